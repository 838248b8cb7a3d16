"""readiness/labels.py: label-like references and answers, their skew, the constant answer graded, and a stored record
made a sample again."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rfteval.readiness.assessment import assess
from rfteval.readiness.labels import is_label_like
from tests.support.readiness_records import SENTIMENT, label_items, records


def test_is_label_like():
    assert is_label_like(["a", "b", "a", "b"])
    assert not is_label_like(["a", "b", "c", "d"])  # every value distinct: free text
    assert not is_label_like(["x" * 80, "x" * 80])
    assert not is_label_like(["a"])


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


def test_the_constant_answer_graded_as_errors_is_not_known_not_unpaid():
    """Every grade of "always answer the majority label" an error: its 0s read as "a constant answer does not pay"
    (ok). They are left out: with no grade left the check is inconclusive; with some, the rest decide."""
    from rfteval.graders.base import GradeResult

    class Failing:
        def __init__(self, fails):
            self.fails = fails

        def grade_batch(self, pairs):
            return [GradeResult.failed("model_grader_truncated_error", "cut") if self.fails(i) else GradeResult(1.0)
                    for _, i in pairs]

    items = label_items(["yes"] * 8 + ["no"] * 2)
    answers = {iid: ["yes", "no", "no"] for iid in items}
    scores = {iid: [float(a == items[iid]["reference_answer"]) for a in answers[iid]] for iid in items}
    rep = assess(records(scores, answers=answers), SENTIMENT, items, group_size=3, engine=Failing(lambda i: True))
    assert rep.labels.constant_answer_score is None
    assert rep.labels.constant_answer_errors == {"model_grader_truncated_error": 10}
    check = next(c for c in rep.checks if c.name == "constant_answer")
    assert check.status == "inconclusive" and "model_grader_truncated_error ×10" in check.message
    assert rep.verdict != "ready"
    some = assess(records(scores, answers=answers), SENTIMENT, items, group_size=3,
                  engine=Failing(lambda i: i["reference_answer"] == "no"))
    assert some.labels.constant_answer_score == 1.0  # the 8 graded, not 8 of 10
    assert some.labels.constant_answer_errors == {"model_grader_truncated_error": 2}
    assert next(c for c in some.checks if c.name == "constant_answer").status == "risky"
