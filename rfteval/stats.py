"""Honest statistics for repeated samples: per-item means first, then intervals over items, paired deltas.

Pure functions over numpy/pandas (see ../shared/statistics.md). Every standard error is computed from
per-item means, never from raw records: the epochs of one item are a cluster, and treating them as
independent would shrink the error bars by about sqrt(K).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

EXACT_MAX_ITEMS = 16  # the sign-flip test enumerates all 2**n patterns up to here
RESAMPLES = 10_000  # Monte-Carlo sign flips above EXACT_MAX_ITEMS
BOOTSTRAP_RESAMPLES = 10_000
GROUPED_MAX_VALUES = 256  # distinct |d| values up to which draws are made per value, not per item
SIGN_FLIP_CHUNK_BLOCKS = 1024  # 8,192 items per independently seeded chunk
POWER = 0.8
NAN = float("nan")


def _arr(values: Sequence[float] | np.ndarray) -> np.ndarray:
    import numpy as np

    a = np.asarray(values, dtype=np.float64).ravel()
    if a.size and not np.all(np.isfinite(a)):
        raise ValueError("statistics need finite values (NaN or inf found)")
    return a


# ---------------------------------------------------------------------------------------------- t distribution
# scipy is an optional extra (and `import scipy.stats` alone costs 2 s), so the t quantile is computed here:
# the CDF from the regularized incomplete beta function (Lentz's continued fraction), inverted by Newton's
# method with a bisection guard. Checked against scipy to 1e-10 in tests/test_stats.py.


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


def t_interval(values: np.ndarray, level: float = 0.95, axis: int = -1) -> tuple[Any, Any, Any, Any]:
    """(mean, se, lo, hi) of a t interval along `axis`; vectorised so a simulation checks many replicates at once.

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


def side_summary(item_means: Sequence[float] | np.ndarray, level: float = 0.95, method: str = "t",
                 seed: int = 0) -> dict[str, Any]:
    """One model's score: the mean of per-item means, its SE over items and an interval (t, or bootstrap)."""
    x = _arr(item_means)
    mean, se, lo, hi = t_interval(x, level)
    if method == "bootstrap":
        lo, hi = bootstrap_interval(x, level, seed)
    elif method != "t":
        raise ValueError(f"unknown interval method {method!r} (t or bootstrap)")
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
    (sign_flip_sums_grouped), else drawn per item (sign_flip_sums): the same distribution either way. Sums within a relative 1e-9 of |observed| count as hits,
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
    sums = sign_flip_sums_grouped(x, resamples, seed)
    if sums is None:
        sums = sign_flip_sums(x, resamples, seed)
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
    """Smallest true delta this many items detect with the given power: (z_{1-α/2} + z_power)·sd(d)/sqrt(n)."""
    if n < 2 or not math.isfinite(sd_d):
        return NAN
    return (_z_quantile(0.5 + level / 2) + _z_quantile(power)) * sd_d / math.sqrt(n)


def win_tie_loss(d: Sequence[float] | np.ndarray, tie: float = 1e-9) -> tuple[int, int, int]:
    import numpy as np

    x = _arr(d)
    wins = int(np.count_nonzero(x > tie))
    losses = int(np.count_nonzero(x < -tie))
    return wins, x.size - wins - losses, losses


def paired_delta(base_means: Sequence[float] | np.ndarray, cand_means: Sequence[float] | np.ndarray,
                 tie: float = 1e-9, level: float = 0.95, seed: int = 0, method: str = "t",
                 resamples: int = RESAMPLES) -> dict[str, Any]:
    """Candidate minus baseline over items aligned by position: the paired comparison of two models.

    Keys: mean, se, sd, ci95, p_value (sign-flip permutation), p_method, mde (80% power), wins, ties,
    losses (per item, tie when |d| ≤ tie), n, correlation of the two sides' item means, and se_unpaired
    (what ignoring the pairing would have claimed, for contrast).
    """
    import numpy as np

    b, c = _arr(base_means), _arr(cand_means)
    if b.shape != c.shape:
        raise ValueError(f"paired_delta needs aligned arrays, got {b.size} and {c.size} values")
    d = c - b
    mean, se, lo, hi = t_interval(d, level)
    if method == "bootstrap":
        lo, hi = bootstrap_interval(d, level, seed)
    elif method != "t":
        raise ValueError(f"unknown interval method {method!r} (t or bootstrap)")
    n = int(d.size)
    sd = float(d.std(ddof=1)) if n > 1 else NAN
    p, p_method = sign_flip_p_value(d, seed=seed, resamples=resamples)
    wins, ties, losses = win_tie_loss(d, tie)
    corr = NAN
    if n > 2 and b.std() > 0 and c.std() > 0:
        corr = float(np.corrcoef(b, c)[0, 1])
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


def variance_split(item_sd: np.ndarray, item_n: np.ndarray, item_means: np.ndarray) -> dict[str, float]:
    """Whether to raise K or n: the within-item noise term mean(σ̂_i²/K_i) against the total Var(item means)."""
    import numpy as np

    ok = np.isfinite(item_sd)
    within = float(np.mean(item_sd[ok] ** 2 / item_n[ok])) if ok.any() else NAN
    total = float(np.var(item_means, ddof=1)) if item_means.size > 1 else NAN
    return {"within_over_k": within, "total": total,
            "between": total - within if math.isfinite(total) and math.isfinite(within) else NAN}
