"""rfteval.series, the public path the README shows: an alias of rfteval.compare.series, where the code lives."""

from rfteval.compare.series import *  # noqa: F403
