"""`make demo`'s support agent: RULER over trajectories. The support questions as an agent (datasets/support:
agent_items.jsonl, tools.py), the scripted local agent's courses for them (scripts/local_agent.py, a stand-in, not
a model), and `rfteval run --tools --group-models` judged by group_judge over whole trajectories with the scripted
local judge (scripts/local_judge.py, a stand-in, not a model), as scripts/demo.sh runs it."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from rfteval.data.dataset import load_dataset
from tests.project.test_demo_agent import cli, module, needs_sandbox, records
from tests.support import REPO

SUP = REPO / "datasets" / "support"
DEMO = REPO / "scripts" / "demo.sh"


@pytest.fixture(scope="module")
def tools() -> ModuleType:
    return module(SUP / "tools.py", "support_tools")


def test_the_agent_items_are_what_their_generator_writes() -> None:
    done = subprocess.run([sys.executable, str(SUP / "make_support.py"), "--check"], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr


def test_the_tools_hold_every_article_the_single_answer_items_inline_and_the_agent_items_none(tools) -> None:
    inlined = {}
    for it in load_dataset(SUP / "items.jsonl"):
        for aid, text in re.findall(r'<article id="([^"]+)">\n(.*?)\n</article>', it.messages[-1]["content"], re.S):
            inlined[aid] = text
    assert inlined == tools.ARTICLES
    agents = [it.data for it in load_dataset(SUP / "agent_items.jsonl")]
    assert [a["id"] for a in agents] == [it.id for it in load_dataset(SUP / "items.jsonl")]
    for a in agents:
        assert "<article" not in json.dumps(a["messages"])
        assert [t["function"]["name"] for t in a["tools"]] == ["search_articles", "get_article"]
        assert set(a["articles"]) <= set(tools.ARTICLES)


def test_the_tools_search_and_read(tools) -> None:
    hits = tools.search_articles("My router has a blinking red light and the internet is down")
    assert hits[0] == {"id": "KB-104", "title": "Router lights", "score": hits[0]["score"]}
    assert tools.get_article("KB-104")["text"].startswith("a blinking red light")
    with pytest.raises(LookupError):
        tools.get_article("KB-105")
    with pytest.raises(ValueError):
        tools.search_articles("the a")


def test_the_demo_runs_the_support_agent_with_group_models_and_labels_both_stand_ins() -> None:
    demo = DEMO.read_text(encoding="utf-8")
    section = demo[demo.index("SUP=datasets/support"):demo.index("INV=datasets/inventory")]
    assert "SCRIPTED STAND-IN, NOT A MODEL" in section and "scripted" in section and "NOT A MODEL)" in section
    for step in ('--tools "$SUP/tools.py"', "--group-models", '--dataset "$SUP/agent_items.jsonl"',
                 '--judge-base-url "$JUDGE_URL"', '"$BIN/rfteval" compare "$SUP_OUT/base.jsonl"'):
        assert step in section, step
    assert demo.index("scripts/local_agent.py --port 0") < demo.index("SUP=datasets/support")


@pytest.mark.slow
def test_the_support_agent_run_is_judged_over_trajectories_and_tuned_ranks_above_base(tmp_path: Path) -> None:
    needs_sandbox()
    agent = module(REPO / "scripts" / "local_agent.py", "local_agent")
    judge = module(REPO / "scripts" / "local_judge.py", "local_judge")
    out = tmp_path / "run"
    with agent.agent_server() as server:
        judge_server = judge.serve(0)
        try:
            res = cli("run", "--dataset", str(SUP / "agent_items.jsonl"), "--grader", str(SUP / "grader.json"),
                      "--model", "base=scripted-base", "--model", "tuned=scripted-tuned", "--base-url",
                      server.base_url, "--tools", str(SUP / "tools.py"), "--max-turns", "6", "--epochs", "3",
                      "--seed", "7", "--group-models", "--judge-base-url", judge_server.base_url, "--judge-model",
                      "local-scripted-judge", "--out", str(out), "--no-readiness", "-q")
        finally:
            judge_server.stop()
    assert res.exit_code == 0, res.output
    summary: dict[str, Any] = json.loads((out / "summary.json").read_text())
    assert summary["judge"]["local-scripted-judge"]["calls"] == 12  # one per item: both models' 6 rollouts
    assert summary["errors"] == 0
    base, tuned = records(out, "base"), records(out, "tuned")
    assert len(base) == len(tuned) == 36
    mean = {k: sum(r["score"] for r in rows) / len(rows) for k, rows in (("base", base), ("tuned", tuned))}
    assert mean["tuned"] > mean["base"] + 0.2
    for r in base + tuned:
        d = r["grade_details"]
        assert d["group_size"] == 6 and "scripted stand-in, not a model: trajectory with" in d["explanation"]
    assert any(r["stop_reason"] == "max_turns" and r["score"] == 0 for r in base)  # no final answer: ranked last
    assert any("0/1 citations shown" in r["grade_details"]["explanation"] for r in base)  # cited what it never read
    assert all(r["tool_calls"] >= 2 for r in tuned)  # searched and read
