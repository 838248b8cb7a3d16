"""rfteval.stats.paired: hand-computed small cases, and coverage by simulation (the sign-flip test: test_permutation;
the t quantiles: test_tdist)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from rfteval.stats import paired as stats
from tests.support.t_tables import T_2_80, T_2_975, T_4_80, T_4_975, Z_80, Z_975

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
