"""The hardest slice: the bottom quartile by baseline mean (or pass rate), measured without selection bias by
cross-fitting on halves of each item's baseline epochs (stats.crossfit_lowest_delta), descriptive when no item can
be split."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from rfteval.compare.measure import NAN, clip, delta_bounds, paired_row
from rfteval.compare.result import CompareOptions, PairRow
from rfteval.stats import paired as stats
from rfteval.stats import passk

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

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
        d["ci95"] = clip(d["ci95"], delta_bounds(bounds))
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
