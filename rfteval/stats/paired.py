"""Honest statistics for repeated samples: per-item means first, then intervals over items, paired deltas.

The p-values come from rfteval.stats.permutation (sign-flip tests), the t quantiles from rfteval.stats.tdist.

Pure functions over numpy/pandas (see docs/statistics.md). Every standard error is computed from
per-item means, never from raw records: the epochs of one item are a cluster, and treating them as
independent would shrink the error bars by about sqrt(K).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, NotRequired, SupportsFloat, SupportsInt, TypeAlias, TypedDict

from rfteval.stats.permutation import RESAMPLES, finite, p_floor, sign_flip_p_value
from rfteval.stats.tdist import t_cdf, t_ppf, t_quantile

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

    # t_interval's results: one value per interval, a numpy float for 1-D input or an array for a batch of them
    MeanOrMeans: TypeAlias = "np.float64 | np.ndarray"

BOOTSTRAP_RESAMPLES = 10_000
POWER = 0.8
# Below this many items no interval (compare) or verdict (readiness) is to be trusted: compare's note and
# readiness's provisional verdict use the same threshold and say so the same way.
MIN_ITEMS_FOR_INTERVAL = 5
NAN = float("nan")


# ---------------------------------------------------------------------------------------------- per item


def item_stats(df: pd.DataFrame) -> pd.DataFrame:
    """Per item: mean over its epochs, sd (ddof=1; NaN with one epoch), epoch count, whether all scores agree.

    `df` needs item_id and score (epoch is not used: each row is one epoch). Rows keep the order in which
    items first appear. Vectorised with factorize/bincount, so 10^5 items cost milliseconds.
    """
    import numpy as np
    import pandas as pd

    if len(df) == 0:
        return pd.DataFrame({"item_id": pd.Series([], dtype=object), "mean": [], "sd": [], "n": pd.Series([], dtype=np.int64),
                             "all_equal": pd.Series([], dtype=bool)})
    codes, uniques = pd.factorize(df["item_id"], sort=False)
    scores = df["score"].to_numpy(dtype=np.float64)
    if not np.all(np.isfinite(scores)):
        raise ValueError("item_stats needs finite scores (set error records to 0 or drop them first)")
    k = len(uniques)
    n = np.bincount(codes, minlength=k)
    mean = np.bincount(codes, weights=scores, minlength=k) / n
    dev = scores - mean[codes]
    ss = np.bincount(codes, weights=dev * dev, minlength=k)
    with np.errstate(invalid="ignore", divide="ignore"):
        sd = np.where(n > 1, np.sqrt(ss / np.maximum(n - 1, 1)), np.nan)
    order = np.argsort(codes, kind="stable")
    starts = np.concatenate(([0], np.cumsum(n)[:-1]))
    sorted_scores = scores[order]
    lo = np.minimum.reduceat(sorted_scores, starts)
    hi = np.maximum.reduceat(sorted_scores, starts)
    return pd.DataFrame({"item_id": uniques, "mean": mean, "sd": sd, "n": n.astype(np.int64),
                         "all_equal": hi == lo})


# ---------------------------------------------------------------------------------------------- intervals


def t_interval(values: np.ndarray, level: float = 0.95, axis: int = -1
               ) -> tuple[MeanOrMeans, MeanOrMeans, MeanOrMeans, MeanOrMeans]:
    """(mean, se, lo, hi) of a t interval along `axis`; vectorised so a simulation checks many replicates at once:
    numpy floats for a 1-D `values`, arrays (the other axes' shape) otherwise.

    se = sd(ddof=1)/sqrt(n); the interval is mean ± t_{n-1}·se. Fewer than two values give NaN se and bounds.
    """
    import numpy as np

    values = np.asarray(values, dtype=np.float64)
    n = values.shape[axis]
    if n == 0:
        mean = np.full(np.delete(values.shape, axis if axis >= 0 else values.ndim + axis), np.nan)
    else:
        mean = values.mean(axis=axis)
    if n < 2:
        nan = np.full(np.shape(mean), np.nan)
        return mean, nan, nan, nan
    se = values.std(axis=axis, ddof=1) / math.sqrt(n)
    half = t_quantile(level, n - 1) * se
    return mean, se, mean - half, mean + half


def bootstrap_interval(values: Sequence[float] | np.ndarray, level: float = 0.95, seed: int = 0,
                       resamples: int = BOOTSTRAP_RESAMPLES) -> tuple[float, float]:
    """Percentile bootstrap of the mean (resampling items, never raw records), in memory-bounded chunks."""
    import numpy as np

    x = finite(values)
    n = x.size
    if n < 2:
        return NAN, NAN
    rng = np.random.default_rng(seed)
    means = np.empty(resamples)
    chunk = max(1, 4_000_000 // n)
    for start in range(0, resamples, chunk):
        r = min(chunk, resamples - start)
        means[start:start + r] = x[rng.integers(0, n, (r, n))].mean(axis=1)
    alpha = 1.0 - level
    lo, hi = np.quantile(means, [alpha / 2, 1 - alpha / 2])
    return float(lo), float(hi)


class SideSummary(TypedDict):
    """One model's score over items: the mean of per-item means, its SE and interval."""

    mean: float
    se: float
    sd: float
    ci95: list[float]
    items: int
    level: float
    method: str  # of the interval: "t" or "bootstrap"


class PairedDelta(TypedDict):
    """Candidate minus baseline over paired items (paired_delta; crossfit_lowest_delta adds its own keys)."""

    mean: float
    se: float
    sd: float
    ci95: list[float]
    p_value: float
    p_method: str
    mde: float  # the smallest true delta found with 80% power
    wins: int
    ties: int
    losses: int
    n: int
    correlation: float
    se_unpaired: float
    level: float
    method: str
    p_adjusted: NotRequired[float]  # Holm-adjusted within its family (slices of one --by, sub-scores)
    descriptive: NotRequired[bool]  # chosen and measured on the same data: no test, no interval
    selected: NotRequired[int]  # cross-fitted hardest slice: the items chosen on either half
    baseline_mean: NotRequired[float]
    candidate_mean: NotRequired[float]


def mean_interval(x: np.ndarray, level: float, method: str, seed: int) -> tuple[float, float, float, float]:
    """(mean, se, lo, hi) of the mean of 1-D `x`: the t interval, or with method "bootstrap" a percentile
    bootstrap's bounds (the SE is the t one either way)."""
    mean, se, t_lo, t_hi = t_interval(x, level)
    if method == "bootstrap":
        lo, hi = bootstrap_interval(x, level, seed)
    elif method == "t":
        lo, hi = float(t_lo), float(t_hi)
    else:
        raise ValueError(f"unknown interval method {method!r} (t or bootstrap)")
    return float(mean), float(se), lo, hi


def side_summary(item_means: Sequence[float] | np.ndarray, level: float = 0.95, method: str = "t",
                 seed: int = 0) -> SideSummary:
    """One model's score: the mean of per-item means, its SE over items and an interval (t, or bootstrap)."""
    x = finite(item_means)
    mean, se, lo, hi = mean_interval(x, level, method, seed)
    sd = float(x.std(ddof=1)) if x.size > 1 else NAN
    return {"mean": float(mean) if x.size else NAN, "se": float(se), "sd": sd, "ci95": [float(lo), float(hi)],
            "items": int(x.size), "level": level, "method": method}


# ---------------------------------------------------------------------------------------------- paired delta


def mde(sd_d: float, n: int, level: float = 0.95, power: float = POWER) -> float:
    """Smallest true delta this many items detect with the given power: (t_{1-α/2} + t_power)·sd(d)/sqrt(n).

    Student's t with n − 1 degrees of freedom, not the normal quantiles: the interval that decides is a t
    interval, and at 5 items the normal shortcut understates the MDE 1.33-fold (1.10-fold at 12).
    """
    if n < 2 or not math.isfinite(sd_d):
        return NAN
    return (t_quantile(level, n - 1) + t_ppf(power, float(n - 1))) * sd_d / math.sqrt(n)


TIE_SLACK = 1e-9  # scores are O(1): a difference within this of the tie tolerance is the tolerance, not past it


def win_tie_loss(d: Sequence[float] | np.ndarray, tie: float = 1e-9) -> tuple[int, int, int]:
    """Items won, tied and lost: |d| ≤ tie is a tie, with slack for float rounding (0.4 − 0.3 ties at 0.1)."""
    import numpy as np

    x = finite(d)
    wins = int(np.count_nonzero(x > tie + TIE_SLACK))
    losses = int(np.count_nonzero(x < -tie - TIE_SLACK))
    return wins, x.size - wins - losses, losses


def correlation(a: np.ndarray, b: np.ndarray) -> float:
    """Pearson correlation of two sides' item means; NaN when either is constant or there are < 3 items.

    Constancy is tested with the range (exact), not std() > 0: the mean of n copies of 0.1 is not exactly 0.1,
    so a constant side has a tiny positive std and corrcoef would report 1.0.
    """
    import numpy as np

    if a.size < 3 or np.ptp(a) == 0 or np.ptp(b) == 0:
        return NAN
    return float(np.corrcoef(a, b)[0, 1])


def paired_delta(base_means: Sequence[float] | np.ndarray, cand_means: Sequence[float] | np.ndarray,
                 tie: float = 1e-9, level: float = 0.95, seed: int = 0, method: str = "t",
                 resamples: int = RESAMPLES) -> PairedDelta:
    """Candidate minus baseline over items aligned by position: the paired comparison of two models.

    Keys: mean, se, sd, ci95, p_value (sign-flip permutation), p_method, mde (80% power), wins, ties,
    losses (per item, tie when |d| ≤ tie), n, correlation of the two sides' item means, and se_unpaired
    (what ignoring the pairing would have claimed, for contrast).
    """
    b, c = finite(base_means), finite(cand_means)
    if b.shape != c.shape:
        raise ValueError(f"paired_delta needs aligned arrays, got {b.size} and {c.size} values")
    d = c - b
    mean, se, lo, hi = mean_interval(d, level, method, seed)
    n = int(d.size)
    sd = float(d.std(ddof=1)) if n > 1 else NAN
    p, p_method = sign_flip_p_value(d, seed=seed, resamples=resamples)
    wins, ties, losses = win_tie_loss(d, tie)
    corr = correlation(b, c)
    se_b = b.std(ddof=1) / math.sqrt(n) if n > 1 else NAN
    se_c = c.std(ddof=1) / math.sqrt(n) if n > 1 else NAN
    return {
        "mean": float(mean) if n else NAN, "se": float(se), "sd": sd, "ci95": [float(lo), float(hi)],
        "p_value": p, "p_method": p_method, "mde": mde(sd, n, level), "wins": wins, "ties": ties,
        "losses": losses, "n": n, "correlation": corr, "se_unpaired": float(math.sqrt(se_b ** 2 + se_c ** 2)),
        "level": level, "method": method,
    }


def per_item_delta_interval(d: np.ndarray, sd_b: np.ndarray, n_b: np.ndarray, sd_c: np.ndarray, n_c: np.ndarray,
                            level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """Each item's delta ± t·sqrt(sd_b²/K_b + sd_c²/K_c), df = K_b + K_c − 2: the spread across its epochs.

    NaN where a side has a single epoch (no spread to measure). Only for plots and tables: the overall
    interval comes from the spread of deltas across items, which already includes this noise.
    """
    import numpy as np

    with np.errstate(invalid="ignore", divide="ignore"):
        se = np.sqrt(sd_b ** 2 / n_b + sd_c ** 2 / n_c)
        df, inverse = np.unique(np.asarray(n_b + n_c - 2, dtype=np.float64), return_inverse=True)
        q = np.array([t_quantile(level, v) if v > 0 else np.nan for v in df])[inverse.ravel()]
    return d - q * se, d + q * se



# ---------------------------------------------------------------------------------------------- decisions


def holm(p_values: Sequence[float] | np.ndarray) -> np.ndarray:
    """Holm's step-down adjustment: family-wise error ≤ α across the tests, under any dependence.

    adjusted p_(i) = max_{j ≤ i} min(1, (m − j + 1)·p_(j)) over the sorted p-values. NaN (untested) stays NaN
    and does not count in m.
    """
    import numpy as np

    p = np.asarray(p_values, dtype=np.float64).ravel()
    out = np.full(p.shape, np.nan)
    ok = np.flatnonzero(np.isfinite(p))
    m = ok.size
    if not m:
        return out
    order = ok[np.argsort(p[ok], kind="stable")]
    scaled = np.minimum(1.0, (m - np.arange(m)) * p[order])
    out[order] = np.maximum.accumulate(scaled)
    return out


def direction(delta: Mapping[str, object], level: float = 0.95) -> str:
    """The verdict of one paired row: 'better', 'worse', 'no clear difference' or 'too few items to tell'.

    One rule for the word, the colour and the gate: a direction is claimed only when the test's p-value (Holm
    adjusted where the row belongs to a family of slices or sub-scores) is below α = 1 − level *and* the
    interval excludes 0 on that side. When the test cannot reach α on this many items it says so.
    """
    if delta.get("descriptive"):
        return "descriptive"
    alpha = 1.0 - level
    count = delta.get("n")
    n = int(count) if isinstance(count, SupportsInt) else 0
    if p_floor(n, str(delta.get("p_method", ""))) > alpha + 1e-12:
        return "too few items to tell"
    p = delta.get("p_adjusted", delta.get("p_value"))
    ci = delta.get("ci95")
    lo, hi = ci if isinstance(ci, (list, tuple)) and len(ci) == 2 else (None, None)
    if not isinstance(p, SupportsFloat) or not math.isfinite(float(p)) or float(p) >= alpha:
        return "no clear difference"
    if lo is not None and math.isfinite(lo) and lo > 0:
        return "better"
    if hi is not None and math.isfinite(hi) and hi < 0:
        return "worse"
    return "no clear difference"


def clip_interval(lo: float, hi: float, bounds: tuple[float, float] | None) -> tuple[float, float]:
    """An interval cut to what the quantity can take (a mean within the grader's range, a delta within ±span)."""
    if bounds is None:
        return lo, hi
    low, high = bounds
    return (max(lo, low) if math.isfinite(lo) else lo), (min(hi, high) if math.isfinite(hi) else hi)

# ---------------------------------------------------------------------------------------------- hardest slice


def select_lowest(values: np.ndarray, fraction: float, seed: int) -> np.ndarray:
    """Mask of the ceil(fraction·n) lowest values; ties at the cutoff broken at random (seeded), never all taken.

    With coarse scores (binary epochs) half the items can share the lowest value: taking every tied item would
    make the "bottom quartile" most of the data.
    """
    import numpy as np

    n = values.size
    mask = np.zeros(n, dtype=bool)
    if n == 0:
        return mask
    k = max(1, math.ceil(n * fraction))
    tiebreak = np.random.default_rng(seed).random(n)
    mask[np.lexsort((tiebreak, values))[:k]] = True
    return mask


def crossfit_lowest_delta(base_a: np.ndarray, base_b: np.ndarray, cand: np.ndarray, fraction: float = 0.25,
                          level: float = 0.95, seed: int = 0, measure_a: np.ndarray | None = None,
                          measure_b: np.ndarray | None = None) -> PairedDelta:
    """The paired delta on the items hardest for the baseline, chosen on data independent of the measurement.

    Choosing the bottom quartile by baseline mean and then measuring those same means reports regression to
    the mean as improvement. Instead each item's baseline epochs are split in two halves A and B: the items
    lowest on A are measured on B (candidate mean − B mean), those lowest on B are measured on A, and the two
    estimates are averaged (cross-fitting). Each half's estimate is unbiased, because the half that selects is
    independent of the half that measures. `measure_a`/`measure_b`, when given, are what is measured on each
    half instead of the selecting values themselves (a pass metric selects on each half's pass rate and measures
    that half's pass@k estimate); by default a half is measured by the same values it selects with. The interval
    treats the per-item contributions
    v_i = ½[1(i∈S_A)(c_i − B_i)·n/|S_A| + 1(i∈S_B)(c_i − A_i)·n/|S_B|] as independent (the estimate is their
    mean), with a t quantile on (selected items − 1) degrees of freedom, since only those carry signal; its
    coverage is checked by simulation.
    """
    import numpy as np

    a, b, c = (np.asarray(x, dtype=np.float64) for x in (base_a, base_b, cand))
    n = c.size
    sel_a = select_lowest(a, fraction, seed)
    sel_b = select_lowest(b, fraction, seed + 1)
    if measure_a is not None:
        a = np.asarray(measure_a, dtype=np.float64)
    if measure_b is not None:
        b = np.asarray(measure_b, dtype=np.float64)
    ka, kb = int(sel_a.sum()), int(sel_b.sum())
    v = np.zeros(n)
    if ka:
        v[sel_a] += 0.5 * (c[sel_a] - b[sel_a]) * n / ka
    if kb:
        v[sel_b] += 0.5 * (c[sel_b] - a[sel_b]) * n / kb
    selected = int((sel_a | sel_b).sum())
    mean = float(v.mean()) if n else NAN
    se = float(v.std(ddof=1)) / math.sqrt(n) if n > 1 else NAN
    df = max(1, selected - 1)  # only the selected items carry signal: count those, not all n
    half = t_quantile(level, df) * se
    lo, hi = mean - half, mean + half
    base_mean = 0.5 * (float(b[sel_a].mean()) + float(a[sel_b].mean())) if ka and kb else NAN
    cand_mean = 0.5 * (float(c[sel_a].mean()) + float(c[sel_b].mean())) if ka and kb else NAN
    # W/T/L count items, as every other row does: an item chosen by both halves has two held-out differences,
    # and its one verdict is their mean (counting both made "4 items" read 6/0/0)
    held_sum = np.zeros(n)
    held_sum[sel_a] += c[sel_a] - b[sel_a]
    held_sum[sel_b] += c[sel_b] - a[sel_b]
    held_n = sel_a.astype(np.int64) + sel_b.astype(np.int64)
    chosen = held_n > 0
    wins, ties, losses = win_tie_loss(held_sum[chosen] / held_n[chosen])
    sd = float(v.std(ddof=1)) if n > 1 else NAN
    p = 2.0 * (1.0 - t_cdf(abs(mean / se), float(df))) if se > 0 else (1.0 if mean == 0 else 0.0)
    return {"mean": mean, "se": se, "sd": sd, "ci95": [lo, hi],
            "p_value": p if math.isfinite(se) else NAN, "p_method": "t, cross-fitted halves",
            "mde": mde(sd, n, level), "wins": wins, "ties": ties, "losses": losses, "n": n,
            "correlation": NAN, "se_unpaired": NAN, "level": level, "method": "t",
            "selected": selected, "baseline_mean": base_mean, "candidate_mean": cand_mean}
