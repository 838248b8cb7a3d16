"""A comparison's options and its result: the typed shape every report and the viewer read, and its `--format json`.

The presentation side of rfteval.compare.comparison, which computes a `CompareResult`; nothing here computes a
statistic or prints.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NotRequired, TypedDict

from rfteval.compare.gate_types import Gate, GateVerdict
from rfteval.data.json_types import JSONObject, JSONScalar
from rfteval.data.records import json_safe
from rfteval.stats.paired import PairedDelta

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

    from rfteval.compare.agent import AgentComparison
    from rfteval.data.records import RecordRows
    from rfteval.data.sampling_check import NotSampling


@dataclass(frozen=True)
class CompareOptions:
    tie: float = 1e-9
    level: float = 0.95
    ci_method: str = "t"  # or "bootstrap"
    seed: int = 0
    exclude_errors: bool = False  # leave every error record out (overrides `errors`)
    strict: bool = False
    by: tuple[str, ...] = ()
    gate: Gate = field(default_factory=Gate)
    # "exclude": generation failures (the endpoint never answered) are left out of the means and counted;
    # grading errors and refusals score 0 (OpenAI's rule). "zero": every error record scores 0.
    errors: str = "exclude"
    score_range: tuple[float, float] | None = None  # None: [0, 1] when every score lies in it, else unbounded
    # What is compared per item: "mean" (the mean score over its epochs), "pass@K" or "pass^K" (rfteval.stats.passk).
    metric: str = "mean"
    # A sample passes when its record's `passed` says so, else when its score reaches this; None: the grader's
    # maximum (found through the run directory's spec.resolved.toml), else --score-range's top, else 1.0.
    pass_threshold: float | None = None


# ---------------------------------------------------------------------------------------------- result


class SideCounts(TypedDict):
    """A side's mean over the paired items and its counts: what a series lists for its baseline and each
    candidate."""

    label: str
    mean: float
    ci95: list[float]
    items: int
    records: int
    errors: int


class SideBrief(SideCounts):
    """A side in brief, as a series shows its baseline: its counts and the file it was read from."""

    path: str


class SideReport(SideBrief):
    """One side of a comparison: its mean over the paired items, and what went into it."""

    se: float
    sd: float
    records_used: int
    duplicates_dropped: int
    generation_errors: int
    generation_error_share: float
    scored_zero_errors: int
    truncated_in_reasoning: int  # answers cut off by the output limit while still thinking (rfteval.data.reasoning)
    truncated_in_reasoning_share: float  # of the answers (records that are not failed generations)
    items_unpaired: NotRequired[int]


class MeanInterval(TypedDict):
    mean: float
    ci95: list[float]
    se: float


class PairRow(TypedDict):
    """Both sides and their paired delta over one set of items: a slice, a sub-score, pass@1 or pass@N."""

    items: int
    baseline: MeanInterval
    candidate: MeanInterval
    delta: PairedDelta
    field: NotRequired[str | None]  # a slice: the dataset field and value it holds, or None for "hardest"
    value: NotRequired[str | None]
    cutoff: NotRequired[float | None]
    rule: NotRequired[str]
    method: NotRequired[str]  # the hardest slice: "cross-fit" or "descriptive"
    k: NotRequired[int]  # pass@k rows
    verdict: NotRequired[str]


class PassThreshold(TypedDict):
    """The score a sample must reach to pass (when its record has no verdict), and where that value came from."""

    threshold: float
    source: str


class PassCurves(TypedDict):
    """One label's pass@k and pass^k by k (as text: JSON keys), for summary.json."""

    pass_at_k: dict[str, float]
    pass_all_k: dict[str, float]


class PassKCheck(TypedDict):
    """pass@1 and pass@N compared (N: the epochs both sides have), and whether that is sharpening."""

    n: int
    pass_at_1: PairRow
    pass_at_n: PairRow
    sharpening: bool  # pass@1 shown better, pass@N not
    thresholds: dict[str, PassThreshold | None]  # per side: the pass threshold and where it came from
    metric: str


