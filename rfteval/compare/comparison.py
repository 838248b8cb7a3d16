"""Paired comparison of two models' records: pair items, compare means, slices and sub-scores, then the gate.

Library first: `compare_paths` is what `rfteval compare` calls; `compare_sides` takes sides already loaded
(rfteval.compare.sides). The gate's checks live in rfteval.compare.gate. Reports render a `CompareResult`; nothing here prints.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, NotRequired, TypedDict

from rfteval.compare.agent import AgentComparison, compare_agents
from rfteval.compare.gate_types import Gate, GateVerdict, no_gate
from rfteval.compare.sides import SUB, Side
from rfteval.data.json_types import JSONInput, JSONMapping, JSONObject, JSONScalar
from rfteval.data.records import check_error_policy, json_safe
from rfteval.errors import InputError
from rfteval.stats import paired as stats
from rfteval.stats import passk
from rfteval.stats.paired import PairedDelta

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

    from rfteval.data.sampling_check import NotSampling
    from rfteval.graders.base import GraderConfig


HARDEST = "hardest"
MISSING = "(missing)"
NOT_IN_DATASET = "(not in dataset)"
NAN = float("nan")


# ---------------------------------------------------------------------------------------------- options





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


# ---------------------------------------------------------------------------------------------- pairing


def used_records(frame: pd.DataFrame, o: CompareOptions) -> pd.DataFrame:
    """The records that enter the means under the error policy (error records already score 0)."""
    if o.exclude_errors:
        return frame[~frame["is_error"]]
    if o.errors == "exclude":
        return frame[~frame["is_generation_failure"]]
    return frame


def used_mask(frame: pd.DataFrame, o: CompareOptions) -> np.ndarray:
    """used_records as a mask over the frame's rows, for a caller that need not copy them."""
    import numpy as np

    if o.exclude_errors:
        return ~frame["is_error"].to_numpy(dtype=bool)
    if o.errors == "exclude":
        return ~frame["is_generation_failure"].to_numpy(dtype=bool)
    return np.ones(len(frame), dtype=bool)


# ---------------------------------------------------------------------------------------------- passing


@lru_cache(maxsize=32)
def _grader_file(grader: str) -> GraderConfig | None:
    """A grader file loaded once for both look-ups below; None when it no longer loads."""
    from rfteval.graders.loader import load_grader
    try:
        return load_grader(grader)
    except Exception:  # noqa: BLE001 - a best-effort look-up: any grader that no longer loads means "unknown"
        return None


def grader_range(grader: str) -> tuple[float, float, str] | None:
    """A grader file's range as readiness reads it (its config's score_range: declared, by definition or
    assumed) and where that comes from; None when the file no longer loads (moved, edited into something
    invalid): the caller then falls back."""
    config = _grader_file(grader)
    return config_range(config, grader) if config is not None else None


def config_range(config: GraderConfig, grader: str) -> tuple[float, float, str]:
    """grader_range of a grader already loaded from the file `grader`."""
    low, high, source = config.score_range()
    return float(low), float(high), f"{source}; {Path(grader).name}"


def side_range(side: Side) -> tuple[float, float, str] | None:
    """The range of the grader that wrote a side's records: its grader file (the run directory's spec), else the
    range the grader wrote on the records (grade_details.score_range); None when neither is known."""
    if side.grader is not None:
        found = side.declared_range if side.declared_range is not None else grader_range(side.grader)
        if found is not None:
            return found
    if side.recorded_range is not None:
        low, high = side.recorded_range
        return low, high, "the range written on the records"
    return None


def grader_maximum(side: Side) -> tuple[float, str] | None:
    """The top of the side's grader range and where that comes from; None when unknown."""
    found = side_range(side)
    return None if found is None else (found[1], f"the grader's maximum ({found[2]})")


def max_threshold_notes(sides: Sequence[Side], o: CompareOptions) -> list[str]:
    """max_threshold_note for each side, one line for the sides it says the same of."""
    by_text: dict[str, list[str]] = {}
    for side in sides:
        line = max_threshold_note(side, resolve_threshold(side, o))
        if line:
            by_text.setdefault(line.split(": ", 1)[1], []).append(side.label)
    return [f"{', '.join(labels)}: {text}" for text, labels in by_text.items()]


def max_threshold_note(side: Side, threshold: tuple[float, str] | None) -> str | None:
    """One line when a sample of a grader whose range is not [0, 1] passes only at its maximum: the grader has no
    pass_threshold (its records carry no `passed`), so 9 on a 0..10 judge fails."""
    import numpy as np

    found = side_range(side)
    if threshold is None or found is None or (found[0], found[1]) == (0.0, 1.0):
        return None
    if not threshold[1].startswith("the grader's maximum"):
        return None
    if "passed" in side.frame and np.isfinite(side.frame["passed"].to_numpy(dtype=np.float64)).all():
        return None
    return (f"{side.label}: the grader's range is [{found[0]:g}, {found[1]:g}] and it has no pass_threshold, so a "
            f"sample passes only at {found[1]:g} (a {found[1] - (found[1] - found[0]) / 10:g} fails): give "
            "--pass-threshold X (or the grader a pass_threshold)")


