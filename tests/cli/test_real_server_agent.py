"""`rfteval run --tools` against a real server and a real model (issue 37, "A real server and model").

llama.cpp's server (llama-cpp-python 0.3.36) serving SmolLM2-135M in its `hf-tokenizer-config` chat format with a
tool-aware template this project owns (tests/support/agent_server.py says why that format), behind a proxy that
logs every request (tests/support/logging_proxy.py: the server keeps no bodies). Items with `tools` and a forced
first `tool_choice`; the python tools run in the bubblewrap sandbox. The model is far too small to use tools well:
what is checked is structure, never quality.

One run, cut by killing the server mid-rollout and resumed by the same command against the restarted server (the
issue's kill-and-resume test), then checked as a whole: the forced first call came back as a proper `tool_calls`,
was executed in the sandbox (tools.jsonl), its result went back in the second turn's request, the records, the
step-down of null content to "" said once, no turn sent twice and no tool run twice, and `compare`'s agent table.
Smoke-sized: 3 items x 3 epochs x 2 labels, two model turns each.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rfteval.sandbox import host
from tests.support.agent_server import AGENT_ALIAS, AgentServer
from tests.support.cli_run_files import RFTEVAL
from tests.support.logging_proxy import Exchange, LoggingProxy
from tests.support.optional import missing, sandbox_refused
from tests.support.real_server import INSTALL_HINT, unavailable
from tests.support.real_server_cli import assert_secret_absent

pytestmark = [pytest.mark.real_server, pytest.mark.slow]
if (REASON := unavailable()) is not None:  # the whole module, in one line saying why
    missing(REASON.removesuffix(f"; {INSTALL_HINT}"), "realserver")
if (REFUSED := host().refused) is not None:  # the tools run in the python sandbox
    sandbox_refused(REFUSED, host().bwrap is not None)

SECRET = "sk-realserver-agent-0123456789abcdef"  # never sent anywhere but 127.0.0.1; must reach no file or output
EPOCHS, CONCURRENCY = 3, 2
SUMS = [(2, 3), (17, 25), (40, 2)]
FORCED = {"type": "function", "function": {"name": "add"}}
ADD = {"type": "function", "function": {
    "name": "add", "description": "Add two integers.",
    "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                   "required": ["a", "b"], "additionalProperties": False}}}
# Two labels, one model name told apart by their system prompts: the server reloads its model for every other name
SPEC = f"""dataset = "items.jsonl"
grader = "grader.json"

[models.base]
model = "{AGENT_ALIAS}"
system_prompt = "You are a calculator. Call the add tool, then say the sum."

[models.tuned]
model = "{AGENT_ALIAS}"
system_prompt = "Add numbers with the add tool and answer with the sum only."
"""
# The tool: its answer from its arguments, the state it keeps per rollout, and a write to the host's file system that
# the sandbox must not let out (no shared files): the file appearing would mean the tool ran unsandboxed.
TOOLS = '''def init_state(item):
    return {"calls": 0}


def add(a: int, b: int, *, state=None):
    state["calls"] += 1
    try:
        with open(ESCAPE, "w") as f:
            f.write("written from a tool")
    except OSError:
        pass
    return f"{a} + {b} = {a + b}"
'''
STEP_DOWN = 'such messages are sent with content "" from now on'  # rfteval.providers.history.STEP_DOWN


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[AgentServer, LoggingProxy]]:
    """The server (killed and restarted by the test) and the proxy in front of it, which outlives it."""
    server = AgentServer(workdir=tmp_path / "llama")
    proxy = LoggingProxy(server.port).start()
    try:
        server.start()
        yield server, proxy
    finally:
        server.stop()
        proxy.stop()


def write_files(tmp: Path) -> Path:
    """The dataset, grader, spec and tools.py of the run; returns the spec."""
    (tmp / "items.jsonl").write_text("".join(json.dumps(
        {"id": f"add-{i}", "messages": [{"role": "user", "content": f"What is {a} plus {b}?"}], "tools": [ADD],
         "tool_choice": FORCED, "reference_answer": str(a + b)}) + "\n" for i, (a, b) in enumerate(SUMS)))
    (tmp / "grader.json").write_text(json.dumps({
        "type": "string_check", "name": "has-sum", "input": "{{ sample.output_text }}",
        "reference": "{{ item.reference_answer }}", "operation": "like"}))
    (tmp / "tools.py").write_text(f"ESCAPE = {str(tmp / 'escaped.txt')!r}\n\n\n" + TOOLS)
    (tmp / "eval.toml").write_text(SPEC)
    return tmp / "eval.toml"


def command(tmp: Path, proxy: LoggingProxy) -> list[str]:
    return [*RFTEVAL, "run", str(write_files(tmp)), "--tools", str(tmp / "tools.py"), "--epochs", str(EPOCHS),
            "--base-url", proxy.base_url, "--max-output-tokens", "24", "--max-turns", "4", "--temperature", "0.8",
            "--seed", "7", "--concurrency", str(CONCURRENCY), "--out", str(tmp / "run"), "--no-readiness"]


def env() -> dict[str, str]:
    # wide enough that each of the run's notes is one line of stderr, as it is on a terminal
    return {**os.environ, "OPENAI_API_KEY": SECRET, "COLUMNS": "400"}


def lines(path: Path) -> list[dict[str, Any]]:
    """A store file's complete lines (a line still being written is left out)."""
    if not path.exists():
        return []
    return [json.loads(x) for x in path.read_text().split("\n")[:-1] if x.strip()]


