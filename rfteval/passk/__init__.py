"""rfteval.passk, the public path the README shows: an alias of rfteval.stats.passk, where the code lives."""

from rfteval.stats.passk import *  # noqa: F403
