"""rfteval.stats.paired: hand-computed small cases, the sign-flip test, and coverage by simulation."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from rfteval.stats import paired as stats
from tests.support.optional import require

T_2_975 = 4.302652729911275  # Student t quantiles from published tables (and scipy)
T_10_975 = 2.2281388519649385
T_30_995 = 2.749995653567353
T_2_80, T_4_975, T_4_80 = 1.0606601717798212, 2.7764451051977987, 0.9409645772358
Z_975, Z_80 = 1.959963984540054, 0.8416212335729143


# ---------------------------------------------------------------------------------------------- small cases


def test_item_stats_by_hand():
    df = pd.DataFrame({"item_id": ["a", "b", "a", "a", "b", "c"], "epoch": [0, 0, 1, 2, 1, 0],
                       "score": [1.0, 0.0, 0.0, 1.0, 0.0, 0.5]})
    st = stats.item_stats(df).set_index("item_id")
    assert list(st.index) == ["a", "b", "c"]  # order of first appearance
    assert st.loc["a", "mean"] == pytest.approx(2 / 3)
    assert st.loc["a", "sd"] == pytest.approx(math.sqrt(((1 - 2 / 3) ** 2 * 2 + (2 / 3) ** 2) / 2))
    assert st.loc["a", "n"] == 3 and not st.loc["a", "all_equal"]
    assert st.loc["b", "mean"] == 0 and st.loc["b", "sd"] == 0 and st.loc["b", "all_equal"]
    assert st.loc["c", "n"] == 1 and math.isnan(st.loc["c", "sd"]) and st.loc["c", "all_equal"]


def test_item_stats_empty_and_nan():
    assert len(stats.item_stats(pd.DataFrame({"item_id": [], "score": []}))) == 0
    with pytest.raises(ValueError):
        stats.item_stats(pd.DataFrame({"item_id": ["a"], "score": [float("nan")]}))


def test_side_summary_by_hand():
    s = stats.side_summary([0.2, 0.5, 0.9])
    mean = 1.6 / 3
    sd = math.sqrt(((0.2 - mean) ** 2 + (0.5 - mean) ** 2 + (0.9 - mean) ** 2) / 2)
    se = sd / math.sqrt(3)
    assert s["mean"] == pytest.approx(mean)
    assert s["se"] == pytest.approx(se)
    assert s["ci95"] == pytest.approx([mean - T_2_975 * se, mean + T_2_975 * se])
    assert s["items"] == 3


def test_side_summary_degenerate():
    one = stats.side_summary([0.7])
    assert one["mean"] == 0.7 and math.isnan(one["se"]) and all(math.isnan(x) for x in one["ci95"])
    assert math.isnan(stats.side_summary([])["mean"])
    with pytest.raises(ValueError):
        stats.side_summary([0.1, 0.2], method="nope")


def test_paired_delta_by_hand():
    # d = [0.2, 0.0, 0.1]: mean 0.1, sd 0.1; the 8 sign patterns give |sum| 0.3 four times and 0.1 four times
    r = stats.paired_delta([0.2, 0.5, 0.9], [0.4, 0.5, 1.0])
    se = 0.1 / math.sqrt(3)
    assert r["mean"] == pytest.approx(0.1)
    assert r["sd"] == pytest.approx(0.1)
    assert r["se"] == pytest.approx(se)
    assert r["ci95"] == pytest.approx([0.1 - T_2_975 * se, 0.1 + T_2_975 * se])
    assert r["p_value"] == pytest.approx(0.5) and r["p_method"] == "exact"
    assert r["mde"] == pytest.approx((T_2_975 + T_2_80) * 0.1 / math.sqrt(3))
    assert (r["wins"], r["ties"], r["losses"], r["n"]) == (2, 1, 0, 3)
    b, c = np.array([0.2, 0.5, 0.9]), np.array([0.4, 0.5, 1.0])
    assert r["correlation"] == pytest.approx(np.corrcoef(b, c)[0, 1])
    se_unpaired = math.sqrt(b.var(ddof=1) / 3 + c.var(ddof=1) / 3)
    assert r["se_unpaired"] == pytest.approx(se_unpaired)
    assert r["se"] < r["se_unpaired"]  # positively correlated items: pairing narrows the interval


def test_paired_delta_tie_tolerance_and_shape():
    r = stats.paired_delta([0.5, 0.5, 0.5, 0.5], [0.5 + 1e-12, 0.51, 0.49, 0.5], tie=1e-9)
    assert (r["wins"], r["ties"], r["losses"]) == (1, 2, 1)
    r = stats.paired_delta([0.5, 0.5, 0.5, 0.5], [0.5 + 1e-12, 0.51, 0.49, 0.5], tie=0.02)
    assert (r["wins"], r["ties"], r["losses"]) == (0, 4, 0)
    with pytest.raises(ValueError):
        stats.paired_delta([0.1, 0.2], [0.1])


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


def test_t_quantiles_match_tables():
    assert stats.t_ppf(0.975, 2) == pytest.approx(T_2_975, rel=1e-9)
    assert stats.t_ppf(0.975, 10) == pytest.approx(T_10_975, rel=1e-9)
    assert stats.t_ppf(0.995, 30) == pytest.approx(T_30_995, rel=1e-9)
    assert stats.t_ppf(0.025, 10) == pytest.approx(-T_10_975, rel=1e-9)
    assert stats.t_ppf(0.975, 1e7) == pytest.approx(Z_975, rel=1e-6)
    assert math.isnan(stats.t_ppf(1.0, 3)) and stats.t_ppf(0.5, 3) == 0.0


def test_t_quantiles_match_scipy():
    st = require("scipy.stats", "setup")  # the graders extra
    for df in list(range(1, 40)) + [57, 99, 250, 1000, 10_000, 100_000]:
        for p in (0.6, 0.9, 0.95, 0.975, 0.995, 0.9995):
            assert stats.t_ppf(p, df) == pytest.approx(st.t.ppf(p, df), rel=1e-8)


def test_bootstrap_interval_is_close_to_t_for_many_items():
    x = np.random.default_rng(3).normal(0.5, 0.2, 400)
    t = stats.side_summary(x)
    b = stats.side_summary(x, method="bootstrap", seed=1)
    width_t, width_b = np.diff(t["ci95"])[0], np.diff(b["ci95"])[0]
    assert width_b == pytest.approx(width_t, rel=0.1)
    assert b["ci95"][0] < x.mean() < b["ci95"][1]
    assert stats.side_summary(x, method="bootstrap", seed=1) == b  # seeded


def test_mde_rule_of_thumb():
    # statistics.md: sd(d) = 0.30 and n = 200 give about 0.059 (normal quantiles; t on 199 df is a hair wider)
    assert stats.mde(0.30, 200) == pytest.approx(2.8016 * 0.30 / math.sqrt(200), rel=0.01)
    assert stats.mde(0.30, 200) == pytest.approx(0.059, abs=0.001)


def test_mde_uses_t_quantiles_at_small_n():
    # 5 items: (t_.975 + t_.8 on 4 df) / (z_.975 + z_.8) = 1.33, the understatement the normal shortcut made
    assert stats.mde(1.0, 5) == pytest.approx((T_4_975 + T_4_80) / math.sqrt(5))
    assert stats.mde(1.0, 5) / ((Z_975 + Z_80) / math.sqrt(5)) == pytest.approx(1.33, abs=0.01)
    assert stats.mde(1.0, 12) / ((Z_975 + Z_80) / math.sqrt(12)) == pytest.approx(1.10, abs=0.01)


def test_win_tie_loss_tolerance_has_float_slack():
    # 0.4 - 0.3 = 0.10000000000000003 and 0.3 - 0.2 = 0.09999999999999998: both are ties at --tie 0.1
    assert stats.win_tie_loss([0.4 - 0.3, 0.3 - 0.2, -(0.4 - 0.3), 0.11, -0.11], tie=0.1) == (1, 3, 1)


def test_correlation_of_a_constant_side_is_undefined():
    const = np.full(10, 0.1)
    assert math.isnan(stats.correlation(const, np.linspace(0, 1, 10)))
    assert math.isnan(stats.paired_delta(const, np.linspace(0, 1, 10))["correlation"])
    assert stats.correlation(np.arange(5.0), np.arange(5.0) * 2) == pytest.approx(1.0)


def test_holm_by_hand():
    adj = stats.holm([0.01, 0.04, 0.03, float("nan"), 0.005])
    # sorted 0.005, 0.01, 0.03, 0.04 (m = 4): 0.02, 0.03, 0.06, 0.06 (monotone)
    assert adj[[4, 0, 2, 1]] == pytest.approx([0.02, 0.03, 0.06, 0.06]) and math.isnan(adj[3])
    assert stats.holm([0.5, 0.9]).tolist() == [1.0, 1.0]


def test_direction_needs_the_test_and_the_interval_to_agree():
    row = {"n": 30, "p_method": "sign-flip", "p_value": 0.01, "ci95": [0.02, 0.2]}
    assert stats.direction(row) == "better"
    assert stats.direction({**row, "p_adjusted": 0.2}) == "no clear difference"  # Holm wins over the raw p
    assert stats.direction({**row, "ci95": [-0.2, -0.02]}) == "worse"
    assert stats.direction({**row, "n": 5, "p_method": "exact"}) == "too few items to tell"
    assert stats.direction({**row, "n": 6, "p_method": "exact"}) == "better"
    assert stats.p_floor(5, "exact") == 0.0625 and stats.p_floor(6, "exact") == 0.03125


def test_clip_interval_to_the_range():
    assert stats.clip_interval(-0.1, 1.2, (0.0, 1.0)) == (0.0, 1.0)
    assert stats.clip_interval(0.2, 0.4, None) == (0.2, 0.4)


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


# ---------------------------------------------------------------------------------------------- simulation

REPLICATES = 4000


def _coverage(lo: np.ndarray, hi: np.ndarray, truth: float) -> float:
    return float(np.mean((lo <= truth) & (truth <= hi)))


def test_side_interval_coverage_continuous_scores():
    """Items drawn from a super-population with mean 0.6; per-item sd 0.15, per-epoch noise sd 0.2, K=3."""
    rng = np.random.default_rng(20240601)
    n, k = 30, 3
    x = rng.normal(0.6, 0.15, (REPLICATES, n, 1))
    scores = x + rng.normal(0, 0.2, (REPLICATES, n, k))
    means = scores.mean(axis=2)  # per item first, as item_stats does
    _, _, lo, hi = stats.t_interval(means)
    assert 0.93 <= _coverage(lo, hi, 0.6) <= 0.97
    # the naive interval over raw records (n*K "independent" scores) undercovers: the reason for item means
    flat = scores.reshape(REPLICATES, n * k)
    naive_se = flat.std(axis=1, ddof=1) / math.sqrt(n * k)
    naive = _coverage(flat.mean(axis=1) - 1.96 * naive_se, flat.mean(axis=1) + 1.96 * naive_se, 0.6)
    assert naive < 0.90
    # the public functions compute exactly these intervals, from records in long format
    for r in range(25):
        long = pd.DataFrame({"item_id": np.repeat([f"i{j}" for j in range(n)], k), "score": scores[r].ravel()})
        item_means = stats.item_stats(long)["mean"].to_numpy()
        assert np.allclose(item_means, means[r])
        s = stats.side_summary(item_means)
        assert s["ci95"] == pytest.approx([lo[r], hi[r]])


def test_side_interval_coverage_binary_scores():
    """Pass/fail graders: item pass rates p_i ~ Beta(2, 2) (true mean 0.5), K=3 Bernoulli epochs, 40 items."""
    rng = np.random.default_rng(7)
    n, k = 40, 3
    p = rng.beta(2, 2, (REPLICATES, n, 1))
    scores = (rng.random((REPLICATES, n, k)) < p).astype(float)
    _, _, lo, hi = stats.t_interval(scores.mean(axis=2))
    assert 0.93 <= _coverage(lo, hi, 0.5) <= 0.97


def test_paired_delta_coverage():
    """Tuned = base + a per-item effect (mean 0.05, sd 0.1), each side with its own epoch noise; truth 0.05."""
    rng = np.random.default_rng(99)
    n, k, true_delta = 35, 3, 0.05
    x_b = rng.normal(0.5, 0.2, (REPLICATES, n, 1))
    x_c = x_b + rng.normal(true_delta, 0.1, (REPLICATES, n, 1))
    base = (x_b + rng.normal(0, 0.15, (REPLICATES, n, k))).mean(axis=2)
    cand = (x_c + rng.normal(0, 0.15, (REPLICATES, n, k))).mean(axis=2)
    _, se, lo, hi = stats.t_interval(cand - base)
    assert 0.93 <= _coverage(lo, hi, true_delta) <= 0.97
    # pairing uses the correlation of item difficulty: the paired SE is well below the unpaired one
    unpaired = np.sqrt(base.var(axis=1, ddof=1) / n + cand.var(axis=1, ddof=1) / n)
    assert np.median(se / unpaired) < 0.6
    for r in range(10):
        res = stats.paired_delta(base[r], cand[r], resamples=200)
        assert res["ci95"] == pytest.approx([lo[r], hi[r]])
        assert res["se"] == pytest.approx(se[r])


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


def test_crossfit_win_tie_loss_counts_items_not_halves():
    """An item chosen by both halves is one verdict (the mean of its two held-out differences), so W/T/L sums to
    the items chosen, as on every other row: the demo's "4 items ... 6/0/0" summed to 6."""
    rng = np.random.default_rng(3)
    for seed in range(20):
        base_a, base_b = rng.random(16), rng.random(16)
        base_b[:4] = base_a[:4] = 0.0  # the same lowest items on both halves: chosen twice
        cand = rng.random(16)
        r = stats.crossfit_lowest_delta(base_a, base_b, cand, 0.25, seed=seed)
        assert r["wins"] + r["ties"] + r["losses"] == r["selected"]
    both = stats.crossfit_lowest_delta(np.array([0.0, 1, 1, 1]), np.array([0.0, 1, 1, 1]), np.array([1.0, 0, 0, 0]))
    assert (both["wins"], both["ties"], both["losses"], both["selected"]) == (1, 0, 0, 1)
