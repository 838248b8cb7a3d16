"""Pure statistics: per-item means, paired deltas, pass@k, zero-signal estimators, agreement. Numpy in, typed results
out; imports nothing above rfteval.errors.

The names of rfteval.stats.paired and the two modules it is built on (rfteval.stats.permutation, the sign-flip tests;
rfteval.stats.tdist, Student's t) are re-exported here, lazily: this is the public path the README shows, and
importing one submodule of the package must not load the others.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from rfteval import lazy_reexport

if TYPE_CHECKING:
    from rfteval.stats.paired import *  # noqa: F403
    from rfteval.stats.permutation import *  # noqa: F403
    from rfteval.stats.tdist import *  # noqa: F403

# Looked up in this order; a name one of them imports from another is the same object wherever it is found
_PARTS = ("rfteval.stats.paired", "rfteval.stats.permutation", "rfteval.stats.tdist")


def _home(name: str) -> str:
    """The first part that has `name` (paired when none has: lazy_reexport then raises AttributeError)."""
    return next((part for part in _PARTS if hasattr(importlib.import_module(part), name)), _PARTS[0])


__getattr__ = lazy_reexport(globals(), _home)
