"""Pure statistics: per-item means, paired deltas, pass@k, zero-signal estimators, agreement. Numpy in, typed results
out; imports nothing above rfteval.errors.

The names of rfteval.stats.paired are re-exported here, lazily: this is the public path the README shows, and
importing one submodule of the package must not load the others.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rfteval import lazy_reexport

if TYPE_CHECKING:
    from rfteval.stats.paired import *  # noqa: F403

__getattr__ = lazy_reexport(globals(), lambda name: "rfteval.stats.paired")
