"""Will RFT learn from this dataset and grader: the assessment, grader probes, reference checks, judge stability.

The names of rfteval.readiness.assessment are re-exported here, lazily: this is the public path the README shows, and
importing one submodule of the package must not load the others.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rfteval import lazy_reexport

if TYPE_CHECKING:
    from rfteval.readiness.assessment import *  # noqa: F403

__getattr__ = lazy_reexport(globals(), lambda name: "rfteval.readiness.assessment")
