"""The readiness report's types: the thresholds the verdict turns at, the per-item statistics, the label, determinism
and error sections, the checks, and the report that holds them (`to_dict` is `rfteval readiness --format json`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, NotRequired, TypedDict

from rfteval.data.records import json_safe
from rfteval.limits import ThresholdDefaults

if TYPE_CHECKING:
    from rfteval.data.json_types import JSONObject
    from rfteval.data.sampling_check import NotSamplingJSON
    from rfteval.stats import zero_signal


@dataclass(frozen=True)
class Thresholds(ThresholdDefaults):
    """Where the verdict turns. Heuristics (statistics.md §3.4), not sourced numbers: tune them per team. The fields
    and their defaults are rfteval.limits.ThresholdDefaults, where the flags of `rfteval readiness` read them."""


LEVEL_DECIMALS = 9  # scores equal to 9 decimals are one score level (the levels, zero-signal shares and advantages)


@dataclass
class ItemStat:
    item_id: str
    k: int
    mean: float
    sd: float | None  # ddof=1; None with one sample
    # "floor" | "ceiling" | "other" when all samples are equal, "mixed" when not, None when k < 2; "errors" when every
    # sample is a grading error: its scores are errors' zeros, no statement about the task (left out of the shares)
    kind: str | None
    expected_zero_signal: float | None
    n_grade_errors: int = 0


@dataclass
class LabelSkew:
    """Label-like references and answers (statistics.md §3.3(e))."""

    reference_path: str
    answer_path: str
    reference_counts: dict[str, int] | None = None
    majority_label: str | None = None
    majority_share: float | None = None
    chance: float | None = None
    constant_answer_score: float | None = None
    constant_answer_method: str | None = None  # "graded" (the grader scored it) or "estimated (exact match)"
    # the constant answer's grades that were errors, left out of its score (None when every grade was one), by type
    constant_answer_errors: dict[str, int] = field(default_factory=dict)
    per_label_mean: dict[str, float] | None = None
    answer_counts: dict[str, int] | None = None
    answer_majority_label: str | None = None
    answer_majority_share: float | None = None


class ChangedGrade(TypedDict):
    """One re-graded output whose grade moved (Determinism.changed)."""

    item_id: str
    epoch: object  # the record's, as it stored it
    stored: float
    regraded: float
    stored_error: str | None
    regraded_error: str | None


@dataclass
class Determinism:
    n_regraded: int
    n_changed: int
    flip_rate: float
    max_abs_diff: float
    changed: list[ChangedGrade] = field(default_factory=list)
    # re-grades with a grading error on either side, by type (the new grade's, else the stored one's): left out of
    # n_changed and flip_rate, which compare scores with scores; when every re-grade is one, nothing is known
    errors: dict[str, int] = field(default_factory=dict)

    @property
    def n_compared(self) -> int:
        return self.n_regraded - sum(self.errors.values())


@dataclass
class Check:
    name: str
    # "ok" | "risky" | "not_ready" | "skipped" | "inconclusive" (rests on grading errors only, or on epochs
    # that are one answer repeated: the server did not sample; never ready)
    status: str
    value: float | None
    threshold: str
    message: str


class ZeroVariance(TypedDict):
    """Observed shares of the assessed items (≥ 2 samples) whose samples all scored alike, by where."""

    n_items: int
    share: float
    floor: float
    ceiling: float
    other: float
    errors: int  # items left out of the shares: every sample a grading error


class ExpectedZeroSignal(TypedDict):
    """The expected share of zero-advantage groups at group size G, and how it was estimated."""

    group_size: int
    share: float
    floor: float
    ceiling: float
    method: str | None
    n_unbiased: int
    n_empirical_bayes: int
    prior: zero_signal.FittedPrior | None
    notes: NotRequired[list[str]]


class ReadinessErrors(TypedDict):
    """Errors of the assessed records by kind, and what the policy did with them (`error_counts`)."""

    generate: int
    grade: int
    generate_share: float
    grade_share: float
    grade_types: dict[str, int]
    refusal: int
    generate_types: dict[str, int]
    policy: str
    excluded: int


class Coverage(TypedDict):
    """The assessed model's cells against what its run was asked for (items × epochs): a run stopped early, or
    whose requests failed, gives a verdict on what it has, and says so."""

    items: int
    epochs: int
    expected: int  # items × epochs
    answered: int  # cells with an answer (a model refusal is one)
    missing: int  # cells with no record: the run stopped before them
    generation_errors: int  # cells whose request failed after every retry: no answer


@dataclass
class ReadinessReport:
    label: str | None
    n_items: int
    n_records: int
    samples_min: int
    samples_max: int
    group_size: int
    score_min: float
    score_max: float
    range_source: str
    mean: float
    se: float | None
    position: float
    zero_variance: ZeroVariance
    expected_zero_signal: ExpectedZeroSignal
    distinct_levels: int
    binary: bool
    share_at_min: float
    share_at_max: float
    mean_within_sd: float | None
    mean_item_variance: float | None
    mean_histogram: list[int]
    sd_histogram: list[int]
    sd_histogram_max: float
    errors: ReadinessErrors
    items: list[ItemStat]
    labels: LabelSkew | None
    determinism: Determinism | None
    checks: list[Check]
    verdict: str  # "ready" | "risky" | "inconclusive" (a check rests on grading errors only) | "not_ready"
    thresholds: Thresholds
    notes: list[str] = field(default_factory=list)
    provisional: bool = False  # fewer items than compare trusts an interval on: the verdict is said to be provisional
    # every item's epochs identical although sampling was asked for (rfteval.data.sampling_check): the checks that
    # read the spread of epochs are inconclusive
    not_sampling: NotSamplingJSON | None = None
    coverage: Coverage | None = None  # None: what the run was asked for is not known

    @property
    def incomplete(self) -> bool:
        """Fewer cells answered than the run was asked for: the verdict is on part of the run."""
        return self.coverage is not None and self.coverage["answered"] < self.coverage["expected"]

    @property
    def reasons(self) -> list[Check]:
        """The checks that decided the verdict (for `ready`: the checks that passed; for `inconclusive`, the risky
        ones beside those that rest on errors)."""
        want = {"ready": {"ok"}, "inconclusive": {"inconclusive", "risky"}}.get(self.verdict, {self.verdict})
        return [c for c in self.checks if c.status in want]

    def to_dict(self) -> JSONObject:
        out = json_safe(asdict(self))
        out["reasons"] = [c.name for c in self.reasons]
        out["incomplete"] = self.incomplete
        return out
