"""Will RFT learn from this dataset and grader: the assessment, grader probes, reference checks, judge stability.

The names of rfteval.readiness.assess are re-exported here, lazily: this is the public path the README shows, and
importing one submodule of the package must not load the others.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rfteval.readiness.assess import *  # noqa: F403


def __getattr__(name: str) -> object:
    module = importlib.import_module("rfteval.readiness.assess")
    if name.startswith("_") or not hasattr(module, name):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(module, name)
    globals()[name] = value
    return value
