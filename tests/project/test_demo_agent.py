"""`make demo`'s agent example: the inventory dataset (datasets/inventory: items, tools.py, grader), the scripted
local agent that plays its model turns (scripts/local_agent.py, a stand-in, not a model, labelled so), and the run,
compare and viewer bundle scripts/demo.sh makes of them, with the tools executed in the python sandbox."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from typer.testing import CliRunner

from rfteval.cli.app import app
from rfteval.data.dataset import load_dataset
from rfteval.sandbox import host
from tests.support import REPO
from tests.support.optional import sandbox_refused

INV = REPO / "datasets" / "inventory"
DEMO = REPO / "scripts" / "demo.sh"
# Each order's answer worked out by hand from tools.py's catalogue (on hand - reserved, capped by the units
# ordered; or units x unit price), not by the generator's code: inv-05 is 0 (6205: 12 on hand, 12 reserved) + 30
# (V-belt: 35 free) + 0 (O-ring kits: all reserved).
REFERENCES = {"inv-01": "180", "inv-02": "44", "inv-03": "810", "inv-04": "20", "inv-05": "30", "inv-06": "85.00",
              "inv-07": "73.20", "inv-08": "163.00", "inv-09": "292.00", "inv-10": "113.80", "inv-11": "554",
              "inv-12": "84.90"}


def module(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    loaded = importlib.util.module_from_spec(spec)
    sys.modules[name] = loaded  # its dataclasses look their module up there
    spec.loader.exec_module(loaded)
    return loaded


@pytest.fixture(scope="module")
def agent() -> ModuleType:
    return module(REPO / "scripts" / "local_agent.py", "local_agent")


@pytest.fixture(scope="module")
def tools() -> ModuleType:
    return module(INV / "tools.py", "inventory_tools")


def needs_sandbox() -> None:
    if (refused := host().refused) is not None:
        sandbox_refused(refused, host().bwrap is not None)


def cli(*args: str) -> Any:
    return CliRunner().invoke(app, list(args), env={"NO_COLOR": "1", "COLUMNS": "200"})


# ---- the dataset -----------------------------------------------------------------------------------------------


def test_the_items_and_grader_are_what_their_generator_writes() -> None:
    done = subprocess.run([sys.executable, str(INV / "make_inventory.py"), "--check"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr


@pytest.mark.slow
def test_the_dataset_validates_and_every_item_declares_the_three_tools() -> None:
    res = cli("validate", "dataset", str(INV / "items.jsonl"))
    assert res.exit_code == 0, res.output
    assert "12 items, no problems" in res.output and "warning" not in res.output
    items = [it.data for it in load_dataset(INV / "items.jsonl")]
    assert 8 <= len(items) <= 12
    assert {it["id"]: it["reference_answer"] for it in items} == REFERENCES
    for it in items:
        assert sorted(t["function"]["name"] for t in it["tools"]) == ["calculate", "find_product", "get_stock"]
        assert it["messages"][-1]["role"] == "user" and it["task"] in ("ship", "quote")


def test_the_grader_takes_the_last_answer_line_within_half_a_cent() -> None:
    grader = json.loads((INV / "grader.json").read_text(encoding="utf-8"))
    namespace: dict[str, Any] = {}
    exec(grader["source"], namespace)  # noqa: S102 - the repository's own grader, as the sandbox would run it
    grade = namespace["grade"]
    item = {"reference_answer": "113.80"}
    cases = {"Lines...\nANSWER: 113.80": 1.0, "ANSWER: 100\nthen\nANSWER: $113.8": 1.0, "113.8": 1.0,
             "ANSWER: 113.81": 0.0, "ANSWER: 1,113.80": 0.0, "about 113.80": 0.0, "": 0.0}
    assert {text: grade({"output_text": text}, item) for text in cases} == cases
    assert grade({"output_text": None}, item) == 0.0


def test_the_tools_answer_from_the_catalogue_and_fail_as_the_model_sees_them(tools: ModuleType) -> None:
    assert tools.find_product("M8 bolt") == [{"sku": "BLT-M8-SS", "name": "M8 hex bolt, stainless"}]
    assert [h["sku"] for h in tools.find_product("ball bearing")] == ["BRG-6204", "BRG-6205"]
    assert tools.find_product("left-handed screwdriver") == []
    assert tools.get_stock("BRG-6205") == {"sku": "BRG-6205", "name": "6205 ball bearing, sealed", "on_hand": 12,
                                           "reserved": 12, "unit_price": 5.4}
    with pytest.raises(LookupError, match="no product with SKU 'M8 hex bolt'"):
        tools.get_stock("M8 hex bolt")  # a name where a SKU is wanted: the base agent's mistake
    assert tools.calculate("min(200, 300 - 120) + 3 * 4.8") == 194.4
    assert tools.calculate("12 * 6.1") == 73.2 and tools.calculate("(2 + 2) / 2") == 2
    for bad in ("__import__('os')", "2 ** 10", "open('x')", "x + 1", "max()"):
        with pytest.raises(ValueError, match="not arithmetic"):
            tools.calculate(bad)


@pytest.mark.slow
def test_its_tools_pass_validate_tools_in_the_sandbox() -> None:
    needs_sandbox()
    res = cli("validate", "tools", "--dataset", str(INV / "items.jsonl"), "--tools", str(INV / "tools.py"),
              "--max-turns", "8")
    assert res.exit_code == 0, res.output
    assert "3 tools fit the items' schemas (calculate, find_product, get_stock); 12 of 12 items declare tools; " \
        "the module loads in the sandbox" in res.output
    assert "at most 288 requests per model" in res.output  # 8 turns x 12 items x 3 epochs


# ---- the scripted local agent ----------------------------------------------------------------------------------


def order_of(agent: ModuleType, item_id: str) -> Any:
    item = next(it.data for it in load_dataset(INV / "items.jsonl") if it.id == item_id)
    return agent.read_order(item["messages"])


def test_the_scripted_agent_reads_the_order_from_the_prompt(agent: ModuleType) -> None:
    order = order_of(agent, "inv-05")
    assert (order.id, order.task) == ("INV-05", "ship")
    assert order.lines == [(6, "6205 ball bearing"), (30, "V-belt A42"), (10, "O-ring kit")]
    assert order_of(agent, "inv-12").task == "quote"


def test_each_course_of_the_scripted_agent_plays_as_its_docstring_says(agent: ModuleType) -> None:
    order, seen = order_of(agent, "inv-04"), agent.Seen()
    guess = agent.play(agent.BASE, order, seen, "no_tools")
    assert guess.tool_calls is None and guess.text.endswith("ANSWER: 24")  # 20 + 4, all taken as in stock
    wrong = agent.play(agent.BASE, order, seen, "name_as_sku").tool_calls
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in wrong] == [
        ("get_stock", {"sku": "jaw coupling"})]
    one = agent.play(agent.BASE, order, seen, "right").tool_calls
    both = agent.play(agent.TUNED, order, seen, "right").tool_calls
    assert [json.loads(c["function"]["arguments"]) for c in one] == [{"query": "jaw coupling"}]  # a call a turn
    assert [json.loads(c["function"]["arguments"]) for c in both] == [{"query": "jaw coupling"},
                                                                      {"query": "roller chain 08B"}]
    found = agent.Seen(sku={"jaw coupling": "CPL-JAW-19"}, turns=3)
    looping = agent.play(agent.BASE, order, found, "loop").tool_calls  # the same lookup, whatever it has seen
    assert [json.loads(c["function"]["arguments"]) for c in looping] == [{"query": "jaw coupling"}]
    assert looping[0]["id"] == "call_4_0"


def test_the_scripted_agent_answers_from_the_tool_results_in_its_history(agent: ModuleType) -> None:
    order = order_of(agent, "inv-01")
    history: list[dict[str, Any]] = [
        {"role": "assistant", "content": None, "tool_calls": [agent.call(1, 0, "find_product", query="M8 hex bolt, stainless")]},
        {"role": "tool", "tool_call_id": "call_1_0", "content": '[{"sku": "BLT-M8-SS", "name": "M8 hex bolt"}]'},
        {"role": "assistant", "content": None, "tool_calls": [agent.call(2, 0, "get_stock", sku="BLT-M8-SS")]},
        {"role": "tool", "tool_call_id": "call_2_0",  # numbers unlike the catalogue's: the answer follows the tool
         "content": '{"sku": "BLT-M8-SS", "on_hand": 90, "reserved": 5, "unit_price": 1.0}'}]
    seen = agent.read_history(history)
    assert seen.turns == 2 and seen.sku == {"M8 hex bolt, stainless": "BLT-M8-SS"}
    assert agent.play(agent.BASE, order, seen, "right").text.endswith("ANSWER: 85")  # min(200, 90 - 5)
    assert agent.play(agent.BASE, order, seen, "slip").text.endswith("ANSWER: 90")  # the reserved units forgotten
    failed = agent.read_history([history[0], {"role": "tool", "tool_call_id": "call_1_0",
                                              "content": "error: ValueError: query is empty"}])
    assert failed.failed and failed.sku == {}


@pytest.mark.slow
def test_the_scripted_agent_says_it_is_not_a_model(agent: ModuleType) -> None:
    assert "IT IS NOT A MODEL" in (agent.__doc__ or "")
    with agent.agent_server() as server:
        from openai import OpenAI

        client = OpenAI(base_url=server.base_url, api_key="unused")
        assert sorted(m.id for m in client.models.list()) == ["scripted-base", "scripted-tuned"]
        text = client.chat.completions.create(model="scripted-base", messages=[{"role": "user", "content": "hi"}])
    assert "scripted stand-in, not a model" in (text.choices[0].message.content or "")


def test_the_demo_runs_the_agent_with_tools_and_labels_the_stand_in() -> None:
    demo = DEMO.read_text(encoding="utf-8")
    section = demo[demo.index("scripts/local_agent.py --port 0"):demo.index("== Look at the samples")]
    assert "a SCRIPTED STAND-IN, NOT A" in section and "MODEL." in section
    for step in ('--tools "$INV/tools.py"', '"$BIN/rfteval" compare "$AGENT_OUT/base.jsonl" "$AGENT_OUT/tuned.jsonl"',
                 '"$BIN/rfteval" view "$AGENT_OUT" --bundle "$AGENT_OUT/view"', "validate tools"):
        assert step in section, step
    before = demo[:demo.index("scripts/local_agent.py --port 0")].splitlines()
    assert not [line for line in before if "--tools" in line and not line.lstrip().startswith("#")]  # no other run


# ---- the demo's agent run, end to end --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def demo_run(agent: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The demo's agent run as scripts/demo.sh makes it, against the scripted agent, the tools in the sandbox."""
    needs_sandbox()
    out = tmp_path_factory.mktemp("demo-agent") / "run"
    with agent.agent_server() as server:
        res = cli("run", "--dataset", str(INV / "items.jsonl"), "--grader", str(INV / "grader.json"),
                  "--model", "base=scripted-base", "--model", "tuned=scripted-tuned", "--base-url", server.base_url,
                  "--tools", str(INV / "tools.py"), "--max-turns", "8", "--epochs", "3", "--seed", "7",
                  "--out", str(out), "--no-readiness", "-q")
    assert res.exit_code == 0, res.output
    yield out


