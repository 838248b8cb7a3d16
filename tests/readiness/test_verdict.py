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
