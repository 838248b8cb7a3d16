"""rfteval.stats.permutation: the sign-flip test (exact, Monte-Carlo, grouped) and the per-item epoch test."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rfteval.stats import permutation as stats


def test_exact_sign_flip_p_values():
    # all five differences positive: only the all-plus and all-minus patterns reach |sum|: p = 2/32
    assert stats.sign_flip_p_value([0.1, 0.2, 0.3, 0.4, 0.5]) == (pytest.approx(2 / 32), "exact")
    # all differences zero: every pattern ties the observed 0
    assert stats.sign_flip_p_value([0.0] * 6)[0] == 1.0
    # d = [0.1, 0.2, 0.3]: |sums| are 0.6, 0, 0.2, 0.4, 0.4, 0.2, 0, 0.6 -> p = 2/8
    assert stats.sign_flip_p_value([0.1, 0.2, 0.3])[0] == pytest.approx(0.25)
    # a tie that exists only up to float rounding still counts as a hit: 0.1 + 0.2 != 0.3 in floats
    assert stats.sign_flip_p_value([0.1, 0.2, -0.3, 0.3])[0] == pytest.approx(np.mean(
        np.abs(stats.sign_flip_all([1, 2, -3, 3])) >= 3))


def test_exact_p_hand_enumeration():
    d = [0.3, -0.1, 0.2, 0.25]
    obs = abs(sum(d))
    hits = 0
    for mask in range(16):
        s = sum(x if mask >> i & 1 else -x for i, x in enumerate(d))
        hits += abs(s) >= obs - 1e-12
    assert stats.sign_flip_p_value(d)[0] == pytest.approx(hits / 16)


@pytest.mark.slow
def test_monte_carlo_p_matches_exact_enumeration():
    rng = np.random.default_rng(5)
    d = rng.normal(0.08, 0.3, 18)  # above the exact limit of 16: Monte-Carlo
    p_mc, method = stats.sign_flip_p_value(d, seed=1)
    assert method == "sign-flip, 10000 resamples"
    sums = np.abs(stats.sign_flip_all(d))  # 2**18 patterns: the exact answer
    p_exact = float(np.mean(sums >= abs(d.sum()) - 1e-9))
    assert abs(p_mc - p_exact) < 4 * math.sqrt(p_exact * (1 - p_exact) / 10_000) + 1e-4


@pytest.mark.slow
def test_monte_carlo_p_floor_and_determinism():
    d = np.full(40, 0.1)  # every item improved: the observed pattern is the most extreme of 2**40
    p, _ = stats.sign_flip_p_value(d)
    assert p == pytest.approx(1 / 10_001)
    rng = np.random.default_rng(0)
    x = rng.normal(0.0, 0.2, 20_000)  # > 1024 blocks: several independently seeded chunks
    assert stats.sign_flip_p_value(x, seed=3) == stats.sign_flip_p_value(x, seed=3)
    assert stats.sign_flip_p_value(x, seed=3) != stats.sign_flip_p_value(x, seed=4)


def test_sign_flip_sums_do_not_depend_on_core_count(monkeypatch):
    x = np.random.default_rng(2).normal(0, 1, 20_000)
    many = stats.sign_flip_sums(x, 500, seed=9)
    monkeypatch.setattr("os.cpu_count", lambda: 1)
    one = stats.sign_flip_sums(x, 500, seed=9)
    assert np.array_equal(many, one)


def test_sign_flip_sums_distribution():
    # Σ s_i d_i with fair random signs has mean 0 and variance Σ d_i²
    x = np.random.default_rng(4).uniform(-1, 1, 1000)
    sums = stats.sign_flip_sums(x, 10_000, seed=0)
    assert abs(sums.mean()) < 4 * math.sqrt((x ** 2).sum() / 10_000)
    assert sums.var() == pytest.approx((x ** 2).sum(), rel=0.05)
    # each table entry is a real signed sum of its block
    table = stats._sign_table(x[:8])
    assert table[0, 0] == pytest.approx(-x[:8].sum()) and table[0, 255] == pytest.approx(x[:8].sum())
    assert table[0, 1] == pytest.approx(x[0] - x[1:8].sum())


@pytest.mark.slow
def test_p_value_is_calibrated_under_the_null():
    rng = np.random.default_rng(11)
    d = rng.normal(0, 1, (1000, 12))  # symmetric differences: no true effect
    rejected = np.mean([stats.sign_flip_p_value(row)[0] <= 0.05 for row in d])
    assert 0.03 <= rejected <= 0.065


def test_epoch_drop_p_values_exact_by_hand():
    # base [1, 1, 1], cand [0, 0, 0]: only 1 of the C(6, 3) = 20 relabellings is as low: p = 0.05
    p = stats.epoch_drop_p_values([np.ones(3), np.ones(3), np.array([1.0, 0.0])],
                                  [np.zeros(3), np.ones(3), np.array([0.0, 1.0])])
    assert p[0] == pytest.approx(1 / 20) and p[1] == pytest.approx(1.0) and p[2] == pytest.approx(5 / 6)
    assert stats.epoch_split_floor(3, 3) == pytest.approx(0.05)
    big = stats.epoch_drop_p_values([np.ones(15)], [np.zeros(15)])  # C(30, 15) > EXACT_MAX_SPLITS: Monte-Carlo
    assert big[0] == pytest.approx(1 / (1 + stats.EPOCH_RESAMPLES))


def test_epoch_drop_p_values_are_calibrated_under_the_null():
    rng = np.random.default_rng(5)
    base = [rng.random(6) for _ in range(3000)]
    cand = [rng.random(6) for _ in range(3000)]
    p = stats.epoch_drop_p_values(base, cand)
    assert np.mean(p <= 0.05) == pytest.approx(0.05, abs=0.012)
    assert np.mean(p <= 0.2) == pytest.approx(0.2, abs=0.025)


def test_grouped_draws_match_per_item_draws():
    """Pass/fail scores over K=3 epochs give deltas on a 1/3 grid: draws per distinct |d| value."""
    rng = np.random.default_rng(8)
    d = rng.integers(-3, 4, 5000) / 3.0
    grouped = stats.sign_flip_sums_grouped(d, 20_000, seed=1)
    per_item = stats.sign_flip_sums(d, 20_000, seed=1)
    assert grouped is not None
    # same distribution: mean 0, variance Σ d², and matching quantiles
    assert grouped.var() == pytest.approx((d ** 2).sum(), rel=0.04)
    qs = [0.05, 0.25, 0.5, 0.75, 0.95]
    spread = math.sqrt((d ** 2).sum())
    assert np.allclose(np.quantile(grouped, qs), np.quantile(per_item, qs), atol=0.05 * spread)
    # too many distinct values: the per-item path is used
    assert stats.sign_flip_sums_grouped(rng.normal(0, 1, 1000)) is None
    assert np.array_equal(stats.sign_flip_sums_grouped(np.zeros(50), 10), np.zeros(10))


@pytest.mark.slow
def test_grouped_p_value_matches_exact_enumeration():
    d = np.array([1, 1, 1, 2, 2, -1, 1, 1, 2, -2, 1, 1, 1, 2, 1, 1, -1, 1], dtype=float) / 3  # 18 items
    p_mc, method = stats.sign_flip_p_value(d, seed=2)
    assert method.startswith("sign-flip")
    sums = np.abs(stats.sign_flip_all(d))
    p_exact = float(np.mean(sums >= abs(d.sum()) - 1e-9))
    assert abs(p_mc - p_exact) < 4 * math.sqrt(p_exact * (1 - p_exact) / 10_000) + 1e-4
