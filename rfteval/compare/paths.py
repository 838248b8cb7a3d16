"""Two record files in, a gated comparison out: `rfteval compare` and the README's `compare_paths`.

Above both the comparison (rfteval.compare.comparison) and the gate (rfteval.compare.gate), which read each other's
types only: the comparison is built first, then the gate judges it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from dataclasses import field as dataclass_field
from pathlib import Path
from typing import TYPE_CHECKING

from rfteval.compare.comparison import compare_sides, dataset_fields
from rfteval.compare.gate import Gate, gated
from rfteval.compare.result import CompareOptions, CompareResult
from rfteval.compare.sides import Side, load_sides
from rfteval.data.sampling_check import check_path, check_rows
from rfteval.errors import InputError

if TYPE_CHECKING:
    from rfteval.compare.series import SeriesResult
    from rfteval.data.sampling_check import NotSampling


def compare_paths(baseline: str | Path, candidate: str | Path, labels: Sequence[str] = (),
                  options: CompareOptions | None = None, dataset: str | Path | None = None,
                  keep_baseline_rows: bool = False) -> CompareResult:
    """`rfteval compare`: two record files compared and gated; labels are () , (both,) or (baseline, candidate).

    `keep_baseline_rows`: the baseline's file is read whole, once, and its records kept on the result (`rows`)
    for what needs more of them than the comparison (compare --html's readiness and samples)."""
    o = options or CompareOptions()
    if len(labels) > 2:
        raise InputError("give --label once (both sides) or twice (baseline, then candidate)", field="--label")
    label_b = labels[0] if labels else None
    label_c = labels[-1] if labels else None
    if o.by and dataset is None:
        raise InputError("--by needs --dataset (the items' fields live in the dataset)", field="--by")
    fields = dataset_fields(dataset, o.by) if dataset is not None and o.by else None
    base, cand = load_sides((baseline, label_b), (candidate, label_c), keep_rows=(keep_baseline_rows,))
    result = gated(compare_sides(base, cand, o, fields))
    result.not_sampling = {role: found for role, side in (("baseline", base), ("candidate", cand))
                           if (found := check_side(side)) is not None}
    result.rows = {"baseline": base.rows} if base.rows is not None else {}
    if Path(base.path).resolve() == Path(cand.path).resolve() and base.label == cand.label:
        result.notes.append("both sides are the same records: every delta is 0 by construction (give two files, "
                            "or --label twice)")
    return result


def check_side(side: Side) -> NotSampling | None:
    """The sampling check of a side: on its records as read when it kept them, else on its file."""
    return check_rows(side.rows, side.label) if side.rows is not None else check_path(side.path, side.label)


def _at_least(value: float | None, name: str, minimum: float = 0.0) -> None:
    if value is not None and not value >= minimum:
        raise InputError(f"must be >= {minimum:g}, got {value:g}", field=name)


def parse_score_range(text: str | None) -> tuple[float, float] | None:
    """`--score-range LO,HI` as two numbers, LO below HI."""
    if text is None:
        return None
    try:
        lo, hi = (float(x) for x in text.split(","))
    except ValueError:
        raise InputError(f"must be two numbers LO,HI, got {text!r}", field="--score-range") from None
    if not lo < hi:
        raise InputError(f"LO must be below HI, got {text!r}", field="--score-range")
    return lo, hi


def compare_inputs(*paths: Path | None) -> list[Path]:
    """Every file a compare reads: the given paths, and a run directory's record files (never to be overwritten)."""
    out: list[Path] = []
    for path in paths:
        if path is None:
            continue
        out.append(path)
        if path.is_dir():
            out += [*path.glob("*.jsonl"), *path.glob("*.parquet")]
    return out


@dataclass(frozen=True)
class ReportFile:
    """A report file `rfteval compare` is asked for besides its stdout (the formats are the compare command's
    table, cli/commands/compare_reports.py): the flag that asked, the path, and why a series has no such report
    (empty: a series has one too)."""

    flag: str
    path: Path
    no_series: str = ""
    reads_records: bool = False  # the report reads the baseline's records beyond the comparison (--html)


@dataclass
class CompareRequest:
    """What `rfteval compare` was asked for. Building it checks every flag and every report path before any work
    (a bad path is one line, and an input is never overwritten); `candidate` None is a series of one RUNDIR."""

    baseline: Path
    candidate: Path | None
    labels: list[str]
    dataset: Path | None
    reports: Sequence[ReportFile]
    tie: float
    top: int
    ci: str
    seed: int
    strict: bool
    by: list[str]
    errors: str
    exclude_errors: bool
    score_range: str | None
    gate: Gate
    metric: str
    pass_threshold: float | None
    series_baseline: str | None = None
    series_candidates: list[str] = dataclass_field(default_factory=list)
    stop_shares: Sequence[str] = ()  # --max-stop-share REASON=SHARE, each: into the gate, checked first
    inputs: list[Path] = dataclass_field(init=False)
    options: CompareOptions = dataclass_field(init=False)

    def __post_init__(self) -> None:
        from rfteval.compare.gate import GATE_MODES
        from rfteval.compare.gate_types import parse_stop_shares
        from rfteval.data.outfile import check_output
        from rfteval.stats.passk import parse_metric

        if self.stop_shares:
            self.gate = replace(self.gate, max_stop_share=parse_stop_shares(self.stop_shares))

        if self.ci not in ("t", "bootstrap"):
            raise InputError(f"must be t or bootstrap, got {self.ci!r}", field="--ci")
        _at_least(self.tie, "--tie")
        _at_least(self.top, "--top")
        _at_least(self.gate.max_drop, "--max-drop")
        _at_least(self.gate.max_item_drop, "--max-item-drop")
        _at_least(self.gate.max_error_rate, "--max-error-rate")
        if self.gate.mode not in GATE_MODES:
            raise InputError(f"must be evidence or strict, got {self.gate.mode!r}", field="--gate")
        parse_metric(self.metric)
        if self.candidate is None and len(self.labels) == 2:  # `compare runs/a -l base -l tuned`: one run directory
            self.candidate = self.baseline
        self.inputs = compare_inputs(self.baseline, self.candidate, self.dataset)
        for report in self.reports:
            check_output(report.path, self.inputs, report.flag)
        self.options = CompareOptions(
            tie=self.tie, ci_method=self.ci, seed=self.seed, exclude_errors=self.exclude_errors, strict=self.strict,
            by=tuple(self.by), errors=self.errors, score_range=parse_score_range(self.score_range), gate=self.gate,
            metric=self.metric, pass_threshold=self.pass_threshold)
        if self.candidate is None:
            if self.labels:
                raise InputError("a series (one RUNDIR) takes --baseline and --candidate, not --label",
                                 field="--label")
            for report in self.reports:
                if report.no_series:
                    raise InputError(report.no_series, field=report.flag)
        elif self.series_baseline is not None or self.series_candidates:
            raise InputError("--baseline and --candidate are for a series: give one RUNDIR and no CANDIDATE",
                             field="--baseline" if self.series_baseline is not None else "--candidate")

    @property
    def is_series(self) -> bool:
        return self.candidate is None


def compare_request(request: CompareRequest) -> CompareResult:
    """The comparison a (non-series) request asks for."""
    assert request.candidate is not None, "a series goes to compare_series_request"
    return compare_paths(request.baseline, request.candidate, request.labels, request.options, request.dataset,
                         keep_baseline_rows=any(report.reads_records for report in request.reports))


def compare_series_request(request: CompareRequest) -> SeriesResult:
    """`rfteval compare RUNDIR`: the baseline against every other model (rfteval.compare.series)."""
    from rfteval.compare.series import compare_series

    o = request.options
    if o.by and request.dataset is None:
        raise InputError("--by needs --dataset (the items' fields live in the dataset)", field="--by")
    fields = dataset_fields(request.dataset, o.by) if request.dataset is not None and o.by else None
    return compare_series(request.baseline, o, request.series_baseline, request.series_candidates, fields)

