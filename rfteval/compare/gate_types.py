"""The gate's data: what a gate asks for (`Gate`, agree's `AgreeGate`) and what it found (`GateVerdict`, one
`GateCheck` per check), for compare's gate and agree's alike.

Apart from the checks (rfteval.compare.gate) so that a comparison can carry its options and its verdict without
importing the checks, which read the comparison: compare_sides builds a result with no verdict, and whoever gates
calls evaluate_gate on it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NotRequired, TypedDict

from rfteval.errors import InputError
from rfteval.limits import MAX_ERROR_RATE

STOP_SHARE_FLAG = "--max-stop-share"

GATE_MODES = ("evidence", "strict")
GATE_EPS = 1e-12  # a value equal to a threshold (up to float rounding) passes


class GateCheck(TypedDict):
    """One check: whether it passed, the line that says why, and (compare's checks) the smallest drop it can see
    (its MDE)."""

    name: str
    passed: bool
    detail: str
    mde: NotRequired[float]  # compare's checks; agree's have no drop to detect
    warning: str | None
    flagged: NotRequired[list[str]]  # max-item-drop: the items that failed
    p_adjusted: NotRequired[dict[str, float]]  # max-item-drop: Holm-adjusted p of each item past the threshold


class GateVerdict(TypedDict):
    passed: bool
    failures: list[str]
    checks: list[GateCheck]
    warnings: list[str]
    mode: NotRequired[str]  # compare's gate: evidence or strict
    flagged_items: NotRequired[list[str]]  # compare's gate: the items max-item-drop flagged
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
    max_error_rate: float = MAX_ERROR_RATE
    # agent runs: (stop reason, share): fail when more than that share of the candidate's rollouts ended so
    # (rfteval.compare.agent); an observed share, as --max-error-rate's, not a test
    max_stop_share: tuple[tuple[str, float], ...] = ()

    def __post_init__(self) -> None:  # a Gate built in code is checked as the flag is
        check_stop_shares(self.max_stop_share)

    @property
    def active(self) -> bool:
        return (self.fail_under is not None or self.max_drop is not None or self.require_improvement
                or self.max_item_drop is not None or bool(self.max_stop_share))



@dataclass(frozen=True)
class AgreeGate:
    """`rfteval agree`'s gate; None / False leaves a check off. Evidence mode, as compare's gate."""

    min_kappa: float | None = None
    max_bias: float | None = None
    require_same_verdict: bool = False
    # compare's flag: with any other check given, the gate fails when either side's share of error records is
    # above it; with none, that is a warning
    max_error_rate: float = MAX_ERROR_RATE

    def __post_init__(self) -> None:  # checked before any judge is paid for (--regrade)
        if not self.max_error_rate >= 0:
            raise InputError(f"must be >= 0, got {self.max_error_rate:g}", field="--max-error-rate")
        for flag, value in (("--min-kappa", self.min_kappa), ("--max-bias", self.max_bias)):
            if value is not None and not math.isfinite(value):
                raise InputError(f"must be a finite number, got {value}", field=flag)
        if self.max_bias is not None and self.max_bias < 0:
            raise InputError(f"must be >= 0, got {self.max_bias:g}", field="--max-bias")


def parse_stop_shares(values: Sequence[str]) -> tuple[tuple[str, float], ...]:
    """`--max-stop-share REASON=SHARE` (repeatable) as (reason, share) pairs, checked before anything is read: a
    known stop reason, a share in [0, 1], each reason once."""
    out = []
    for text in values:
        reason, eq, share = text.partition("=")
        try:
            value = float(share) if eq else math.nan
        except ValueError:
            value = math.nan
        if not eq or not reason.strip() or not math.isfinite(value):
            raise InputError(f"must be REASON=SHARE (e.g. max_turns=0.10), got {text!r}", field=STOP_SHARE_FLAG)
        out.append((reason.strip(), value))
    return check_stop_shares(tuple(out))


def check_stop_shares(pairs: tuple[tuple[str, float], ...]) -> tuple[tuple[str, float], ...]:
    if not pairs:
        return pairs
    from rfteval.compare.agent import STOP_REASONS

    seen: set[str] = set()
    for reason, share in pairs:
        if reason not in STOP_REASONS:
            raise InputError(f"unknown stop reason {reason!r} (one of: {', '.join(STOP_REASONS)})",
                             field=STOP_SHARE_FLAG)
        if not 0.0 <= share <= 1.0:
            raise InputError(f"{reason}: the share must lie in [0, 1], got {share:g}", field=STOP_SHARE_FLAG)
        if reason in seen:
            raise InputError(f"{reason} given twice", field=STOP_SHARE_FLAG)
        seen.add(reason)
    return pairs


def no_gate(gate: Gate) -> GateVerdict:
    """The verdict before any check has run, and of a comparison asked for no gate."""
    return {"passed": True, "failures": [], "checks": [], "warnings": [], "mode": gate.mode, "flagged_items": []}
