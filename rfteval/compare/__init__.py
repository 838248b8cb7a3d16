"""Two sides of record files (or a baseline and a series) paired by item; the gate; two graders' agreement on the same
samples.

The names of rfteval.compare.comparison are re-exported here, lazily: this is the public path the README shows, and
importing one submodule of the package must not load the others.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rfteval import lazy_reexport

if TYPE_CHECKING:
    from rfteval.compare.comparison import *  # noqa: F403
    from rfteval.compare.paths import compare_paths as compare_paths

# compare_paths gates the comparison, so it lives above the comparison and the gate (rfteval.compare.paths)
__getattr__ = lazy_reexport(
    globals(), lambda name: "rfteval.compare.paths" if name == "compare_paths" else "rfteval.compare.comparison")
