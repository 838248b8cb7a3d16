"""rfteval/run/rollout.py: one cell played as a rollout. Without tools one turn; with a tool box the loop, its
limits and stop reasons, against the fake server through the real openai client."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from rfteval.data.dataset import Item
from rfteval.errors import InputError
from rfteval.providers.base import GenerationRequest, Sampling
from rfteval.run.monitor import RunMonitor
from rfteval.run.rollout import RolloutLimits, play
from rfteval.run.runner import RunOptions, RunResult, run_eval
from rfteval.run.spec import ModelRun, build_spec, flag_overrides
from rfteval.run.store import CellKeys, ResponseEntry, RunStore, new_response_entry
from rfteval.tools.base import BAD_ARGUMENTS, UNKNOWN_TOOL, RolloutToolError, ToolResult
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

RUN = ModelRun("base", "m-base", "openai", {}, Sampling())
ITEM = Item("i1", 1, {"id": "i1", "messages": [{"role": "user", "content": "q"}]})
OPTS = RunOptions(backoff_base_s=0.001, handle_signals=False)


@dataclass(frozen=True)
class Job:
    run: ModelRun
    item: Item
    epoch: int
    request: GenerationRequest
    key: str
    first_key: str


def job(epoch: int = 1) -> Job:
    return Job(RUN, ITEM, epoch, GenerationRequest(model="m-base", messages=ITEM.messages, item_id="i1", epoch=epoch),
               f"key{epoch}", f"key{epoch}")


def test_without_tools_a_cell_is_one_turn_sent_once_and_stored_before_it_is_returned(tmp_path: Path):
    sent: list[tuple[GenerationRequest, CellKeys, int]] = []
    with RunStore(tmp_path / "run") as store:
        async def send(run: ModelRun, request: GenerationRequest, keys: CellKeys, turn: int) -> ResponseEntry:
            sent.append((request, keys, turn))
            assert store.get_response(keys["key"]) is None  # nothing stored before the answer
            return new_response_entry(**keys, latency_s=0.1)

        cell = job()
        entry = asyncio.run(play(cell, send, store))
        assert [(r, t) for r, _, t in sent] == [(cell.request, 1)]  # the item's own request, as the runner built it
        assert sent[0][1] == {"key": "key1", "label": "base", "model": "m-base", "item_id": "i1", "epoch": 1,
                              "session": store.session}
        assert store.get_response("key1") == entry
    lines = (tmp_path / "run" / "store" / "responses.jsonl").read_text().splitlines()
    assert [json.loads(line)["key"] for line in lines] == ["key1"]
    assert sorted(p.name for p in (tmp_path / "run" / "store").glob("*.jsonl")) == ["grades.jsonl", "responses.jsonl"]


def test_the_limits_key_holds_each_limit():
    assert RolloutLimits().key() == {"max_turns": 10, "max_tool_calls": None, "timeout_s": None}
    assert RolloutLimits(3, 4, 5.0).key() != RolloutLimits(3, 4, 6.0).key()


# ---- the loop, against the fake server -----------------------------------------------------------------------------


def agent_run(files: dict[str, Path], server: FakeOpenAI, tools: FunctionTools | None = None, epochs: int = 1,
              labels: tuple[str, ...] = ("base",), opts: RunOptions = OPTS, **limits: Any) -> RunResult:
    spec = build_spec(None, flag_overrides(
        models=[f"{label}=fake-{label}" for label in labels], dataset=str(files["dataset"]),
        grader=str(files["grader"]), out=str(files["out"]), base_url=server.base_url, epochs=epochs,
        tools={"python": str(files["tools"]), **limits}, cwd=files["out"].parent))
    return run_eval(spec, None, opts, tools=tools if tools is not None else calculator())


def records(files: dict[str, Path], label: str = "base") -> list[dict[str, Any]]:
    return [json.loads(line) for line in (files["out"] / f"{label}.jsonl").read_text().splitlines()]


def rollouts(files: dict[str, Path]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (files["out"] / "store" / "rollouts.jsonl").read_text().splitlines()]


def chat_messages(request: Request) -> list[dict[str, Any]]:
    return list(request.body["messages"])


@pytest.mark.slow
def test_a_tool_call_runs_and_the_next_turn_sees_its_result(tmp_path: Path):
    files = write_agent_files(tmp_path)
    box = calculator()
    with FakeOpenAI(scripted_agent(adding_agent)) as server:
        result = agent_run(files, server, box)
    first, second = server.requests
    assert chat_messages(first) == [{"role": "user", "content": "add 2 and 3 (0)"}]
    assert [t["function"]["name"] for t in first.body["tools"]] == ["add", "count"]  # the item's tools
    # the assistant turn with its call (content null, as OpenAI sends it), then the tool's answer as a string
    assert chat_messages(second)[1:] == [
        {"role": "assistant", "content": None, "tool_calls": [tool_call("add", {"a": 2, "b": 3})]},
        {"role": "tool", "tool_call_id": "call_1", "content": "5"}]
    assert second.body["tools"] == first.body["tools"]
    (line,) = rollouts(files)
    assert box.turns_run == [(line["trace_id"], ["add"])]  # the rollout's trace id, which its calls carry
    assert line["trace_id"].startswith("trace_") and store_lines(files, "tools.jsonl")[0]["trace_id"] == \
        line["trace_id"]
    (rec,) = records(files)
    assert rec["output_text"] == "sum: 5" and rec["score"] == 1.0  # graded on the final turn
    assert rec["usage"]["output_tokens"] == sum(  # summed over the turns, as the fake counts them
        json.loads(line)["usage"]["output_tokens"]
        for line in (files["out"] / "store" / "responses.jsonl").read_text().splitlines())
    (rollout,) = rollouts(files)
    assert (rollout["turns"], rollout["stop_reason"], rollout["tool_calls"]) == (2, "no_tool_calls", 1)
    agent = result.summary.models["base"].agent
    assert agent is not None and (agent.rollouts, agent.turns, agent.stop_reasons) == (1, 2, {"no_tool_calls": 1})
    tools = result.summary.tools
    assert tools is not None and tools["max_turns"] == 10 and tools["identity"] == box.identity
    assert box.closed  # the run closes the tool box it was handed, as it closes the providers


@pytest.mark.slow
def test_the_tools_state_is_carried_from_turn_to_turn_within_a_rollout_and_not_across(tmp_path: Path):
    files = write_agent_files(tmp_path, n_items=2, reference="3")

    def counting(request: Request, turn: int) -> Reply:
        if turn <= 3:
            return Reply(tool_calls=[tool_call("count", {}, f"c{turn}")])
        return Reply(text=str(tool_messages(request)[-1]["content"]))

    with FakeOpenAI(scripted_agent(counting)) as server:
        agent_run(files, server)
    assert [r["output_text"] for r in records(files)] == ["3", "3"]  # 1, 2, 3 in each rollout: no state shared


@pytest.mark.slow
def test_a_forced_tool_choice_applies_to_the_first_turn_only(tmp_path: Path):
    forced = {"type": "function", "function": {"name": "add"}}
    files = write_agent_files(tmp_path, tool_choice=forced)
    with FakeOpenAI(scripted_agent(adding_agent)) as server:
        agent_run(files, server)
    assert [r.body["tool_choice"] for r in server.requests] == [forced, "auto"]


def always_adding(request: Request, turn: int) -> Reply:
    return Reply(text=f"turn {turn}", tool_calls=[tool_call("add", {"a": turn, "b": 1}, f"a{turn}")])


@pytest.mark.slow
def test_max_turns_stops_after_that_many_model_calls_and_the_last_turns_calls_are_the_answer(tmp_path: Path):
    files = write_agent_files(tmp_path, reference="turn 3")
    box = calculator()
    with FakeOpenAI(scripted_agent(always_adding)) as server:
        agent_run(files, server, box, max_turns=3)
    assert len(server.requests) == 3
    assert len(box.turns_run) == 2  # the third turn's call is not run: no model turn would read it
    (rec,) = records(files)
    assert rec["output_text"] == "turn 3" and rec["score"] == 1.0  # a limited rollout is graded
    assert rec["output_tools"][0]["function"]["arguments"] == json.dumps({"a": 3, "b": 1})
    (rollout,) = rollouts(files)
    assert (rollout["stop_reason"], rollout["turns"], rollout["tool_calls"]) == ("max_turns", 3, 3)


@pytest.mark.slow
def test_a_turn_asking_for_more_calls_than_remain_runs_none_of_them(tmp_path: Path):
    files = write_agent_files(tmp_path)

    def two_calls(request: Request, turn: int) -> Reply:
        return Reply(tool_calls=[tool_call("add", {"a": 1, "b": 1}, f"x{turn}"),
                                 tool_call("add", {"a": 2, "b": 2}, f"y{turn}")])

    box = calculator()
    with FakeOpenAI(scripted_agent(two_calls)) as server:
        agent_run(files, server, box, max_tool_calls=3)
    assert box.turns_run and [names for _, names in box.turns_run] == [["add", "add"]]  # 2 run, then 2 > 1 left
    assert len(server.requests) == 2
    (rollout,) = rollouts(files)
    assert (rollout["stop_reason"], rollout["turns"], rollout["tool_calls"]) == ("max_tool_calls", 2, 4)
    assert [m["role"] for m in rollout["messages"]] == ["assistant", "tool", "tool", "assistant"]


@pytest.mark.slow
def test_finish_reason_length_mid_rollout_stops_it_and_it_is_graded(tmp_path: Path):
    files = write_agent_files(tmp_path, reference="cut sh")

    def cut_on_turn_two(request: Request, turn: int) -> Reply:
        if turn == 1:
            return Reply(tool_calls=[tool_call("add", {"a": 2, "b": 3})])
        return Reply(text="cut sh", tool_calls=[tool_call("add", '{"a": 1', "c2")], finish_reason="length")

    box = calculator()
    with FakeOpenAI(scripted_agent(cut_on_turn_two)) as server:
        agent_run(files, server, box)
    assert len(server.requests) == 2 and len(box.turns_run) == 1  # the cut turn's call is not run
    (rec,) = records(files)
    assert rec["score"] == 1.0 and rec["error"] is None
    assert rollouts(files)[0]["stop_reason"] == "length"


@pytest.mark.slow
def test_a_history_past_the_servers_context_stops_the_rollout_which_is_graded_as_it_stands(tmp_path: Path):
    files = write_agent_files(tmp_path, reference="")
    box = FunctionTools({"add": lambda a, b: "many words " * 200})  # a long result: the next turn will not fit
    with FakeOpenAI(scripted_agent(adding_agent)) as server:
        server.context_tokens = 100
        result = agent_run(files, server, box)
    assert len(server.requests) == 1 and server.stats.get("invalid") == 1  # turn 2 refused as too long
    (rec,) = records(files)
    assert rec["error"] is None and rec["score"] == 1.0  # scored: the final turn is the first (no text)
    assert rec["output_tools"][0]["function"]["name"] == "add"
    (rollout,) = rollouts(files)
    assert (rollout["stop_reason"], rollout["turns"]) == ("context", 1)
    assert result.summary.errors == 0


@pytest.mark.slow
def test_a_429_on_turn_three_is_retried_and_the_rollout_goes_on(tmp_path: Path):
    files = write_agent_files(tmp_path, reference="done")
    with FakeOpenAI() as server:
        server.queue(Reply(tool_calls=[tool_call("add", {"a": 1, "b": 2}, "t1")]),
                     Reply(tool_calls=[tool_call("add", {"a": 3, "b": 4}, "t2")]),
                     Reply.error(429, headers={"Retry-After": "0"}),
                     Reply(text="done"))
        agent_run(files, server)
        turns = [len(r.body["messages"]) for r in server.requests]
    assert turns == [1, 3, 5, 5]  # turn 3 sent twice (the 429, its retry), nothing else
    (rec,) = records(files)
    assert rec["score"] == 1.0 and rollouts(files)[0]["turns"] == 3


@pytest.mark.slow
def test_a_turn_that_fails_after_every_retry_is_the_cells_generation_error(tmp_path: Path):
    files = write_agent_files(tmp_path, n_items=2)
    with FakeOpenAI() as server:
        def responder(request: Request) -> Reply:
            if len(request.body["messages"]) > 1 and "(1)" in request.last_user_text():
                return Reply.error(503)
            return scripted_agent(adding_agent)(request)

        server.responder = responder
        result = agent_run(files, server, opts=RunOptions(backoff_base_s=0.001, handle_signals=False,
                                                          fixed_concurrency=True))
    ok, failed = records(files)
    assert ok["score"] == 1.0 and ok["error"] is None
    assert failed["error"]["stage"] == "generate" and failed["error"]["type"] == "server"
    s = result.summary
    assert s.errors == 1 and s.models["base"].mean == 1.0  # left out of the mean, counted
    assert s.models["base"].agent is not None and s.models["base"].agent.rollouts == 1


class UnansweredTools(FunctionTools):
    """The calculator behind a server that gives its first `failures` turns no answer (a tool endpoint's 5xx after
    its retries: tools.base.RolloutToolError)."""

    def __init__(self, failures: int):
        super().__init__({"add": lambda a, b: a + b})
        self.failures = failures

    async def run_turn(self, rollout_id: str, item: dict[str, Any], calls: Any,
                       state: dict[str, Any]) -> tuple[list[ToolResult], dict[str, Any]]:
        if self.failures:
            self.failures -= 1
            self.turns_run.append((rollout_id, [c.name for c in calls]))
            raise RolloutToolError("tool_server_error", "tool 'add' at http://127.0.0.1:9/tools: HTTP 503 (after 3 "
                                   "retries)")
        return await super().run_turn(rollout_id, item, calls, state)


@pytest.mark.slow
def test_a_tool_without_an_answer_makes_the_rollout_a_generation_error_and_a_rerun_keeps_its_trace(tmp_path: Path):
    files = write_agent_files(tmp_path, n_items=2)
    with FakeOpenAI(scripted_agent(adding_agent)) as server:
        first = UnansweredTools(failures=1)
        result = agent_run(files, server, first, opts=RunOptions(backoff_base_s=0.001, handle_signals=False,
                                                                 fixed_concurrency=True, start_concurrency=1))
        failed = [r for r in records(files) if r["error"] is not None]
        assert len(failed) == 1 and failed[0]["error"] == {
            "stage": "generate", "type": "tool_server_error",
            "message": "tool 'add' at http://127.0.0.1:9/tools: HTTP 503 (after 3 retries)"}
        assert result.summary.errors == 1 and result.summary.models["base"].mean == 1.0  # left out, not scored 0
        (trace, _), (other, _) = first.turns_run
        assert trace != other  # two rollouts, two traces
        server.reset()
        again = UnansweredTools(failures=0)
        agent_run(files, server, again)
        assert len(server.requests) == 1  # the failed rollout's second turn only: its first is read back
    assert again.turns_run == [(trace, ["add"])]  # played again under the trace its first attempt's calls carried
    assert [r["error"] for r in records(files)] == [None, None]


@pytest.mark.slow
def test_a_resumed_rollouts_later_calls_carry_the_trace_its_first_calls_did(tmp_path: Path):
    files = write_agent_files(tmp_path, reference="")
    with FakeOpenAI(scripted_agent(always_adding)) as server:
        agent_run(files, server, max_turns=2)  # turn 1's call runs; turn 2's calls are the answer
        (stored,) = store_lines(files, "tools.jsonl")
        box = calculator()
        agent_run(files, server, box, max_turns=3)  # another rollout key: continued from the stored turns
    assert box.turns_run == [(stored["trace_id"], ["add"])]  # turn 2's call, under turn 1's trace
    assert rollouts(files)[-1]["trace_id"] == stored["trace_id"]


@pytest.mark.slow
def test_bad_json_arguments_and_an_unknown_tool_are_shown_to_the_model_and_counted(tmp_path: Path):
    files = write_agent_files(tmp_path, reference="ok")

    def faulty(request: Request, turn: int) -> Reply:
        if turn == 1:
            return Reply(tool_calls=[tool_call("add", '{"a": 2, "b": ', "bad"), tool_call("nope", {}, "unknown"),
                                     tool_call("add", {"a": 2}, "missing")])
        return Reply(text="ok")

    with FakeOpenAI(scripted_agent(faulty)) as server:
        agent_run(files, server)
        shown = tool_messages(server.requests[1])
    assert [m["tool_call_id"] for m in shown] == ["bad", "unknown", "missing"]
    assert shown[0]["content"].startswith(f"error: {BAD_ARGUMENTS}: ")
    assert shown[1]["content"] == f"error: {UNKNOWN_TOOL}: no tool named 'nope'"
    assert shown[2]["content"].startswith(f"error: {BAD_ARGUMENTS}: ")  # a required parameter missing
    (rollout,) = rollouts(files)
    assert rollout["tool_errors"] == {BAD_ARGUMENTS: 2, UNKNOWN_TOOL: 1}
    assert rollout["call_errors"] == {"bad": BAD_ARGUMENTS, "unknown": UNKNOWN_TOOL, "missing": BAD_ARGUMENTS}
    assert records(files)[0]["score"] == 1.0


@pytest.mark.slow
def test_the_rollout_timeout_ends_a_rollout_that_would_go_on(tmp_path: Path):
    files = write_agent_files(tmp_path, reference="")

    def slow(**_: Any) -> str:
        import time

        time.sleep(0.3)
        return "slow"

    with FakeOpenAI(scripted_agent(always_adding)) as server:
        agent_run(files, server, FunctionTools({"add": slow}), rollout_timeout=0.5)
        sent = len(server.requests)
    (rollout,) = rollouts(files)
    assert rollout["stop_reason"] == "rollout_timeout"
    assert sent <= 3 and rollout["turns"] <= sent  # it would have gone on to 10 turns


def test_an_agent_run_refuses_replayed_models_and_the_batch_paths_before_anything_is_written(
        tmp_path: Path, fake_openai: FakeOpenAI):
    files = write_agent_files(tmp_path)
    (tmp_path / "rec.jsonl").write_text("")
    spec = build_spec(None, flag_overrides(models=[f"base=replay:{tmp_path / 'rec.jsonl'}"],
                                           dataset=str(files["dataset"]), grader=str(files["grader"]),
                                           out=str(files["out"]), tools={"python": str(files["tools"])}, cwd=tmp_path))
    with pytest.raises(InputError, match="replays recorded answers") as caught:
        run_eval(spec, None, OPTS, tools=calculator())
    assert caught.value.field == "--tools"
    live = build_spec(None, flag_overrides(models=["base=m"], base_url=fake_openai.base_url,
                                           dataset=str(files["dataset"]), grader=str(files["grader"]),
                                           out=str(files["out"]), tools={"python": str(files["tools"])}, cwd=tmp_path))
    for flag, opts in (("--batch", RunOptions(batch=True)),
                       ("--export-requests", RunOptions(export_requests=tmp_path / "req.jsonl")),
                       ("--import-responses", RunOptions(import_responses=tmp_path / "rec.jsonl"))):
        with pytest.raises(InputError, match="cannot be combined with --tools") as caught:
            run_eval(live, None, opts, tools=calculator())
        assert caught.value.field == flag
    assert not files["out"].exists() and fake_openai.requests == []


def test_the_rollout_limits_without_tools_are_one_line_naming_the_flag(tmp_path: Path):
    files = write_agent_files(tmp_path)
    with pytest.raises(InputError, match="the rollout limits need tools") as caught:
        build_spec(None, flag_overrides(models=["base=m"], dataset=str(files["dataset"]), grader=str(files["grader"]),
                                        tools={"max_turns": 3}, cwd=tmp_path))
    assert caught.value.field == "--tools"


# ---- what the grader sees ------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_templates_render_the_rollout_and_python_graders_get_it(tmp_path: Path):
    files = write_agent_files(tmp_path, n_items=1)
    (tmp_path / "grader.json").write_text(json.dumps({
        "type": "multi", "name": "both", "calculate_output": "(template + code) / 2",
        "graders": {
            "template": {"type": "string_check", "name": "t", "input": "{{ sample.rollout.messages }}",
                         "reference": '"role": "tool", "tool_call_id": "call_1", "content": "5"', "operation": "like"},
            "code": {"type": "python", "name": "c", "source": (
                "def grade(sample, item):\n"
                "    r = sample['rollout']\n"
                "    ok = (r['turns'], r['stop_reason'], r['tool_results'][0]['content'], sample['output_text'])\n"
                "    return float(ok == (2, 'no_tool_calls', '5', 'sum: 5'))\n")}}}))
    with FakeOpenAI(scripted_agent(adding_agent)) as server:
        result = agent_run(files, server)
    (rec,) = records(files)
    assert rec["error"] is None, rec
    assert rec["sub_scores"] == {"template": 1.0, "code": 1.0} and rec["score"] == 1.0
    assert result.summary.errors == 0


def test_a_grader_reading_the_rollout_is_refused_without_tools_in_one_line(tmp_path: Path):
    from rfteval.run.paths import check_run_inputs

    files = write_agent_files(tmp_path)
    (tmp_path / "grader.json").write_text(json.dumps({"type": "string_check", "name": "s", "operation": "eq",
                                                      "input": "{{ sample.rollout.stop_reason }}",
                                                      "reference": "no_tool_calls"}))
    args = dict(models=["base=m"], dataset=str(files["dataset"]), grader=str(files["grader"]), cwd=tmp_path)
    warnings: list[str] = []
    with pytest.raises(InputError, match=r"sample.rollout is an agent run's trajectory, there only in `rfteval run "
                                         r"--tools`"):
        check_run_inputs(build_spec(None, flag_overrides(**args)), warnings.append)
    check_run_inputs(build_spec(None, flag_overrides(**args, tools={"python": str(files["tools"])})),
                     warnings.append)  # an agent run's samples have it
    assert any("not uploadable to OpenAI" in w for w in warnings)


# ---- scripted user turns (rfteval_followups) --------------------------------------------------------------------

FOLLOWUPS = ["now add 4 and 5", {"role": "user", "content": "and 6 and 7"}]


def conversing(request: Request, turn: int) -> Reply:
    """After each user message, add the two numbers it names; after the tool's answer, say the sum."""
    last = request.body["messages"][-1]
    if last["role"] == "user":
        a, b = (int(w) for w in last["content"].replace("(0)", "").split() if w.isdigit())
        return Reply(tool_calls=[tool_call("add", {"a": a, "b": b}, f"c{turn}")])
    return Reply(text=f"sum: {last['content']}")


