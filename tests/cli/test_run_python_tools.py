"""`rfteval run --tools tools.py` with a real tools.py, executed in the bubblewrap sandbox, against FakeOpenAI.

tests/cli/test_run_tools.py stands in for the python tools with an in-process tool box, and tests/tools/test_python.py
and tests/sandbox/test_attacks.py prove the sandbox's tool turns one by one. Here the whole path runs as a user runs
it: the CLI opens the module in the sandbox under the limits its flags give, a scripted agent on the fake server
calls the tools, and what each call gave is read back from the records, store/tools.jsonl and the requests the
server saw (the next turn's history): a calculator's result seen by the second turn, a state made by
init_state(item) and carried across turns, and every fault the issue lists (bad argument JSON, arguments that do
not bind, an unknown tool, an exception, finish_reason length mid-rollout, a 429 on turn 3, a tool past
--tool-timeout, one past --tool-memory, one trying the network, one looking for another rollout's file or module
global), each a tool message `error: <Type>: ...` counted in the record's tool_errors, the rollout and the run going
on. One run of one item per scenario (a module fixture: the sandbox starts once); each test reads its scenario.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from rfteval.cli.app import app
from rfteval.sandbox import host
from rfteval.tools.check import misfits
from rfteval.tools.python import declared_functions, read_tools_module
from tests.support.fake_openai import FakeOpenAI, Reply, Request
from tests.support.guard import hang_guard
from tests.support.optional import sandbox_refused
from tests.support.toolboxes import tool_call, tool_messages, turn_of

TOOL_TIMEOUT_S = 2
TOOL_MEMORY_MB = 256
SECRET = "ann's card 4242"
LEAK_MODEL = "exfiltrated"  # what a tool that reached the fake server would have asked it for

TOOLS = '''
import json
import time
import urllib.request

SEEN = {}  # a module global: what one unit sets here, no other unit (turn, rollout) starts with


def init_state(item):
    return {"total": item["start"], "secret": None}


def add(a: float, b: float):
    return a + b


def tally(n: int, *, state=None):
    state["total"] += n
    return state["total"]


def fail(reason: str):
    raise ValueError(reason)


def nap(seconds: float):
    time.sleep(seconds)
    return "woke"


def hog(mb: int):
    return len(bytearray(mb << 20))


def post(url: str):
    body = json.dumps({"model": "exfiltrated", "messages": [{"role": "user", "content": "the state"}]}).encode()
    request = urllib.request.Request(url, body, {"Content-Type": "application/json"})
    return urllib.request.urlopen(request, timeout=5).read().decode()


def remember(secret: str, *, state=None):
    with open("/tmp/secret.txt", "w") as fh:
        fh.write(secret)
    SEEN["secret"] = secret
    state["secret"] = secret
    return "kept"


def peek_file():
    with open("/tmp/secret.txt") as fh:
        return fh.read()


def peek_global():
    return SEEN["secret"]


def peek_state(*, state=None):
    return state["secret"]
'''


def schema(name: str, **properties: str) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "description": f"{name}.", "parameters": {
        "type": "object", "properties": {p: {"type": t} for p, t in properties.items()},
        "required": list(properties)}}}


TOOLS_SCHEMA = [schema("add", a="number", b="number"), schema("tally", n="integer"),
                schema("fail", reason="string"), schema("nap", seconds="number"), schema("hog", mb="integer"),
                schema("post", url="string"), schema("remember", secret="string"), schema("peek_file"),
                schema("peek_global"), schema("peek_state")]

Calls = list[tuple[str, Any]]  # a model turn's calls: (tool name, arguments as an object, or as raw text)


@dataclass
class Scenario:
    """One item's rollout as the scripted agent plays it: the calls of each model turn, then an answer listing the
    tool results it was shown (`answer` shapes it); `reply` replaces the server's reply to a turn (a fault)."""

    turns: list[Calls]
    start: int = 0
    reference: str = ""
    answer: Callable[[list[str]], str] = lambda shown: json.dumps(shown)
    reply: dict[int, Callable[[int], Reply | None]] = field(default_factory=dict)


