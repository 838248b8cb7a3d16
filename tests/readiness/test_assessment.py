"""Readiness signals on synthetic runs with known properties, checked against hand computation and simulation."""

from __future__ import annotations

import json
import math
from itertools import combinations

import numpy as np
import pandas as pd
import pytest

from rfteval.data.records import effective_scores, make_record, records_frame
from rfteval.data.rundir import pick_label
from rfteval.errors import InputError
from rfteval.graders.base import GradeResult
from rfteval.graders.grading import apply_grade
from rfteval.graders.loader import parse_config
from rfteval.readiness.advantages import grpo_advantages, scored_mask
from rfteval.readiness.assessment import assess, expected_zero_signal
from rfteval.readiness.labels import is_label_like
from rfteval.readiness.report import Thresholds


def records(pattern: dict[str, list[float]], label: str = "base", answers: dict[str, list[str]] | None = None,
            errors: dict[tuple[str, int], str] | None = None) -> pd.DataFrame:
    """Records through the real record contract: one per (item, epoch) with the given scores."""
    rows = []
    for iid, scores in pattern.items():
        for epoch, s in enumerate(scores):
            text = answers[iid][epoch] if answers else f"answer {iid} {epoch}"
            stage = (errors or {}).get((iid, epoch))
            err = ({"stage": "generate", "type": "timeout", "message": "x"} if stage == "generate"
                   else {"stage": "generate", "type": "refusal", "message": "no"} if stage == "refusal" else None)
            rec = make_record(run_id="r", model_label=label, model="m", item_id=iid, epoch=epoch, output_text=text,
                              error=err)
            if stage == "grade":
                rec = apply_grade(rec, GradeResult.failed("python_grader_runtime_error", "boom"))
            else:
                rec = apply_grade(rec, GradeResult(float(s)))
            rows.append(rec)
    return records_frame(rows)


KNOWN = {"floor": [0, 0, 0, 0], "ceiling": [1, 1, 1, 1], "half": [0, 1, 0, 1], "three": [1, 1, 0, 1]}


def test_known_shares_mean_and_levels():
    rep = assess(records(KNOWN), group_size=4)
    assert rep.n_items == 4 and rep.samples_min == rep.samples_max == 4
    assert rep.mean == pytest.approx((0 + 1 + 0.5 + 0.75) / 4)
    assert rep.position == pytest.approx(rep.mean)
    assert rep.zero_variance == {"n_items": 4, "share": 0.5, "floor": 0.25, "ceiling": 0.25, "other": 0.0}
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


def test_verdict_not_ready_at_floor_and_ceiling():
    low = assess(records({f"i{i}": [0, 0, 0] for i in range(5)}))
    assert low.verdict == "not_ready" and "base_mean" in [c.name for c in low.reasons]
    high = assess(records({f"i{i}": [1, 1, 1] for i in range(5)}))
    assert high.verdict == "not_ready"
    assert any("maximum" in c.message for c in high.reasons)


def test_verdict_ready_for_balanced_items():
    rep = assess(records({f"i{i}": [0, 1] * 4 for i in range(6)}), group_size=8)
    assert rep.expected_zero_signal["share"] == 0.0  # C(4, 8) = 0
    assert rep.verdict == "ready", [(c.name, c.status) for c in rep.checks]
    assert {c.name for c in rep.reasons} >= {"base_mean", "zero_signal"}


def test_verdict_mostly_unsolved_is_not_ready_with_reasons():
    pattern = {f"z{i}": [0] * 4 for i in range(7)} | {f"m{i}": [0, 1, 1, 0] for i in range(3)}
    rep = assess(records(pattern), group_size=4)
    status = {c.name: c.status for c in rep.checks}
    assert status["floor_items"] == "risky" and status["zero_signal"] == "not_ready"
    assert rep.verdict == "not_ready"
    # loosen the thresholds and the same run is only risky
    loose = assess(records(pattern), group_size=4, thresholds=Thresholds(zero_signal_not_ready=0.9))
    assert loose.verdict == "risky"


SENTIMENT = parse_config({"type": "string_check", "name": "eq", "input": "{{sample.output_text}}",
                          "reference": "{{item.reference_answer}}", "operation": "eq"})


def label_items(refs: list[str]) -> dict[str, dict]:
    return {f"s{i}": {"messages": [{"role": "user", "content": "Sentiment?"}], "reference_answer": r}
            for i, r in enumerate(refs)}