@pytest.mark.slow
def test_follow_ups_are_sent_one_at_a_time_after_each_answer_and_the_rollout_ends_after_the_last(tmp_path: Path):
    files = write_agent_files(tmp_path, reference="sum: 13", rfteval_followups=FOLLOWUPS)
    with FakeOpenAI(scripted_agent(conversing)) as server:
        agent_run(files, server)
    histories = [chat_messages(r) for r in server.requests]
    assert len(histories) == 6  # each user turn: a call, then the answer
    users = [[m["content"] for m in h if m["role"] == "user"] for h in histories]
    assert users == [["add 2 and 3 (0)"]] * 2 + [["add 2 and 3 (0)", "now add 4 and 5"]] * 2 + [
        ["add 2 and 3 (0)", "now add 4 and 5", "and 6 and 7"]] * 2
    # a follow-up comes right after the answer it follows, as the user's message
    assert histories[2][-2:] == [{"role": "assistant", "content": "sum: 5"},
                                 {"role": "user", "content": "now add 4 and 5"}]
    (rec,) = records(files)
    assert rec["output_text"] == "sum: 13" and rec["score"] == 1.0  # the answer to the last follow-up
    assert (rec["turns"], rec["tool_calls"], rec["stop_reason"]) == (6, 3, "no_tool_calls")
    transcript = json.loads(rec["transcript"])
    assert [m["role"] for m in transcript] == ["assistant", "tool", "assistant", "user", "assistant", "tool",
                                               "assistant", "user", "assistant", "tool", "assistant"]
    assert [m["content"] for m in transcript if m["role"] == "user"] == ["now add 4 and 5", "and 6 and 7"]
    assert histories[-1][1:] == transcript[:-1]  # what the model was sent is what the record keeps


