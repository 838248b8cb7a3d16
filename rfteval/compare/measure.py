"""What a comparison measures on each side and each set of paired items: the records the error policy lets in,
per-item statistics (scores or pass indicators, a pass metric's per-item estimate), a side's report, both sides'
means and their paired delta over a set of items, and the score range intervals are cut to."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from rfteval.compare.result import CompareOptions, PairRow, SideReport
from rfteval.compare.sides import Side
from rfteval.stats import paired as stats
from rfteval.stats import passk

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

NAN = float("nan")


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


def pass_indicator(used: pd.DataFrame, threshold: float) -> np.ndarray:
    """Per record, whether it passed: the grader's `passed` verdict, else score ≥ threshold (rfteval.stats.passk.passes).

    Error records left in by the error policy (grading errors, refusals; every error under --errors zero) fail,
    as they score 0: OpenAI's rule, the same as for the mean.
    """
    import numpy as np

    passed = used["passed"].to_numpy(dtype=np.float64) if "passed" in used else None
    return passk.passes(used["score"].to_numpy(dtype=np.float64), passed, threshold,
                        error=used["is_error"].to_numpy(dtype=bool))


def side_stats(side: Side, o: CompareOptions, threshold: float | None = None,
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


def side_report(side: Side, used: pd.DataFrame, means: np.ndarray, o: CompareOptions,
             bounds: tuple[float, float] | None) -> SideReport:
    s = stats.side_summary(means, o.level, o.ci_method, o.seed)
    f = side.frame
    records = int(len(f))
    generation = int(f["is_generation_failure"].sum())
    truncated = int((f["truncated_in_reasoning"] & ~f["is_generation_failure"]).sum()) \
        if "truncated_in_reasoning" in f else 0
    return {"label": side.label, "mean": s["mean"], "ci95": clip(s["ci95"], bounds),
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


def clip(ci: Sequence[float], bounds: tuple[float, float] | None) -> list[float]:
    lo, hi = stats.clip_interval(float(ci[0]), float(ci[1]), bounds)
    return [lo, hi]


def delta_bounds(bounds: tuple[float, float] | None) -> tuple[float, float] | None:
    return None if bounds is None else (bounds[0] - bounds[1], bounds[1] - bounds[0])


def paired_row(base: np.ndarray, cand: np.ndarray, o: CompareOptions,
               bounds: tuple[float, float] | None = None) -> PairRow:
    """Both sides' means with intervals, and the paired delta, for one set of items (a slice, a sub-score)."""
    b = stats.side_summary(base, o.level, o.ci_method, o.seed)
    c = stats.side_summary(cand, o.level, o.ci_method, o.seed)
    delta = stats.paired_delta(base, cand, o.tie, o.level, o.seed, o.ci_method)
    delta["ci95"] = clip(delta["ci95"], delta_bounds(bounds))
    delta["p_adjusted"] = delta["p_value"]
    return {"items": int(len(base)),
            "baseline": {"mean": b["mean"], "ci95": clip(b["ci95"], bounds), "se": b["se"]},
            "candidate": {"mean": c["mean"], "ci95": clip(c["ci95"], bounds), "se": c["se"]},
            "delta": delta}


def adjust_family(rows: Sequence[PairRow]) -> None:
    """Holm-adjust the p-values of rows that answer one question together (the slices of one --by, sub-scores)."""
    adjusted = stats.holm([r["delta"]["p_value"] for r in rows])
    for row, p in zip(rows, adjusted.tolist()):
        row["delta"]["p_adjusted"] = p