def test_label_skew_and_constant_answer_graded():
    refs = ["yes"] * 8 + ["no"] * 2
    items = label_items(refs)
    answers = {iid: ["yes", "yes", "no"] if i % 2 else ["no", "yes", "no"] for i, iid in enumerate(items)}
    scores = {iid: [float(a == items[iid]["reference_answer"]) for a in answers[iid]] for iid in items}
    rep = assess(records(scores, answers=answers), SENTIMENT, items, group_size=3)
    lab = rep.labels
    assert lab.reference_counts == {"yes": 8, "no": 2}
    assert lab.majority_label == "yes" and lab.majority_share == pytest.approx(0.8) and lab.chance == 0.5
    assert lab.constant_answer_method == "graded" and lab.constant_answer_score == pytest.approx(0.8)
    yes_means = [sum(scores[i]) / 3 for i in items if items[i]["reference_answer"] == "yes"]
    assert lab.per_label_mean["yes"] == pytest.approx(sum(yes_means) / len(yes_means))
    assert lab.answer_counts == {"yes": 15, "no": 15}
    assert rep.mean == pytest.approx(0.5)
    status = {c.name: c.status for c in rep.checks}
    assert status["label_skew"] == "risky" and status["constant_answer"] == "risky"


def test_answer_skew_flags_a_model_that_always_says_one_label():
    items = label_items(["yes", "no"] * 5)
    answers = {iid: ["yes", "yes", "yes", "yes"] if i else ["yes", "no", "yes", "no"] for i, iid in enumerate(items)}
    scores = {iid: [float(a == items[iid]["reference_answer"]) for a in answers[iid]] for iid in items}
    rep = assess(records(scores, answers=answers), SENTIMENT, items, group_size=4)
    assert rep.labels.majority_share == 0.5
    assert rep.labels.answer_majority_label == "yes" and rep.labels.answer_majority_share == pytest.approx(38 / 40)
    assert {c.name: c.status for c in rep.checks}["answer_skew"] == "risky"


def test_is_label_like():
    assert is_label_like(["a", "b", "a", "b"])
    assert not is_label_like(["a", "b", "c", "d"])  # every value distinct: free text
    assert not is_label_like(["x" * 80, "x" * 80])
    assert not is_label_like(["a"])


def test_grpo_advantages_sample_std_per_group():
    df = records({"a": [1, 0, 0, 1], "b": [1, 1, 1, 1], "c": [0.2, 0.5, 0.8, 0.5]})
    tuned = records({"a": [1, 1, 1, 0]}, label="tuned")
    both = pd.concat([df, tuned], ignore_index=True)
    adv = grpo_advantages(both)
    assert adv.index.equals(both.index)
    for _, rows in both.groupby(["model_label", "item_id"]):
        s = rows["score"].to_numpy(float)
        sd = np.std(s, ddof=1)
        want = np.zeros_like(s) if sd == 0 else (s - s.mean()) / sd
        np.testing.assert_allclose(adv.loc[rows.index].to_numpy(), want)
    assert adv.loc[both["item_id"] == "a"].tolist()[:4] == pytest.approx([math.sqrt(3) / 2 * x for x in (1, -1, -1, 1)])


def test_grpo_advantages_skip_generation_errors_and_single_samples():
    df = records({"a": [1, 0, 1], "solo": [1]}, errors={("a", 2): "generate"})
    adv = grpo_advantages(df)
    assert math.isnan(adv.iloc[2])
    assert adv.iloc[:2].tolist() == pytest.approx([1 / math.sqrt(0.5) * 0.5, -1 / math.sqrt(0.5) * 0.5])
    assert adv.iloc[3] == 0.0


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


class CountingEngine:
    """A grader that returns scores from a function, counting what it graded (a nondeterministic one too)."""

    def __init__(self, fn):
        self.fn = fn
        self.calls = 0

    def grade_batch(self, pairs):
        self.calls += len(pairs)
        return [GradeResult(self.fn(s, i)) for s, i in pairs]


def test_regrade_reports_changed_scores():
    items = label_items(["yes", "no"] * 5)
    answers = {iid: ["yes", "no"] for iid in items}
    scores = {iid: [float(a == items[iid]["reference_answer"]) for a in answers[iid]] for iid in items}
    df = records(scores, answers=answers)
    same = assess(df, SENTIMENT, items, regrade_n=12, group_size=2)
    assert same.determinism.n_regraded == 12 and same.determinism.n_changed == 0
    assert {c.name: c.status for c in same.checks}["determinism"] == "ok"
    df.loc[0, "score"] = 1.0 - df.loc[0, "score"]  # a stored score the grader no longer gives
    changed = assess(df, SENTIMENT, items, regrade_n=len(df), group_size=2)
    assert changed.determinism.n_changed == 1
    assert changed.determinism.changed[0]["item_id"] == df.loc[0, "item_id"]
    rng = np.random.default_rng(0)
    noisy = assess(df, SENTIMENT, items, regrade_n=10, group_size=2,
                   engine=CountingEngine(lambda s, i: float(rng.random() < 0.5)))
    assert noisy.determinism.flip_rate > 0.05 and noisy.verdict == "not_ready"


