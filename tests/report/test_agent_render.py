"""rfteval.report.agent_render: an agent comparison in the terminal, Markdown, HTML and JUnit, under the score's
table; a row the test shows is marked in one neutral colour whichever way it went, any other row never."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from rfteval.compare.gate import Gate
from rfteval.compare.paths import compare_paths
from rfteval.compare.result import CompareOptions, CompareResult
from rfteval.report.agent_render import SHOWN, agent_html, agent_markdown, agent_properties, agent_tables
from rfteval.report.html import render_html
from rfteval.report.junit import GATE_SUITE, ITEMS_SUITE, render_junit
from rfteval.report.markdown import cell, render_markdown
from rfteval.report.terminal import render_compare
from tests.support.agent_records import Rollout, agent_side, write_agent
from tests.support.record_sides import write_pair

HOSTILE = "<b>base</b>|*x*"


@pytest.fixture
def result(tmp_path: Path) -> CompareResult:
    """Twelve items: the tuned agent takes 2 turns where the base takes 5 (a shown change), its latency is the same
    noise on both sides (no change), and one of its rollouts ends at the turn limit."""
    base = {f"q{i}": [(float(i % 2), Rollout(5, tool_calls=4)), (1.0, Rollout(5, tool_calls=4))] for i in range(12)}
    tuned = {f"q{i}": [(1.0, Rollout(2, "max_turns" if i == 0 else "no_tool_calls", 1)), (1.0, Rollout(2, tool_calls=1))]
             for i in range(12)}
    b_recs, t_recs = agent_side(HOSTILE, base), agent_side("tuned", tuned)
    for k, (r, _) in enumerate(b_recs + t_recs):
        r.latency_s = 1.0 + (k * 7919 % 13) / 10  # the same values on both sides, in another order
    b = write_agent(b_recs, tmp_path / "b.jsonl")
    t = write_agent(t_recs, tmp_path / "t.jsonl")
    return compare_paths(b, t, options=CompareOptions(gate=Gate(max_stop_share=(("max_turns", 0.01),))))


def test_the_rows_carry_the_tests_word(result: CompareResult) -> None:
    agent = result.agent
    assert agent is not None
    assert agent["rows"]["turns"]["verdict"] == "lower"
    assert agent["rows"]["latency_s"]["verdict"] == "no clear difference"


def test_terminal_marks_shown_rows_in_one_neutral_colour(result: CompareResult) -> None:
    from rich.table import Table

    parts = agent_tables(result)
    effort = parts[0]
    assert isinstance(effort, Table)
    names = [c.plain for c in effort.columns[0]._cells]
    deltas = effort.columns[4]._cells  # the delta column: coloured on a shown row
    assert deltas[names.index("turns")].style == SHOWN and deltas[names.index("latency (s)")].style == ""
    assert SHOWN not in ("green", "red")
    rendered = render_compare(result, top=0)
    assert "tuned" in str(rendered[0].title) and "agent:" not in str(rendered[0].title)  # the score's table first
    assert isinstance(rendered[1], Table) and "agent:" in str(rendered[1].title)


def test_markdown_bolds_shown_rows_only(result: CompareResult) -> None:
    lines = agent_markdown(result, cell)
    turns = next(line for line in lines if line.startswith("| turns |"))
    latency = next(line for line in lines if line.startswith("| latency (s) |"))
    assert "**lower**" in turns and "**" not in latency
    assert any(line.startswith("| max\\_turns | 0.0% (0) | 4.2% (1) |") for line in lines)
    page = render_markdown(result)
    assert page.index("| overall |") < page.index("### agent:") < page.index("- baseline ")
    assert "<b>" not in page  # the hostile label is escaped


def test_html_tables_escaped_and_marked(result: CompareResult, tmp_path: Path) -> None:
    fragment = agent_html(result)
    for table in ("agent-effort", "agent-stops", "agent-score"):
        assert f'<table id="{table}">' in fragment
    assert "<b>base</b>" not in fragment and "&lt;b&gt;base&lt;/b&gt;" in fragment
    turns = fragment[fragment.index("<td>turns</td>"):].split("</tr>")[0]
    latency = fragment[fragment.index("<td>latency (s)</td>"):].split("</tr>")[0]
    assert 'class="shown"' in turns and 'class="shown"' not in latency
    page = render_html(result, top=5)
    assert page.index('id="summary"') < page.index('id="agent-effort"') < page.index('id="facts"')
    assert ".shown{" in page and ".shown{" not in render_html(compare_paths(*write_pair(tmp_path)))


def test_junit_properties_and_the_gate_case(result: CompareResult) -> None:
    root = ET.fromstring(render_junit(result))
    items = next(s for s in root.iter("testsuite") if s.get("name") == ITEMS_SUITE)
    props = {p.get("name"): p.get("value") for p in items.iter("property")}
    assert props["agent.turns.verdict"] == "lower"
    assert float(props["agent.turns.delta"]) == pytest.approx(-3.0)
    assert float(props["agent.stop.max_turns.candidate"]) == pytest.approx(1 / 24)
    assert props["agent.rollouts.candidate"] == "24"
    gate = next(s for s in root.iter("testsuite") if s.get("name") == GATE_SUITE)
    case = next(c for c in gate.iter("testcase") if c.get("name") == "max-stop-share max_turns")
    assert case.find("failure") is not None
    assert set(agent_properties(result)) == {k for k in props if k.startswith("agent.")}


def test_a_plain_comparison_renders_as_before(tmp_path: Path) -> None:
    plain = compare_paths(*write_pair(tmp_path))
    assert agent_tables(plain) == [] and agent_markdown(plain, cell) == [] and agent_html(plain) == ""
    assert agent_properties(plain) == {}
    assert "agent" not in render_markdown(plain) and "agent-effort" not in render_html(plain)