@pytest.mark.slow
def test_max_turns_counts_model_calls_over_every_follow_up_and_raising_it_goes_on_from_there(tmp_path: Path):
    files = write_agent_files(tmp_path, reference="sum: 13", rfteval_followups=FOLLOWUPS)
    with FakeOpenAI(scripted_agent(conversing)) as server:
        agent_run(files, server, max_turns=4)  # two user turns answered; a follow-up left: the limit stopped it
        (first,) = rollouts(files)
        assert (first["turns"], first["stop_reason"], first["output_text"]) == (4, "max_turns", "sum: 9")
        assert json.loads(records(files)[0]["transcript"])[-1] == {"role": "assistant", "content": "sum: 9"}
        server.reset()
        box = calculator()
        agent_run(files, server, box, max_turns=10)
        sent = [chat_messages(r)[-1]["content"] for r in server.requests]
    assert sent == ["and 6 and 7", "13"]  # only the last follow-up's turns: the four before are read back
    assert len(box.turns_run) == 1
    assert (rollouts(files)[-1]["stop_reason"], records(files)[0]["score"]) == ("no_tool_calls", 1.0)


@pytest.mark.slow
def test_a_rollout_cut_after_a_follow_up_resumes_there_and_a_changed_follow_up_is_another_rollout(tmp_path: Path):
    files = write_agent_files(tmp_path, reference="sum: 13", rfteval_followups=FOLLOWUPS)
    opts = RunOptions(backoff_base_s=0.001, handle_signals=False, fixed_concurrency=True)
    with FakeOpenAI() as server:
        def cut_after_the_first_follow_up(request: Request) -> Reply:
            if "and 6 and 7" in request.user_texts():
                return Reply.error(503)  # the run ends here, as a kill would: the turns before are stored
            return scripted_agent(conversing)(request)

        server.responder = cut_after_the_first_follow_up
        agent_run(files, server, opts=opts)
        assert records(files)[0]["error"]["stage"] == "generate"
        stored = len(store_lines(files, "responses.jsonl"))
        server.responder = scripted_agent(conversing)
        server.reset()
        agent_run(files, server, opts=opts)
        resumed = [chat_messages(r) for r in server.requests]
        assert [h[-1]["content"] for h in resumed] == ["and 6 and 7", "13"]  # no turn before it sent again
        assert records(files)[0]["score"] == 1.0 and stored == 4 + 1  # four answers and the failed turn
        # the second follow-up changed: the turns before it are the same requests (read back), its own are new
        write_agent_files(tmp_path, reference="sum: 19", rfteval_followups=[FOLLOWUPS[0], "and 9 and 10"])
        server.reset()
        agent_run(files, server, opts=opts)
        assert [chat_messages(r)[-1]["content"] for r in server.requests] == ["and 9 and 10", "19"]
    assert records(files)[0]["output_text"] == "sum: 19" and records(files)[0]["score"] == 1.0