@dataclass
class CompareResult:
    baseline: SideReport
    candidate: SideReport
    delta: PairedDelta
    items: pd.DataFrame  # one row per paired item, sorted by delta (largest drop first)
    slices: dict[str, PairRow]
    sub_scores: dict[str, PairRow]
    unpaired: dict[str, list[str]]
    gate: GateVerdict
    options: CompareOptions
    notes: list[str] = field(default_factory=list)
    baseline_scores: np.ndarray | None = None  # raw record scores, for distribution plots
    candidate_scores: np.ndarray | None = None
    baseline_records: pd.DataFrame | None = None  # item_id and score of the records used, for per-item tests
    candidate_records: pd.DataFrame | None = None
    bounds: tuple[float, float] | None = None  # the score range intervals were cut to
    metric: str = "mean"  # what each item's value is: its mean score, or its pass@k / pass^k estimate
    pass_k: PassKCheck | None = None  # pass@1 and pass@N compared (2+ epochs), the pass rule (pass_k_check)
    # per side ("baseline", "candidate"): its every item's epochs identical although sampling was asked for
    # (rfteval.data.sampling_check; compare_paths reads it from the record files)
    not_sampling: dict[str, NotSampling] = field(default_factory=dict)
    agent: AgentComparison | None = None  # both sides agent runs: effort, stop reasons (rfteval.compare.agent)
    # per side, its file's records as compare_paths read them when asked to keep them (compare --html: the
    # baseline's readiness, sampling check and listed samples come from that one read); never in the JSON
    rows: dict[str, RecordRows] = field(default_factory=dict)

    def to_json(self, items: bool = True) -> JSONObject:
        """The documented `--format json` shape (extra keys allowed, none removed); `items=False` leaves the
        per-item rows out (a viewer pages them itself)."""
        o = self.options
        out: JSONObject = json_safe({
            "baseline": self.baseline, "candidate": self.candidate, "delta": self.delta, "items": [],
            "slices": self.slices, "sub_scores": self.sub_scores, "unpaired": self.unpaired, "gate": self.gate,
            "options": {"tie": o.tie, "level": o.level, "ci_method": o.ci_method, "seed": o.seed,
                        "exclude_errors": o.exclude_errors, "strict": o.strict, "by": list(o.by),
                        "errors": o.errors, "gate": o.gate.mode, "max_error_rate": o.gate.max_error_rate,
                        "score_range": list(self.bounds) if self.bounds else None,
                        "metric": self.metric, "pass_threshold": o.pass_threshold,
                        **({"max_stop_share": dict(o.gate.max_stop_share)} if o.gate.max_stop_share else {})},
            "notes": self.notes,
            **({"pass_k": self.pass_k} if self.pass_k is not None else {}),
            **({"agent": self.agent} if self.agent is not None else {}),
            "not_sampling": {role: c.to_json() for role, c in self.not_sampling.items()},
        })
        if items:
            out["items"] = [*self.items_json()]
        else:
            del out["items"]
        return out

    def items_json(self) -> list[JSONObject]:
        """Per-item rows, built column by column rather than row by row: a large comparison stays fast."""
        it = self.items
        cols = {name: _column(it[src]) for name, src in (
            ("item_id", "item_id"), ("baseline", "baseline"), ("candidate", "candidate"), ("delta", "delta"),
            ("lo", "delta_lo"), ("hi", "delta_hi"), ("baseline_epochs", "baseline_n"),
            ("candidate_epochs", "candidate_n"), ("baseline_errors", "baseline_errors"),
            ("candidate_errors", "candidate_errors"))}
        return [
            {"item_id": i, "baseline": b, "candidate": c, "delta": d, "delta_ci95": [lo, hi], "baseline_epochs": kb,
             "candidate_epochs": kc, "baseline_errors": eb, "candidate_errors": ec}
            for i, b, c, d, lo, hi, kb, kc, eb, ec in zip(*cols.values())
        ]


def _column(series: pd.Series) -> list[JSONScalar]:
    """A column as Python values, NaN as None."""
    import numpy as np

    if series.dtype.kind == "f":
        values = series.to_numpy()
        out = values.tolist()
        if not np.isfinite(values).all():
            out = [v if math.isfinite(v) else None for v in out]
        return out
    return series.tolist()
