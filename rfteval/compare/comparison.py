"""Paired comparison of two models' records: pair items, compare means, slices and sub-scores; the gate comes after.

Library first: `compare_paths` (rfteval.compare.paths) is what `rfteval compare` calls; `compare_sides` takes sides
already loaded (rfteval.compare.sides). This module is the computation's order: its parts are measure.py (per-side
and per-row statistics), passing.py (the pass rule, pass@k), hardest.py (the hardest slice) and ranges.py (grader
ranges); result.py is what it gives (CompareResult and its JSON). The gate's checks live in rfteval.compare.gate.
Reports render a `CompareResult`; nothing here prints.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from rfteval.compare.agent import compare_agents
from rfteval.compare.gate_types import no_gate
from rfteval.compare.hardest import hardest_slice
from rfteval.compare.measure import (
    UNBOUNDED_NOTE,
    adjust_family,
    clip,
    delta_bounds,
    infer_bounds,
    paired_row,
    side_report,
    side_stats,
    used_mask,
)
from rfteval.compare.passing import check_threshold_in_range, max_threshold_notes, pass_k_check, side_thresholds
from rfteval.compare.ranges import side_range, sub_grader_ranges
from rfteval.compare.result import CompareOptions, CompareResult, PairRow
from rfteval.compare.sides import SUB, Side
from rfteval.data.json_types import JSONInput, JSONMapping
from rfteval.data.records import check_error_policy
from rfteval.errors import InputError
from rfteval.stats import paired as stats
from rfteval.stats import passk

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

HARDEST = "hardest"
MISSING = "(missing)"
NOT_IN_DATASET = "(not in dataset)"


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
    used_b, st_b = side_stats(base, o, th_b, metric)
    used_c, st_c = side_stats(cand, o, th_c, metric)
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
    baseline = side_report(base, used_b, bm, o, bounds)
    candidate = side_report(cand, used_c, cm, o, bounds)
    baseline["items_unpaired"], candidate["items_unpaired"] = len(only_b), len(only_c)
    delta = stats.paired_delta(bm, cm, o.tie, o.level, o.seed, o.ci_method)
    delta["ci95"] = clip(delta["ci95"], delta_bounds(bounds))
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