def once(reply: Reply) -> Callable[[int], Reply | None]:
    """A fault the server answers the first time the turn is asked, then answers as usual (a retry gets through)."""
    return lambda seen: reply if seen == 1 else None


SCENARIOS: dict[str, Scenario] = {
    "calc": Scenario([[("add", {"a": 2, "b": 3})]], reference="sum: 5", answer=lambda shown: f"sum: {shown[-1]}"),
    "tally": Scenario([[("tally", {"n": 1})], [("tally", {"n": 2}), ("tally", {"n": 3})]], start=10),
    "bad_args": Scenario([[("add", '{"a": 2,'), ("add", {"a": 2, "b": 3, "c": 4}), ("add", [2, 3]), ("multiply", {"a": 2})],
                          [("add", {"a": 2, "b": 3})]]),
    "raises": Scenario([[("fail", {"reason": "out of stock"})], [("add", {"a": 1, "b": 1})]]),
    "length": Scenario([[("add", {"a": 1, "b": 2})], [("add", {"a": 3, "b": 4})]],
                       reply={2: lambda seen: Reply(text="the answer is 3 and", finish_reason="length")}),
    "rate_limited": Scenario([[("tally", {"n": 1})], [("tally", {"n": 1})], [("tally", {"n": 1})]], start=100,
                             reply={3: once(Reply.error(429, headers={"Retry-After": "0"}))}),
    "timeout": Scenario([[("add", {"a": 1, "b": 1}), ("nap", {"seconds": 60}), ("add", {"a": 2, "b": 2})],
                         [("add", {"a": 3, "b": 3})]]),
    "memory": Scenario([[("hog", {"mb": 4 * TOOL_MEMORY_MB})], [("add", {"a": 5, "b": 5})]]),
    "network": Scenario([[("post", {"url": "SERVER/chat/completions"})]]),
    "leaker": Scenario([[("remember", {"secret": SECRET}), ("peek_file", {}), ("peek_global", {})],
                        [("peek_file", {}), ("peek_global", {}), ("peek_state", {})]]),
    "snooper": Scenario([[("peek_file", {}), ("peek_global", {}), ("peek_state", {})]]),
}


class Agent:
    """The fake server's responder: each request's item (its user message) and turn (1 + the assistant messages in
    its history) answered from the item's Scenario. The snooper's first turn waits until the leaker's second turn
    is asked for, so that the leaker's tool turn, which wrote its secret, has run before the snooper's looks."""

    def __init__(self) -> None:
        self.base_url = ""
        self.asked: Counter[tuple[str, int]] = Counter()
        self.lock = threading.Lock()
        self.leaked = threading.Event()
        self.waited = False

    def __call__(self, request: Request) -> Reply:
        item, turn = request.user_texts()[0], turn_of(request)
        scenario = SCENARIOS[item]
        with self.lock:
            self.asked[item, turn] += 1
            seen = self.asked[item, turn]
        if (item, turn) == ("leaker", 2):
            self.leaked.set()
        if (item, turn) == ("snooper", 1):
            self.waited = self.leaked.wait(60)
        fault = scenario.reply.get(turn, lambda _: None)(seen)
        if fault is not None:
            return fault
        if turn > len(scenario.turns):
            return Reply(text=scenario.answer([m["content"] for m in tool_messages(request)]))
        return Reply(tool_calls=[tool_call(name, self.arguments(arguments), f"{item}_{turn}_{i}")
                                 for i, (name, arguments) in enumerate(scenario.turns[turn - 1])])

    def arguments(self, arguments: Any) -> Any:
        if isinstance(arguments, dict) and "url" in arguments:
            return {"url": arguments["url"].replace("SERVER", self.base_url)}
        return arguments


