"""The expected zero-signal share when G exceeds the samples per item (issue 10 item 4), checked by simulation.

Base runs of 400 items × 3 epochs, G = 8, item rates drawn from a known prior; the truth is the mean over items
of p_i^8 + (1 − p_i)^8 with the drawn p_i. Library calls only, fixed seeds.
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pandas as pd
import pytest

from rfteval.readiness.assessment import assess
from rfteval.stats import zero_signal as zs

N_ITEMS, K, G = 400, 3, 8
SEEDS = range(20)
PRIORS = [(2.0, 2.0), (0.6, 0.6), (1.0, 1.0)]


def binary_run(a: float, b: float, seed: int) -> tuple[list[Counter[float]], float]:
    """Level counts of a simulated binary run and its true zero-signal share at G."""
    rng = np.random.default_rng(seed)
    p = rng.beta(a, b, N_ITEMS)
    c = rng.binomial(K, p)
    truth = float(np.mean(p**G + (1 - p) ** G))
    return [Counter({1.0: int(x), 0.0: K - int(x)}) for x in c], truth


def prior_truth(a: float, b: float) -> float:
    """E[p^G + (1 − p)^G] under Beta(a, b): Π_j (a + j)/(a + b + j) + Π_j (b + j)/(a + b + j)."""
    return math.prod((a + j) / (a + b + j) for j in range(G)) + math.prod((b + j) / (a + b + j) for j in range(G))


@pytest.mark.parametrize("a, b", PRIORS)
def test_empirical_bayes_within_005_of_the_truth_where_the_plug_in_is_not(a, b):
    eb, plug, truth = [], [], []
    for seed in SEEDS:
        counts, t = binary_run(a, b, seed)
        est = zs.estimate(counts, G, atoms=(0.0, 1.0))
        assert est.method == zs.EB_BETA_BINOMIAL and est.n_empirical_bayes == N_ITEMS
        eb.append(est.share)
        plug.append(float(np.mean([zs.plug_in(list(c.values()), G) for c in counts])))
        truth.append(t)
    eb_err = np.array(eb) - np.array(truth)
    plug_err = np.array(plug) - np.array(truth)
    # The estimator is unbiased to within 0.02 (the target is 0.05; measured: |bias| ≤ 0.006 at these priors) ...
    assert abs(eb_err.mean()) <= 0.02, eb_err.mean()
    # ... and one run lands within 0.05 of its truth most of the time: the fit of (α, β) from 3 samples per item
    # is noisy (mean absolute error about 0.02; about 1 run in 12 misses 0.05 over 200 seeds, at most by 0.08).
    assert np.abs(eb_err).mean() <= 0.035
    assert (np.abs(eb_err) <= 0.05).mean() >= 0.8
    assert np.abs(eb_err).max() <= 0.1
    # The old plug-in misses by far more than 0.05 on every one of these cases: the test has teeth.
    assert plug_err.mean() > 0.2 and (plug_err > 0.05).all()
    # The drawn truth sits on the prior's expectation (a check of the simulation itself).
    assert np.mean(truth) == pytest.approx(prior_truth(a, b), abs=0.01)


def test_the_issue_example_039_for_010():
    """Beta(2, 2) at K = 3, G = 8: the issue measured the plug-in at 0.39 for a truth of 0.10."""
    counts, truth = binary_run(2.0, 2.0, 0)
    plug = float(np.mean([zs.plug_in(list(c.values()), G) for c in counts]))
    est = zs.estimate(counts, G, atoms=(0.0, 1.0))
    assert truth == pytest.approx(0.11, abs=0.02) and plug > 0.35
    assert est.share == pytest.approx(truth, abs=0.05)


def _records(counts: list[Counter[float]]) -> pd.DataFrame:
    rows = [{"model_label": "base", "item_id": f"i{i}", "epoch": e, "score": v, "error": None}
            for i, c in enumerate(counts) for e, v in enumerate(v for v, n in sorted(c.items()) for _ in range(n))]
    return pd.DataFrame(rows)


def test_assess_reports_the_empirical_bayes_share_and_its_method():
    counts, truth = binary_run(0.6, 0.6, 3)
    rep = assess(_records(counts), group_size=G)
    ez = rep.expected_zero_signal
    assert ez["method"] == "empirical Bayes (beta-binomial)"
    assert ez["n_empirical_bayes"] == N_ITEMS and ez["n_unbiased"] == 0
    assert ez["prior"]["family"] == "beta-binomial" and ez["prior"]["converged"]
    assert ez["share"] == pytest.approx(truth, abs=0.05)
    assert ez["floor"] + ez["ceiling"] == pytest.approx(ez["share"])  # binary: every all-equal group is one of them
    assert sum(it.expected_zero_signal for it in rep.items) / N_ITEMS == pytest.approx(ez["share"])
    assert not any("plug-in" in n for n in rep.notes)
    assert any("empirical Bayes" in n for n in rep.notes)
    check = next(c for c in rep.checks if c.name == "zero_signal")
    assert "empirical Bayes (beta-binomial)" in check.message


LEVELS = (0.0, 0.5, 1.0)


@pytest.mark.parametrize("conc", [(1.0, 1.0, 1.0), (0.3, 0.3, 0.3), (2.0, 1.0, 0.5)])
def test_multi_level_dirichlet_multinomial(conc):
    """Three score levels, item distributions ~ Dirichlet(conc): the Dirichlet-multinomial estimate is close."""
    eb_err, plug_err, floor_err = [], [], []
    for seed in range(10):
        rng = np.random.default_rng(100 + seed)
        probs = rng.dirichlet(conc, N_ITEMS)
        truth = float((probs**G).sum(axis=1).mean())
        counts = [Counter({LEVELS[j]: int(n) for j, n in enumerate(rng.multinomial(K, p)) if n}) for p in probs]
        est = zs.estimate(counts, G, atoms=(0.0, 1.0))
        assert est.method == zs.EB_DIRICHLET
        eb_err.append(est.share - truth)
        floor_err.append(est.level_share(0.0) - float((probs[:, 0] ** G).mean()))
        plug_err.append(np.mean([zs.plug_in(list(c.values()), G) for c in counts]) - truth)
    assert abs(np.mean(eb_err)) <= 0.02 and np.abs(eb_err).max() <= 0.06
    assert abs(np.mean(floor_err)) <= 0.02
    assert min(plug_err) > 0.15


def test_continuous_scores_tie_only_at_their_atoms():
    """Half the items always score 0, half spread over continuous values: about half the groups are all-equal."""
    rng = np.random.default_rng(5)
    counts = [Counter({0.0: K}) if i % 2 else Counter(np.round(rng.random(K), 9).tolist()) for i in range(N_ITEMS)]
    est = zs.estimate(counts, G, atoms=(0.0, 1.0))
    assert est.prior is not None and est.prior["diffuse"]
    assert est.share == pytest.approx(0.5, abs=0.01)
    assert est.level_share(0.0) == pytest.approx(est.share)
    spread = zs.estimate([c for c in counts if len(c) > 1], G)
    assert spread.share == 0.0 and spread.method == zs.NO_TIES


def test_k_at_least_g_stays_unbiased_and_mixed_k_is_named():
    full = [Counter({1.0: 5, 0.0: 5}), Counter({1.0: 10}), Counter({0.0: 9, 1.0: 1})]
    est = zs.estimate(full, 8)
    assert est.method == zs.UNBIASED and est.prior is None
    assert est.per_item == pytest.approx([0.0, 1.0, math.comb(9, 8) / math.comb(10, 8)])
    mixed = zs.estimate(full + [Counter({1.0: 2, 0.0: 1}), Counter({0.0: 3})], 8)
    assert mixed.method == f"{zs.UNBIASED} + {zs.EB_BETA_BINOMIAL}"
    assert mixed.n_unbiased == 3 and mixed.n_empirical_bayes == 2
    assert mixed.per_item[:3] == est.per_item
    assert 0 < mixed.per_item[3] < mixed.per_item[4] < 1


def test_one_level_and_underdispersed_items():
    floor = zs.estimate([Counter({0.0: 3})] * 20, 8, atoms=(0.0, 1.0))
    assert floor.method == zs.ONE_LEVEL and floor.share == 1.0 and floor.level_share(0.0) == 1.0
    # every item has p = 1/2 (no spread between items): the fit finds a concentrated prior, and the share is
    # about 2 · 0.5^8, not the plug-in's
    rng = np.random.default_rng(11)
    c = rng.binomial(3, 0.5, 2000)
    counts = [Counter({1.0: int(x), 0.0: 3 - int(x)}) for x in c]
    est = zs.estimate(counts, 8)
    assert est.prior["concentration"] > 100
    assert est.share == pytest.approx(2 * 0.5**8, abs=0.003)


def test_posterior_formula_is_the_beta_function_ratio():
    """Π_j (a+j)/(A+j) equals B(α+c+G, β+K−c)/B(α+c, β+K−c) computed with lgamma (issue 10's formula)."""
    def log_b(x: float, y: float) -> float:
        return math.lgamma(x) + math.lgamma(y) - math.lgamma(x + y)

    alpha, beta, k, g = 0.7, 1.9, 3, 8
    for c in range(k + 1):
        want_hi = math.exp(log_b(alpha + c + g, beta + k - c) - log_b(alpha + c, beta + k - c))
        want_lo = math.exp(log_b(alpha + c, beta + k - c + g) - log_b(alpha + c, beta + k - c))
        got = zs.posterior_all_equal(np.array([beta, alpha]), np.array([k - c, c]), g)
        assert got == pytest.approx([want_lo, want_hi], rel=1e-12)
    # Dirichlet: Γ(a_v+G)Γ(A)/(Γ(a_v)Γ(A+G))
    a = np.array([0.4, 1.3, 2.2])
    n = np.array([1, 0, 2])
    post = a + n
    want = [math.exp(math.lgamma(x + 8) + math.lgamma(post.sum()) - math.lgamma(x) - math.lgamma(post.sum() + 8))
            for x in post]
    assert zs.posterior_all_equal(a, n, 8) == pytest.approx(want, rel=1e-12)


def test_beta_binomial_fit_is_the_maximum_likelihood():
    rng = np.random.default_rng(2)
    p = rng.beta(0.8, 1.7, 300)
    c = rng.binomial(4, p)
    counts = np.stack([4 - c, c], axis=1)
    (a0, a1), converged = zs.fit_beta_binomial(counts)
    assert converged
    best = zs.log_likelihood(np.array([a0, a1]), counts)
    for da in (-0.02, 0.02):
        for db in (-0.02, 0.02):
            assert zs.log_likelihood(np.array([a0 * math.exp(da), a1 * math.exp(db)]), counts) < best
    # a fine grid does no better
    grid = np.exp(np.linspace(-3, 3, 121))
    assert max(zs.log_likelihood(np.array([x, y]), counts) for x in grid[::4] for y in grid[::4]) <= best + 1e-9
    # the log-likelihood by its definition, Σ_i log[B(α+c, β+K−c)/B(α, β)] (+ a constant)
    def log_b(x: float, y: float) -> float:
        return math.lgamma(x) + math.lgamma(y) - math.lgamma(x + y)

    direct = sum(log_b(a1 + ci, a0 + 4 - ci) - log_b(a1, a0) for ci in c)
    assert zs.log_likelihood(np.array([a0, a1]), counts) == pytest.approx(direct, rel=1e-10)


def test_nelder_mead_minimises_rosenbrock():
    x, converged = zs.nelder_mead(lambda v: (1 - v[0]) ** 2 + 100 * (v[1] - v[0] ** 2) ** 2, np.array([-1.2, 1.0]),
                                  max_iter=5000)
    assert converged and x == pytest.approx([1.0, 1.0], abs=1e-4)


def test_many_levels_take_the_sparse_path_and_agree_with_the_dense_one():
    rng = np.random.default_rng(9)
    values = np.arange(80) / 79
    counts = [Counter(rng.choice(values, 3, p=rng.dirichlet(np.full(80, 0.05))).tolist()) for _ in range(300)]
    est = zs.estimate(counts, 8, atoms=(0.0, 1.0))
    assert est.method == zs.EB_DIRICHLET and len(est.prior["alpha"]) > 64
    alpha = np.array(est.prior["alpha"])
    index = {v: i for i, v in enumerate(est.levels)}
    matrix = np.zeros((len(counts), len(alpha)), dtype=np.int64)
    for row, c in enumerate(counts):
        for v, n in c.items():
            matrix[row, index.get(v, len(alpha) - 1)] += n
    dense = zs.posterior_all_equal(np.broadcast_to(alpha, matrix.shape), matrix, 8)
    atoms = dense[:, :len(est.levels)].sum(axis=1)
    assert est.per_item == pytest.approx(atoms.tolist(), abs=1e-12)
    assert est.level_share(est.levels[0]) == pytest.approx(dense[:, 0].mean(), abs=1e-12)