def resolve_threshold(side: Side, o: CompareOptions) -> tuple[float, str] | None:
    """The score a sample must reach to pass when its record has no `passed` verdict, and why that value.

    --pass-threshold, else --score-range's top, else the maximum of the grader that wrote the records, else 1.0
    for scores in [0, 1]. None when none of these applies (scores above 1 and nothing known about the grader):
    "reaches 1.0" would then be an arbitrary rule.
    """
    import numpy as np

    if o.pass_threshold is not None:
        return float(o.pass_threshold), "--pass-threshold"
    if o.score_range is not None:
        return float(o.score_range[1]), "the top of --score-range"
    found = grader_maximum(side)
    scores = side.frame["score"].to_numpy(dtype=np.float64)
    top = float(np.nanmax(scores)) if scores.size and np.isfinite(scores).any() else None
    if found is not None:
        # a python grader's range is assumed [0, 1]: one that scores 6 and 10 has no known maximum, and "reaches
        # 1" would pass its 6
        return None if top is not None and top > found[0] + 1e-9 else found
    if top is not None and top > 1.0:
        return None
    return 1.0, "1.0 (no grader information with the records)"


def pass_indicator(used: pd.DataFrame, threshold: float) -> np.ndarray:
    """Per record, whether it passed: the grader's `passed` verdict, else score ≥ threshold (rfteval.stats.passk.passes).

    Error records left in by the error policy (grading errors, refusals; every error under --errors zero) fail,
    as they score 0: OpenAI's rule, the same as for the mean.
    """
    import numpy as np

    passed = used["passed"].to_numpy(dtype=np.float64) if "passed" in used else None
    return passk.passes(used["score"].to_numpy(dtype=np.float64), passed, threshold,
                        error=used["is_error"].to_numpy(dtype=bool))


def check_threshold_in_range(sides: Sequence[Side], o: CompareOptions) -> None:
    """--pass-threshold outside the scores' known range makes every pass@k and pass rate 0 (above the top) or 1
    (below the bottom) whatever the models did: a verdict no one should read, so bad input."""
    if o.pass_threshold is None:
        return
    for side in sides:
        found = (o.score_range[0], o.score_range[1], "--score-range") if o.score_range else side_range(side)
        if found is not None and found[2].startswith("assumed"):
            continue  # a python grader's [0, 1] is a guess, and a threshold is how a user corrects it
        if found is not None and not found[0] <= o.pass_threshold <= found[1]:
            what = "no sample can pass" if o.pass_threshold > found[1] else "every sample passes"
            raise InputError(f"{o.pass_threshold:g} is outside the scores' range [{found[0]:g}, {found[1]:g}] "
                             f"({found[2]}): {what}", field="--pass-threshold")


def side_thresholds(base: Side, cand: Side, o: CompareOptions, required: bool) -> tuple[float, float] | None:
    """Both sides' pass thresholds; None (or, when `required`, bad input) when either cannot be set."""
    tb, tc = resolve_threshold(base, o), resolve_threshold(cand, o)
    if tb is None or tc is None:
        if required:
            side = base if tb is None else cand
            raise InputError("scores above 1 (or above the grader's assumed maximum) and no grader maximum "
                             "known: give --pass-threshold X (or --score-range LO,HI)", side.path or side.label,
                             field="--metric")
        return None
    return tb[0], tc[0]


def _threshold_info(base: Side, cand: Side, o: CompareOptions) -> dict[str, PassThreshold | None]:
    out: dict[str, PassThreshold | None] = {}
    for role, side in (("baseline", base), ("candidate", cand)):
        found = resolve_threshold(side, o)
        out[role] = {"threshold": found[0], "source": found[1]} if found else None
    return out


def _num3(x: float | None, sign: str = "") -> str:
    return "n/a" if x is None or not math.isfinite(x) else f"{x:{sign}.3f}"


