"""pass@k and pass^k from the N samples already drawn per item: unbiased estimators, the metric names.

Per item with n graded samples of which c pass (Chen et al. 2021, "Evaluating Large Language Models Trained
on Code", eq. 1):

    pass@k = 1 − C(n − c, k) / C(n, k)      P(at least one of k samples drawn without replacement passes)
    pass^k = C(c, k) / C(n, k)              P(all k of them pass)

Both are unbiased for the item's 1 − (1 − p)^k and p^k whenever k ≤ n: the hypergeometric draw of k of the
n samples is the same experiment as k fresh Bernoulli(p) draws, averaged over every subset. The plug-in
1 − (1 − c/n)^k is biased (it understates pass@k), which is why it is not used. A model's pass@k is the mean
over items, so its interval, like the mean score's, comes from the spread of the per-item values.

maj@k is not offered: a majority vote needs the samples' answers grouped into equivalence classes, and a grader
returns a score per sample, not an answer key. "Most of k samples pass" would be computable from (n, c) but it
is a different quantity under a borrowed name.

Pure functions over integers and numpy arrays; no pandas, no I/O.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, overload

from rfteval.errors import InputError

if TYPE_CHECKING:
    import numpy as np

# The public names (what `from ... import *` and the alias package in rfteval/ hand on)
__all__ = [
    "NAN", "METRIC_KINDS", "pass_at_k", "pass_all_k", "per_item", "curve", "Metric", "MEAN", "parse_metric",
    "passes",
]

NAN = float("nan")
METRIC_KINDS = ("mean", "pass@", "pass^")
_METRIC_RE = re.compile(r"^(pass@|pass\^)([1-9][0-9]{0,5})$")


# ---------------------------------------------------------------------------------------------- one item


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one item from n samples, c passing: 1 − C(n−c, k)/C(n, k); NaN when k > n.

    Exact in integers (math.comb), then one division: no cancellation at large n, unlike the product form.
    """
    _check(n, c, k)
    if k > n:
        return NAN
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def pass_all_k(n: int, c: int, k: int) -> float:
    """Unbiased pass^k (all k pass) of one item: C(c, k)/C(n, k); NaN when k > n."""
    _check(n, c, k)
    if k > n:
        return NAN
    return math.comb(c, k) / math.comb(n, k)


def _check(n: int, c: int, k: int) -> None:
    if not (0 <= c <= n) or k < 1:
        raise ValueError(f"need 0 <= c <= n and k >= 1, got n={n}, c={c}, k={k}")


# ---------------------------------------------------------------------------------------------- many items


def per_item(n: Sequence[int] | np.ndarray, c: Sequence[int] | np.ndarray, k: int, kind: str = "pass@") -> np.ndarray:
    """Per item, pass@k (kind "pass@") or pass^k (kind "pass^"); NaN where the item has fewer than k samples.

    Items share few distinct (n, c) pairs (n is the epoch count), so each pair is computed once, exactly.
    """
    import numpy as np

    n_arr = np.asarray(n, dtype=np.int64).ravel()
    c_arr = np.asarray(c, dtype=np.int64).ravel()
    if n_arr.shape != c_arr.shape:
        raise ValueError(f"n and c must be aligned, got {n_arr.size} and {c_arr.size} values")
    if not n_arr.size:
        return np.zeros(0)
    if (c_arr < 0).any() or (c_arr > n_arr).any():
        raise ValueError("need 0 <= c <= n for every item")
    fn = {"pass@": pass_at_k, "pass^": pass_all_k}.get(kind)
    if fn is None:
        raise ValueError(f"unknown kind {kind!r} (pass@ or pass^)")
    width = int(n_arr.max()) + 1
    keys, inverse = np.unique(n_arr * width + c_arr, return_inverse=True)  # one key per (n, c) pair
    values = np.array([fn(int(key // width), int(key % width), k) for key in keys], dtype=np.float64)
    return values[inverse.ravel()]


def curve(n: Sequence[int] | np.ndarray, c: Sequence[int] | np.ndarray, kind: str = "pass@",
          k_max: int | None = None) -> dict[int, float]:
    """{k: mean over items of the per-item estimate} for k = 1 … k_max (default: the largest n).

    Each k averages the items that have at least k samples (an item cut short by generation errors drops out
    of the larger k only); k values that no item reaches are left out.
    """
    import numpy as np

    n_arr = np.asarray(n, dtype=np.int64).ravel()
    if not n_arr.size:
        return {}
    top = int(n_arr.max()) if k_max is None else min(int(k_max), int(n_arr.max()))
    out: dict[int, float] = {}
    for k in range(1, top + 1):
        values = per_item(n_arr, c, k, kind)
        ok = np.isfinite(values)
        if ok.any():
            out[k] = float(values[ok].mean())
    return out


# ---------------------------------------------------------------------------------------------- metric names


@dataclass(frozen=True)
class Metric:
    """What `compare --metric` compares per item: the mean score, pass@k or pass^k."""

    kind: str = "mean"  # "mean", "pass@" or "pass^"
    k: int = 0

    @property
    def is_pass(self) -> bool:
        return self.kind != "mean"

    @property
    def name(self) -> str:
        return "mean" if self.kind == "mean" else f"{self.kind}{self.k}"

    def per_item(self, n: np.ndarray, c: np.ndarray) -> np.ndarray:
        return per_item(n, c, self.k, self.kind)


MEAN = Metric()


def parse_metric(text: str) -> Metric:
    """'mean', 'pass@K' or 'pass^K' (K ≥ 1); anything else is bad input for --metric."""
    text = text.strip()
    if text == "mean":
        return MEAN
    m = _METRIC_RE.match(text)
    if not m:
        raise InputError(f"must be mean, pass@K or pass^K (K = 1, 2, ...), got {text!r}", field="--metric")
    return Metric(m.group(1), int(m.group(2)))


@overload
def passes(score: np.ndarray, passed: np.ndarray | None, threshold: float,
           error: np.ndarray | None = None) -> np.ndarray: ...


@overload
def passes(score: np.ndarray, passed: np.ndarray | None, threshold: float | None,
           error: np.ndarray | None = None) -> np.ndarray | None: ...


def passes(score: np.ndarray, passed: np.ndarray | None, threshold: float | None,
           error: np.ndarray | None = None) -> np.ndarray | None:
    """The one pass rule: which samples pass. The grader's own verdict where it gave one (`passed` as 1.0 / 0.0,
    NaN for none: the record's `passed`, set from the grader's pass_threshold), else score ≥ threshold (with 1e-9
    slack for float rounding, so 0.1 + 0.2 reaches 0.3); an error record (`error` True) fails, as it scores 0
    (OpenAI's rule). Without a threshold: None, unless every sample has a verdict or is an error."""
    import numpy as np

    s = np.asarray(score, dtype=np.float64)
    known = np.isfinite(np.asarray(passed, dtype=np.float64)) if passed is not None else np.zeros(s.shape, bool)
    failed = np.asarray(error, dtype=bool) if error is not None else np.zeros(s.shape, bool)
    if threshold is None:
        if not (known | failed).all():
            return None
        out = np.zeros(s.shape, bool)
    else:
        out = s >= threshold - 1e-9 * max(1.0, abs(threshold))
    if passed is not None:
        out = np.where(known, np.asarray(passed, dtype=np.float64) > 0.5, out)
    return out & ~failed if error is not None else out