@pytest.mark.slow
def test_an_item_with_follow_ups_is_refused_in_one_line_by_a_run_without_tools(tmp_path: Path):
    files = write_agent_files(tmp_path, rfteval_followups=["more"])
    spec = build_spec(None, flag_overrides(models=["base=fake-base"], dataset=str(files["dataset"]),
                                           grader=str(files["grader"]), out=str(files["out"]),
                                           base_url="http://127.0.0.1:9/v1", cwd=tmp_path))
    with pytest.raises(InputError) as err:
        run_eval(spec, None, OPTS)
    assert (err.value.file, err.value.line, err.value.field) == (str(files["dataset"]), 1, "rfteval_followups")
    assert "--tools" in err.value.message and not files["out"].exists()


# ---- store, cache, resume ------------------------------------------------------------------------------------------


def store_lines(files: dict[str, Path], name: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (files["out"] / "store" / name).read_text().splitlines()]


@pytest.mark.slow
def test_a_rerun_sends_nothing_runs_no_tool_and_grades_nothing_again(tmp_path: Path):
    files = write_agent_files(tmp_path, n_items=2)
    with FakeOpenAI(scripted_agent(adding_agent)) as server:
        agent_run(files, server, epochs=2)
        first = records(files)
        server.reset()
        box = calculator()
        result = agent_run(files, server, box, epochs=2)
        assert server.requests == [] and box.turns_run == [] and box.inits == 0
    assert [r["score"] for r in records(files)] == [r["score"] for r in first] == [1.0] * 4
    assert all(r["cached"] for r in records(files)) and result.summary.models["base"].cached == 4
    assert len(store_lines(files, "grades.jsonl")) == 4 and len(store_lines(files, "rollouts.jsonl")) == 4
    # every model turn is in responses.jsonl under its own request's key, the turn's number beside it
    assert sorted(line["turn"] for line in store_lines(files, "responses.jsonl")) == [1, 1, 1, 1, 2, 2, 2, 2]