def pass_k_check(base: Side, cand: Side, o: CompareOptions, thresholds: tuple[float, float],
                 metric: passk.Metric) -> tuple[PassKCheck | None, str | None]:
    """pass@1 and pass@N of the paired items compared (N: the epochs both sides have), and the sharpening flag.

    RL fine-tuning often concentrates probability on answers the base model could already sample: pass@1 rises
    while pass@N, which credits an item when any of N samples passes, does not (Yue et al. 2025, "Does
    Reinforcement Learning Really Incentivize Reasoning Capacity in LLMs Beyond the Base Model?"). The note is
    raised only when both comparisons say so through stats.direction: pass@1 shown better (p < α and the
    interval above 0), pass@N not shown better. "Not shown better" is an absence of evidence, and the note says
    exactly that. No Holm across the two: the note makes no claim that either test alone would not.
    Returns (None, None) below 2 epochs a side.
    """
    import numpy as np

    _, st_b = _side_stats(base, o, thresholds[0])
    _, st_c = _side_stats(cand, o, thresholds[1])
    j = st_b[["mean", "n"]].join(st_c[["mean", "n"]], how="inner", lsuffix="_b", rsuffix="_c")
    if j.empty:
        return None, None
    n_b, n_c = j["n_b"].to_numpy(), j["n_c"].to_numpy()
    top = int(min(n_b.max(), n_c.max()))
    if top < 2:
        return None, None
    c_b = np.rint(j["mean_b"].to_numpy() * n_b).astype(np.int64)
    c_c = np.rint(j["mean_c"].to_numpy() * n_c).astype(np.int64)
    rows: dict[str, PairRow] = {}
    for name, k in (("pass_at_1", 1), ("pass_at_n", top)):
        vb, vc = passk.per_item(n_b, c_b, k), passk.per_item(n_c, c_c, k)
        ok = np.isfinite(vb) & np.isfinite(vc)
        row: PairRow = {"k": k, **paired_row(vb[ok], vc[ok], o, (0.0, 1.0))}
        row["verdict"] = stats.direction(row["delta"], o.level)
        rows[name] = row
    one, top_row = rows["pass_at_1"], rows["pass_at_n"]
    sharpening = one["verdict"] == "better" and top_row["verdict"] != "better"
    out: PassKCheck = {"n": top, "pass_at_1": one, "pass_at_n": top_row, "sharpening": sharpening,
                       "thresholds": _threshold_info(base, cand, o), "metric": metric.name}
    note = None
    if sharpening:
        def span(row: PairRow) -> str:
            d = row["delta"]
            return (f"{_num3(row['baseline']['mean'])} -> {_num3(row['candidate']['mean'])}, delta "
                    f"{_num3(d['mean'], '+')} [{_num3(d['ci95'][0], '+')}, {_num3(d['ci95'][1], '+')}]")

        # the words are stats.direction's, never a comparison of the point estimates: pass@N "not shown better" on
        # 11 items is no evidence that it did not rise (it may have, by more than pass@1 did)
        word = top_row["verdict"]
        if word == "worse":
            lead = f"pass@1 shown better, pass@{top} shown worse (sharpening, not new capability)"
        else:
            lead = (f"pass@1 shown better, pass@{top} not shown better ({word}): sharpening (not new capability) "
                    f"looks like this, and so does a pass@{top} gain that {top_row['delta']['n']} items cannot show")
        note = (f"{lead}; pass@1 {span(one)}; pass@{top} {span(top_row)}"
                + ("" if word == "worse" else f" (near the ceiling pass@{top} may also have no room to rise)"))
    return out, note


def run_pass_curves(sides: Mapping[str, Side], grader: GraderConfig) -> tuple[dict[str, PassCurves], PassThreshold]:
    """Per label of a run, {"pass_at_k": {"1": …, "N": …}, "pass_all_k": {…}}, and the pass rule.

    For summary.json: from the sides the run already read for its comparison (rfteval.data.frame.load_run_frames),
    under compare's default error policy (a generation error is left out, a grading error or refusal fails), so
    `compare --metric pass@K` reproduces these numbers. A sample passes by its record's `passed`, else when it
    reaches the grader's maximum. A label with no side (no records yet), or whose scores pass that maximum (then it
    is not the grader's), is left out.
    """
    import numpy as np

    _, high, source = grader.score_range()
    o = CompareOptions()
    out: dict[str, PassCurves] = {}
    above: list[str] = []
    for label, side in sides.items():
        scores = side.frame["score"].to_numpy(dtype=np.float64)
        if np.isfinite(scores).any() and float(np.nanmax(scores)) > float(high) + 1e-9:
            above.append(label)  # scores above the grader's (assumed) maximum: no pass rule is known, no pass@k
            continue
        _, st = _side_stats(side, o, float(high))
        n = st["n"].to_numpy()
        c = (st["mean"].to_numpy() * n).round().astype("int64")
        out[label] = {"pass_at_k": {str(k): v for k, v in passk.curve(n, c, "pass@").items()},
                      "pass_all_k": {str(k): v for k, v in passk.curve(n, c, "pass^").items()}}
    unknown = (f"; not applied to {', '.join(above)}, whose scores pass it: give --pass-threshold X to compare "
               "--metric pass@K") if above else ""
    return out, {"threshold": float(high), "source": f"the record's passed, else score >= the grader's maximum "
                                                     f"({source}){unknown}"}


