"""Issue 37 item 5: readiness, pass@k, series, Markdown, HTML, JUnit and Parquet work on agent runs unchanged.

Each runs end to end over an agent run's record files (JSONL and Parquet, the agent fields and a transcript on every
record) and over the same records written without them, and gives the same numbers; the agent comparison is only
added beside them.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rfteval.cli.app import app
from tests.support.agent_records import AGENT_FIELDS, Rollout, agent_record, write_agent, write_plain

runner = CliRunner()
pytestmark = pytest.mark.slow  # a dozen commands over two pairs of runs

GRADE_ERROR = {"stage": "grade", "type": "python_error", "message": "boom"}
FAILED = {"stage": "generate", "type": "timeout", "message": "gone"}
LABELS = ("base", "tuned", "tuned2")


def _records(label: str, skill: float) -> list:
    """16 items x 4 epochs: scores on a grid, sub-scores, a grader verdict, a grading error and a generation failure;
    rollouts of 1-6 turns ending every way."""
    out = []
    reasons = ("no_tool_calls", "no_tool_calls", "max_turns", "length")
    for i in range(16):
        for e in range(4):
            score = min(1.0, ((i * 7 + e * 3) % 5) / 4 + skill)
            ro = Rollout(1 + (i + e) % 6, reasons[(i * e) % 4], (i + e) % 6, {"ValueError": e % 2})
            error = GRADE_ERROR if (i, e) == (3, 1) else FAILED if (i, e) == (5, 2) else None
            r, ro = agent_record(label, f"q{i:02d}", e, None if error else score, ro, error=error)
            if not error:
                r.sub_scores = {"acc": score, "fmt": float(e % 2)}
                r.passed = score >= 0.75
            out.append((r, ro))
    return out


def _run(directory: Path, agent: bool, suffix: str) -> Path:
    directory.mkdir()
    write = write_agent if agent else write_plain
    records = {label: _records(label, skill) for label, skill in zip(LABELS, (0.0, 0.2, 0.1))}
    if suffix == "parquet":
        write([r for recs in records.values() for r in recs], directory / "results.parquet")
    else:
        for label, recs in records.items():
            write(recs, directory / f"{label}.jsonl")
    return directory


@pytest.fixture(params=["jsonl", "parquet"])
def runs(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Path, Path]:
    agent = _run(tmp_path / "agent", True, request.param)
    plain = _run(tmp_path / "plain", False, request.param)
    files = list(agent.iterdir())
    assert all(b'"transcript"' in f.read_bytes() or f.suffix == ".parquet" for f in files)
    return agent, plain


def invoke(*args: object) -> tuple[int, str]:
    res = runner.invoke(app, [str(a) for a in args])
    return res.exit_code, res.stdout


def _same(agent_dir: Path, plain_dir: Path, text: str) -> str:
    return text.replace(str(agent_dir), str(plain_dir))


def _json(run: Path, *args: object) -> dict:
    code, out = invoke("compare", run, *args, "--format", "json")
    assert code == 0, out
    return json.loads(out)


def test_compare_json_and_pass_at_k(runs: tuple[Path, Path]) -> None:
    agent, plain = runs
    for extra in ((), ("--metric", "pass@2"), ("--metric", "pass^3", "--pass-threshold", "0.5")):
        a = _json(agent, "-l", "base", "-l", "tuned", *extra)
        p = _json(plain, "-l", "base", "-l", "tuned", *extra)
        assert "agent" in a and "agent" not in p
        del a["agent"]
        assert json.loads(_same(agent, plain, json.dumps(a))) == p


def test_series(tmp_path: Path) -> None:
    """A series reads a run directory's DIR/<label>.jsonl (as `rfteval run` writes them beside results.parquet)."""
    agent, plain = _run(tmp_path / "agent", True, "jsonl"), _run(tmp_path / "plain", False, "jsonl")
    a, p = _json(agent), _json(plain)
    assert [c["label"] for c in a["candidates"]] == ["tuned", "tuned2"]
    assert json.loads(_same(agent, plain, json.dumps(a))) == p


def test_markdown_html_and_junit(runs: tuple[Path, Path], tmp_path: Path) -> None:
    agent, plain = runs
    outputs = {}
    for name, run in (("agent", agent), ("plain", plain)):
        out = tmp_path / f"reports-{name}"
        out.mkdir()
        code, _ = invoke("compare", run, "-l", "base", "-l", "tuned", "--max-drop", "0.1", "--markdown", out / "c.md",
                         "--html", out / "c.html", "--junit", out / "c.xml")
        assert code == 0
        outputs[name] = {f: _same(agent, plain, (out / f).read_text(encoding="utf-8")) for f in ("c.md", "c.html", "c.xml")}
    md_a, md_p = outputs["agent"]["c.md"], outputs["plain"]["c.md"]
    start, end = md_a.index("### agent:"), md_a.index("- baseline base:")
    assert "| turns |" in md_a[start:end]
    assert md_a[:start] + md_a[end:] == md_p
    html_a, html_p = outputs["agent"]["c.html"], outputs["plain"]["c.html"]
    start, end = html_a.index("<style>.shown"), html_a.index('<ul id="facts">')
    assert 'id="agent-effort"' in html_a[start:end]
    assert html_a[:start] + html_a[end:] == html_p
    xml_a, xml_p = (re.sub(r' timestamp="[^"]*"', "", outputs[k]["c.xml"]) for k in ("agent", "plain"))
    root_a, root_p = ET.fromstring(xml_a), ET.fromstring(xml_p)
    props = [p for p in root_a.iter("property") if p.get("name", "").startswith("agent.")]
    assert props
    for p in props:
        next(s for s in root_a.iter("properties")).remove(p)
    assert _tree(root_a) == _tree(root_p)


def _tree(node: ET.Element) -> tuple:
    return node.tag, sorted(node.attrib.items()), (node.text or "").strip(), [_tree(c) for c in node]


def test_readiness(runs: tuple[Path, Path]) -> None:
    agent, plain = runs
    code_a, out_a = invoke("readiness", agent, "--label", "base", "--format", "json")
    code_p, out_p = invoke("readiness", plain, "--label", "base", "--format", "json")
    assert code_a == code_p and out_a.strip()
    assert json.loads(_same(agent, plain, out_a)) == json.loads(out_p)


def test_the_agent_files_hold_what_the_contract_says(runs: tuple[Path, Path]) -> None:
    """The files above are an agent run's: every agent field on every record, in JSONL last and in this order."""
    agent, _ = runs
    for path in agent.iterdir():
        if path.suffix == ".jsonl":
            first = json.loads(path.read_text(encoding="utf-8").splitlines()[0])
            assert list(first)[-len(AGENT_FIELDS):] == list(AGENT_FIELDS)
        else:
            import pyarrow.parquet as pq

            assert set(AGENT_FIELDS) <= set(pq.read_schema(path).names)