@pytest.mark.slow
def test_a_changed_grader_regrades_with_no_request_and_no_tool_run(tmp_path: Path):
    files = write_agent_files(tmp_path)
    with FakeOpenAI(scripted_agent(adding_agent)) as server:
        agent_run(files, server)
        assert records(files)[0]["score"] == 1.0
        (tmp_path / "grader.json").write_text(json.dumps({"type": "string_check", "name": "turns", "operation": "eq",
                                                          "input": "{{ sample.rollout.turns }}", "reference": "3"}))
        server.reset()
        box = calculator()
        agent_run(files, server, box)
        assert server.requests == [] and box.turns_run == []
    assert records(files)[0]["score"] == 0.0  # two turns, not three: graded again, from the stored rollout
    assert len(store_lines(files, "grades.jsonl")) == 2


@pytest.mark.slow
def test_changed_tools_rerun_their_turns_and_resend_only_the_turns_whose_history_changed(tmp_path: Path):
    files = write_agent_files(tmp_path, n_items=2, reference="")
    with FakeOpenAI(scripted_agent(adding_agent)) as server:
        agent_run(files, server, FunctionTools({"add": lambda a, b: a + b}, version="v1"))
        server.reset()

        def add_v2(a: float, b: float, *, item: dict[str, Any]) -> float:  # item q1's result changes, q0's does not
            return a + b + (100 if item["id"] == "q1" else 0)

        box = FunctionTools({"add": add_v2}, version="v2")
        agent_run(files, server, box)
        resent = [tool_messages(r)[-1]["content"] for r in server.requests]
    assert len(box.turns_run) == 2  # another tool box: every tool turn runs again
    assert resent == ["105"]  # q0's turn 2 is the same request: read back; q1's history changed: sent
    assert [r["output_text"] for r in records(files)] == ["sum: 5", "sum: 105"]


