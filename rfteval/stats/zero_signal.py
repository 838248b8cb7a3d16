"""The expected share of zero-advantage GRPO groups at group size G, from K samples per item.

A group of G samples of one prompt whose rewards are all equal has zero advantage and gives no gradient
(DeepSeekMath, arXiv:2402.03300). For an item whose samples take score level v with probability p_v, that
happens with probability Σ_v p_v^G (statistics.md §3.3(b)). From the K samples of a base run:

- K ≥ G: Σ_v C(n_v, G) / C(K, G) is unbiased (the construction of Chen et al.'s pass@k, arXiv:2107.03374).
- K < G: no unbiased estimator exists (p^G has degree G; K draws estimate polynomials of degree ≤ K only).
  The with-replacement plug-in Σ_v (n_v/K)^G is biased upwards (Jensen; an item seen 3 times has p̂ ∈ {0, ⅓,
  ⅔, 1}, and the two ends count as certain zero signal). Instead the items borrow strength from each other
  (empirical Bayes): fit the distribution of item rates across items, then average p^G over each item's
  posterior.
    - two score levels (binary, or any two-valued reward): the beta-binomial, p_i ~ Beta(α, β), fitted by
      maximum likelihood over (log α, log β);
    - more levels: the Dirichlet-multinomial, (p_iv)_v ~ Dirichlet(s·m_v), with the mean m by moments (the
      item-averaged level shares) and the concentration s by maximum likelihood (Minka, "Estimating a Dirichlet
      distribution", 2000, fits mean and precision separately the same way).
  Under the posterior Dirichlet(a_v = α_v + n_v), E[p_v^G] = Γ(a_v + G)Γ(A) / (Γ(a_v)Γ(A + G)), A = Σ_v a_v;
  for an integer G that ratio is the product Π_{j<G} (a_v + j)/(A + j), computed in logs. For two levels it is
  B(α+c+G, β+K−c)/B(α+c, β+K−c), the same number.

Everything here is a pure function of score-level counts; numpy is the only dependency (scipy is not a core
dependency of rfteval, and a two-parameter likelihood needs no more than Nelder–Mead).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypedDict

import numpy as np

UNBIASED = "unbiased"
EB_BETA_BINOMIAL = "empirical Bayes (beta-binomial)"
EB_DIRICHLET = "empirical Bayes (Dirichlet-multinomial)"
ONE_LEVEL = "one score level"
NO_TIES = "no repeated score"
# Bounds of the fitted prior parameters. Below 1e-3 the prior is a point mass at the levels' corners for any
# practical G; above 1e6 every item has the common rate (no between-item spread). The likelihood is flat
# beyond both, so the bounds decide only where a fit that runs off to a limit stops.
_LOG_MIN, _LOG_MAX = math.log(1e-3), math.log(1e6)


def unbiased(counts: Sequence[int], group_size: int) -> float:
    """Σ_v C(n_v, G) / C(K, G): the unbiased estimate of Σ_v p_v^G from K ≥ G samples (statistics.md §3.3(b))."""
    k = sum(counts)
    if k < group_size:
        raise ValueError(f"the unbiased estimator needs K >= G samples (K={k}, G={group_size})")
    return sum(math.comb(n, group_size) for n in counts) / math.comb(k, group_size)


def plug_in(counts: Sequence[int], group_size: int) -> float:
    """Σ_v (n_v / K)^G: G draws with replacement from the item's own K scores. Biased upwards when K < G.

    Kept as the reference the empirical-Bayes estimate is tested against; readiness no longer reports it.
    """
    k = sum(counts)
    return sum((n / k) ** group_size for n in counts) if k else float("nan")


def posterior_all_equal(alpha: np.ndarray, counts: np.ndarray, group_size: int) -> np.ndarray:
    """E[p_v^G] per level v under the posterior Dirichlet(alpha + counts): Π_{j<G} (a_v + j)/(A + j).

    `alpha` and `counts` have the levels on their last axis; the sum over levels is the item's all-equal
    probability at G.
    """
    a = np.asarray(alpha, dtype=np.float64) + np.asarray(counts, dtype=np.float64)
    total = a.sum(axis=-1, keepdims=True)
    j = np.arange(group_size, dtype=np.float64)
    log_num = np.log(a[..., None] + j).sum(axis=-1)
    log_den = np.log(total[..., None] + j).sum(axis=-1)
    return np.exp(log_num - log_den)


def _count_tails(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """h[v, j] = #items with n_v > j and h_total[j] = #items with K > j: the sufficient statistics of the
    Dirichlet-multinomial likelihood, which is Σ_v Σ_j h[v, j] log(α_v + j) − Σ_j h_total[j] log(S + j)
    (Γ(α + n)/Γ(α) = Π_{j<n} (α + j); the multinomial coefficients do not depend on α and are dropped)."""
    k_max = int(counts.sum(axis=1).max()) if counts.size else 0
    j = np.arange(k_max)
    h = (counts[:, :, None] > j).sum(axis=0)
    h_total = (counts.sum(axis=1)[:, None] > j).sum(axis=0)
    return h.astype(np.float64), h_total.astype(np.float64)


def log_likelihood(alpha: np.ndarray, counts: np.ndarray) -> float:
    """The Dirichlet-multinomial log-likelihood of item × level counts (up to a constant), at prior `alpha`."""
    h, h_total = _count_tails(np.asarray(counts))
    return _log_likelihood(np.asarray(alpha, dtype=np.float64), h, h_total)


def _log_likelihood(alpha: np.ndarray, h: np.ndarray, h_total: np.ndarray) -> float:
    j = np.arange(h.shape[1], dtype=np.float64)
    return float((h * np.log(alpha[:, None] + j)).sum() - (h_total * np.log(alpha.sum() + j)).sum())


def nelder_mead(fn: Callable[[np.ndarray], float], x0: np.ndarray, step: float = 0.5, xtol: float = 1e-6,
                ftol: float = 1e-10, max_iter: int = 1000) -> tuple[np.ndarray, bool]:
    """Minimise `fn` from `x0` with the Nelder–Mead simplex (standard coefficients 1, 2, ½, ½).

    Returns the best point and whether the simplex shrank below both tolerances within `max_iter` steps.
    """
    n = len(x0)
    simplex = [np.asarray(x0, dtype=np.float64)] + [x0 + step * np.eye(n)[i] for i in range(n)]
    values = [fn(x) for x in simplex]
    for _ in range(max_iter):
        order = np.argsort(values)
        simplex = [simplex[i] for i in order]
        values = [values[i] for i in order]
        spread = max(float(np.abs(x - simplex[0]).max()) for x in simplex[1:])
        if spread < xtol and values[-1] - values[0] < ftol * (1 + abs(values[0])):
            return simplex[0], True
        centroid = np.mean(simplex[:-1], axis=0)
        worst = simplex[-1]
        reflected = centroid + (centroid - worst)
        f_r = fn(reflected)
        if f_r < values[0]:
            expanded = centroid + 2 * (centroid - worst)
            f_e = fn(expanded)
            simplex[-1], values[-1] = (expanded, f_e) if f_e < f_r else (reflected, f_r)
        elif f_r < values[-2]:
            simplex[-1], values[-1] = reflected, f_r
        else:
            inside = f_r >= values[-1]
            contracted = centroid + 0.5 * ((worst if inside else reflected) - centroid)
            f_c = fn(contracted)
            if f_c < min(f_r, values[-1]):
                simplex[-1], values[-1] = contracted, f_c
            else:
                best = simplex[0]
                simplex = [best] + [best + 0.5 * (x - best) for x in simplex[1:]]
                values = [values[0]] + [fn(x) for x in simplex[1:]]
    best = int(np.argmin(values))
    return simplex[best], False


def _moment_start(counts: np.ndarray) -> np.ndarray:
    """A method-of-moments start for the two-level fit: mean and precision from the spread of item shares.

    Var(c/K) = μ(1−μ)[1/K + (1 − 1/K)/(s + 1)] for a beta-binomial with precision s = α + β; solved for s with
    the mean K. When the items spread less than binomial noise allows (no between-item variance), s = 100.
    """
    k = counts.sum(axis=1).astype(np.float64)
    share = counts[:, 0] / k
    mu = float(np.clip(share.mean(), 0.02, 0.98))
    var = float(share.var(ddof=1)) if len(share) > 1 else 0.0
    k_bar = float(k.mean())
    between = var / (mu * (1 - mu)) - 1 / k_bar  # = (1 − 1/K) / (s + 1)
    s = (1 - 1 / k_bar) / between - 1 if between > 1e-9 else 100.0
    s = float(np.clip(s, 0.1, 1e4))
    return np.log([mu * s, (1 - mu) * s])


def fit_beta_binomial(counts: np.ndarray) -> tuple[np.ndarray, bool]:
    """Maximum-likelihood Beta(α, β) prior of two-level counts (items × [n_first, n_second]).

    Optimised over (log α, log β), inside [1e-3, 1e6] each, by Nelder–Mead from a method-of-moments start.
    Returns (α, β) in the column order of `counts` and whether the search converged.
    """
    counts = np.asarray(counts, dtype=np.int64)
    h, h_total = _count_tails(counts)

    def negative(x: np.ndarray) -> float:
        return -_log_likelihood(np.exp(np.clip(x, _LOG_MIN, _LOG_MAX)), h, h_total)

    x, converged = nelder_mead(negative, _moment_start(counts))
    return np.exp(np.clip(x, _LOG_MIN, _LOG_MAX)), converged


def fit_dirichlet_multinomial(counts: np.ndarray) -> tuple[np.ndarray, bool]:
    """Dirichlet(s·m) prior of item × level counts: m the item-averaged level shares, s by maximum likelihood.

    The profile log-likelihood in log s is searched on a grid over [1e-3, 1e6] and refined by golden-section
    search around the best grid point. Returns α = s·m and whether the refinement converged.
    """
    counts = np.asarray(counts, dtype=np.int64)
    h, h_total = _count_tails(counts)
    k = counts.sum(axis=1, keepdims=True)
    mean = (counts / k).mean(axis=0)
    mean = np.maximum(mean, 1e-12)
    mean = mean / mean.sum()

    def ll(log_s: float) -> float:
        return _log_likelihood(math.exp(log_s) * mean, h, h_total)

    grid = np.linspace(_LOG_MIN, _LOG_MAX, 61)
    values = [ll(x) for x in grid]
    i = int(np.argmax(values))
    lo, hi = grid[max(i - 1, 0)], grid[min(i + 1, len(grid) - 1)]
    ratio = (math.sqrt(5) - 1) / 2
    a, b = hi - ratio * (hi - lo), lo + ratio * (hi - lo)
    fa, fb = ll(a), ll(b)
    converged = False
    for _ in range(200):
        if hi - lo < 1e-8:
            converged = True
            break
        if fa > fb:
            hi, b, fb = b, a, fa
            a = hi - ratio * (hi - lo)
            fa = ll(a)
        else:
            lo, a, fa = a, b, fb
            b = lo + ratio * (hi - lo)
            fb = ll(b)
    best = max(((values[i], grid[i]), (fa, a), (fb, b)))[1]
    return math.exp(best) * mean, converged


class FittedPrior(TypedDict):
    """The empirical-Bayes prior fitted to the items with fewer samples than G (readiness reports it)."""

    family: str  # "beta-binomial" or "Dirichlet-multinomial"
    levels: list[float]  # the score levels it spans (scores seen more than once, and the range's ends)
    diffuse: bool  # a last level pools the scores seen once
    alpha: list[float]
    concentration: float
    converged: bool


@dataclass
class ZeroSignalEstimate:
    """Per-item all-equal probabilities at G, split by score level, and how they were estimated."""

    group_size: int
    method: str  # UNBIASED, an empirical-Bayes family, ONE_LEVEL, NO_TIES, or "unbiased + <family>" when K varies
    levels: list[float]
    per_item: list[float]  # Σ_v of the item's parts: its probability of a zero-advantage group
    # the item's E[p_v^G] per level v: every level with weight (under EB also levels it never showed), or with
    # many levels those it showed plus the lowest and the highest
    parts: list[dict[float, float]]
    n_unbiased: int = 0
    n_empirical_bayes: int = 0
    prior: FittedPrior | None = None  # the fitted family and parameters, when any item needed one
    notes: list[str] = field(default_factory=list)

    @property
    def share(self) -> float:
        return sum(self.per_item) / len(self.per_item) if self.per_item else float("nan")

    def level_share(self, level: float) -> float:
        """Expected share of groups whose G rewards all equal `level` (the floor or ceiling split)."""
        return sum(p.get(level, 0.0) for p in self.parts) / len(self.parts) if self.parts else float("nan")


def estimate(level_counts: Sequence[Mapping[float, int]], group_size: int,
             atoms: Iterable[float] = ()) -> ZeroSignalEstimate:
    """The expected zero-signal probability of each item at G from its counts per score level.

    Items with K ≥ G use the unbiased estimator; items with K < G the empirical-Bayes posterior of a prior fitted
    on every item given (see the module docstring for the formulas). A score seen once in the whole run (a
    continuous grader's typical value) is not a level that G samples could all repeat: such scores form one
    "diffuse" category, fitted with the levels (an item that spreads over it is an item whose samples differ) but
    contributing nothing to the all-equal probability. The prior is a beta-binomial when the levels and that
    category make two categories, a Dirichlet-multinomial when they make more. `atoms` are always levels, even
    when seen once (the grader's minimum and maximum: a binary grader's rare pass is still a level).
    """
    g = group_size
    if g < 1:
        raise ValueError("group size must be at least 1")
    totals: Counter[float] = Counter()
    for c in level_counts:
        totals.update({v: n for v, n in c.items() if n > 0})
    always = set(atoms)
    levels = sorted(v for v, n in totals.items() if n > 1 or v in always)
    diffuse = len(levels) < len(totals)
    index = {v: i for i, v in enumerate(levels)}
    width = len(levels) + diffuse  # the diffuse category, if any, is the last column
    matrix = np.zeros((len(level_counts), width), dtype=np.int64)
    for row, c in enumerate(level_counts):
        for v, n in c.items():
            if n > 0:
                matrix[row, index.get(v, width - 1)] += n
    ks = matrix.sum(axis=1)
    if (ks == 0).any():
        raise ValueError("every item needs at least one sample")
    small = ks < g
    out = ZeroSignalEstimate(g, UNBIASED, levels, [0.0] * len(ks), [{} for _ in ks])
    for row in np.flatnonzero(~small).tolist():
        parts = {levels[i]: math.comb(int(n), g) / math.comb(int(ks[row]), g)
                 for i, n in enumerate(matrix[row, :len(levels)]) if n >= g}
        out.parts[row], out.per_item[row] = parts, sum(parts.values())
    out.n_unbiased = int((~small).sum())
    out.n_empirical_bayes = int(small.sum())
    if not small.any():
        return out

    rows = np.flatnonzero(small)
    if width == 1:
        family = ONE_LEVEL if levels else NO_TIES
        for row in rows.tolist():
            out.parts[row] = {levels[0]: 1.0} if levels else {}
            out.per_item[row] = 1.0 if levels else 0.0
    else:
        if width == 2:
            family, name = EB_BETA_BINOMIAL, "beta-binomial"
            alpha, converged = fit_beta_binomial(matrix)
        else:
            family, name = EB_DIRICHLET, "Dirichlet-multinomial"
            alpha, converged = fit_dirichlet_multinomial(matrix)
        out.prior = {"family": name, "levels": levels, "diffuse": diffuse, "alpha": [float(a) for a in alpha],
                     "concentration": float(alpha.sum()), "converged": converged}
        if not converged:
            out.notes.append("the empirical-Bayes prior fit did not converge; the estimate is approximate")
        keep = sorted({0, len(levels) - 1, width - 1})
        for row, (share, by_index) in zip(rows.tolist(), _posterior_parts(alpha, matrix[rows], g, keep)):
            if diffuse:
                share -= by_index.pop(width - 1, 0.0)
            out.parts[row] = {levels[i]: p for i, p in by_index.items()}
            out.per_item[row] = share
    out.method = family if not out.n_unbiased else f"{UNBIASED} + {family}"
    return out


def _posterior_parts(alpha: np.ndarray, counts: np.ndarray, g: int,
                     keep: Sequence[int]) -> list[tuple[float, dict[int, float]]]:
    """(Σ_v E[p_v^G], {category index: E[p_v^G]}) for each item (rows of `counts`) under its posterior.

    Dense over categories when they are few. With many, the categories an item never showed keep the prior's
    parameter, so their sum depends on K alone and is computed once per distinct K; the parts then hold the
    categories the item showed and those in `keep` (the lowest and highest level, the diffuse category).
    """
    if len(alpha) <= 64:
        dense = posterior_all_equal(np.broadcast_to(alpha, counts.shape), counts, g)
        return [(float(row.sum()), {i: float(p) for i, p in enumerate(row)}) for row in dense]
    total = float(alpha.sum())
    j = np.arange(g, dtype=np.float64)
    log_prior_num = np.log(alpha[:, None] + j).sum(axis=1)
    by_k: dict[int, tuple[float, np.ndarray]] = {}
    out = []
    for row in counts:
        k = int(row.sum())
        if k not in by_k:
            each = np.exp(log_prior_num - np.log(total + k + j).sum())
            by_k[k] = (float(each.sum()), each)
        unseen_sum, each = by_k[k]
        seen = np.flatnonzero(row)
        a = alpha[seen] + row[seen]
        seen_parts = np.exp(np.log(a[:, None] + j).sum(axis=1) - np.log(total + k + j).sum())
        share = unseen_sum - float(each[seen].sum()) + float(seen_parts.sum())
        parts = {int(i): float(each[i]) for i in keep}
        parts.update({int(i): float(p) for i, p in zip(seen, seen_parts)})
        out.append((share, parts))
    return out
