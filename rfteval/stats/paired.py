"""Honest statistics for repeated samples: per-item means first, then intervals over items, paired deltas.

Pure functions over numpy/pandas (see docs/statistics.md). Every standard error is computed from
per-item means, never from raw records: the epochs of one item are a cluster, and treating them as
independent would shrink the error bars by about sqrt(K).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, NotRequired, SupportsFloat, SupportsInt, TypeAlias, TypedDict

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

    # t_interval's results: one value per interval, a numpy float for 1-D input or an array for a batch of them
    MeanOrMeans: TypeAlias = "np.float64 | np.ndarray"

EXACT_MAX_ITEMS = 16  # the sign-flip test enumerates all 2**n patterns up to here
RESAMPLES = 10_000  # Monte-Carlo sign flips above EXACT_MAX_ITEMS
BOOTSTRAP_RESAMPLES = 10_000
GROUPED_MAX_VALUES = 256  # distinct |d| values up to which draws are made per value, not per item
SIGN_FLIP_CHUNK_BLOCKS = 1024  # 8,192 items per independently seeded chunk
POWER = 0.8
# Below this many items no interval (compare) or verdict (readiness) is to be trusted: compare's note and
# readiness's provisional verdict use the same threshold and say so the same way.
MIN_ITEMS_FOR_INTERVAL = 5
NAN = float("nan")


def _arr(values: Sequence[float] | np.ndarray) -> np.ndarray:
    import numpy as np

    a = np.asarray(values, dtype=np.float64).ravel()
    if a.size and not np.all(np.isfinite(a)):
        raise ValueError("statistics need finite values (NaN or inf found)")
    return a


# ---------------------------------------------------------------------------------------------- t distribution
# scipy is an optional extra (and importing scipy.stats is slow), so the t quantile is computed here:
# the CDF from the regularized incomplete beta function (Lentz's continued fraction), inverted by Newton's
# method with a bisection guard. Checked against scipy to 1e-10 in tests/stats/test_paired.py.


def _betacf(a: float, b: float, x: float) -> float:
    tiny, eps = 1e-300, 1e-15
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 10_000):
        m2 = 2 * m
        for num in (m * (b - m) * x / ((a + m2 - 1) * (a + m2)), -(a + m) * (a + b + m) * x / ((a + m2) * (a + m2 + 1))):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < eps:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    lbt = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(lbt) * _betacf(a, b, x) / a
    return 1.0 - math.exp(lbt) * _betacf(b, a, 1.0 - x) / b


def t_cdf(x: float, df: float) -> float:
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + x * x))
    return 1.0 - tail if x > 0 else tail


def t_pdf(x: float, df: float) -> float:
    return math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
                    - (df + 1) / 2 * math.log1p(x * x / df))


@lru_cache(maxsize=4096)
def t_ppf(p: float, df: float) -> float:
    """Quantile of Student's t with `df` degrees of freedom (df > 0, 0 < p < 1)."""
    if not 0.0 < p < 1.0 or not df > 0:
        return NAN
    if p == 0.5:
        return 0.0
    if p < 0.5:
        return -t_ppf(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        lo, hi = hi, hi * 2.0
    x = min(max(_z_quantile(p), lo), hi)
    for _ in range(200):
        f = t_cdf(x, df) - p
        if f > 0:
            hi = x
        else:
            lo = x
        step = f / t_pdf(x, df)
        nx = x - step
        if not lo < nx < hi:
            nx = (lo + hi) / 2.0
        if abs(nx - x) <= 1e-14 * max(1.0, abs(x)):
            return nx
        x = nx
    return x


def _t_quantile(level: float, df: int) -> float:
    return t_ppf(0.5 + level / 2.0, float(df))


def _z_quantile(p: float) -> float:
    from statistics import NormalDist

    return NormalDist().inv_cdf(p)


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
    half = _t_quantile(level, n - 1) * se
    return mean, se, mean - half, mean + half


def bootstrap_interval(values: Sequence[float] | np.ndarray, level: float = 0.95, seed: int = 0,
                       resamples: int = BOOTSTRAP_RESAMPLES) -> tuple[float, float]:
    """Percentile bootstrap of the mean (resampling items, never raw records), in memory-bounded chunks."""
    import numpy as np

    x = _arr(values)
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
    x = _arr(item_means)
    mean, se, lo, hi = mean_interval(x, level, method, seed)
    sd = float(x.std(ddof=1)) if x.size > 1 else NAN
    return {"mean": float(mean) if x.size else NAN, "se": float(se), "sd": sd, "ci95": [float(lo), float(hi)],
            "items": int(x.size), "level": level, "method": method}


# ---------------------------------------------------------------------------------------------- paired delta


def _sign_table(d: np.ndarray) -> np.ndarray:
    """For each block of 8 differences, the sum under each of the 256 sign patterns: (blocks, 256)."""
    import numpy as np

    pad = (-d.size) % 8
    blocks = np.concatenate([d, np.zeros(pad)]).reshape(-1, 8)
    signs = np.where((np.arange(256)[:, None] >> np.arange(8)) & 1, 1.0, -1.0)
    return blocks @ signs.T


def _partial_sums(rows: np.ndarray, resamples: int, seed: np.random.SeedSequence) -> np.ndarray:
    """Sums over a chunk of blocks, 32 blocks per numpy call (large calls keep threads off the GIL)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    acc = np.zeros(resamples)
    for g in range(0, rows.shape[0], 32):
        part = rows[g:g + 32]
        k = part.shape[0]
        idx = np.frombuffer(rng.bytes(k * resamples), dtype=np.uint8).reshape(k, resamples).astype(np.uint16)
        idx += (np.arange(k, dtype=np.uint16) * 256)[:, None]
        acc += part.ravel().take(idx).sum(axis=0)
    return acc


def sign_flip_sums(d: Sequence[float] | np.ndarray, resamples: int = RESAMPLES, seed: int = 0) -> np.ndarray:
    """Σ s_i·d_i under random signs s_i = ±1: `resamples` draws, fixed seed.

    Each block of 8 items becomes one random byte that indexes a 256-entry table of its signed sums,
    so one draw costs n/8 look-ups instead of n multiplications. Blocks are cut into fixed chunks, each
    with its own child seed, run on threads (numpy releases the GIL) and added in chunk order: the
    result depends on the seed only, not on the number of cores.
    """
    import os
    from concurrent.futures import ThreadPoolExecutor

    import numpy as np

    table = _sign_table(_arr(d))
    chunk = SIGN_FLIP_CHUNK_BLOCKS
    parts = [table[i:i + chunk] for i in range(0, table.shape[0], chunk)]
    seeds = np.random.SeedSequence(seed).spawn(len(parts))
    workers = min(len(parts), os.cpu_count() or 1)
    if workers <= 1:
        sums = [_partial_sums(p, resamples, s) for p, s in zip(parts, seeds)]
    else:
        with ThreadPoolExecutor(workers) as pool:
            sums = list(pool.map(_partial_sums, parts, [resamples] * len(parts), seeds))
    total = np.zeros(resamples)
    for s in sums:
        total += s
    return total


def sign_flip_all(d: Sequence[float] | np.ndarray) -> np.ndarray:
    """Σ s_i·d_i under every one of the 2**n sign patterns (n ≤ 20)."""
    import numpy as np

    x = _arr(d)
    if x.size > 20:
        raise ValueError("exact enumeration is for at most 20 values")
    patterns = np.arange(2 ** x.size)[:, None] >> np.arange(x.size)
    return np.where(patterns & 1, 1.0, -1.0) @ x


def sign_flip_p_value(d: Sequence[float] | np.ndarray, seed: int = 0, resamples: int = RESAMPLES) -> tuple[float, str]:
    """Two-sided paired sign-flip permutation p-value of mean(d) = 0, and how it was computed.

    Exact (all 2**n patterns) for n ≤ 16; otherwise Monte-Carlo with (1 + hits) / (1 + resamples), which
    counts the observed pattern and so is never 0. Draws are grouped by distinct |d| when there are few
    (sign_flip_sums_grouped), else drawn per item (sign_flip_sums): the same distribution either way. Sums within a
    relative 1e-9 of |observed| count as hits,
    so float rounding never turns a tie into a miss.
    """
    import numpy as np

    x = _arr(d)
    if x.size == 0:
        return NAN, "none"
    observed = abs(float(x.sum()))
    tol = 1e-9 * max(float(np.abs(x).sum()), 1e-300)
    if x.size <= EXACT_MAX_ITEMS:
        sums = sign_flip_all(x)
        return float(np.mean(np.abs(sums) >= observed - tol)), "exact"
    grouped = sign_flip_sums_grouped(x, resamples, seed)
    sums = grouped if grouped is not None else sign_flip_sums(x, resamples, seed)
    hits = int(np.count_nonzero(np.abs(sums) >= observed - tol))
    return (1 + hits) / (1 + resamples), f"sign-flip, {resamples} resamples"


def sign_flip_sums_grouped(d: Sequence[float] | np.ndarray, resamples: int = RESAMPLES,
                           seed: int = 0) -> np.ndarray | None:
    """The same draws as sign_flip_sums, in O(distinct |d|) per draw; None when |d| has too many values.

    Σ s_i·d_i depends only on how many of the m_v items with |d_i| = v got a plus sign, and that count is
    Binomial(m_v, 1/2): a draw is Σ_v v·(2·B_v − m_v). Pass/fail graders over K epochs give per-item
    deltas on a grid of 1/K steps, so 10^5 items collapse to a handful of values.
    """
    import numpy as np

    values, counts = np.unique(np.abs(_arr(d)), return_counts=True)
    keep = values > 0
    values, counts = values[keep], counts[keep]
    if values.size > GROUPED_MAX_VALUES:
        return None
    rng = np.random.default_rng(np.random.SeedSequence(seed).spawn(1)[0])
    if values.size == 0:
        return np.zeros(resamples)
    plus = rng.binomial(counts, 0.5, size=(resamples, values.size))
    return (2 * plus - counts) @ values


def mde(sd_d: float, n: int, level: float = 0.95, power: float = POWER) -> float:
    """Smallest true delta this many items detect with the given power: (t_{1-α/2} + t_power)·sd(d)/sqrt(n).

    Student's t with n − 1 degrees of freedom, not the normal quantiles: the interval that decides is a t
    interval, and at 5 items the normal shortcut understates the MDE 1.33-fold (1.10-fold at 12).
    """
    if n < 2 or not math.isfinite(sd_d):
        return NAN
    return (_t_quantile(level, n - 1) + t_ppf(power, float(n - 1))) * sd_d / math.sqrt(n)


TIE_SLACK = 1e-9  # scores are O(1): a difference within this of the tie tolerance is the tolerance, not past it


def win_tie_loss(d: Sequence[float] | np.ndarray, tie: float = 1e-9) -> tuple[int, int, int]:
    """Items won, tied and lost: |d| ≤ tie is a tie, with slack for float rounding (0.4 − 0.3 ties at 0.1)."""
    import numpy as np

    x = _arr(d)
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
    b, c = _arr(base_means), _arr(cand_means)
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
        q = np.array([_t_quantile(level, v) if v > 0 else np.nan for v in df])[inverse.ravel()]
    return d - q * se, d + q * se



# ---------------------------------------------------------------------------------------------- decisions


def p_floor(n: int, method: str) -> float:
    """The smallest p-value a test on n items can return: 2/2**n for the exact two-sided sign-flip test.

    At n ≤ 5 it is ≥ 0.0625, so no difference can reach 0.05 whatever the data, even when a t interval
    excludes 0: such a comparison is "too few items to tell", never "better".
    """
    if method == "exact":
        return 2.0 ** (1 - n) if n > 0 else 1.0
    if method.startswith("sign-flip"):
        return 2.0 ** (1 - n) if n < 64 else 0.0
    return 0.0


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


# ---------------------------------------------------------------------------------------------- per-item drops

EXACT_MAX_SPLITS = 20_000  # epoch permutations enumerated per item up to here; Monte-Carlo above
EPOCH_RESAMPLES = 4_000


def epoch_split_floor(k_base: int, k_cand: int) -> float:
    """The smallest one-sided p an exact permutation test over one item's epochs can give: 1/C(K_b + K_c, K_c).

    3 epochs a side give 1/20 = 0.05: with more than one item tested, Holm asks for less, so no item can be
    shown to have dropped; that is a fact about the design, said up front rather than discovered.
    """
    if k_base < 1 or k_cand < 1:
        return 1.0
    return 1.0 / math.comb(k_base + k_cand, k_cand)


def epoch_drop_p_values(base: Sequence[np.ndarray], cand: Sequence[np.ndarray], seed: int = 0) -> np.ndarray:
    """One-sided permutation p-value, per item, that its candidate epochs score lower than its baseline epochs.

    The statistic is mean(candidate) − mean(baseline) over the item's epochs; under "no change" the K_b + K_c
    epoch scores are exchangeable, so p = P(statistic under a random relabelling ≤ observed). Exact over all
    C(K_b + K_c, K_c) relabellings up to EXACT_MAX_SPLITS, else Monte-Carlo (1 + hits)/(1 + draws). Items with
    the same epoch counts are computed together as one matrix product.
    """
    import itertools

    import numpy as np

    out = np.full(len(base), np.nan)
    groups: dict[tuple[int, int], list[int]] = {}
    for i, (b, c) in enumerate(zip(base, cand)):
        if len(b) and len(c):
            groups.setdefault((len(b), len(c)), []).append(i)
    rng = np.random.default_rng(seed)
    for (kb, kc), idx in groups.items():
        k = kb + kc
        pooled = np.array([np.concatenate([cand[i], base[i]]) for i in idx], dtype=np.float64)  # cand first
        observed = pooled[:, :kc].mean(axis=1) - pooled[:, kc:].mean(axis=1)
        total = pooled.sum(axis=1)
        exact = math.comb(k, kc) <= EXACT_MAX_SPLITS
        if exact:
            ind = np.zeros((math.comb(k, kc), k))
            for row, chosen in enumerate(itertools.combinations(range(k), kc)):
                ind[row, list(chosen)] = 1.0
        else:
            ind = np.zeros((EPOCH_RESAMPLES, k))
            picks = np.argsort(rng.random((EPOCH_RESAMPLES, k)), axis=1)[:, :kc]
            np.put_along_axis(ind, picks, 1.0, axis=1)
        csum = pooled @ ind.T  # (items, relabellings)
        stat = csum / kc - (total[:, None] - csum) / kb
        tol = 1e-9 * np.maximum(1.0, np.abs(pooled).max(axis=1))
        hits = np.count_nonzero(stat <= (observed + tol)[:, None], axis=1)
        out[idx] = hits / ind.shape[0] if exact else (1 + hits) / (1 + EPOCH_RESAMPLES)
    return out


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
    half = _t_quantile(level, df) * se
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
