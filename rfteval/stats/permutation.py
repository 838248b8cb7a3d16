"""Permutation tests: the paired sign-flip test of a mean difference (exact up to EXACT_MAX_ITEMS items, Monte-Carlo
above, grouped by distinct |d| when there are few), the smallest p a test can reach, and the per-item test over one
item's epochs that the gate's --max-item-drop uses."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

EXACT_MAX_ITEMS = 16  # the sign-flip test enumerates all 2**n patterns up to here
RESAMPLES = 10_000  # Monte-Carlo sign flips above EXACT_MAX_ITEMS
GROUPED_MAX_VALUES = 256  # distinct |d| values up to which draws are made per value, not per item
SIGN_FLIP_CHUNK_BLOCKS = 1024  # 8,192 items per independently seeded chunk
NAN = float("nan")


def finite(values: Sequence[float] | np.ndarray) -> np.ndarray:
    """Values as a flat float array; NaN or inf is an error (a statistic over them would mean nothing)."""
    import numpy as np

    a = np.asarray(values, dtype=np.float64).ravel()
    if a.size and not np.all(np.isfinite(a)):
        raise ValueError("statistics need finite values (NaN or inf found)")
    return a


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

    table = _sign_table(finite(d))
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

    x = finite(d)
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

    x = finite(d)
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

    values, counts = np.unique(np.abs(finite(d)), return_counts=True)
    keep = values > 0
    values, counts = values[keep], counts[keep]
    if values.size > GROUPED_MAX_VALUES:
        return None
    rng = np.random.default_rng(np.random.SeedSequence(seed).spawn(1)[0])
    if values.size == 0:
        return np.zeros(resamples)
    plus = rng.binomial(counts, 0.5, size=(resamples, values.size))
    return (2 * plus - counts) @ values


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
