"""rfteval.records, the public path the README shows: an alias of rfteval.data.records, where the code lives."""

from rfteval.data.records import *  # noqa: F403
