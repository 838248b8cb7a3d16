"""The gate's data: what a gate asks for (`Gate`) and what it found (`GateVerdict`, one `GateCheck` per check).

Apart from the checks (rfteval.compare.gate) so that a comparison can carry its options and its verdict without
importing the checks, which read the comparison: compare_sides builds a result with no verdict, and whoever gates
calls evaluate_gate on it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NotRequired, TypedDict

GATE_MODES = ("evidence", "strict")
GATE_EPS = 1e-12  # a value equal to a threshold (up to float rounding) passes


class GateCheck(TypedDict):
    """One check: whether it passed, the line that says why, and the smallest drop it can see (its MDE)."""

    name: str
    passed: bool
    detail: str
    mde: float
    warning: str | None
    flagged: NotRequired[list[str]]  # max-item-drop: the items that failed
    p_adjusted: NotRequired[dict[str, float]]  # max-item-drop: Holm-adjusted p of each item past the threshold


class GateVerdict(TypedDict):
    passed: bool
    failures: list[str]
    checks: list[GateCheck]
    warnings: list[str]
    mode: str
    flagged_items: list[str]
    p_adjusted: NotRequired[float]  # in a series: the candidate's p, Holm-adjusted across the gated candidates


@dataclass(frozen=True)
class Gate:
    """The CI gate; None / False leaves a check off.

    mode "evidence" (the default) fails only on evidence: a drop whose interval lies below 0 and whose size
    passes the threshold, a candidate whose whole interval lies under --fail-under. Noise alone then fails
    about 2.5% of runs per check. mode "strict" asks for proof of no regression instead (non-inferiority): the
    interval's lower bound must clear each threshold, which fails on noise whenever the eval is too small.
    """

    fail_under: float | None = None
    max_drop: float | None = None
    require_improvement: bool = False
    max_item_drop: float | None = None
    mode: str = "evidence"
    max_error_rate: float = 0.05

    @property
    def active(self) -> bool:
        return (self.fail_under is not None or self.max_drop is not None or self.require_improvement
                or self.max_item_drop is not None)




def no_gate(gate: Gate) -> GateVerdict:
    """The verdict before any check has run, and of a comparison asked for no gate."""
    return {"passed": True, "failures": [], "checks": [], "warnings": [], "mode": gate.mode, "flagged_items": []}
