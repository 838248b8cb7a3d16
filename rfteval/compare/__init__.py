"""Two sides of record files (or a baseline and a series) paired by item; the gate; two graders' agreement on the same
samples.

The public names of the comparison's modules (the computation, its result, its measures, the pass rule, the hardest
slice, the grader ranges) and `compare_paths` are re-exported here, lazily: this is the public path the README shows,
and importing one submodule of the package must not load the others.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from rfteval import lazy_reexport

if TYPE_CHECKING:
    from rfteval.compare.comparison import *  # noqa: F403
    from rfteval.compare.hardest import *  # noqa: F403
    from rfteval.compare.measure import *  # noqa: F403
    from rfteval.compare.passing import *  # noqa: F403
    from rfteval.compare.paths import compare_paths as compare_paths
    from rfteval.compare.ranges import *  # noqa: F403
    from rfteval.compare.result import *  # noqa: F403

# Looked up in this order; a name one of them imports from another is the same object wherever it is found.
# compare_paths gates the comparison, so it lives above the comparison and the gate (rfteval.compare.paths)
_PARTS = tuple(f"rfteval.compare.{part}" for part in
               ("comparison", "result", "measure", "passing", "hardest", "ranges"))


def _home(name: str) -> str:
    """The first part that has `name` (the comparison when none has: lazy_reexport then raises AttributeError)."""
    if name == "compare_paths":
        return "rfteval.compare.paths"
    return next((part for part in _PARTS if hasattr(importlib.import_module(part), name)), _PARTS[0])


__getattr__ = lazy_reexport(globals(), _home)
