"""rfteval.compare.gate: each check, evidence and strict modes, power warnings, and the error-rate check."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from rfteval.compare.gate import Gate, evaluate_gate
from rfteval.compare.paths import compare_paths
from rfteval.compare.result import CompareOptions
from rfteval.data.records import write_jsonl
from rfteval.stats import paired as stats
from tests.support.record_sides import rec, side_records, write_pair


@pytest.fixture
def pair(tmp_path: Path) -> tuple[Path, Path]:
    return write_pair(tmp_path)


def test_gate_fails_on_a_broken_run_whatever_the_scores(tmp_path):
    b, t = tmp_path / "b.jsonl", tmp_path / "t.jsonl"
    write_jsonl(side_records("b", {f"q{i}": [0.5, 0.5] for i in range(20)}), b)
    gen = {"stage": "generate", "type": "connection", "message": "cannot reach"}
    write_jsonl([rec("t", f"q{i}", e, 0.5) if i >= 2 else rec("t", f"q{i}", e, None, error=gen)
                 for i in range(20) for e in range(2)], t)
    r = compare_paths(b, t, options=CompareOptions(gate=Gate(max_drop=0.05)))
    assert not r.gate["passed"]
    assert r.gate["failures"] == ["error-rate: t: 10.0% of records failed to generate (> 0.05): a broken run is "
                                  "not a verdict"]
    ok = compare_paths(b, t, options=CompareOptions(gate=Gate(max_drop=0.05, max_error_rate=0.2)))
    assert ok.gate["passed"]
    assert compare_paths(b, t).gate["passed"]  # no gate asked for: nothing fails


@pytest.mark.parametrize("gate, passed, name", [
    (Gate(fail_under=0.5), True, "fail-under"),
    (Gate(fail_under=0.9), True, "fail-under"),  # 0.75 over 4 items: its interval reaches 1, no evidence below 0.9
    (Gate(fail_under=0.9, mode="strict"), False, "fail-under"),  # nor proof of being above it
    (Gate(max_drop=0.0), True, "max-drop"),
    (Gate(max_drop=0.0, mode="strict"), False, "max-drop"),
    (Gate(require_improvement=True), False, "require-improvement"),  # 4 items: too few to tell
    (Gate(max_item_drop=0.5), True, "max-item-drop"),
    (Gate(max_item_drop=0.2), True, "max-item-drop"),  # b drops 1/3, but 3+3 epochs cannot show it
])
def test_each_gate_flag(pair, gate, passed, name):
    r = compare_paths(*pair, options=CompareOptions(gate=gate))
    # candidate mean 0.75, delta +0.25 with a wide interval over 4 items, item b drops by 1/3
    assert r.gate["passed"] is passed
    assert [c["name"] for c in r.gate["checks"]] == [name, "error-rate"]
    assert len(r.gate["failures"]) == (0 if passed else 1)
    if not passed:
        assert r.gate["failures"][0].startswith(name + ": ")


def test_gate_thresholds_and_messages(pair):
    r = compare_paths(*pair)
    assert r.gate == {"passed": True, "failures": [], "checks": [], "warnings": [], "mode": "evidence",
                      "flagged_items": []}
    g = evaluate_gate(r, Gate(fail_under=1.0, max_drop=0.0, max_item_drop=1 / 3))  # equal passes
    assert g["passed"], g
    g = evaluate_gate(r, Gate(fail_under=0.76, max_item_drop=0.3, max_drop=0.3, mode="strict"))
    assert g["failures"][0].startswith("fail-under: candidate mean 0.7500, interval lower bound ")
    assert g["failures"][0].endswith(" < 0.76")
    assert g["failures"][1].startswith("max-drop: delta interval lower bound ")
    assert any("cannot show any single item's drop among 4 items" in w for w in g["warnings"])
    r.delta.update(mean=-0.4, ci95=[-0.6, -0.2], p_value=0.001, p_adjusted=0.001, n=40, p_method="sign-flip")
    assert evaluate_gate(r, Gate(max_drop=0.3))["failures"] == [
        "max-drop: delta -0.4000 [-0.6000, -0.2000] lies below 0 and below -0.3"]
    assert evaluate_gate(r, Gate(max_drop=0.5))["passed"]  # a real drop, but not past the threshold


def test_require_improvement_passes_on_a_clear_gain(tmp_path):
    b, t = tmp_path / "b.jsonl", tmp_path / "t.jsonl"
    write_jsonl(side_records("b", {f"q{i}": [0.2 + i / 100, 0.3] for i in range(20)}), b)
    write_jsonl(side_records("t", {f"q{i}": [0.6 + i / 100, 0.7 - i / 200] for i in range(20)}), t)
    r = compare_paths(b, t, options=CompareOptions(gate=Gate(require_improvement=True)))
    assert r.gate["passed"] and r.delta["ci95"][0] > 0
    assert "an improvement" in r.gate["checks"][0]["detail"]


def test_too_few_items_to_tell_even_when_the_interval_excludes_zero(tmp_path):
    b, t = tmp_path / "b.jsonl", tmp_path / "t.jsonl"
    write_jsonl(side_records("b", {f"q{i}": [0.2, 0.2] for i in range(5)}), b)
    write_jsonl(side_records("t", {f"q{i}": [0.8 + i / 100, 0.8] for i in range(5)}), t)
    r = compare_paths(b, t, options=CompareOptions(gate=Gate(require_improvement=True)))
    assert r.delta["ci95"][0] > 0 and r.delta["p_value"] == pytest.approx(0.0625)
    assert stats.direction(r.delta) == "too few items to tell"
    assert not r.gate["passed"] and "too few items to tell" in r.gate["failures"][0]
    assert not any("too few for a reliable interval" in n for n in r.notes)
    write_jsonl(side_records("t", {f"q{i}": [0.8 + i / 100, 0.8] for i in range(4)}), t)
    four = compare_paths(b, t)
    assert any("only 4 paired item(s): too few for a reliable interval" in n for n in four.notes)


def test_max_item_drop_flags_only_significant_drops_after_holm(tmp_path):
    b, t = tmp_path / "b.jsonl", tmp_path / "t.jsonl"
    base = {f"q{i}": [1.0] * 10 for i in range(10)}
    tuned = dict(base, q0=[0.0] * 10, q1=[1.0] * 6 + [0.0] * 4)  # q0 collapses; q1 drops 0.4 on 10 epochs
    write_jsonl(side_records("b", base), b)
    write_jsonl(side_records("t", tuned), t)
    r = compare_paths(b, t, options=CompareOptions(gate=Gate(max_item_drop=0.3)))
    assert r.gate["flagged_items"] == ["q0"] and not r.gate["passed"]
    check = r.gate["checks"][0]
    assert check["p_adjusted"]["q0"] < 0.05 <= check["p_adjusted"]["q1"]
    assert r.gate["warnings"] == []


def test_gate_warns_when_the_threshold_is_below_what_the_eval_can_see(tmp_path):
    rng = np.random.default_rng(3)
    b, t = tmp_path / "b.jsonl", tmp_path / "t.jsonl"
    p = rng.beta(2, 2, 20)
    write_jsonl(side_records("b", {f"q{i}": (rng.random(3) < p[i]).astype(float).tolist() for i in range(20)}), b)
    write_jsonl(side_records("t", {f"q{i}": (rng.random(3) < p[i]).astype(float).tolist() for i in range(20)}), t)
    r = compare_paths(b, t, options=CompareOptions(gate=Gate(max_drop=0.02)))
    check = r.gate["checks"][0]
    assert check["mde"] > 0.1
    assert r.gate["warnings"] == [f"max-drop: this eval cannot reliably see a drop of 0.02; it sees drops >= "
                                  f"{check['mde']:.2f} (80% power): add items or epochs"]


def _agent_pair(tmp_path: Path, limited: int) -> tuple[Path, Path]:
    """Ten items x 2 epochs; `limited` of the candidate's 20 rollouts end at the turn limit, none of the baseline's."""
    from tests.support.agent_records import Rollout, agent_side, write_agent

    base = {f"q{i}": [(1.0, Rollout(2)), (1.0, Rollout(2))] for i in range(10)}
    ends = ["max_turns"] * limited + ["no_tool_calls"] * (20 - limited)
    tuned = {f"q{i}": [(1.0, Rollout(3, ends[2 * i])), (1.0, Rollout(3, ends[2 * i + 1]))] for i in range(10)}
    return (write_agent(agent_side("base", base), tmp_path / "b.jsonl"),
            write_agent(agent_side("tuned", tuned), tmp_path / "t.jsonl"))


@pytest.mark.parametrize("limited, passed", [(1, True), (2, True), (3, False)])
def test_max_stop_share_fails_past_the_share(tmp_path, limited, passed):
    """2 of 20 rollouts at the limit is a share of 0.10: equal passes, 3 of 20 fails."""
    r = compare_paths(*_agent_pair(tmp_path, limited),
                      options=CompareOptions(gate=Gate(max_stop_share=(("max_turns", 0.10),))))
    assert r.gate["passed"] is passed
    assert [c["name"] for c in r.gate["checks"]] == ["max-stop-share max_turns", "error-rate"]
    share = f"{limited / 20:.1%}"
    detail = f"tuned: {share} of 20 rollouts ended with max_turns ({'<=' if passed else '>'} 0.1)"
    assert r.gate["checks"][0]["detail"] == detail
    assert r.gate["failures"] == ([] if passed else [f"max-stop-share max_turns: {detail}"])


def test_max_stop_share_of_each_reason_given(tmp_path):
    r = compare_paths(*_agent_pair(tmp_path, 3), options=CompareOptions(
        gate=Gate(max_stop_share=(("max_turns", 0.5), ("no_tool_calls", 0.5), ("context", 0.0)))))
    assert [(c["name"], c["passed"]) for c in r.gate["checks"]] == [
        ("max-stop-share max_turns", True), ("max-stop-share no_tool_calls", False),
        ("max-stop-share context", True), ("error-rate", True)]


def test_max_stop_share_fails_without_agent_records(pair):
    """A gate asked about stop reasons of records that have none cannot pass: it says why."""
    r = compare_paths(*pair, options=CompareOptions(gate=Gate(max_stop_share=(("max_turns", 0.1),))))
    assert r.gate["failures"] == ["max-stop-share max_turns: no stop reasons to check: the two sides are not both "
                                  "agent runs' records (turns, stop_reason)"]


@pytest.mark.parametrize("values, message", [
    (["max_turn=0.1"], "unknown stop reason 'max_turn' (one of: no_tool_calls, max_turns"),
    (["max_turns=1.5"], "max_turns: the share must lie in [0, 1], got 1.5"),
    (["max_turns=-0.1"], "the share must lie in [0, 1], got -0.1"),
    (["max_turns"], "must be REASON=SHARE (e.g. max_turns=0.10), got 'max_turns'"),
    (["max_turns=ten"], "must be REASON=SHARE"),
    (["max_turns=0.1", "max_turns=0.2"], "max_turns given twice"),
])
def test_max_stop_share_bad_values(values, message):
    from rfteval.compare.gate_types import parse_stop_shares
    from rfteval.errors import InputError

    with pytest.raises(InputError, match=re.escape(message)) as found:
        parse_stop_shares(values)
    assert found.value.field == "--max-stop-share"
    with pytest.raises(InputError, match="unknown stop reason"):
        Gate(max_stop_share=(("bogus", 0.1),))
    assert parse_stop_shares(["max_turns=0.10", " length = 0"]) == (("max_turns", 0.1), ("length", 0.0))