@pytest.mark.slow
def test_raising_max_turns_continues_only_the_rollouts_that_stopped_at_the_limit(tmp_path: Path):
    files = write_agent_files(tmp_path, n_items=2, reference="")

    def q1_keeps_calling(request: Request, turn: int) -> Reply:
        if "(0)" in request.last_user_text():
            return adding_agent(request, turn)
        return always_adding(request, turn) if turn < 4 else Reply(text="done")

    with FakeOpenAI(scripted_agent(q1_keeps_calling)) as server:
        agent_run(files, server, max_turns=2)
        assert {r["item_id"]: r["stop_reason"] for r in rollouts(files)} == {"q0": "no_tool_calls",
                                                                             "q1": "max_turns"}
        server.reset()
        box = calculator()
        agent_run(files, server, box, max_turns=4)
        sent = [(r.last_user_text(), len(r.body["messages"])) for r in server.requests]
    assert sent == [("add 2 and 3 (1)", 5), ("add 2 and 3 (1)", 7)]  # q1's turns 3 and 4 only
    assert [len(names) for _, names in box.turns_run] == [1, 1]  # q1's tool turns 2 and 3: never run before
    latest = {r["item_id"]: r for r in rollouts(files)}  # the last line per item: the new limit's rollouts
    assert (latest["q0"]["stop_reason"], latest["q1"]["stop_reason"], latest["q1"]["turns"]) == (
        "no_tool_calls", "no_tool_calls", 4)


