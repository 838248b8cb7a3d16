"""Readiness signals on synthetic runs with known properties, checked against hand computation and simulation."""

from __future__ import annotations

import json
import math
from itertools import combinations

import numpy as np
import pandas as pd
import pytest

from rfteval.data.records import effective_scores
from rfteval.data.rundir import pick_label
from rfteval.errors import InputError
from rfteval.graders.loader import parse_config
from rfteval.readiness.advantages import grpo_advantages, scored_mask
from rfteval.readiness.assessment import assess, expected_zero_signal
from tests.support.readiness_records import KNOWN, records


def test_known_shares_mean_and_levels():
    rep = assess(records(KNOWN), group_size=4)
    assert rep.n_items == 4 and rep.samples_min == rep.samples_max == 4
    assert rep.mean == pytest.approx((0 + 1 + 0.5 + 0.75) / 4)
    assert rep.position == pytest.approx(rep.mean)
    assert rep.zero_variance == {"n_items": 4, "share": 0.5, "floor": 0.25, "ceiling": 0.25, "other": 0.0, "errors": 0}
    assert rep.distinct_levels == 2 and rep.binary
    assert rep.share_at_min == pytest.approx(7 / 16) and rep.share_at_max == pytest.approx(9 / 16)
    # within-item SD (ddof=1): half -> sqrt(1/3), three -> 0.5; floor/ceiling 0
    assert rep.mean_within_sd == pytest.approx((0 + 0 + math.sqrt(1 / 3) + 0.5) / 4)
    # mean sample variance (ddof=1, the unbiased p(1-p)): 0, 0, 1/3, 1/4 (p̂(1-p̂) times K/(K-1) = 4/3)
    assert rep.mean_item_variance == pytest.approx((1 / 3 + 0.25) / 4)
    assert rep.mean_item_variance == pytest.approx((0.25 + 0.1875) / 4 * 4 / 3)
    assert rep.mean_histogram == [1, 0, 0, 0, 0, 1, 0, 1, 0, 1]  # 0, .5, .75, 1 in tenths


def test_expected_zero_signal_unbiased_by_hand():
    # K = 4 = G: only all-equal sets count; C(2,4)=0 -> the 2/2 item never yields a zero group at G=4
    rep = assess(records(KNOWN), group_size=4)
    assert rep.expected_zero_signal["method"] == "unbiased"
    assert rep.expected_zero_signal["share"] == pytest.approx((1 + 1 + 0 + 0) / 4)
    assert rep.expected_zero_signal["floor"] == pytest.approx(0.25)
    assert rep.expected_zero_signal["ceiling"] == pytest.approx(0.25)
    # G = 2: pairs of equal scores out of C(4,2)=6 -> half: 2/6, three: 3/6
    rep2 = assess(records(KNOWN), group_size=2)
    assert rep2.expected_zero_signal["share"] == pytest.approx((1 + 1 + 2 / 6 + 3 / 6) / 4)


def test_expected_zero_signal_matches_statistics_md_examples():
    # K < G: the plug-in at p̂ = 1/2 is p^G + (1-p)^G exactly
    assert expected_zero_signal([1, 1], 4) == pytest.approx(0.125)
    assert expected_zero_signal([1, 1], 8) == pytest.approx(0.0078, abs=1e-4)
    # large K: the unbiased estimate converges to p^G + (1-p)^G (the table in statistics.md §3.3(b))
    assert expected_zero_signal([900, 100], 4) == pytest.approx(0.66, abs=0.01)
    assert expected_zero_signal([900, 100], 8) == pytest.approx(0.43, abs=0.01)
    assert expected_zero_signal([900, 100], 16) == pytest.approx(0.19, abs=0.01)
    assert expected_zero_signal([950, 50], 8) == pytest.approx(0.66, abs=0.01)
    # K >= G: the combinatorial formula, enumerated by brute force over all G-subsets
    scores = [0, 0, 0, 1, 1, 0.5, 0.5, 0.5, 0.5, 1]
    subsets = list(combinations(range(len(scores)), 4))
    brute = sum(len({scores[i] for i in s}) == 1 for s in subsets) / len(subsets)
    counts = [scores.count(v) for v in sorted(set(scores))]
    assert expected_zero_signal(counts, 4) == pytest.approx(brute)