def _side_stats(side: Side, o: CompareOptions, threshold: float | None = None,
                metric: passk.Metric = passk.MEAN) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(records used, per-item stats with error counts and the first error message).

    With a threshold the records' scores become pass indicators (1 pass, 0 fail: pass_indicator) before
    anything else, so the per-item mean is the item's pass rate, the halves of the hardest slice are pass rates
    and the per-item drop test runs on passes. A pass metric then replaces each item's mean with its pass@k or
    pass^k estimate from (n, c), NaN when the item has fewer than k samples.
    """
    import numpy as np

    f = side.frame
    errors = f[f["is_error"]]
    used = used_records(f, o)
    if threshold is not None:
        used = used.assign(score=pass_indicator(used, threshold).astype(np.float64))
    st = stats.item_stats(used[["item_id", "score"]]).set_index("item_id")
    if metric.is_pass:
        n = st["n"].to_numpy()
        c = np.rint(st["mean"].to_numpy() * n).astype(np.int64)
        st["mean"] = metric.per_item(n, c)
        if metric.k > 1:  # the spread of one item's pass indicators says nothing about its pass@k's error
            st["sd"] = np.nan
    counts = errors.groupby("item_id").size()
    st["errors"] = counts.reindex(st.index, fill_value=0).to_numpy(dtype=np.int64) if len(counts) else 0
    first = errors.drop_duplicates("item_id").set_index("item_id")
    msg = (first["error_stage"].fillna("?") + "/" + first["error_type"].fillna("error") + ": "
           + first["error_message"].fillna("")) if len(first) else None
    st["first_error"] = msg.reindex(st.index) if msg is not None else None
    return used, st


def _summary(side: Side, used: pd.DataFrame, means: np.ndarray, o: CompareOptions,
             bounds: tuple[float, float] | None) -> SideReport:
    s = stats.side_summary(means, o.level, o.ci_method, o.seed)
    f = side.frame
    records = int(len(f))
    generation = int(f["is_generation_failure"].sum())
    truncated = int((f["truncated_in_reasoning"] & ~f["is_generation_failure"]).sum()) \
        if "truncated_in_reasoning" in f else 0
    return {"label": side.label, "mean": s["mean"], "ci95": _clip(s["ci95"], bounds),
            "items": s["items"], "records": records, "errors": int(f["is_error"].sum()), "se": s["se"],
            "sd": s["sd"], "records_used": int(len(used)), "duplicates_dropped": side.duplicates,
            "path": side.path, "generation_errors": generation,
            "generation_error_share": generation / records if records else 0.0,
            "scored_zero_errors": int((f["is_error"] & ~f["is_generation_failure"]).sum()),
            "truncated_in_reasoning": truncated,
            "truncated_in_reasoning_share": truncated / (records - generation) if records > generation else 0.0}


def infer_bounds(o: CompareOptions, *scores: np.ndarray,
                 declared: Sequence[tuple[float, float, str] | None] = ()) -> tuple[float, float] | None:
    """The score range intervals are cut to: --score-range; else the graders' declared ranges (side_range: the
    run directory's grader, or the range on the records; both sides' together) when every score lies in them;
    else [0, 1] when every score lies in it; else None (unbounded)."""
    import numpy as np

    if o.score_range is not None:
        return o.score_range

    def within(low: float, high: float) -> bool:
        return all(x.size == 0 or (np.nanmin(x) >= low and np.nanmax(x) <= high) for x in scores)

    known = [r for r in declared if r is not None]
    if known:
        low, high = min(r[0] for r in known), max(r[1] for r in known)
        if within(low, high):
            return low, high
    if within(0.0, 1.0):
        return 0.0, 1.0
    return None


UNBOUNDED_NOTE = ("scores outside [0, 1] and no declared grader range holds them (none from a run directory's grader "
                  "or on the records): intervals are not cut to what the grader can score; give --score-range LO,HI")


def _clip(ci: Sequence[float], bounds: tuple[float, float] | None) -> list[float]:
    lo, hi = stats.clip_interval(float(ci[0]), float(ci[1]), bounds)
    return [lo, hi]


def _delta_bounds(bounds: tuple[float, float] | None) -> tuple[float, float] | None:
    return None if bounds is None else (bounds[0] - bounds[1], bounds[1] - bounds[0])


def paired_row(base: np.ndarray, cand: np.ndarray, o: CompareOptions,
               bounds: tuple[float, float] | None = None) -> PairRow:
    """Both sides' means with intervals, and the paired delta, for one set of items (a slice, a sub-score)."""
    b = stats.side_summary(base, o.level, o.ci_method, o.seed)
    c = stats.side_summary(cand, o.level, o.ci_method, o.seed)
    delta = stats.paired_delta(base, cand, o.tie, o.level, o.seed, o.ci_method)
    delta["ci95"] = _clip(delta["ci95"], _delta_bounds(bounds))
    delta["p_adjusted"] = delta["p_value"]
    return {"items": int(len(base)),
            "baseline": {"mean": b["mean"], "ci95": _clip(b["ci95"], bounds), "se": b["se"]},
            "candidate": {"mean": c["mean"], "ci95": _clip(c["ci95"], bounds), "se": c["se"]},
            "delta": delta}


HARDEST_FRACTION = 0.25


