"""Will RFT learn from this dataset and grader: the assessment, grader probes, reference checks, judge stability.

The public names of the assessment's modules (the assessment, its report types, the verdict, the label checks, the
determinism check, the advantages) are re-exported here, lazily: this is the public path the README shows
(`from rfteval.readiness import assess`), and importing one submodule of the package must not load the others.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from rfteval import lazy_reexport

if TYPE_CHECKING:
    from rfteval.readiness.advantages import *  # noqa: F403
    from rfteval.readiness.assessment import *  # noqa: F403
    from rfteval.readiness.determinism import *  # noqa: F403
    from rfteval.readiness.labels import *  # noqa: F403
    from rfteval.readiness.report import *  # noqa: F403
    from rfteval.readiness.verdict import *  # noqa: F403

# Looked up in this order; a name one of them imports from another is the same object wherever it is found
_PARTS = tuple(f"rfteval.readiness.{part}" for part in
              ("assessment", "report", "verdict", "labels", "determinism", "advantages"))


def _home(name: str) -> str:
    """The first part that has `name` (the assessment when none has: lazy_reexport then raises AttributeError)."""
    return next((part for part in _PARTS if hasattr(importlib.import_module(part), name)), _PARTS[0])


__getattr__ = lazy_reexport(globals(), _home)
