"""rfteval.sample, the public path the README shows: an alias of rfteval.data.sample, where the code lives."""

from rfteval.data.sample import *  # noqa: F403
