"""Agreement between two graders on the same samples: correlations, bias, limits of agreement, pass/fail kappa.

Pure functions over numpy arrays (no I/O). Samples of one item are not independent (the same output family, the
same reference), so every interval resamples whole items (a cluster bootstrap, as stats.bootstrap_interval
resamples items, never raw records), with per-item counts summed per resample so thousands of resamples cost one
matrix gather. tests/stats/test_agreement.py checks their coverage on simulated graders with a known truth.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, TypedDict

if TYPE_CHECKING:
    import numpy as np

AGREE_RESAMPLES = 2000  # item-cluster bootstrap resamples for every interval here
LOA_Z = 1.96  # Bland–Altman: 95% of single-sample differences fall within bias ± 1.96·sd
NAN = float("nan")


class Bias(TypedDict):
    """Mean of B − A over items (each item's mean difference weighted equally), with an item-bootstrap interval."""

    mean: float
    ci95: list[float]
    sd_items: float  # sd of the per-item mean differences


class Limits(TypedDict):
    """Bland–Altman limits of agreement: where 95% of single-sample differences B − A fall."""

    lower: float
    upper: float
    sd: float  # sd of the per-sample differences


class Table2x2(TypedDict):
    both: int
    a_only: int
    b_only: int
    neither: int


class Interval(TypedDict):
    value: float
    ci95: list[float]


class PassAgreement(TypedDict):
    """Pass/fail agreement at the thresholds, A taken as the reference for B's precision and recall."""

    table: Table2x2
    kappa: Interval
    agreement: float  # share of samples with the same verdict
    precision: Interval  # of B's passes, the share A passed too
    recall: Interval  # of A's passes, the share B passed too


class LabelAgreement(TypedDict):
    labels: list[str]
    confusion: list[list[int]]  # rows: A's label, columns: B's label
    kappa: Interval


class ScoreAgreement(TypedDict):
    n_samples: int
    n_items: int
    pearson: float
    spearman: float
    bias: Bias
    mae: float
    loa: Limits


def _codes(items: Sequence[str] | np.ndarray) -> tuple[np.ndarray, int]:
    import pandas as pd

    codes, uniques = pd.factorize(pd.Series(items, dtype=object), sort=False)
    return codes, len(uniques)


BOOT_CHUNK_VALUES = 4_000_000  # gathered values per bootstrap chunk: memory stays bounded at 10^5 items


def _boot_sums(per_item: np.ndarray, resamples: int, seed: int) -> np.ndarray:
    """Sums over items of `per_item` (items, ...) under `resamples` item-bootstrap resamples: (resamples, ...).

    Drawn in chunks of at most BOOT_CHUNK_VALUES gathered values from one seeded generator, so the result
    depends on the seed only and memory does not grow with resamples × items.
    """
    import numpy as np

    k = per_item.shape[0]
    width = int(np.prod(per_item.shape[1:])) if per_item.ndim > 1 else 1
    rng = np.random.default_rng(seed)
    out = np.empty((resamples, *per_item.shape[1:]))
    chunk = max(1, BOOT_CHUNK_VALUES // max(1, k * width))
    for start in range(0, resamples, chunk):
        r = min(chunk, resamples - start)
        out[start:start + r] = per_item[rng.integers(0, k, (r, k))].sum(axis=1)
    return out


def _interval(estimate: float, boot: np.ndarray, clusters: int, level: float = 0.95,
              bounds: tuple[float, float] | None = None, logit: bool = False) -> list[float]:
    """estimate ± t_{C−1} · sd(bootstrap) · sqrt(C/(C−1)), cut to `bounds`: a cluster-bootstrap SE interval.

    `logit`: for a proportion (precision, recall), by the delta method on the log-odds scale, mapped back, so an
    estimate near 1 gets the skewed interval it needs (a symmetric one covers about 92% there).

    The percentile interval of the same resamples under-covers at RFT sizes (about 91% for kappa on 60 items,
    tests/stats/test_agreement.py): the bootstrap's spread lacks the C/(C−1) finite-cluster correction (inspect's, and
    statistics.md §2.2) and a normal quantile ignores that C is small. NaN when most resamples are undefined.
    """
    import numpy as np

    from rfteval.stats.tdist import t_ppf

    v = boot[np.isfinite(boot)]
    if clusters < 2 or not math.isfinite(estimate) or v.size < max(10, boot.size // 2):
        return [NAN, NAN]
    se = float(v.std(ddof=1)) * math.sqrt(clusters / (clusters - 1))
    q = t_ppf(0.5 + level / 2, float(clusters - 1))
    if logit and 0.0 < estimate < 1.0:
        # the delta method on the log-odds scale: se / (p(1 − p)), mapped back (resampled logits are infinite
        # whenever a resample has no miss at all, so they cannot be used directly)
        center, half = math.log(estimate / (1 - estimate)), q * se / (estimate * (1 - estimate))
        lo, hi = 1 / (1 + math.exp(-(center - half))), 1 / (1 + math.exp(-(center + half)))
    else:
        lo, hi = estimate - q * se, estimate + q * se
    if bounds is not None:
        lo, hi = max(lo, bounds[0]), min(hi, bounds[1])
    return [float(lo), float(hi)]


def _edge(estimate: float, n: int, level: float) -> list[float] | None:
    """A proportion of exactly 0 or 1 (every resample agrees, so the bootstrap has no spread): the exact binomial
    (Clopper–Pearson) bound over its n samples instead, e.g. recall 1 of 30 passes gives [0.884, 1]."""
    if n < 1 or estimate not in (0.0, 1.0):
        return None
    bound = ((1 - level) / 2) ** (1 / n)
    return [bound, 1.0] if estimate == 1.0 else [0.0, 1 - bound]


def pearson(a: np.ndarray, b: np.ndarray) -> float:
    """Pearson correlation; NaN when either side is constant (the range is tested, exactly) or n < 3."""
    import numpy as np

    if a.size < 3 or np.ptp(a) == 0 or np.ptp(b) == 0:
        return NAN
    return float(np.corrcoef(a, b)[0, 1])


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman's rank correlation: Pearson on average ranks (ties share their mean rank)."""
    import pandas as pd

    if a.size < 3:
        return NAN
    ra = pd.Series(a).rank(method="average").to_numpy()
    rb = pd.Series(b).rank(method="average").to_numpy()
    return pearson(ra, rb)


def score_agreement(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray,
                    items: Sequence[str] | np.ndarray, level: float = 0.95, seed: int = 0,
                    resamples: int = AGREE_RESAMPLES) -> ScoreAgreement:
    """Per-sample agreement of two graders' scores on the same samples (aligned by position).

    The bias is the mean over items of each item's mean difference (per-item means first, as everywhere in
    rfteval), its interval a percentile bootstrap over items. The limits of agreement describe one sample's
    difference, so they use the spread of per-sample differences.
    """
    import numpy as np

    x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if x.shape != y.shape or x.size != len(items):
        raise ValueError("score_agreement needs aligned arrays")
    codes, k = _codes(items)
    d = y - x
    counts = np.bincount(codes, minlength=k).astype(np.float64)
    item_d = np.bincount(codes, weights=d, minlength=k) / counts if k else np.zeros(0)
    mean = float(item_d.mean()) if k else NAN
    ci = [NAN, NAN]
    if k >= 2:
        ci = _interval(mean, _boot_sums(item_d, resamples, seed) / k, k, level)
    sd = float(d.std(ddof=1)) if d.size > 1 else NAN
    sd_items = float(item_d.std(ddof=1)) if k > 1 else NAN
    return {
        "n_samples": int(x.size), "n_items": k, "pearson": pearson(x, y), "spearman": spearman(x, y),
        "bias": {"mean": mean, "ci95": ci, "sd_items": sd_items},
        "mae": float(np.abs(d).mean()) if d.size else NAN,
        "loa": {"lower": mean - LOA_Z * sd, "upper": mean + LOA_Z * sd, "sd": sd},
    }


def _kappa_from_cells(cells: np.ndarray) -> np.ndarray:
    """Cohen's kappa of square confusion tables (..., L, L); NaN where chance agreement is 1 (one label only)."""
    import numpy as np

    total = cells.sum(axis=(-2, -1))
    with np.errstate(invalid="ignore", divide="ignore"):
        p = cells / total[..., None, None]
        po = np.trace(p, axis1=-2, axis2=-1)
        pe = (p.sum(axis=-1) * p.sum(axis=-2)).sum(axis=-1)
        kappa = np.where(np.isclose(pe, 1.0) & np.isclose(po, 1.0), 1.0, (po - pe) / (1.0 - pe))
    # one label on both sides with full agreement: kappa is undefined by formula, but the graders agree
    # completely, and identical grades must read as kappa 1 (the agree command's own contract)
    return np.asarray(np.where(np.isfinite(kappa), kappa, NAN))


def cohen_kappa(cells: np.ndarray) -> float:
    """Cohen's kappa of one L×L confusion table (rows A, columns B)."""
    import numpy as np

    return float(_kappa_from_cells(np.asarray(cells, dtype=np.float64)))


def _item_confusions(a_codes: np.ndarray, b_codes: np.ndarray, items: np.ndarray, k: int, labels: int) -> np.ndarray:
    """(items, L, L): each item's confusion counts, so a bootstrap resample is one sum over gathered items."""
    import numpy as np

    flat = (items * labels + a_codes) * labels + b_codes
    return np.bincount(flat, minlength=k * labels * labels).reshape(k, labels, labels).astype(np.float64)


def pass_agreement(a_pass: Sequence[bool] | np.ndarray, b_pass: Sequence[bool] | np.ndarray,
                   items: Sequence[str] | np.ndarray, level: float = 0.95, seed: int = 0,
                   resamples: int = AGREE_RESAMPLES) -> PassAgreement:
    """The 2×2 table of pass verdicts, Cohen's kappa and B's precision / recall against A, item-bootstrap intervals.

    Precision and recall are ratios of pooled sample counts (every sample counts once); their intervals, like
    kappa's, resample whole items.
    """
    import numpy as np

    x, y = np.asarray(a_pass, dtype=bool), np.asarray(b_pass, dtype=bool)
    codes, k = _codes(items)
    cells = _item_confusions(x.astype(np.int64), y.astype(np.int64), codes, k, 2)  # [a][b], 0 = fail
    total = cells.sum(axis=0)
    table: Table2x2 = {"both": int(total[1, 1]), "a_only": int(total[1, 0]), "b_only": int(total[0, 1]),
                       "neither": int(total[0, 0])}

    def ratios(t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        with np.errstate(invalid="ignore", divide="ignore"):
            return t[..., 1, 1] / (t[..., 1, 1] + t[..., 0, 1]), t[..., 1, 1] / (t[..., 1, 1] + t[..., 1, 0])

    precision, recall = ratios(total)
    kappa = float(_kappa_from_cells(total))
    ci_k = ci_p = ci_r = [NAN, NAN]
    if k >= 2:
        boot = _boot_sums(cells, resamples, seed)
        ci_k = _interval(kappa, _kappa_from_cells(boot), k, level, (-1.0, 1.0))
        bp, br = ratios(boot)
        ci_p = _edge(float(precision), table["both"] + table["b_only"], level) or _interval(
            float(precision), bp, k, level, (0.0, 1.0), logit=True)
        ci_r = _edge(float(recall), table["both"] + table["a_only"], level) or _interval(
            float(recall), br, k, level, (0.0, 1.0), logit=True)
    n = int(x.size)
    return {"table": table, "kappa": {"value": kappa, "ci95": ci_k},
            "agreement": float(np.mean(x == y)) if n else NAN,
            "precision": {"value": float(precision), "ci95": ci_p}, "recall": {"value": float(recall), "ci95": ci_r}}


def label_agreement(a_labels: Sequence[str], b_labels: Sequence[str], items: Sequence[str] | np.ndarray,
                    labels: Sequence[str] | None = None, level: float = 0.95, seed: int = 0,
                    resamples: int = AGREE_RESAMPLES) -> LabelAgreement:
    """The label confusion matrix (rows A, columns B) and Cohen's kappa over labels, with an item-bootstrap interval."""
    import numpy as np

    names = list(labels) if labels is not None else sorted(set(a_labels) | set(b_labels))
    extra = sorted((set(a_labels) | set(b_labels)) - set(names))
    names += extra
    pos = {name: i for i, name in enumerate(names)}
    ac = np.array([pos[v] for v in a_labels], dtype=np.int64)
    bc = np.array([pos[v] for v in b_labels], dtype=np.int64)
    codes, k = _codes(items)
    cells = _item_confusions(ac, bc, codes, k, len(names))
    total = cells.sum(axis=0)
    kappa = float(_kappa_from_cells(total))
    ci = [NAN, NAN]
    if k >= 2:
        boot = _kappa_from_cells(_boot_sums(cells, resamples, seed))
        ci = _interval(kappa, boot, k, level, (-1.0, 1.0))
    return {"labels": names, "confusion": total.astype(np.int64).tolist(), "kappa": {"value": kappa, "ci95": ci}}


def shorten(text: str | None, width: int = 160) -> str:
    """One line of at most `width` characters, whitespace collapsed, an ellipsis where it was cut."""
    flat = " ".join((text or "").split())
    return flat if len(flat) <= width else flat[: width - 1].rstrip() + "…"


def finite(x: float) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)