def cut_rollouts(store: Path) -> set[str]:
    """Rollouts with a stored tool turn and no finished line: the ones a kill now cuts between their turns."""
    return ({t["rollout"] for t in lines(store / "tools.jsonl")} - {r["key"] for r in lines(store / "rollouts.jsonl")})


def records(out: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for label in ("base", "tuned") for x in (out / f"{label}.jsonl").read_text().splitlines()]


def step_downs(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if STEP_DOWN in line]


def answered(proxy: LoggingProxy) -> list[Exchange]:
    return [x for x in proxy.chat() if x.status == 200]


def test_a_real_server_runs_rollouts_and_a_killed_run_resumes_with_no_turn_sent_twice(
        served: tuple[AgentServer, LoggingProxy], tmp_path: Path) -> None:
    server, proxy = served
    args, out = command(tmp_path, proxy), tmp_path / "run"
    store = out / "store"

    # ---- the run, the server killed mid-rollout: after some rollouts finished, while one is between its turns
    first = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env())
    deadline = time.monotonic() + 240  # a hang guard, not a timing check
    while time.monotonic() < deadline and first.poll() is None:
        if len(lines(store / "rollouts.jsonl")) >= 2 and cut_rollouts(store):
            break
        time.sleep(0.02)
    assert first.poll() is None, "the run ended before the server was killed"
    server.kill()
    try:
        stdout1, stderr1 = first.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        first.kill()
        first.communicate()
        pytest.fail("the run did not stop within 120 s of the server's death: a hang guard, not a timing check")
    assert first.returncode == 3, stdout1 + stderr1  # stopped, resumable
    assert "Traceback" not in stdout1 + stderr1
    cut = cut_rollouts(store)
    assert cut, "no rollout was cut between its turns"
    tools_before = (store / "tools.jsonl").read_bytes()
    turns_before = {e["key"] for e in lines(store / "responses.jsonl")}
    assert len(answered(proxy)) == len(turns_before)  # every answer the server gave before its death was stored

    # ---- the same command against the restarted server: the run resumes and completes
    server.start()
    second = subprocess.run(args, capture_output=True, text=True, env=env(), timeout=600)
    assert second.returncode == 0, second.stdout + second.stderr
    assert "Traceback" not in second.stdout + second.stderr

    recs = records(out)
    rollouts = lines(store / "rollouts.jsonl")
    tool_turns = lines(store / "tools.jsonl")
    n = 2 * len(SUMS) * EPOCHS
    assert len(recs) == n == len(rollouts) and {r["key"] for r in rollouts} >= cut

    # every record a rollout of at least two turns that ended in a valid way, no generation error
    assert all(r["error"] is None for r in recs), [r["error"] for r in recs if r["error"]]
    assert all(r["turns"] >= 2 and r["tool_calls"] >= 1 for r in recs), [(r["turns"], r["tool_calls"]) for r in recs]
    assert {r["stop_reason"] for r in recs} <= {"no_tool_calls", "length"}, Counter(r["stop_reason"] for r in recs)
    assert all(r["score"] in (0.0, 1.0) for r in recs)

    # the forced first call came back as a proper tool_calls answer (finish_reason tool_calls) to a request forcing it
    log = answered(proxy)
    by_call: dict[str, Exchange] = {}
    for x in log:
        for choice in x.answer_json()["choices"]:
            for call in choice["message"].get("tool_calls") or []:
                by_call[call["id"]] = x
    calls = [c for t in tool_turns for c in t["calls"]]
    assert len(calls) == sum(r["tool_calls"] for r in recs)
    for call in calls:
        asked = by_call[call["id"]]
        assert asked.request_json()["tool_choice"] == FORCED
        choice = asked.answer_json()["choices"][0]
        assert choice["finish_reason"] == "tool_calls"
        assert choice["message"]["tool_calls"][0]["function"] == {"name": "add", "arguments": call["arguments"]}

    # executed in the sandbox: each result is the tool's answer to the arguments the model sent, the state carried,
    # and the tool's write to the host's file system never got out
    for turn in tool_turns:
        for call, result in zip(turn["calls"], turn["results"], strict=True):
            assert result["tool_call_id"] == call["id"]
            try:
                a, b = (json.loads(call["arguments"])[k] for k in ("a", "b"))
            except (ValueError, KeyError, TypeError):  # arguments the grammar let through but add cannot take
                assert result["error"] is not None
                continue
            assert result == {"tool_call_id": call["id"], "name": "add", "content": f"{a} + {b} = {a + b}",
                              "error": None}
        assert turn["state"] == {"calls": sum(r["error"] is None for r in turn["results"])}
    assert sum(r["error"] is None for t in tool_turns for r in t["results"]) >= len(calls) // 2
    assert not (tmp_path / "escaped.txt").exists()

    # the record's transcript: the call, its result as the tool returned it, the answer after
    results = {r["tool_call_id"]: r["content"] for t in tool_turns for r in t["results"]}
    for r in recs:
        messages = json.loads(r["transcript"])
        assert [m["role"] for m in messages] == ["assistant", "tool"] * (r["turns"] - 1) + ["assistant"]
        assert all(results[m["tool_call_id"]] == m["content"] for m in messages if m["role"] == "tool")

    # the second turn's request held the assistant's call (content "", the step-down) and the tool message with its
    # result, with the tool choice left to the model
    for turn in tool_turns:
        result = turn["results"][0]
        second_turns = [x for x in log if {"role": "tool", "tool_call_id": result["tool_call_id"],
                                           "content": result["content"]} in x.request_json()["messages"]]
        assert len(second_turns) == 1, result
        body = second_turns[0].request_json()
        assert body["tool_choice"] == "auto"
        asked = next(m for m in body["messages"] if m["role"] == "assistant")
        assert asked["content"] == "" and asked["tool_calls"][0]["id"] == result["tool_call_id"]

    # the server needs the step-down: it refused null content (HTTP 500), and each run said so in one line
    refused = [x for x in proxy.chat() if x.status == 500]
    assert refused and all(any(m.get("content", "") is None for m in x.request_json()["messages"]) for x in refused)
    assert len(refused) <= 2 * CONCURRENCY  # each run: the requests in flight when it was learned, no more
    assert len(step_downs(stderr1)) == 1 and len(step_downs(second.stderr)) == 1, (stderr1, second.stderr)

    # no turn sent twice: one answered request per stored turn over both runs, no body answered twice, and every
    # turn stored before the kill kept (none sent again)
    assert len(log) == sum(r["turns"] for r in recs) == len(lines(store / "responses.jsonl"))
    assert len({x.digest for x in log}) == len(log)
    assert turns_before <= {e["key"] for e in lines(store / "responses.jsonl")}

    # no tool run twice: one tools.jsonl line per tool turn of the records (every turn but a rollout's last), the
    # lines of before the kill kept as they were and the resumed run's after them
    assert (store / "tools.jsonl").read_bytes().startswith(tools_before)
    assert len(tool_turns) == sum(r["turns"] - 1 for r in recs) == len({t["key"] for t in tool_turns})

    # run again, complete: nothing sent, no tool run
    sent, tools_after = len(proxy.chat()), (store / "tools.jsonl").read_bytes()
    third = subprocess.run(args, capture_output=True, text=True, env=env(), timeout=300)
    assert third.returncode == 0, third.stdout + third.stderr
    assert len(proxy.chat()) == sent and (store / "tools.jsonl").read_bytes() == tools_after

    # compare: the agent table under the score's, its figures those of the records
    cmp = subprocess.run([*RFTEVAL, "compare", str(out), "--label", "base", str(out), "--label", "tuned"],
                         capture_output=True, text=True, env=env(), timeout=120)
    assert cmp.returncode == 0, cmp.stdout + cmp.stderr
    assert "agent: base -> tuned, per-item means over rollouts" in cmp.stdout
    assert "how rollouts ended" in cmp.stdout and "tool calls" in cmp.stdout
    cmp_json = subprocess.run([*RFTEVAL, "compare", str(out), "--label", "base", str(out), "--label", "tuned",
                               "--format", "json"], capture_output=True, text=True, env=env(), timeout=120)
    agent = json.loads(cmp_json.stdout)["agent"]
    for role, label in (("baseline", "base"), ("candidate", "tuned")):
        side = [r for r in recs if r["model_label"] == label]
        assert agent["rollouts"][role] == len(side)
        per_item = [sum(r["turns"] for r in side if r["item_id"] == i) / EPOCHS for i in sorted({r["item_id"] for r in side})]
        assert agent["rows"]["turns"][role]["mean"] == pytest.approx(sum(per_item) / len(per_item))
        ended = Counter(r["stop_reason"] for r in side)
        assert {k: v[f"{role}_rollouts"] for k, v in agent["stop_reasons"].items() if v[f"{role}_rollouts"]} == ended

    assert_secret_absent(SECRET, out, stdout1, stderr1, second.stdout, second.stderr, third.stdout, third.stderr,
                         cmp.stdout)