@dataclass
class AgentRun:
    exit_code: int
    output: str
    out: Path
    records: dict[str, dict[str, Any]]
    requests: list[Request]
    agent: Agent
    validated: tuple[int, str]
    rerun: tuple[int, int, bool]  # the same command run again: exit code, requests sent, tools.jsonl unchanged

    def transcript(self, item: str) -> list[dict[str, Any]]:
        return list(json.loads(self.records[item]["transcript"]))

    def shown(self, item: str) -> list[tuple[str | None, str]]:
        """What the model was shown of each call, in order: (error type, content), from tools.jsonl."""
        return [(r["error"], r["content"]) for t in self.tool_turns(item) for r in t["results"]]

    def tool_turns(self, item: str) -> list[dict[str, Any]]:
        """The item's lines of store/tools.jsonl, by turn (the scripted call ids start with the item's id)."""
        lines = [json.loads(line) for line in (self.out / "store" / "tools.jsonl").read_text().splitlines()]
        return sorted((t for t in lines if t["calls"][0]["id"].startswith(f"{item}_")), key=lambda t: t["turn"])

    def sent(self, item: str, turn: int) -> list[Request]:
        return [r for r in self.requests if r.api == "chat" and r.user_texts()[0] == item and turn_of(r) == turn]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentRun]:
    if (refused := host().refused) is not None:
        sandbox_refused(refused, host().bwrap is not None)
    tmp = tmp_path_factory.mktemp("python_tools")
    dataset, grader, tools, out = tmp / "items.jsonl", tmp / "grader.json", tmp / "tools.py", tmp / "run"
    dataset.write_text("".join(json.dumps({
        "id": item, "messages": [{"role": "user", "content": item}], "tools": TOOLS_SCHEMA, "start": scenario.start,
        "reference_answer": scenario.reference}) + "\n" for item, scenario in SCENARIOS.items()))
    grader.write_text(json.dumps({"type": "string_check", "name": "exact", "input": "{{ sample.output_text }}",
                                  "reference": "{{ item.reference_answer }}", "operation": "eq"}))
    tools.write_text(TOOLS)
    validated = CliRunner().invoke(app, ["validate", "tools", "--dataset", str(dataset), "--tools", str(tools),
                                         "--epochs", "1", "--max-turns", "5"])
    agent = Agent()
    with FakeOpenAI(agent) as server, hang_guard(300, "an agent run with python tools"):
        agent.base_url = server.base_url
        args = ["run", "--dataset", str(dataset), "--grader", str(grader), "--tools", str(tools), "--model",
                "base=fake-base", "--epochs", "1", "--base-url", server.base_url, "--out", str(out), "--max-turns",
                "5", "--tool-timeout", str(TOOL_TIMEOUT_S), "--tool-memory", str(TOOL_MEMORY_MB),
                "--retry-base-delay", "0.01", "--no-readiness"]
        env = {"NO_COLOR": "1", "COLUMNS": "200", "OPENAI_API_KEY": "sk-tools-0001"}
        res = CliRunner().invoke(app, args, env=env)
        requests = list(server.requests)
        stored = (out / "store" / "tools.jsonl").read_bytes() if out.exists() else b""
        again = CliRunner().invoke(app, args, env=env)  # the same command again: all of it read back
        rerun = (again.exit_code, len(server.requests) - len(requests),
                 (out / "store" / "tools.jsonl").read_bytes() == stored)
    lines = [json.loads(line) for line in (out / "base.jsonl").read_text().splitlines()] if out.exists() else []
    yield AgentRun(res.exit_code, res.output, out, {r["item_id"]: r for r in lines}, requests, agent,
                   (validated.exit_code, validated.output), rerun)


def test_the_tools_fit_the_schemas_the_items_declare(tmp_path: Path) -> None:
    """What `validate tools` checks first, without the sandbox: the scenarios' module and schemas agree."""
    (tmp_path / "tools.py").write_text(TOOLS)
    module = read_tools_module(tmp_path / "tools.py")
    declared = declared_functions(TOOLS_SCHEMA)
    assert set(module.functions) == set(declared) and module.init_state is not None
    assert {name: misfits(module.functions[name], declared[name]) for name in declared} == {n: [] for n in declared}
    called = {name for scenario in SCENARIOS.values() for calls in scenario.turns for name, _ in calls}
    assert called - set(declared) == {"multiply"}  # the unknown tool, on purpose


