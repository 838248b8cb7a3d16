"""`rfteval run --mcp` / `[tools] mcp`, end to end: real MCP servers from PyPI, run as their users run them (each
from a venv of its own, `make mcp`), started over stdio by the official SDK's client inside the sandbox, the model
scripted on FakeOpenAI. The reference server's get_current_time called and its answer seen by turn 2; the stateful
sqlite server's database fresh in each rollout (a table one rollout creates is absent from another); a run killed
mid-rollout and resumed with no finished tool turn run again; the fault server (written with the SDK's MCPServer)
exiting mid-rollout, a generation error the same command resumes; a tool an item declares that no server has."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from rfteval.cli.app import app
from tests.support.cli_run_files import RFTEVAL
from tests.support.fake_openai import FakeOpenAI, Reply, Request
from tests.support.mcp_servers import fault_server, need_client, need_sandbox, real_server
from tests.support.toolboxes import scripted_agent, tool_call, tool_messages

pytestmark = pytest.mark.slow  # each test starts MCP servers in the sandbox and runs `rfteval run`

ENV = {"NO_COLOR": "1", "COLUMNS": "200"}


@pytest.fixture(autouse=True)
def _needs() -> None:
    need_client()
    need_sandbox()


def write_items(tmp: Path, n: int, reference: str, tools: list[Any] | None = None) -> dict[str, Path]:
    rows = [{"id": f"q{i}", "messages": [{"role": "user", "content": f"question {i}"}], "reference_answer": reference,
             **({"tools": tools} if tools is not None else {})} for i in range(n)]
    (tmp / "items.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp / "grader.json").write_text(json.dumps({"type": "string_check", "name": "g", "input": "{{ sample.output_text }}",
                                                 "reference": "{{ item.reference_answer }}", "operation": "like"}))
    return {"dataset": tmp / "items.jsonl", "grader": tmp / "grader.json", "out": tmp / "run"}


def run_args(f: dict[str, Path], fake: FakeOpenAI, *more: str, epochs: int = 1) -> list[str]:
    return ["run", "--dataset", str(f["dataset"]), "--grader", str(f["grader"]), "--model", "base=fake-base",
            "--epochs", str(epochs), "--base-url", fake.base_url, "--out", str(f["out"]), "--retry-base-delay", "0.01",
            "--no-readiness", *more]


def records(f: dict[str, Path]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (f["out"] / "base.jsonl").read_text().splitlines()]


def tool_turns(f: dict[str, Path]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (f["out"] / "store" / "tools.jsonl").read_text().splitlines()]


def test_the_reference_time_servers_tools_are_offered_called_and_their_answer_seen_in_turn_2(tmp_path: Path) -> None:
    server = real_server("time")

    def agent(request: Request, turn: int) -> Reply:
        if turn == 1:
            return Reply(tool_calls=[tool_call("get_current_time", {"timezone": "Europe/Paris"}, "call_now")])
        shown = json.loads(tool_messages(request)[-1]["content"])
        return Reply(text=f"It is {shown['datetime']} in {shown['timezone']}.")

    f = write_items(tmp_path, 1, "in Europe/Paris")  # the item declares no tools: the server's are offered
    with FakeOpenAI(scripted_agent(agent)) as fake:
        res = CliRunner().invoke(app, run_args(f, fake, "--mcp", f"{server} --local-timezone UTC"), env=ENV)
        assert res.exit_code == 0, res.output
        first, second = (r.body for r in fake.requests)
    assert sorted(t["function"]["name"] for t in first["tools"]) == ["convert_time", "get_current_time"]
    schema = next(t["function"]["parameters"] for t in first["tools"] if t["function"]["name"] == "get_current_time")
    assert schema["required"] == ["timezone"]
    (shown,) = [m for m in second["messages"] if m["role"] == "tool"]
    answer = json.loads(shown["content"])  # what the real server computed, inside the sandbox
    assert shown["tool_call_id"] == "call_now" and answer["timezone"] == "Europe/Paris"
    assert datetime.fromisoformat(answer["datetime"]).utcoffset().total_seconds() in (3600, 7200)  # type: ignore[union-attr]
    (rec,) = records(f)
    assert rec["score"] == 1.0 and rec["turns"] == 2 and rec["tool_calls"] == 1 and rec["tool_errors"] == {}
    summary = json.loads((f["out"] / "summary.json").read_text())["tools"]
    assert summary["mcp"] == [{"command": [str(server), "--local-timezone", "UTC"], "env": [], "per": "rollout",
                               "network": False}]
    assert f"tools MCP {server} --local-timezone UTC (per rollout, no network); limits:" in res.output


def sqlite_spec(tmp: Path, f: dict[str, Path], fake: FakeOpenAI, epochs: int, extra: str = "") -> Path:
    spec = tmp / "eval.toml"
    spec.write_text(f'dataset = "items.jsonl"\ngrader = "grader.json"\nepochs = {epochs}\nout = "run"\n'
                    f'[endpoint]\nbase_url = "{fake.base_url}"\n[models.base]\nmodel = "fake-base"\n'
                    f'[tools]\nmcp = [{{command = ["{real_server("sqlite")}", "--db-path", "/tmp/notes.db"]}}]\n'
                    + extra)
    return spec


def test_each_rollout_gets_a_fresh_sqlite_database_a_table_made_in_one_is_absent_from_another(tmp_path: Path) -> None:
    def agent(request: Request, turn: int) -> Reply:
        item = request.user_texts()[0].split()[-1]
        if turn == 1:  # each rollout makes a table of its own, then lists what the database holds
            return Reply(tool_calls=[tool_call("create_table", {"query": f"CREATE TABLE notes_{item} (body TEXT)"}, "c1"),
                                     tool_call("list_tables", {}, "c2")])
        return Reply(text=" | ".join(m["content"] for m in tool_messages(request)))

    f = write_items(tmp_path, 2, "Table created successfully")
    with FakeOpenAI(scripted_agent(agent)) as fake:
        res = CliRunner().invoke(app, ["run", str(sqlite_spec(tmp_path, f, fake, epochs=2)), "--retry-base-delay",
                                       "0.01", "--no-readiness"], env=ENV)
        assert res.exit_code == 0, res.output
    recs = records(f)
    assert len(recs) == 4 and all(r["score"] == 1.0 and r["tool_errors"] == {} for r in recs)
    for r in recs:  # two epochs of each item made the same table: neither saw the other's, nor the other item's
        assert r["output_text"] == f"Table created successfully | [{{'name': 'notes_{r['item_id'][1]}'}}]"
    assert "(per rollout, no network)" in res.output


def test_a_run_killed_mid_rollout_resumes_without_running_a_finished_tool_turn_again(tmp_path: Path) -> None:
    reached, gate, cut = threading.Event(), threading.Event(), [True]

    def agent(request: Request, turn: int) -> Reply:
        if turn == 1:
            return Reply(tool_calls=[tool_call("create_table", {"query": "CREATE TABLE notes (body TEXT)"}, "c1"),
                                     tool_call("write_query", {"query": "INSERT INTO notes VALUES ('kept')"}, "c2")])
        if turn == 2 and cut:
            cut.clear()
            reached.set()  # turn 1's tool turn is finished and stored: the run is killed while turn 2 is asked
            gate.wait(60)
            return Reply.error(503, "gone")
        if turn == 2:
            return Reply(tool_calls=[tool_call("read_query", {"query": "SELECT body FROM notes"}, "c3")])
        return Reply(text=tool_messages(request)[-1]["content"])

    f = write_items(tmp_path, 1, "")
    with FakeOpenAI(scripted_agent(agent)) as fake:
        spec = sqlite_spec(tmp_path, f, fake, epochs=1)
        args = [*RFTEVAL, "run", str(spec), "--no-readiness", "-q"]
        proc = subprocess.Popen(args, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                env={**os.environ, **ENV}, start_new_session=True)
        try:
            assert reached.wait(120), proc.communicate(timeout=5)[0].decode()[-2000:]
        finally:
            os.killpg(proc.pid, signal.SIGKILL)  # the run and, through bwrap's --die-with-parent, its server
            proc.wait()
            gate.set()
        sent_before = len(fake.requests)
        assert [t["turn"] for t in tool_turns(f)] == [1]  # stored before the kill
        res = CliRunner().invoke(app, ["run", str(spec), "--retry-base-delay", "0.01", "--no-readiness"], env=ENV)
        assert res.exit_code == 0, res.output
        resumed = fake.requests[sent_before:]
    assert [len([m for m in r.body["messages"] if m["role"] == "assistant"]) for r in resumed] == [1, 2]  # turns 2, 3
    turns = tool_turns(f)
    assert [t["turn"] for t in turns] == [1, 2]  # each tool turn ran once: turn 1's before the kill, not again
    assert [r["content"] for r in turns[0]["results"]] == ["Table created successfully",
                                                           "[{'affected_rows': 1}]"]
    # the resumed rollout's server is a fresh one that saw no replay of turn 1: its table is not there (README)
    (rec,) = records(f)
    assert rec["output_text"] == "Database error: no such table: notes" and rec["turns"] == 3


def test_a_server_exiting_mid_rollout_is_a_generation_error_the_same_command_resumes(tmp_path: Path) -> None:
    def agent(request: Request, turn: int) -> Reply:
        if turn == 1:
            return Reply(tool_calls=[tool_call("count", {}, "c1"), tool_call("die", {}, "c2")])
        return Reply(text="after: " + " ".join(m["content"] for m in tool_messages(request)))

    f = write_items(tmp_path, 1, "after: 1 alive")
    with FakeOpenAI(scripted_agent(agent)) as fake:
        # the server dies on `die` while MCP_FAULTS_DIE=1 reaches it; the env is given through a spec table
        (tmp_path / "eval.toml").write_text(
            '[tools]\nmcp = [{command = ' + json.dumps(fault_server()) + ', env = {MCP_FAULTS_DIE = "${DIE}"}}]\n')
        base = [str(tmp_path / "eval.toml"), *run_args(f, fake, "--max-error-rate", "1")[1:]]
        res = CliRunner().invoke(app, ["run", *base], env={**ENV, "DIE": "1"})
        assert res.exit_code == 0, res.output
        (failed,) = records(f)
        assert failed["error"]["type"] == "mcp_server_exited" and failed["error"]["stage"] == "generate"
        assert "exited mid-rollout" in failed["error"]["message"] and len(fake.requests) == 1
        res = CliRunner().invoke(app, ["run", *base], env={**ENV, "DIE": "0"})  # same identity: env names only
        assert res.exit_code == 0, res.output
        assert len(fake.requests) == 2  # turn 1 read back from the store, turn 2 sent
    (rec,) = records(f)
    assert rec["error"] is None and rec["output_text"] == "after: 1 alive" and rec["score"] == 1.0


def test_a_tool_an_item_declares_that_no_server_has_is_one_line_before_anything_is_sent(tmp_path: Path) -> None:
    declared = [{"type": "function", "function": {"name": "teleport", "parameters": {"type": "object"}}}]
    f = write_items(tmp_path, 2, "", tools=declared)
    with FakeOpenAI(scripted_agent(lambda r, t: Reply(text="x"))) as fake:
        res = CliRunner().invoke(app, run_args(f, fake, "--mcp", " ".join(fault_server())), env=ENV)
        assert res.exit_code == 2, res.output
        assert fake.requests == []
    (line,) = [ln for ln in res.output.splitlines() if "teleport" in ln]
    assert f"{f['dataset']}:1" in line and "tools" in line and "no MCP server" in line
    assert not (f["out"] / "base.jsonl").exists()