@pytest.mark.slow
def test_a_dry_run_of_an_agent_run_counts_rollouts_and_their_turns(tmp_path: Path):
    files = write_agent_files(tmp_path, n_items=3)
    with FakeOpenAI(scripted_agent(adding_agent)) as server:
        plan = agent_run(files, server, opts=RunOptions(dry_run=True, handle_signals=False), max_turns=4).plan
        assert plan is not None and (plan.cells, plan.to_send, plan.max_turns) == (3, 3, 4)
        assert not files["out"].exists()
        agent_run(files, server, max_turns=4)
        server.reset()
        plan = agent_run(files, server, opts=RunOptions(dry_run=True, handle_signals=False), max_turns=4).plan
        assert plan is not None and (plan.stored, plan.to_send) == (3, 0) and server.requests == []


# ---- the records -----------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_an_agent_runs_records_carry_the_rollout_and_a_run_without_tools_writes_none_of_it(tmp_path: Path):
    import pyarrow.parquet as pq

    from rfteval.data.records import AGENT_FIELDS, FIELDS

    files = write_agent_files(tmp_path)

    def faulty_then_answer(request: Request, turn: int) -> Reply:
        if turn == 1:
            return Reply(tool_calls=[tool_call("add", {"a": 2, "b": 3}), tool_call("nope", {}, "c2")])
        return adding_agent(request, turn)

    with FakeOpenAI(scripted_agent(faulty_then_answer)) as server:
        agent_run(files, server)
    (rec,) = records(files)
    assert list(rec) == [*FIELDS, *AGENT_FIELDS]
    (rollout,) = rollouts(files)
    assert (rec["turns"], rec["stop_reason"], rec["tool_calls"], rec["tool_errors"]) == (
        2, "no_tool_calls", 2, {UNKNOWN_TOOL: 1})
    assert json.loads(rec["transcript"]) == rollout["messages"] and len(rollout["messages"]) == 4
    assert rec["latency_s"] == rollout["latency_s"] and rec["usage"] == rollout["usage"]
    table = pq.read_table(files["out"] / "results.parquet")
    assert table.column_names == [*FIELDS, *AGENT_FIELDS] and table.column("transcript").to_pylist() == [
        rec["transcript"]]

    (tmp_path / "plain").mkdir()
    plain = write_agent_files(tmp_path / "plain")
    with FakeOpenAI() as server:
        spec = build_spec(None, flag_overrides(models=["base=fake-base"], dataset=str(plain["dataset"]),
                                               grader=str(plain["grader"]), out=str(plain["out"]),
                                               base_url=server.base_url, epochs=1, cwd=tmp_path))
        run_eval(spec, None, OPTS)
    (line,) = records(plain)
    assert list(line) == list(FIELDS)
    assert pq.read_table(plain["out"] / "results.parquet").column_names == list(FIELDS)