@pytest.mark.slow  # the module's agent run: the sandbox, a tool past its 2 s time limit
def test_the_run_goes_on_past_every_fault_and_counts_the_tool_errors(run: AgentRun) -> None:
    assert run.exit_code == 0, run.output
    assert set(run.records) == set(SCENARIOS)
    assert all(r["error"] is None for r in run.records.values())  # no fault made a cell a generation error
    expected: Counter[str] = Counter()
    for item, record in run.records.items():
        errors = Counter(error for error, _ in run.shown(item) if error is not None)
        assert Counter(record["tool_errors"]) == errors, item  # the record counts what the model was shown
        expected += errors
    summary = json.loads((run.out / "summary.json").read_text())
    agent = summary["models"]["base"]["agent"]
    assert agent["tool_errors"] == dict(expected) and agent["rollouts"] == len(SCENARIOS)
    assert agent["stop_reasons"] == {"no_tool_calls": len(SCENARIOS) - 1, "length": 1}
    assert summary["tools"]["tool_timeout"] == TOOL_TIMEOUT_S and summary["tools"]["tool_memory"] == TOOL_MEMORY_MB
    assert f"tool errors: {', '.join(f'{k} {v}' for k, v in sorted(expected.items()))}" in run.output


@pytest.mark.slow
def test_the_same_command_again_sends_nothing_and_runs_no_tool(run: AgentRun) -> None:
    assert run.rerun == (0, 0, True)


@pytest.mark.slow
def test_validate_tools_passes_the_module_the_run_played(run: AgentRun) -> None:
    code, output = run.validated
    assert code == 0, output
    assert f"{len(TOOLS_SCHEMA)} tools fit the items' schemas" in output and "the module loads in the sandbox" in output
    cells = len(SCENARIOS)
    assert f"{cells} items x 1 epochs = {cells} cells per model: at most {5 * cells} requests per model" in output


@pytest.mark.slow
def test_a_calculators_result_is_what_the_second_turn_sees(run: AgentRun) -> None:
    (second,) = run.sent("calc", 2)
    assert tool_messages(second) == [{"role": "tool", "tool_call_id": "calc_1_0", "content": "5"}]
    record = run.records["calc"]
    assert (record["output_text"], record["score"], record["turns"], record["tool_calls"]) == ("sum: 5", 1.0, 2, 1)
    assert run.transcript("calc")[1] == tool_messages(second)[0]  # the transcript holds what was sent


@pytest.mark.slow
def test_init_state_makes_the_state_and_the_turns_carry_it(run: AgentRun) -> None:
    # start 10 (the item's, through init_state(item)); +1 in turn 1; +2 then +3 in turn 2's one unit
    assert run.shown("tally") == [(None, "11"), (None, "13"), (None, "16")]
    assert [t["state"] for t in run.tool_turns("tally")] == [{"total": 11, "secret": None}, {"total": 16, "secret": None}]
    assert run.records["tally"]["output_text"] == '["11", "13", "16"]'  # the last turn saw every result


@pytest.mark.slow
def test_bad_arguments_and_an_unknown_tool_are_shown_and_the_next_turn_runs(run: AgentRun) -> None:
    shown = run.shown("bad_args")
    assert [error for error, _ in shown] == ["BadArguments", "BadArguments", "BadArguments", "UnknownTool", None]
    assert shown[0][1].startswith("error: BadArguments: the arguments are not JSON (")
    assert shown[1][1] == "error: BadArguments: got an unexpected keyword argument 'c'"  # bound in the sandbox
    assert shown[2][1] == "error: BadArguments: the arguments are a JSON array, not an object"
    assert shown[3][1].startswith("error: UnknownTool: no tool named 'multiply' (the tools are: add, fail, hog, ")
    assert shown[4] == (None, "5")
    assert run.records["bad_args"]["tool_errors"] == {"BadArguments": 3, "UnknownTool": 1}


