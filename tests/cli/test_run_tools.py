"""`rfteval run --tools`, end to end against FakeOpenAI: the agent flags and [tools] keys, the header, the tables,
summary.json, and what an agent run refuses. The python tools themselves (rfteval/tools/python.py, the sandbox) are
tested where they live; here `rfteval.tools.python.open_python_tools` is stood in for by an in-process tool box
(tests/support/toolboxes.py), reached through the run's real call site."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import types
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from rfteval.cli.app import app
from rfteval.tools.base import ToolLimits
from tests.support.cli_run_files import write_agent_files
from tests.support.fake_openai import FakeOpenAI, Reply, Request
from tests.support.toolboxes import (
    FunctionTools,
    adding_agent,
    calculator,
    scripted_agent,
    tool_call,
    tool_messages,
)

OPENED: list[tuple[Path, ToolLimits, FunctionTools]] = []


@pytest.fixture
def python_tools(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Path, ToolLimits, FunctionTools]]:
    """`rfteval.tools.python` as the run finds it, opening the calculator under the limits it is given."""

    def open_python_tools(path: Path, limits: ToolLimits, policy: object) -> FunctionTools:
        box = calculator()
        box.limits = limits
        OPENED.append((path, limits, box))
        return box

    OPENED.clear()
    module = types.ModuleType("rfteval.tools.python")
    module.open_python_tools = open_python_tools  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "rfteval.tools.python", module)
    return OPENED


def files(tmp: Path, n_items: int = 2) -> dict[str, Path]:
    return write_agent_files(tmp, n_items, tools_py="def add(a, b):\n    return a + b\n")


def invoke(*args: str) -> Any:
    return CliRunner().invoke(app, ["run", *args, "--retry-base-delay", "0.01", "--no-readiness"],
                              env={"NO_COLOR": "1", "COLUMNS": "200"})


def run_args(f: dict[str, Path], server: FakeOpenAI, *more: str) -> list[str]:
    return ["--dataset", str(f["dataset"]), "--grader", str(f["grader"]), "--model", "base=fake-base",
            "--model", "tuned=fake-tuned", "--epochs", "2", "--base-url", server.base_url, "--out", str(f["out"]),
            *more]


@pytest.mark.slow
def test_an_agent_run_end_to_end_with_its_limits_in_the_header_the_table_and_summary_json(
        tmp_path: Path, python_tools: list[tuple[Path, ToolLimits, FunctionTools]]) -> None:
    f = files(tmp_path)
    with FakeOpenAI(scripted_agent(adding_agent)) as server:
        res = invoke(*run_args(f, server, "--tools", str(f["tools"]), "--max-turns", "4", "--max-tool-calls", "6",
                               "--tool-timeout", "7", "--tool-memory", "256", "--tool-output-limit", "900",
                               "--rollout-timeout", "120"))
        sent = len(server.requests)
    assert res.exit_code == 0, res.output
    assert sent == 2 * 2 * 2 * 2  # 2 models x 2 items x 2 epochs, two turns each
    ((path, limits, box),) = python_tools
    assert path == f["tools"] and limits == ToolLimits(timeout_s=7.0, memory_mb=256, output_chars=900)
    assert len(box.turns_run) == 8 and box.closed
    limits = ("limits: max turns 4, max tool calls 6, rollout timeout 120 s, tool timeout 7 s, tool memory 256 MB, "
              "tool output limit 900 characters")
    # the header and the line under the table say the same
    assert " ".join(res.output.split()).count(" ".join(f"agent run: tools {f['tools']}; {limits}".split())) == 2
    assert "base: 4 rollouts, 2.00 turns and 1.00 tool calls each; tool errors: none; stopped: no_tool_calls 4" \
        in res.output  # under the table
    s = json.loads((f["out"] / "summary.json").read_text())
    assert s["tools"] == {"python": str(f["tools"]), "identity": box.identity, "max_turns": 4, "max_tool_calls": 6,
                          "tool_timeout": 7.0, "tool_memory": 256, "tool_output_limit": 900, "rollout_timeout": 120.0}
    assert s["models"]["tuned"]["agent"] == {"rollouts": 4, "turns": 8, "tool_calls": 4, "tool_errors": {},
                                             "stop_reasons": {"no_tool_calls": 4}}
    assert s["models"]["base"]["mean"] == 1.0
    resolved = (f["out"] / "spec.resolved.toml").read_text()
    assert "[tools]\npython = " in resolved and "max_turns = 4\n" in resolved


@pytest.mark.slow
def test_the_tools_table_of_a_spec_file_is_read_relative_to_it(
        tmp_path: Path, python_tools: list[tuple[Path, ToolLimits, FunctionTools]]) -> None:
    f = files(tmp_path)
    (tmp_path / "eval.toml").write_text('dataset = "items.jsonl"\ngrader = "grader.json"\nepochs = 1\n'
                                        '[models.base]\nmodel = "fake-base"\n'
                                        '[tools]\npython = "tools.py"\nmax_turns = 2\n')
    with FakeOpenAI(scripted_agent(lambda r, t: Reply(tool_calls=[tool_call("add", {"a": t, "b": 0}, f"c{t}")]))) \
            as server:
        res = invoke(str(tmp_path / "eval.toml"), "--base-url", server.base_url, "--out", str(f["out"]), "-q")
        assert res.exit_code == 0, res.output
        assert len(server.requests) == 2 * 2  # two items, two turns: --max-turns from the spec
    assert python_tools[0][0] == f["tools"]
    s = json.loads((f["out"] / "summary.json").read_text())
    assert s["models"]["base"]["agent"]["stop_reasons"] == {"max_turns": 2}


def test_tools_refuse_the_batch_api_in_one_line(tmp_path: Path, fake_openai: FakeOpenAI,
                                               python_tools: list[tuple[Path, ToolLimits, FunctionTools]]) -> None:
    f = files(tmp_path)
    res = invoke(*run_args(f, fake_openai, "--tools", str(f["tools"]), "--batch"))
    assert res.exit_code == 2
    assert "--batch: cannot be combined with --tools yet" in res.output and "Traceback" not in res.output
    assert not f["out"].exists() and python_tools == [] and fake_openai.requests == []  # before anything


def test_a_rollout_limit_without_tools_is_one_line(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    f = files(tmp_path)
    res = invoke(*run_args(f, fake_openai, "--max-turns", "3"))
    assert res.exit_code == 2 and "--tools: the rollout limits need tools" in res.output
    assert not f["out"].exists()


def test_a_tools_file_that_is_not_there_is_one_line(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    f = files(tmp_path)
    res = invoke(*run_args(f, fake_openai, "--tools", str(tmp_path / "missing.py")))
    assert res.exit_code == 2 and "missing.py: --tools: no such file" in res.output


# ---- a rollout cut by a kill or Ctrl-C goes on where it was cut ------------------------------------------------------

AGENT_PROC = Path(__file__).resolve().parents[1] / "support" / "agent_proc.py"


def ticking(request: Request, turn: int) -> Reply:
    """Nine turns calling `tick`, then the answer: what the ticks returned, in order."""
    if turn < 10:
        return Reply(tool_calls=[tool_call("tick", {}, f"t{turn}")])
    return Reply(text=" ".join(m["content"] for m in tool_messages(request)))


def start_agent(tmp: Path, server: FakeOpenAI, hang_at: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, str(AGENT_PROC), server.base_url, str(tmp), str(hang_at)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=tmp)


def wait_for(path: Path, proc: subprocess.Popen[bytes], timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"the agent run never reached {path.name}: {proc.communicate()[0][-2000:]!r}")
        time.sleep(0.02)


@pytest.mark.slow
@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGINT])
def test_a_rollout_cut_at_turn_7_goes_on_at_turn_7_sending_no_turn_and_running_no_tool_twice(
        tmp_path: Path, how: signal.Signals) -> None:
    f = files(tmp_path, n_items=1)
    (tmp_path / "items.jsonl").write_text(json.dumps({
        "id": "q0", "messages": [{"role": "user", "content": "tick ten times"}], "reference_answer": "",
        "tools": [{"type": "function", "function": {"name": "tick", "parameters": {"type": "object"}}}]}) + "\n")
    with FakeOpenAI(scripted_agent(ticking)) as server:
        proc = start_agent(tmp_path, server, hang_at=7)
        wait_for(tmp_path / "hanging", proc)  # model turn 7 answered and stored, its tool turn under way
        proc.send_signal(how)
        out = proc.communicate(timeout=60)[0].decode()
        assert proc.returncode == (-signal.SIGKILL if how == signal.SIGKILL else 130), out
        assert len(server.requests) == 7
        (tmp_path / "hanging").unlink()
        resumed = start_agent(tmp_path, server, hang_at=0)
        out = resumed.communicate(timeout=120)[0].decode()
        assert resumed.returncode == 0, out
        bodies = [json.dumps(r.body, sort_keys=True) for r in server.requests]
    assert len(bodies) == 10 and len(set(bodies)) == 10  # turns 1-7, then 8-10: no turn sent twice
    # the ticks: turns 1-6 from the first run, read back; turn 7's tick ran again (it never finished), then 8 and 9
    assert (tmp_path / "calls.txt").read_text() == "10"  # 9 tool turns + the one cut: none of the finished re-ran
    (rec,) = [json.loads(line) for line in (f["out"] / "base.jsonl").read_text().splitlines()]
    assert rec["output_text"] == "1 2 3 4 5 6 8 9 10"
    tool_turns = (f["out"] / "store" / "tools.jsonl").read_text().splitlines()
    assert [json.loads(line)["turn"] for line in tool_turns] == list(range(1, 10))  # each stored once


# ---- servers ---------------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_second_turn_the_server_always_refuses_stops_the_run_in_one_line(
        tmp_path: Path, python_tools: list[tuple[Path, ToolLimits, FunctionTools]]) -> None:
    f = files(tmp_path, n_items=6)
    with FakeOpenAI(scripted_agent(adding_agent)) as server:
        server.refused_roles = {"tool"}  # a server whose chat schema has no tool message
        res = invoke(*run_args(f, server, "--tools", str(f["tools"]), "-q"))
    assert res.exit_code == 2, res.output
    (line,) = [ln for ln in res.output.splitlines() if "refused" in ln]
    assert line.startswith("rfteval: model ") and "refused 4 turn-2 requests (the history after a tool call) " \
        "alike: HTTP 500: 5 validation errors: messages[2].role: Input should be 'system', 'user', 'assistant' or " \
        "'function' (input: 'tool'); a re-run after fixing it resumes" in line
    assert "stored responses are kept in" in line and "Traceback" not in res.output
