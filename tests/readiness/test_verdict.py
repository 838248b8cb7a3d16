"""readiness/verdict.py: the checks and the verdict they give, through assess: floor, ceiling, balanced items,
thresholds, too few items."""

from __future__ import annotations

from rfteval.readiness.assessment import assess
from rfteval.readiness.report import Thresholds
from tests.support.readiness_records import records


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


def test_a_verdict_resting_on_grading_errors_only_is_inconclusive_never_ready():
    """Every sample a grading error: its 0s read as "the mean is the grader's minimum, not ready" (the task's
    fault). The signals rest on errors only: inconclusive, with the count and the kind, never READY."""
    from rfteval.report.readiness_render import summary_lines

    pattern = {f"i{i}": [0, 0, 0] for i in range(6)}
    errors = {(iid, e): "grade" for iid in pattern for e in range(3)}
    rep = assess(records(pattern, errors=errors), group_size=3)
    status = {c.name: c.status for c in rep.checks}
    assert rep.verdict == "inconclusive" and status["grade_errors"] == "inconclusive"
    assert not {"base_mean", "zero_signal", "floor_items"} & set(status)  # no verdict read from errors' zeros
    (reason,) = rep.reasons
    assert "every scored sample is a grading error (18: python_grader_runtime_error ×18)" in reason.message
    assert rep.zero_variance["errors"] == 6 and rep.zero_variance["n_items"] == 0
    assert "INCONCLUSIVE" in "\n".join(summary_lines(rep))


def test_items_whose_every_sample_errored_are_left_out_of_the_zero_signal_and_counted():
    """Two items only ever failed to grade: they are not "all at the minimum" (the task too hard), they are the
    grader's failure; the other items decide the shares, and the two are counted."""
    pattern = {f"m{i}": [0, 1, 1, 0] for i in range(4)} | {"e0": [0] * 4, "e1": [0] * 4}
    errors = {(iid, e): "grade" for iid in ("e0", "e1") for e in range(4)}
    rep = assess(records(pattern, errors=errors), group_size=4)
    assert rep.zero_variance["errors"] == 2 and rep.zero_variance["n_items"] == 4
    assert rep.zero_variance["floor"] == 0.0 and rep.expected_zero_signal["share"] == 0.0
    assert [it.kind for it in rep.items if it.item_id.startswith("e")] == ["errors", "errors"]
    assert any("2 item(s) left out of the zero-signal" in n for n in rep.notes)
    assert rep.mean == sum(sum(v) / 4 for v in pattern.values()) / 6  # the mean keeps the one error policy: 0
    assert {c.name: c.status for c in rep.checks}["grade_errors"] == "risky"  # 8 of 24 > 0.2


def test_probes_whose_grades_are_all_errors_never_read_as_held():
    """The probe check said "every probe held" (ok) when the probes' grades were errors: now inconclusive, and the
    verdict of an otherwise ready run is not READY."""
    from rfteval.graders.base import GradeResult
    from rfteval.graders.loader import parse_config
    from rfteval.readiness.probes import run_probes

    class Raises:
        def grade_batch(self, pairs):
            return [GradeResult.failed("python_grader_runtime_error", "boom") for _ in pairs]

    grader = parse_config({"type": "string_check", "name": "eq", "input": "{{ sample.output_text }}",
                           "reference": "{{ item.reference_answer }}", "operation": "eq"})
    items = {f"i{i}": {"messages": [{"role": "user", "content": "q"}], "reference_answer": str(i)} for i in range(6)}
    probes = run_probes(grader, items, grader=Raises(), only=["empty", "injection"])
    rep = assess(records({f"i{i}": [0, 1] * 4 for i in range(6)}), group_size=8, probes=probes)
    check = next(c for c in rep.checks if c.name == "probes_inconclusive")
    assert check.status == "inconclusive" and "empty: 6 grading errors (python_grader_runtime_error ×6)" in check.message
    assert "probes" not in {c.name for c in rep.checks}  # no "every probe held"
    assert rep.verdict == "inconclusive" and check in rep.reasons