def test_regrade_without_a_grader_is_noted_not_invented():
    rep = assess(records(KNOWN), regrade_n=5)
    assert rep.determinism is None
    assert {c.name: c.status for c in rep.checks}["determinism"] == "skipped"


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


def test_to_dict_is_strict_json():
    rep = assess(records({"a": [0, 1], "solo": [1]}), group_size=2)
    text = json.dumps(rep.to_dict(), allow_nan=False)
    back = json.loads(text)
    assert back["verdict"] == rep.verdict and back["reasons"] == [c.name for c in rep.reasons]
    assert back["items"][1]["sd"] is None
    assert back["thresholds"]["zero_signal_not_ready"] == 0.6


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


def test_zero_signal_iff_advantages_are_zero():
    """Issue 10: std > 1e-12 gave ±0.97 advantages to an item the 9-decimal levels call zero-signal."""
    df = records({"tie": [0.5, 0.5 + 1e-11, 0.5, 0.5 - 1e-11], "apart": [0.5, 0.5 + 1e-8, 0.5, 0.5]})
    rep = assess(df, group_size=2)
    kinds = {it.item_id: it.kind for it in rep.items}
    assert kinds == {"tie": "other", "apart": "mixed"}
    adv = grpo_advantages(df)
    tie = adv[df["item_id"] == "tie"]
    apart = adv[df["item_id"] == "apart"]
    assert (tie == 0).all()
    assert (apart != 0).any() and apart.abs().max() == pytest.approx(1.5)
    # the rule holds for every item: zero signal exactly when every advantage is 0
    for it in rep.items:
        assert (it.kind != "mixed") == bool((adv[df["item_id"] == it.item_id] == 0).all())


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


def test_sample_from_record_decodes_json_text_and_a_frames_values() -> None:
    """A record row from Parquet holds output_json / output_tools as JSON text; from a frame, numbers may be numpy
    scalars (a column of them): each becomes the JSON value it is, and what is no JSON value is None."""
    from rfteval.readiness.labels import sample_from_record

    calls = [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]
    s = sample_from_record({"output_text": "7", "output_json": "[1, 2]", "output_tools": json.dumps(calls)})
    assert s["output_json"] == [1, 2] and s["output_tools"] == calls
    n = sample_from_record({"output_text": "7", "output_json": np.int64(7)})["output_json"]
    assert n == 7 and type(n) is int
    assert sample_from_record({"output_text": "{}", "output_json": float("nan")})["output_json"] == {}  # parsed
    assert sample_from_record({"output_text": "x", "output_json": object()})["output_json"] is None


def test_a_verdict_on_fewer_than_five_items_is_provisional_in_terminal_and_json():
    """Issue 27: READY on 2 items × 3 samples, without a word; compare warns below 5 items, and so does readiness
    now, with the same threshold and words, and the verdict says it is provisional."""
    from rfteval.report.readiness_render import summary_lines
    from rfteval.stats.paired import MIN_ITEMS_FOR_INTERVAL

    rep = assess(records({"a": [0, 1, 1], "b": [1, 0, 1]}), group_size=3)
    assert rep.verdict == "ready" and rep.provisional
    note = ("only 2 item(s): too few for a reliable verdict (5 or more are needed, as for compare's interval): this "
            "verdict is provisional")
    assert rep.notes[0] == note and rep.to_dict()["provisional"] is True
    text = "\n".join(summary_lines(rep))  # rich markup: the words are there as printed
    assert "READY[/] (provisional: only 2 items)" in text and note in text
    five = assess(records({f"i{i}": [0, 1, 1] for i in range(MIN_ITEMS_FOR_INTERVAL)}), group_size=3)
    assert not five.provisional and not any("provisional" in n for n in five.notes)


def test_a_judge_that_stopped_is_not_read_as_a_nondeterministic_grader():
    """Issue 27: readiness's re-grades through a judge that stopped (refused alike, unreachable) would all be
    errors, read as flips ("not ready"); it says why in one line instead."""
    from rfteval.errors import InputError
    from rfteval.providers.base import ProviderError

    class Stopped:  # what a Judge that stopped exposes (providers.judge.judge_stopped reads it)
        fatal_error = ProviderError("server", "the server refused 4 judge requests alike: HTTP 500: ...", 500)
        fatal_model = "judge-m"
        model_override = None

    items = label_items(["yes", "no"] * 5)
    answers = {iid: ["yes", "no"] for iid in items}
    scores = {iid: [float(a == items[iid]["reference_answer"]) for a in answers[iid]] for iid in items}
    with pytest.raises(InputError, match=r"the judge \(judge-m\) stopped: server: the server refused 4 judge"):
        assess(records(scores, answers=answers), SENTIMENT, items, regrade_n=4, group_size=2,
               engine=CountingEngine(lambda s, i: 0.0), judge=Stopped())  # type: ignore[arg-type]
