"""rfteval.report.markdown: the CI job summary / PR comment."""

from __future__ import annotations

import pytest

from rfteval.compare.gate import Gate
from rfteval.compare.paths import compare_paths
from rfteval.compare.result import CompareOptions
from rfteval.report.markdown import cell, code, render_markdown, write_markdown
from tests.support.record_sides import write_side


@pytest.fixture
def result(tmp_path):
    b = write_side(tmp_path / "b.jsonl", "base", {"a|1": [0, 0, 1], "b": [1, 1, 1], "c": [0, 0, 0], "d_x": [1, 0, 1]})
    t = write_side(tmp_path / "t.jsonl", "tuned", {"a|1": [1, 1, 1], "b": [1, 1, 0], "c": [0, 1, 0], "d_x": [1, 1, 1]})
    return compare_paths(b, t, options=CompareOptions(gate=Gate(fail_under=0.9, max_drop=0.0, max_item_drop=0.2,
                                                                mode="strict")))


def test_summary_table_rows_and_numbers(result):
    md = render_markdown(result)
    assert md.startswith("## rfteval compare: base → tuned")
    assert "| | items | base | tuned | delta | 95% CI | p adj. | W/T/L |" in md
    assert "| overall | 4 | 0.500 | 0.750 | +0.250 |" in md
    h = result.slices["hardest"]
    assert f"| hardest | {h['items']} | {h['baseline']['mean']:.3f} | {h['candidate']['mean']:.3f} |" in md
    lo, hi = result.delta["ci95"]
    assert f"[{lo:+.3f}, {hi:+.3f}]" in md
    assert "3/0/1" in md


def test_gate_failures_verbatim(result):
    md = render_markdown(result)
    assert "**Gate: FAILED**" in md
    for line in result.gate["failures"]:
        assert f"- ❌ `{line}`" in md
    assert len(result.gate["failures"]) == 2
    assert result.gate["warnings"] and all(f"- ⚠️ `{w}`" in md for w in result.gate["warnings"])


def test_gate_passed_line(tmp_path):
    b = write_side(tmp_path / "b.jsonl", "base", {"a": [0.5], "b": [0.5]})
    t = write_side(tmp_path / "t.jsonl", "tuned", {"a": [0.6], "b": [0.7]})
    md = render_markdown(compare_paths(b, t, options=CompareOptions(gate=Gate(max_drop=0.01))))
    assert "**Gate: passed** (max-drop, error-rate)" in md and "FAILED" not in md
    md = render_markdown(compare_paths(b, t))
    assert "Gate" not in md  # no gate flags, no gate line


def test_item_ids_escaped_in_tables(result):
    md = render_markdown(result, top=10)
    assert "| a\\|1 |" in md and "| d\\_x |" in md
    assert cell("x|y*z") == "x\\|y\\*z"
    assert code("a ` b") == "`` a ` b ``" and code("plain") == "`plain`"


def test_items_table_top_n(result):
    md = render_markdown(result, top=2)
    assert "Per item, lowest delta first (2 of 4)" in md
    rows = [ln for ln in md.split("<details>")[1].splitlines() if ln.startswith("| ") and ln.endswith("/0 |")]
    assert len(rows) == 2 and rows[0].startswith("| b |")  # b dropped most
    assert "<details>" not in render_markdown(result, top=0)


def test_write_is_atomic(result, tmp_path):
    out = tmp_path / "c.md"
    write_markdown(result, out)
    assert out.read_text(encoding="utf-8") == render_markdown(result)
    assert not list(tmp_path.glob("*.tmp"))