@pytest.mark.slow
def test_an_exception_is_its_type_and_message(run: AgentRun) -> None:
    assert run.shown("raises") == [("ValueError", "error: ValueError: out of stock"), (None, "2")]
    assert run.records["raises"]["stop_reason"] == "no_tool_calls"


@pytest.mark.slow
def test_finish_reason_length_mid_rollout_stops_it_and_it_is_graded(run: AgentRun) -> None:
    record = run.records["length"]
    assert (record["stop_reason"], record["turns"], record["tool_calls"]) == ("length", 2, 1)
    assert record["output_text"] == "the answer is 3 and" and record["score"] == 0.0
    assert run.shown("length") == [(None, "3")]  # the cut turn's calls never ran
    assert not run.sent("length", 3)


@pytest.mark.slow
def test_a_429_on_turn_3_is_retried_and_no_tool_turn_runs_twice(run: AgentRun) -> None:
    assert [len(run.sent("rate_limited", turn)) for turn in (1, 2, 3, 4)] == [1, 1, 2, 1]
    assert run.shown("rate_limited") == [(None, "101"), (None, "102"), (None, "103")]
    record = run.records["rate_limited"]
    assert (record["turns"], record["tool_calls"], record["stop_reason"]) == (4, 3, "no_tool_calls")


@pytest.mark.slow
def test_a_tool_past_the_tool_timeout_ends_its_turn_and_the_next_turn_runs(run: AgentRun) -> None:
    shown = run.shown("timeout")
    assert shown[0] == (None, "2")  # what ran before the timeout is kept
    assert shown[1] == ("ToolTimeout", f"error: ToolTimeout: nap ran past the turn's {TOOL_TIMEOUT_S} s time limit")
    assert shown[2][0] == "ToolTimeout" and shown[2][1].startswith("error: ToolTimeout: not run: ")
    assert shown[3] == (None, "6")
    assert run.records["timeout"]["tool_errors"] == {"ToolTimeout": 2}


@pytest.mark.slow
def test_a_tool_past_the_tool_memory_is_killed_and_the_next_turn_runs(run: AgentRun) -> None:
    (error, content), after = run.shown("memory")
    assert error == "ToolMemory" and content.startswith("error: ToolMemory: ") and f"{TOOL_MEMORY_MB} MB" in content
    assert after == (None, "10")


@pytest.mark.slow
def test_a_tool_reaches_no_network_not_even_the_server_on_loopback(run: AgentRun) -> None:
    ((error, content),) = run.shown("network")
    assert error == "URLError" and content.startswith("error: URLError: ") and "refused" in content, content
    assert LEAK_MODEL in TOOLS and {r.model for r in run.requests} == {"fake-base"}  # none came from the tool


@pytest.mark.slow
def test_a_rollout_never_finds_another_rollouts_file_or_module_global(run: AgentRun) -> None:
    assert run.agent.waited  # the snooper looked after the leaker's tool turn had written its secret
    leaker, snooper = run.shown("leaker"), run.shown("snooper")
    assert leaker[:3] == [(None, "kept"), (None, SECRET), (None, SECRET)]  # within its own unit: found
    # its own next turn, a fresh unit: the file and the global are gone, the state alone carries the secret
    assert [error for error, _ in leaker[3:]] == ["FileNotFoundError", "KeyError", None] and leaker[5][1] == SECRET
    assert snooper[0] == ("FileNotFoundError", "error: FileNotFoundError: [Errno 2] No such file or directory: "
                                               "'/tmp/secret.txt'")
    assert snooper[1] == ("KeyError", "error: KeyError: 'secret'") and snooper[2] == (None, "null")
    assert SECRET not in run.records["snooper"]["transcript"]
    assert run.records["snooper"]["tool_errors"] == {"FileNotFoundError": 1, "KeyError": 1}
