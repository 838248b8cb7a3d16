"""readiness/determinism.py: stored outputs graded again, through assess: changed scores, a noisy grader, no grader, a
judge that stopped."""

from __future__ import annotations

import numpy as np
import pytest

from rfteval.errors import InputError
from rfteval.readiness.assessment import assess
from tests.support.readiness_records import KNOWN, SENTIMENT, CountingEngine, label_items, records


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


def test_a_judge_that_stopped_is_not_read_as_a_nondeterministic_grader():
    """Issue 27: readiness's re-grades through a judge that stopped (refused alike, unreachable) would all be
    errors, read as flips ("not ready"); it says why in one line instead."""
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


class Failing:
    """A grader whose grades are errors: `fails(item)` says on which items."""

    def __init__(self, fails, score=1.0):
        self.fails, self.score = fails, score

    def grade_batch(self, pairs):
        from rfteval.graders.base import GradeResult

        return [GradeResult.failed("python_grader_runtime_error", "boom") if self.fails(i)
                else GradeResult(self.score) for _, i in pairs]


def test_regrades_that_are_grading_errors_are_left_out_and_counted():
    """A re-grade's error scored 0 against the stored score: read as a flip, or, against a stored error, as the
    same grade. Neither compares scores: such re-grades are counted apart, and when every one is an error the
    check is inconclusive, never "ok" (nor "not ready")."""
    items = label_items(["yes", "no"] * 5)
    answers = {iid: ["yes", "yes"] for iid in items}
    scores = {iid: [float(items[iid]["reference_answer"] == "yes")] * 2 for iid in items}
    df = records(scores, answers=answers)
    every = assess(df, SENTIMENT, items, regrade_n=len(df), group_size=2, engine=Failing(lambda i: True))
    det = every.determinism
    assert (det.n_regraded, det.n_compared, det.n_changed) == (20, 0, 0)
    assert det.errors == {"python_grader_runtime_error": 20} and np.isnan(det.flip_rate)
    check = next(c for c in every.checks if c.name == "determinism")
    assert check.status == "inconclusive" and "python_grader_runtime_error ×20" in check.message
    assert every.verdict in ("inconclusive", "not_ready") and every.verdict != "ready"
    # the "no" items' grades fail: the rest are compared (the grader now gives 1.0 where 1.0 was stored)
    fails_no = Failing(lambda i: i["reference_answer"] == "no")
    some = assess(df, SENTIMENT, items, regrade_n=len(df), group_size=2, engine=fails_no).determinism
    assert (some.n_compared, some.n_changed, some.errors) == (10, 0, {"python_grader_runtime_error": 10})
    assert some.flip_rate == 0.0
