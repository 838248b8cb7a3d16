"""rfteval.stats.agreement: exact values on small tables, and coverage on simulated graders with a known truth."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rfteval.stats import agreement

# ---------------------------------------------------------------------------------------------- exact values


def test_identical_scores_agree_perfectly() -> None:
    a = np.array([0.1, 0.5, 0.9, 0.3, 0.7, 1.0])
    items = ["i1", "i1", "i2", "i2", "i3", "i3"]
    got = agreement.score_agreement(a, a.copy(), items)
    assert got["pearson"] == pytest.approx(1.0)
    assert got["spearman"] == pytest.approx(1.0)
    assert got["bias"]["mean"] == 0.0
    assert got["bias"]["ci95"] == [0.0, 0.0]
    assert got["mae"] == 0.0
    assert (got["loa"]["lower"], got["loa"]["upper"]) == (0.0, 0.0)
    assert (got["n_samples"], got["n_items"]) == (6, 3)


def test_bias_weights_items_equally() -> None:
    # item x has 3 samples with difference 0.3, item y has 1 with difference -0.1: the bias is (0.3 − 0.1) / 2
    a = np.array([0.0, 0.0, 0.0, 0.5])
    b = np.array([0.3, 0.3, 0.3, 0.4])
    got = agreement.score_agreement(a, b, ["x", "x", "x", "y"])
    assert got["bias"]["mean"] == pytest.approx(0.1)
    assert got["mae"] == pytest.approx((0.9 + 0.1) / 4)


def test_kappa_of_a_known_table() -> None:
    # A textbook table: po = 0.7, pe = 0.5·0.6 + 0.5·0.4 = 0.5, kappa = 0.4
    cells = np.array([[20, 5], [10, 15]])  # rows A (fail, pass), columns B
    assert agreement.cohen_kappa(cells) == pytest.approx((0.7 - 0.5) / 0.5)


def test_pass_agreement_table_precision_recall() -> None:
    a = np.array([1, 1, 1, 0, 0, 1, 0, 0], dtype=bool)
    b = np.array([1, 1, 0, 1, 0, 1, 0, 0], dtype=bool)
    items = [f"i{i // 2}" for i in range(8)]
    got = agreement.pass_agreement(a, b, items)
    assert got["table"] == {"both": 3, "a_only": 1, "b_only": 1, "neither": 3}
    assert got["precision"]["value"] == pytest.approx(3 / 4)
    assert got["recall"]["value"] == pytest.approx(3 / 4)
    assert got["kappa"]["value"] == pytest.approx(0.5)


def test_identical_verdicts_give_kappa_one_even_with_one_label() -> None:
    ones = np.ones(6, dtype=bool)
    got = agreement.pass_agreement(ones, ones, ["a", "a", "b", "b", "c", "c"])
    assert got["kappa"]["value"] == 1.0
    assert got["kappa"]["ci95"] == [1.0, 1.0]


def test_label_confusion_rows_are_a() -> None:
    a = ["good", "good", "bad", "fair", "bad"]
    b = ["good", "fair", "bad", "fair", "good"]
    got = agreement.label_agreement(a, b, ["1", "2", "3", "4", "5"], labels=["good", "fair", "bad"])
    assert got["labels"] == ["good", "fair", "bad"]
    assert got["confusion"] == [[1, 1, 0], [0, 1, 0], [1, 0, 1]]
    po, pe = 3 / 5, (2 * 2 + 1 * 2 + 2 * 1) / 25
    assert got["kappa"]["value"] == pytest.approx((po - pe) / (1 - pe))


def test_spearman_is_rank_based() -> None:
    a = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    assert agreement.spearman(a, a ** 3) == pytest.approx(1.0)
    assert agreement.pearson(a, a ** 3) < 1.0
    assert math.isnan(agreement.pearson(a, np.ones(5)))


def test_shorten() -> None:
    assert agreement.shorten("a  b\n c") == "a b c"
    assert len(agreement.shorten("x" * 500, 40)) == 40


# ---------------------------------------------------------------------------------------------- simulation

REPLICATES = 1000
N_ITEMS, K = 60, 3


def _covers(ci: list[float], truth: float) -> bool:
    return ci[0] <= truth <= ci[1]


@pytest.mark.slow
def test_bias_interval_covers_the_truth() -> None:
    """B = A + bias + noise, with item effects shared by the samples of an item: the item bootstrap covers 93–97%."""
    rng = np.random.default_rng(11)
    bias, hits, means = 0.07, 0, []
    items = np.repeat(np.arange(N_ITEMS).astype(str), K)
    for r in range(REPLICATES):
        x = rng.uniform(0.2, 0.8, N_ITEMS)
        a = np.repeat(x, K) + rng.normal(0, 0.1, N_ITEMS * K)
        item_shift = np.repeat(rng.normal(0, 0.08, N_ITEMS), K)  # B's disagreement is itself item-clustered
        b = a + bias + item_shift + rng.normal(0, 0.05, N_ITEMS * K)
        got = agreement.score_agreement(a, b, items, seed=r, resamples=500)
        hits += _covers(got["bias"]["ci95"], bias)
        means.append(got["bias"]["mean"])
    assert abs(np.mean(means) - bias) < 0.005
    assert 0.93 <= hits / REPLICATES <= 0.97, hits / REPLICATES


@pytest.mark.slow
def test_kappa_precision_recall_intervals_cover_the_truth() -> None:
    """A passes with an item-specific probability; B flips A's passes to fails at rate f1 and fails to passes at
    f0. The truth follows from the rates; the item-bootstrap intervals cover it 93–97% of the time."""
    rng = np.random.default_rng(5)
    f1, f0 = 0.15, 0.10
    alpha, beta = 2.0, 2.0  # p_i ~ Beta(2, 2): pass probability varies by item, so samples of an item cluster
    pi = alpha / (alpha + beta)
    both, a_only, b_only, neither = pi * (1 - f1), pi * f1, (1 - pi) * f0, (1 - pi) * (1 - f0)
    pa, pb = both + a_only, both + b_only
    po, pe = both + neither, pa * pb + (1 - pa) * (1 - pb)
    truth = {"kappa": (po - pe) / (1 - pe), "precision": both / (both + b_only), "recall": 1 - f1}
    items = np.repeat(np.arange(N_ITEMS).astype(str), K)
    hits = dict.fromkeys(truth, 0)
    est: dict[str, list[float]] = {key: [] for key in truth}
    for r in range(REPLICATES):
        p = np.repeat(rng.beta(alpha, beta, N_ITEMS), K)
        a = rng.random(N_ITEMS * K) < p
        flip = np.where(a, rng.random(a.size) < f1, rng.random(a.size) < f0)
        b = a ^ flip
        got = agreement.pass_agreement(a, b, items, seed=r, resamples=500)
        for key in truth:
            value = got[key]  # type: ignore[literal-required]
            hits[key] += _covers(value["ci95"], truth[key])
            est[key].append(value["value"])
    for key in truth:
        assert abs(np.mean(est[key]) - truth[key]) < 0.02, (key, np.mean(est[key]), truth[key])
        assert 0.93 <= hits[key] / REPLICATES <= 0.97, (key, hits[key] / REPLICATES)


@pytest.mark.slow
def test_label_kappa_interval_covers_the_truth() -> None:
    """Three labels, each item with its own label distribution (Dirichlet(2, 2, 2), so the marginal is uniform); B
    keeps A's label with probability 1 − f, else picks one of the other two. Truth: kappa = (1 − f − 1/3) / (2/3)."""
    rng = np.random.default_rng(21)
    f, labels = 0.2, np.array(["good", "fair", "bad"])
    truth = (1 - f - 1 / 3) / (2 / 3)
    items = np.repeat(np.arange(N_ITEMS).astype(str), K)
    hits, est = 0, []
    for r in range(REPLICATES // 2):
        p = rng.dirichlet([2.0, 2.0, 2.0], N_ITEMS)
        cum = np.repeat(p.cumsum(axis=1), K, axis=0)
        a = np.minimum((rng.random(N_ITEMS * K)[:, None] > cum).sum(axis=1), 2)  # a draw from each item's p
        other = (a + rng.integers(1, 3, a.size)) % 3
        b = np.where(rng.random(a.size) < f, other, a)
        got = agreement.label_agreement(labels[a].tolist(), labels[b].tolist(), items, seed=r, resamples=500)
        hits += _covers(got["kappa"]["ci95"], truth)
        est.append(got["kappa"]["value"])
    assert abs(np.mean(est) - truth) < 0.02
    assert 0.93 <= hits / (REPLICATES // 2) <= 0.97, hits / (REPLICATES // 2)