# ---- servers -----------------------------------------------------------------------------------------------------------


class Said(RunMonitor):
    def __init__(self) -> None:
        self.lines: list[str] = []

    def message(self, text: str) -> None:
        self.lines.append(text)


@pytest.mark.slow
def test_a_server_refusing_null_content_gets_empty_content_and_the_run_keeps_its_keys(tmp_path: Path):
    keys = {}
    files = write_agent_files(tmp_path, n_items=3)
    with FakeOpenAI(scripted_agent(adding_agent)) as server:
        for refuses in (False, True):
            said = Said()
            server.refuse_null_tool_content = refuses
            server.stats["invalid"] = 0
            spec = build_spec(None, flag_overrides(
                models=["base=fake-base"], dataset=str(files["dataset"]), grader=str(files["grader"]),
                out=str(tmp_path / f"run-{refuses}"), base_url=server.base_url, epochs=1, concurrency=1,
                tools={"python": str(files["tools"])}, cwd=tmp_path))
            result = run_eval(spec, said, OPTS, tools=calculator())
            refused = server.stats["invalid"]
            assert result.summary.models["base"].mean == 1.0 and result.summary.errors == 0
            assert refused == (1 if refuses else 0)  # tried once, remembered for the rest of the run
            steps = [line for line in said.lines if "content is null beside its tool_calls" in line]
            assert len(steps) == (1 if refuses else 0)
            keys[refuses] = sorted(json.loads(line)["key"] for line in
                                   (tmp_path / f"run-{refuses}" / "store" / "responses.jsonl").read_text().splitlines())
    assert keys[True] == keys[False]  # the stored history keeps null: the keys do not depend on the server


@pytest.mark.slow
def test_a_second_turn_refused_every_time_stops_the_run_naming_the_turn_and_the_reason(tmp_path: Path):
    from rfteval.run.turns import RequestRefused

    files = write_agent_files(tmp_path, n_items=6)
    with FakeOpenAI(scripted_agent(adding_agent)) as server:
        server.refuse_null_tool_content = True  # stepped down to "", then refused again: no tool role at all
        server.refused_roles = {"tool"}
        with pytest.raises(RequestRefused) as caught:
            agent_run(files, server, opts=RunOptions(backoff_base_s=0.001, handle_signals=False,
                                                     fixed_concurrency=True))
        refused = server.stats["invalid"]
    line = str(caught.value)
    assert caught.value.turn == 2 and "the server refused 4 turn-2 requests (the history after a tool call) alike" \
        in line
    assert "messages[2].role: Input should be 'system', 'user', 'assistant' or 'function' (input: 'tool')" in line
    # each of the 6 cells' second turns refused about twice (null, then the role once stepped down to ""; a request
    # in flight while the step-down is learned may be refused with null once more): the run stopped at the fourth
    # alike, not after every cell's 10 retries (60)
    assert refused < 3 * 6