@pytest.mark.parametrize("probs, k, g", [((0.9, 0.1), 16, 8), ((0.5, 0.3, 0.2), 10, 4), ((0.6, 0.4), 8, 8)])
def test_unbiased_estimator_matches_simulation(probs, k, g):
    """Mean of the K >= G estimator over simulated runs ≈ the zero-signal rate of simulated training groups."""
    rng = np.random.default_rng(7)
    reps = 20000
    truth_mc = np.mean([len(set(rng.choice(len(probs), g, p=probs))) == 1 for _ in range(reps // 4)])
    exact = sum(p**g for p in probs)
    assert truth_mc == pytest.approx(exact, abs=4 * math.sqrt(exact * (1 - exact) / (reps // 4)) + 1e-3)
    draws = rng.choice(len(probs), size=(reps, k), p=probs)
    est = np.array([expected_zero_signal(np.bincount(row, minlength=len(probs)).tolist(), g) for row in draws])
    se = est.std(ddof=1) / math.sqrt(reps)
    assert est.mean() == pytest.approx(exact, abs=4 * se + 1e-4)


@pytest.mark.slow
def test_plug_in_is_resampling_of_the_empirical_distribution_and_pessimistic():
    """K < G: the plug-in equals drawing G with replacement from the item's scores; on average it overestimates."""
    rng = np.random.default_rng(3)
    item = [0.0, 0.0, 1.0, 0.5]
    counts = [2, 1, 1]
    sim = np.mean([len(set(rng.choice(item, 8, replace=True))) == 1 for _ in range(40000)])
    assert expected_zero_signal(counts, 8) == pytest.approx(sim, abs=0.003)
    p, k, g = 0.3, 3, 8
    exact = p**g + (1 - p) ** g
    draws = rng.binomial(k, p, size=20000)
    est = np.array([expected_zero_signal([c, k - c], g) for c in draws])
    assert est.mean() > exact + 0.1


def test_float_scores_are_not_binary_and_use_levels():
    rep = assess(records({"a": [0.2, 0.2, 0.5, 0.5, 0.5, 0.9], "b": [0.7] * 6}), group_size=3)
    assert not rep.binary and rep.distinct_levels == 4
    assert rep.zero_variance["other"] == pytest.approx(0.5)
    a = (math.comb(2, 3) + math.comb(3, 3) + math.comb(1, 3)) / math.comb(6, 3)
    assert rep.expected_zero_signal["share"] == pytest.approx((a + 1) / 2)
    assert rep.expected_zero_signal["floor"] == 0 and rep.expected_zero_signal["ceiling"] == 0


def test_errors_are_counted_generation_left_out_grading_scored_zero():
    df = records({"a": [1, 0, 1, 1], "b": [0, 1, 0, 1]}, errors={("a", 0): "generate", ("b", 1): "grade"})
    assert scored_mask(df).tolist() == [False, True, True, True, True, True, True, True]
    rep = assess(df, group_size=2)
    assert rep.errors["generate"] == 1 and rep.errors["grade"] == 1
    assert rep.errors["grade_types"] == {"python_grader_runtime_error": 1}
    assert rep.n_records == 8
    assert rep.items[0].k == 3 and rep.items[1].mean == pytest.approx(0.25)  # the grade error counts as 0
    status = {c.name: c.status for c in rep.checks}
    assert status["grade_errors"] == "ok" and status["generate_errors"] == "ok"


def test_score_range_from_the_grader_and_widening():
    judge = parse_config({"type": "score_model", "name": "j", "model": "m", "range": [0, 10],
                          "input": [{"role": "user", "content": "{{sample.output_text}}"}]})
    assert judge.score_range()[:2] == (0.0, 10.0)
    rep = assess(records({"a": [0, 10, 5], "b": [10, 10, 10]}), judge, group_size=2)
    assert rep.position == pytest.approx((5 + 10) / 2 / 10)
    assert rep.zero_variance["ceiling"] == 0.5
    wide = assess(records({"a": [0, 2, 1]}))
    assert wide.score_max == 2 and "widened" in wide.range_source


def test_pick_label():
    both = pd.concat([records(KNOWN), records(KNOWN, label="tuned")], ignore_index=True)
    assert pick_label(both, None) == "base"
    assert pick_label(both, "tuned") == "tuned"
    with pytest.raises(InputError, match="--label: no records for label"):
        pick_label(both, "nope")
    two = pd.concat([records(KNOWN, label="x"), records(KNOWN, label="y")], ignore_index=True)
    with pytest.raises(InputError, match="several labels"):
        pick_label(two, None)
    rep = assess(both, label="tuned", group_size=2)
    assert rep.label == "tuned" and rep.n_records == 16


def test_grading_error_with_a_null_score_counts_as_zero():
    """Issue 10: a record with a grading error and no score was dropped; it is reward 0, as compare scores it."""
    df = records({"a": [1, 1, 1], "b": [1, 0, 1]})
    df.at[1, "error"] = {"stage": "grade", "type": "python_grader_runtime_error", "message": "boom"}
    df.at[1, "score"] = None
    df.at[3, "error"] = {"type": "model_grader_refusal_error", "message": "judge refused"}  # no stage: a grade
    df.at[3, "score"] = 0.7  # whatever score it carries, an errored grade is 0
    assert scored_mask(df).all()
    assert effective_scores(df).tolist() == [1, 0, 1, 0, 0, 1]
    rep = assess(df, group_size=2)
    assert rep.items[0].k == 3 and rep.items[0].mean == pytest.approx(2 / 3)
    assert rep.items[1].mean == pytest.approx(1 / 3)
    assert rep.errors["grade"] == 2 and rep.errors["excluded"] == 0
    # a row with no score and no error was never graded: left out
    df.at[0, "error"], df.at[0, "score"] = None, None
    assert scored_mask(df).tolist() == [False] + [True] * 5


def test_error_policy_refusals_zero_generation_errors_excluded_or_zero():
    errs = {("a", 0): "generate", ("a", 1): "refusal", ("b", 2): "grade"}
    df = records({"a": [1, 1, 1, 1], "b": [1, 1, 1, 1]}, errors=errs)
    assert effective_scores(df).tolist()[:2] == [pytest.approx(math.nan, nan_ok=True), 0.0]
    rep = assess(df, group_size=2)
    assert rep.errors["policy"] == "exclude" and rep.errors["excluded"] == 1
    assert rep.errors["generate"] == 2 and rep.errors["refusal"] == 1 and rep.errors["grade"] == 1
    assert rep.errors["generate_types"] == {"timeout": 1, "refusal": 1}
    assert rep.items[0].k == 3 and rep.items[0].mean == pytest.approx(2 / 3)  # the refusal is a 0, the timeout out
    assert rep.items[1].k == 4 and rep.items[1].mean == pytest.approx(3 / 4)
    zero = assess(df, group_size=2, errors="zero")
    assert zero.errors["policy"] == "zero" and zero.errors["excluded"] == 0
    assert zero.items[0].k == 4 and zero.items[0].mean == pytest.approx(2 / 4)
    message = next(c.message for c in zero.checks if c.name == "generate_errors")
    assert "reward 0" in message and "1 of them model refusals" in message
    adv = grpo_advantages(df)
    assert math.isnan(adv.iloc[0]) and adv.iloc[1] < 0
    assert not math.isnan(grpo_advantages(df, errors="zero").iloc[0])
    with pytest.raises(InputError, match="--errors: must be exclude or zero"):
        assess(df, errors="drop")


def test_empirical_bayes_when_k_below_g_and_no_plug_in_note():
    pattern = {f"i{i}": [1, 0, 1] if i % 3 else [0, 0, 0] for i in range(30)}
    rep = assess(records(pattern), group_size=8)
    ez = rep.expected_zero_signal
    assert ez["method"] == "empirical Bayes (beta-binomial)" and ez["prior"]["family"] == "beta-binomial"
    assert not any("plug-in" in n for n in rep.notes)
    plug = sum(expected_zero_signal([sum(v), 3 - sum(v)], 8) for v in pattern.values()) / 30
    assert ez["share"] < plug
    assert ez["floor"] + ez["ceiling"] == pytest.approx(ez["share"])
    text = json.dumps(rep.to_dict(), allow_nan=False)
    assert '"n_empirical_bayes": 30' in text


def test_a_single_model_run_is_not_called_the_base():
    checks = {c.name: c.message for c in assess(records(KNOWN, label="gpt-oss"), group_size=4).checks}
    assert checks["base_mean"].startswith("gpt-oss's mean sits at")
    assert "the base" not in " ".join(checks.values())
    base = {c.name: c.message for c in assess(records(KNOWN), group_size=4).checks}
    assert base["base_mean"].startswith("the base mean sits at")