def half_means(used: pd.DataFrame, item_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per item (in `item_ids` order), the mean of its alternate epochs: positions 1, 3, ... and 2, 4, ...

    Epochs are taken in epoch order (record order where epochs are missing); an item with one epoch has no
    second half (NaN).
    """
    import numpy as np
    import pandas as pd

    f = used[["item_id", "epoch", "score"]].sort_values(["item_id", "epoch"], kind="stable", na_position="last")
    pos = f.groupby("item_id", sort=False).cumcount().to_numpy()
    halves = f.assign(half=pos % 2).groupby(["item_id", "half"], sort=False)["score"].mean().unstack()
    halves = halves.reindex(columns=[0, 1]).reindex(pd.Index(item_ids))
    return halves[0].to_numpy(dtype=np.float64), halves[1].to_numpy(dtype=np.float64)


def half_counts(used: pd.DataFrame, item_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per item (in `item_ids` order): (n_a, c_a, n_b, c_b), the samples and passes of the two alternate-epoch
    halves half_means splits into, from records whose score is a pass indicator."""
    import numpy as np
    import pandas as pd

    f = used[["item_id", "epoch", "score"]].sort_values(["item_id", "epoch"], kind="stable", na_position="last")
    pos = f.groupby("item_id", sort=False).cumcount().to_numpy()
    g = f.assign(half=pos % 2).groupby(["item_id", "half"], sort=False)["score"].agg(["size", "sum"])
    n = g["size"].unstack().reindex(columns=[0, 1]).reindex(pd.Index(item_ids)).fillna(0)
    c = g["sum"].unstack().reindex(columns=[0, 1]).reindex(pd.Index(item_ids)).fillna(0)
    return (n[0].to_numpy(np.int64), np.rint(c[0].to_numpy()).astype(np.int64),
            n[1].to_numpy(np.int64), np.rint(c[1].to_numpy()).astype(np.int64))


def hardest_slice(used_b: pd.DataFrame, items: np.ndarray, bm: np.ndarray, cm: np.ndarray, o: CompareOptions,
                  bounds: tuple[float, float] | None, metric: passk.Metric = passk.MEAN) -> PairRow:
    """The bottom quartile by baseline mean, measured without selection bias (stats.crossfit_lowest_delta).

    Items whose baseline has one epoch cannot be split; when no item can, the slice is shown as descriptive:
    chosen and measured on the same data, so without interval or p-value, and never coloured.

    Under a pass metric the records' scores are pass indicators, so each half's mean is its pass rate. pass@1
    and pass^1 are that rate: the slice is the usual cross-fit on it. For k > 1 the items are still chosen on one
    half's pass rate (pass@k = 1 − (1 − p)^k and pass^k = p^k both rise with the pass rate p, so "lowest
    pass rate" and "lowest pass@k" name the same items in expectation), and the baseline is measured by the
    unbiased pass@k / pass^k estimator on the other half, which needs at least k samples in that half. Choice
    and measurement stay independent, so the estimate stays unbiased. With fewer than k samples per half (3
    epochs and pass@2 or pass@3) no independent measurement exists and the slice is descriptive.
    """
    import numpy as np

    measure_a = measure_b = None
    if metric.is_pass and metric.k > 1:
        n_a, c_a, n_b, c_b = half_counts(used_b, items)
        with np.errstate(invalid="ignore", divide="ignore"):
            a, b = c_a / n_a, c_b / n_b
        measure_a, measure_b = metric.per_item(n_a, c_a), metric.per_item(n_b, c_b)
        split = np.isfinite(measure_a) & np.isfinite(measure_b)
    else:
        a, b = half_means(used_b, items)
        split = np.isfinite(a) & np.isfinite(b)
    if split.sum() >= 2:
        d = stats.crossfit_lowest_delta(a[split], b[split], cm[split], HARDEST_FRACTION, o.level, o.seed,
                                        None if measure_a is None else measure_a[split],
                                        None if measure_b is None else measure_b[split])
        d["ci95"] = _clip(d["ci95"], _delta_bounds(bounds))
        d["p_adjusted"] = d["p_value"]
        left = int((~split).sum())
        why = _chosen_note(a[split], b[split], int(d.get("selected", 0)))
        if metric.is_pass:
            rule = (f"bottom quartile by baseline pass rate, chosen on half of each item's baseline epochs, its "
                    f"{metric.name} measured on the other half, both ways, averaged ({d['selected']} items chosen"
                    f"{why}" + (f"; {left} item(s) with fewer than {2 * metric.k} epochs left out" if left else "")
                    + ")")
        else:
            rule = (f"bottom quartile by baseline mean, chosen on half of each item's baseline epochs and measured "
                    f"on the other half, both ways, averaged ({d['selected']} items chosen{why}"
                    + (f"; {left} single-epoch item(s) left out" if left else "") + ")")
        base_mean, cand_mean = d.pop("baseline_mean", NAN), d.pop("candidate_mean", NAN)
        return {"field": None, "value": None, "cutoff": None, "rule": rule, "method": "cross-fit",
                "items": d.get("selected", 0), "baseline": {"mean": base_mean, "ci95": [NAN, NAN], "se": NAN},
                "candidate": {"mean": cand_mean, "ci95": [NAN, NAN], "se": NAN}, "delta": d}
    mask = stats.select_lowest(bm, HARDEST_FRACTION, o.seed)
    cutoff = float(bm[mask].max()) if mask.any() else NAN
    row = paired_row(bm[mask], cm[mask], o, bounds)
    delta = row["delta"]
    delta["se"] = delta["p_value"] = delta["p_adjusted"] = delta["mde"] = delta["se_unpaired"] = NAN
    delta["ci95"] = [NAN, NAN]
    delta["descriptive"] = True
    delta["p_method"] = "none (descriptive)"
    row["baseline"]["ci95"] = row["candidate"]["ci95"] = [NAN, NAN]
    taken = int(mask.sum())
    at_cut = int(np.isclose(bm, cutoff).sum()) if taken else 0
    below = int((bm < cutoff - 1e-12).sum()) if taken else 0
    ties = (f"; {at_cut} items tie at the cut, and the {taken - below} taken are drawn among them (seeded)"
            if below + at_cut > taken else "")
    if metric.is_pass and metric.k > 1:
        rule = (f"selected on the same data, descriptive: the {int(mask.sum())} items lowest by baseline "
                f"{metric.name} (<= {cutoff:.4g}{ties}); {metric.name} needs {metric.k} samples in each half of an "
                f"item's baseline epochs ({2 * metric.k} epochs) to be measured apart from the choice, so no interval")
    else:
        rule = (f"selected on the same data, descriptive: the {int(mask.sum())} items lowest by baseline mean "
                f"(<= {cutoff:.4g}{ties}); one epoch per item leaves no independent half to measure on, so no "
                "interval")
    return {"field": None, "value": None, "cutoff": cutoff, "rule": rule, "method": "descriptive", **row}


def _chosen_note(a: np.ndarray, b: np.ndarray, selected: int) -> str:
    """Why the cross-fit's "bottom quartile" holds more items than a quarter: each half chooses its own quarter
    (stats.select_lowest), and the slice is their union; with coarse scores many items tie at a half's cut, and
    which of them are taken is a seeded draw, so the halves' choices differ. Empty when the union is one quarter."""
    import numpy as np

    n = int(a.size)
    k = max(1, math.ceil(n * HARDEST_FRACTION))
    if selected <= k:
        return ""
    tied = []
    for half in (a, b):
        cut = float(np.sort(half)[k - 1])
        at_cut, below = int(np.isclose(half, cut).sum()), int((half < cut - 1e-12).sum())
        if below + at_cut > k:
            tied.append(at_cut)
    ties = (f"; ties at the cut: up to {max(tied)} items share a half's cut value, and its last places are drawn "
            "among them (seeded)") if tied else ""
    return f": each half of the epochs chooses its own quarter, {k} of {n} items, and the two choices differ{ties}"


def field_value(data: JSONMapping, name: str) -> str:
    """An item's value for `--by NAME`: a top-level field, else metadata.NAME; dots walk into objects."""
    parts = name.split(".")
    if len(parts) == 1 and name not in data and isinstance(data.get("metadata"), dict):
        parts = ["metadata", name]
    value: JSONInput = data
    for part in parts:
        if not isinstance(value, dict) or part not in value:
            return MISSING
        value = value[part]
    if value is None:
        return MISSING
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def dataset_fields(dataset: str | Path, names: Sequence[str]) -> dict[str, dict[str, str]]:
    """{field: {item_id: value}} for the items of a dataset."""
    from rfteval.data.dataset import load_dataset

    ds = load_dataset(dataset)
    fields = {name: {it.id: field_value(it.data, name) for it in ds.items} for name in names}
    for name, values in fields.items():
        if values and all(v == MISSING for v in values.values()):  # a typo would make one silent "(missing)" slice
            raise InputError(f"no item of {ds.path} has this field (top-level, or under metadata)", field=f"--by {name}")
    return fields


def adjust_family(rows: Sequence[PairRow]) -> None:
    """Holm-adjust the p-values of rows that answer one question together (the slices of one --by, sub-scores)."""
    adjusted = stats.holm([r["delta"]["p_value"] for r in rows])
    for row, p in zip(rows, adjusted.tolist()):
        row["delta"]["p_adjusted"] = p


def compare_sides(base: Side, cand: Side, options: CompareOptions | None = None,
                  fields: dict[str, dict[str, str]] | None = None) -> CompareResult:
    """The whole comparison of two sides already loaded: statistics, slices and sub-scores. The gate's verdict is
    left empty (no_gate): whoever gates calls rfteval.compare.gate.evaluate_gate (compare_paths does).

    Under --metric pass@K / pass^K every item's value is its pass@K / pass^K estimate instead of its mean score,
    and everything downstream (intervals, p, verdict, slices, the gate) runs on it unchanged; the per-item drop
    test runs on the items' pass indicators (pass@K and pass^K both rise with the pass rate, so a drop in one is
    a drop in the other). Items with fewer than K usable samples on either side are left out, with a note.
    """
    import numpy as np
    import pandas as pd

    o = options or CompareOptions()
    check_error_policy(o.errors)
    metric = passk.parse_metric(o.metric)
    if o.pass_threshold is not None and not math.isfinite(o.pass_threshold):
        raise InputError(f"must be a finite number, got {o.pass_threshold}", field="--pass-threshold")
    notes: list[str] = []
    check_threshold_in_range((base, cand), o)
    thresholds = side_thresholds(base, cand, o, required=metric.is_pass)
    th_b, th_c = thresholds if metric.is_pass and thresholds else (None, None)
    used_b, st_b = _side_stats(base, o, th_b, metric)
    used_c, st_c = _side_stats(cand, o, th_c, metric)
    only_b = sorted(st_b.index.difference(st_c.index).tolist())
    only_c = sorted(st_c.index.difference(st_b.index).tolist())
    if o.strict and (only_b or only_c):
        which = (f"{len(only_b)} only in the baseline (e.g. {only_b[0]!r})" if only_b
                 else f"{len(only_c)} only in the candidate (e.g. {only_c[0]!r})")
        raise InputError(f"items do not pair: {which}", cand.path or cand.label, field="--strict")
    joined = st_b.join(st_c, how="inner", lsuffix="_b", rsuffix="_c")
    if joined.empty:
        raise InputError("no item_id appears on both sides: nothing to compare", cand.path or cand.label,
                         field="item_id")
    if only_b or only_c:
        notes.append(f"{len(only_b)} item(s) only in the baseline and {len(only_c)} only in the candidate "
                     "were left out")
    if metric.is_pass:
        short = ~(np.isfinite(joined["mean_b"].to_numpy()) & np.isfinite(joined["mean_c"].to_numpy()))
        if short.all():
            top = int(min(joined["n_b"].max(), joined["n_c"].max()))
            raise InputError(f"{metric.name} needs {metric.k} samples per item; these records have at most {top} "
                             "usable per item on one side", cand.path or cand.label, field="--metric")
        if short.any():
            notes.append(f"{int(short.sum())} item(s) with fewer than {metric.k} usable samples on a side were "
                         f"left out of {metric.name}")
            joined = joined[~short]
    bounds = (0.0, 1.0) if metric.is_pass else infer_bounds(o, used_b["score"].to_numpy(), used_c["score"].to_numpy(),
                                                           declared=(side_range(base), side_range(cand)))
    if bounds is None:
        notes.append(UNBOUNDED_NOTE)
    bm = joined["mean_b"].to_numpy()
    cm = joined["mean_c"].to_numpy()
    d = cm - bm
    n_b, n_c = joined["n_b"].to_numpy(), joined["n_c"].to_numpy()
    lo, hi = stats.per_item_delta_interval(d, joined["sd_b"].to_numpy(), n_b, joined["sd_c"].to_numpy(), n_c, o.level)
    few = (n_b < MIN_EPOCHS_FOR_ITEM_INTERVAL) | (n_c < MIN_EPOCHS_FOR_ITEM_INTERVAL)
    lo, hi = np.where(few, np.nan, lo), np.where(few, np.nan, hi)
    if bounds is not None:  # an item's delta lies within ±(the grader's span), as the overall delta's does
        span = bounds[1] - bounds[0]
        lo, hi = np.maximum(lo, -span), np.minimum(hi, span)
    items = pd.DataFrame({
        "item_id": joined.index.to_numpy(), "baseline": bm, "candidate": cm, "delta": d, "delta_lo": lo,
        "delta_hi": hi, "baseline_sd": joined["sd_b"].to_numpy(), "candidate_sd": joined["sd_c"].to_numpy(),
        "baseline_n": n_b, "candidate_n": n_c,
        "baseline_errors": joined["errors_b"].to_numpy(), "candidate_errors": joined["errors_c"].to_numpy(),
        "baseline_error": joined["first_error_b"].to_numpy(), "candidate_error": joined["first_error_c"].to_numpy(),
    })
    baseline = _summary(base, used_b, bm, o, bounds)
    candidate = _summary(cand, used_c, cm, o, bounds)
    baseline["items_unpaired"], candidate["items_unpaired"] = len(only_b), len(only_c)
    delta = stats.paired_delta(bm, cm, o.tie, o.level, o.seed, o.ci_method)
    delta["ci95"] = _clip(delta["ci95"], _delta_bounds(bounds))
    delta["p_adjusted"] = delta["p_value"]
    if len(d) < MIN_ITEMS_FOR_INTERVAL:
        notes.append(f"only {len(d)} paired item(s): too few for a reliable interval ({MIN_ITEMS_FOR_INTERVAL} or "
                     "more are needed, and 6 or more before a permutation test can reach p < 0.05)")

    slices: dict[str, PairRow] = {}
    slices[HARDEST] = hardest_slice(used_b, joined.index.to_numpy(), bm, cm, o, bounds, metric)
    for name in o.by:
        values = fields.get(name, {}) if fields else {}
        if fields is not None and not any(i in values for i in items["item_id"]):
            raise InputError("none of the compared items is in the dataset (does it belong to these records?)",
                             field=f"--by {name}")
        col = np.array([values.get(i, NOT_IN_DATASET) for i in items["item_id"]], dtype=object)
        family = []
        for value in sorted(set(col.tolist())):
            sel = col == value
            row: PairRow = {"field": name, "value": value, **paired_row(bm[sel], cm[sel], o, bounds)}
            slices[f"{name}={value}"] = row
            family.append(row)
        adjust_family(family)
    if metric.is_pass:
        sub_scores: dict[str, PairRow] = {}
        if any(c.startswith(SUB) for c in used_b.columns):
            notes.append(f"sub-scores are compared as means, not under {metric.name}: left out here")
    else:
        sub_scores = _sub_scores(used_b, used_c, joined[[]], o, notes, (base, cand))
    adjust_family(list(sub_scores.values()))
    pass_k = None
    if thresholds is not None:
        pass_k, note = pass_k_check(base, cand, o, thresholds, metric)
        if note:
            notes.append(note)
        if metric.is_pass or pass_k is not None:  # the pass rule is in use: say when it is "only the maximum"
            notes += max_threshold_notes((base, cand), o)
    per_item: dict[str, np.ndarray] = {}
    agent = compare_agents(base, cand, used_mask(base.frame, o), used_mask(cand.frame, o), joined.index, o, per_item,
                           bounds)
    if per_item:
        items = items.assign(**per_item)  # in joined's order, as the items were built
    if base.agent != cand.agent:
        one = base if base.agent else cand
        notes.append(f"only {one.label}'s records are an agent run's (turns, stop_reason): no agent comparison")
    items = items.sort_values(["delta", "item_id"], kind="stable").reset_index(drop=True)
    return CompareResult(
        baseline=baseline, candidate=candidate, delta=delta, items=items, slices=slices, sub_scores=sub_scores,
        unpaired={"baseline_only": only_b, "candidate_only": only_c}, gate=no_gate(o.gate), options=o, notes=notes,
        baseline_scores=used_b["score"].to_numpy(), candidate_scores=used_c["score"].to_numpy(),
        baseline_records=used_b[["item_id", "score"]], candidate_records=used_c[["item_id", "score"]],
        bounds=bounds, metric=metric.name, pass_k=pass_k, agent=agent)


MIN_ITEMS_FOR_INTERVAL = stats.MIN_ITEMS_FOR_INTERVAL
MIN_EPOCHS_FOR_ITEM_INTERVAL = 5  # an interval from 2-3 epochs (often all alike) is not one to show


def sub_grader_ranges(grader: str) -> dict[str, tuple[float, float, str]]:
    """A multi grader file's sub-graders' ranges by key (a 0..10 score_model inside a multi scoring 0..1)."""
    config = _grader_file(grader)  # best effort, as grader_range
    return config_sub_ranges(config) if config is not None else {}


def config_sub_ranges(config: GraderConfig) -> dict[str, tuple[float, float, str]]:
    """sub_grader_ranges of a grader already loaded."""
    graders = getattr(config, "graders", None)
    if not isinstance(graders, dict):
        return {}
    return {str(key): (*sub.score_range()[:2], f"{key}: {sub.score_range()[2]}") for key, sub in graders.items()}


def _sub_scores(used_b: pd.DataFrame, used_c: pd.DataFrame, paired: pd.DataFrame, o: CompareOptions,
                notes: list[str], sides: tuple[Side, Side]) -> dict[str, PairRow]:
    """Each multi-grader sub-score compared like the score: error records count 0 unless excluded. Each one's
    intervals are cut to its own sub-grader's range (infer_bounds), not the multi's."""
    import numpy as np

    declared = [s.declared_sub_ranges if s.declared_sub_ranges is not None else sub_grader_ranges(s.grader)
                if s.grader is not None else {} for s in sides]

    keys_b = {c[len(SUB):] for c in used_b.columns if c.startswith(SUB)}
    keys_c = {c[len(SUB):] for c in used_c.columns if c.startswith(SUB)}
    if keys_b ^ keys_c:
        notes.append(f"sub-scores on one side only, not compared: {', '.join(sorted(keys_b ^ keys_c))}")
    out: dict[str, PairRow] = {}
    for key in sorted(keys_b & keys_c):
        per_side = []
        for used in (used_b, used_c):
            vals = used[SUB + key].to_numpy(dtype=np.float64).copy()
            vals[used["is_error"].to_numpy()] = 0.0
            ok = ~np.isnan(vals)
            frame = used.loc[ok, ["item_id"]].assign(score=vals[ok])
            per_side.append(stats.item_stats(frame).set_index("item_id")["mean"])
        j = per_side[0].to_frame("b").join(per_side[1].to_frame("c"), how="inner").join(paired, how="inner")
        if len(j):
            b_vals, c_vals = j["b"].to_numpy(), j["c"].to_numpy()
            bounds = infer_bounds(o, b_vals, c_vals, declared=[d.get(key) for d in declared])
            out[key] = paired_row(b_vals, c_vals, o, bounds)
    return out


# ---------------------------------------------------------------------------------------------- entry


