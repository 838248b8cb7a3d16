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