def records(run: Path, label: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run / f"{label}.jsonl").read_text(encoding="utf-8").splitlines()]


@pytest.mark.slow
def test_the_demo_agent_run_executes_the_tools_and_the_tuned_agent_uses_them_better(demo_run: Path) -> None:
    base, tuned = records(demo_run, "base"), records(demo_run, "tuned")
    assert len(base) == len(tuned) == 36
    mean = {label: sum(r["score"] for r in rows) / len(rows) for label, rows in (("base", base), ("tuned", tuned))}
    assert mean["tuned"] > mean["base"] + 0.2
    stops = Counter(r["stop_reason"] for r in base)
    assert stops["max_turns"] >= 1 and all(r["turns"] == 8 for r in base if r["stop_reason"] == "max_turns")
    assert any(r["tool_calls"] == 0 and r["turns"] == 1 for r in base)  # answered without a call
    assert sum((r["tool_errors"] or {}).get("LookupError", 0) for r in base) >= 1  # a name where a SKU is wanted
    assert {r["stop_reason"] for r in tuned} == {"no_tool_calls"}
    # the tools ran: each tool message in a transcript is what tools.py returns for its call, computed here again
    tools = module(INV / "tools.py", "inventory_tools_again")
    checked = 0
    for record in base + tuned:
        messages = json.loads(record["transcript"])
        calls = {c["id"]: c["function"] for m in messages for c in m.get("tool_calls") or []}
        for message in (m for m in messages if m["role"] == "tool"):
            fn = calls[message["tool_call_id"]]
            args = json.loads(fn["arguments"])
            try:
                expected = getattr(tools, fn["name"])(**args)
            except LookupError as exc:
                assert message["content"] == f"error: LookupError: {exc}"
            else:
                assert (message["content"] if isinstance(expected, str) else json.loads(message["content"])) \
                    == expected
            checked += 1
    assert checked > 100
    lines = (demo_run / "store" / "tools.jsonl").read_text(encoding="utf-8").splitlines()
    # every tool turn, run once: a rollout's turns but its last (an answer, or calls --max-turns leaves unrun)
    assert len(lines) == sum(r["turns"] - 1 for r in base + tuned)


@pytest.mark.slow
def test_the_demo_agent_run_compares_with_the_agent_table_and_bundles_its_trajectories(demo_run: Path) -> None:
    res = cli("compare", str(demo_run / "base.jsonl"), str(demo_run / "tuned.jsonl"), "--top", "3")
    assert res.exit_code == 0, res.output
    score, agent_table = res.output.index("overall"), res.output.index("agent: base -> tuned")
    assert score < agent_table  # the agent table under the score table
    for row in ("turns", "tool calls", "tool-error share", "how rollouts ended", "max_turns",
                "tool errors, base: LookupError"):
        assert row in res.output[agent_table:], row
    bundle = demo_run / "view"
    res = cli("view", str(demo_run), "--bundle", str(bundle))
    assert res.exit_code == 0, res.output
    data = (bundle / "data.js").read_text(encoding="utf-8")
    assert "find_product" in data and "BLT-M8-SS" in data and "max_turns" in data
