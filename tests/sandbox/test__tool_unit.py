"""sandbox/_tool_unit.py in this process: a turn's calls as a unit's child runs them (the state, the item, every
error of a call), what the supervisor believes of the child's records, and its copies of tools.base's names.
Through the real sandbox: tests/sandbox/test_turns.py."""

from __future__ import annotations

import json
import marshal
import signal
import types
from collections.abc import Iterator

import pytest

from rfteval.sandbox import _tool_unit
from rfteval.sandbox._tool_unit import TOOL_TIMEOUT, Tools, Turn, TurnCheck, load_failed_rows, load_failure
from rfteval.tools import base

SOURCE = '''
import json

class Forged(Exception):
    pass

Forged.__name__ = "not a name"

def init_state(item):
    return {"seen": [], "id": item["id"]}

def add(x: int, *, state=None):
    state["seen"].append(x)
    return {"total": sum(state["seen"])}

def echo(text, *, item=None):
    item["id"] = "changed"  # a fresh copy each call: the next call sees the line as sent
    return f"{text} {item['id']}"

def whose(*, item=None):
    return item["id"]

def positional(state):
    return f"positional {state}"

def boom(message="bad"):
    raise ValueError(message + "\\n  on two lines")

def forged():
    raise Forged("x")

def a_set():
    return {1, 2}

def poison(*, state=None):
    state["bad"] = {1}
    return "ok"

def changes_then_fails(*, state=None):
    state["seen"].append(99)
    raise KeyError("gone")

def huge(*, state=None):
    state["big"] = "x" * (1 << 21)
    return "ok"

def text_subclass():
    class Label(str):
        pass
    return Label("plain")

def long():
    return "y" * 50

def returns_none():
    return None
'''


class Recorder:
    """What a turn needs of _worker.Child; the records it commits are kept in order."""

    def __init__(self, timeout_s: float = 30.0):
        self.in_call = False
        self.call_started = 0.0
        self.timeout_s = timeout_s
        self.records: list[tuple[int, tuple[str, str] | None, str | None]] = []

    def commit(self, index: int, score: float, error: tuple[str, str] | None, stdout: str | None) -> None:
        self.records.append((index, error, stdout))


class Alarm(BaseException):
    pass


@pytest.fixture(autouse=True)
def alarm() -> Iterator[None]:
    """A turn arms the real-time timer before each call (as in a unit's child): disarmed after each test."""
    before = signal.signal(signal.SIGALRM, signal.SIG_IGN)
    yield
    signal.setitimer(signal.ITIMER_REAL, 0)
    signal.signal(signal.SIGALRM, before)


@pytest.fixture(scope="module")
def tools() -> Tools:
    module = types.ModuleType("rfteval_tools_under_test")
    exec(compile(SOURCE, "<tools test>", "exec"), module.__dict__)
    return Tools(module.__dict__, module.__name__)


def turn(tools: Tools, calls: list[tuple[str, dict | None]], state: dict | None = None,
         item: dict | None = None, limit: int = 1000) -> tuple[list[tuple[str | None, str | None]], dict | None]:
    """The calls as a unit's child runs them: (error type or None, content or message) per call, and the state
    after (None: unchanged)."""
    recorder = Recorder()
    unit = (marshal.dumps(item or {"id": "q1"}), json.dumps(state if state is not None else {"seen": []}),
            [(name, None if args is None else marshal.dumps(args)) for name, args in calls], limit)
    Turn(recorder, tools, unit, Alarm, {"memory": "256 MB", "timeout": "30 s"}).run()
    *rows, (last, no_error, state_text) = recorder.records
    assert last == len(calls) and no_error is None  # the state record comes last, numbered after the calls
    assert [index for index, _, _ in rows] == list(range(len(rows)))
    results = [(error[0], error[1]) if error else (None, content) for _, error, content in rows]
    return results, None if state_text is None else json.loads(state_text)


def test_the_state_goes_from_call_to_call_and_comes_back_as_json(tools: Tools) -> None:
    results, state = turn(tools, [("add", {"x": 2}), ("add", {"x": 5})])
    assert results == [(None, '{"total": 2}'), (None, '{"total": 7}')]
    assert state == {"seen": [2, 5]}


def test_a_turn_that_leaves_the_state_alone_sends_none(tools: Tools) -> None:
    assert turn(tools, [("echo", {"text": "hi"})]) == ([(None, "hi changed")], None)


def test_item_and_state_are_given_only_to_keyword_only_parameters_of_those_names(tools: Tools) -> None:
    results, _ = turn(tools, [("echo", {"text": "a"}), ("whose", {}), ("positional", {"state": "the model's"})],
                      item={"id": "q7"})
    assert results == [(None, "a changed"), (None, "q7"), (None, "positional the model's")]  # a fresh item each call


def test_the_model_cannot_give_what_rfteval_passes(tools: Tools) -> None:
    results, state = turn(tools, [("add", {"x": 1, "state": {"seen": [100]}}), ("whose", {"item": {"id": "forged"}})])
    assert [r[0] for r in results] == ["BadArguments", "BadArguments"] and "'state'" in results[0][1]
    assert state is None


def test_arguments_that_do_not_bind_are_bad_arguments_with_the_binding_message(tools: Tools) -> None:
    results, _ = turn(tools, [("add", {}), ("add", {"x": 1, "y": 2}), ("add", ["not", "an", "object"])])
    assert results[0] == ("BadArguments", "missing a required argument: 'x'")
    assert results[1] == ("BadArguments", "got an unexpected keyword argument 'y'")
    assert results[2] == ("BadArguments", "the arguments are not a JSON object")


def test_an_unknown_tool_and_a_private_name_are_unknown_tools(tools: Tools) -> None:
    results, _ = turn(tools, [("nope", {}), ("_hidden", {}), ("init_state", {"item": {}}), ("json", {})])
    assert [r[0] for r in results] == ["UnknownTool"] * 4
    assert results[0][1] == "the tools module defines no function 'nope'"


def test_an_exception_is_its_type_and_one_line_and_the_turn_goes_on(tools: Tools) -> None:
    results, _ = turn(tools, [("boom", {}), ("forged", {}), ("add", {"x": 1})])
    assert results[0] == ("ValueError", "bad on two lines")  # one line, no traceback
    assert results[1] == ("Exception", "x")  # a class whose name is no name is counted as Exception
    assert results[2] == (None, '{"total": 1}')


def test_return_values_a_str_as_it_is_else_json_else_an_error(tools: Tools) -> None:
    results, _ = turn(tools, [("text_subclass", {}), ("returns_none", {}), ("a_set", {})])
    assert results[0] == (None, "plain") and results[1] == (None, "null")
    assert results[2][0] == "TypeError" and "a_set returned a set, which is not JSON" in results[2][1]


def test_the_content_is_cut_at_the_limit_as_tools_base_cuts_it(tools: Tools) -> None:
    results, _ = turn(tools, [("long", {})], limit=10)
    assert results == [(None, base.cut("y" * 50, 10))]


def test_a_failed_call_leaves_the_state_as_it_was_before_it(tools: Tools) -> None:
    results, state = turn(tools, [("add", {"x": 1}), ("changes_then_fails", {}), ("poison", {}), ("huge", {}),
                                  ("add", {"x": 2})])
    assert results[1] == ("KeyError", "'gone'")
    assert results[2][0] == "TypeError" and "the state after poison is not JSON" in results[2][1]
    assert results[3][0] == "ValueError" and "a rollout's state may hold" in results[3][1]
    assert results[4] == (None, '{"total": 3}')  # 99, {1} and the 2 MB string are gone
    assert state == {"seen": [1, 2]}


def test_init_state_makes_the_first_state_from_the_item(tools: Tools) -> None:
    results, state = turn(tools, [("init_state", None)], state={}, item={"id": "q3"})
    assert results == [(None, "")] and state == {"seen": [], "id": "q3"}


def test_init_state_that_returns_no_dict_or_is_missing_is_an_error() -> None:
    namespace: dict[str, object] = {"init_state": lambda item: [item]}
    results, state = turn(Tools(namespace, "m"), [("init_state", None)], state={})
    assert results[0][0] == "TypeError" and "not a dict" in results[0][1] and state is None
    results, _ = turn(Tools({}, "m"), [("init_state", None)], state={})
    assert results[0][0] == "UnknownTool"


def test_a_timeout_ends_the_turn_and_keeps_what_ran_before(tools: Tools) -> None:
    recorder = Recorder(timeout_s=30.0)
    namespace = {"slow": lambda: (_ for _ in ()).throw(Alarm())}  # as the child's alarm interrupts a call
    unit = (marshal.dumps({}), "{}", [("slow", marshal.dumps({})), ("slow", marshal.dumps({}))], 100)
    Turn(recorder, Tools(namespace, "m"), unit, Alarm, {"memory": "256 MB"}).run()
    assert [(i, e[0] if e else None) for i, e, _ in recorder.records] == [(0, TOOL_TIMEOUT), (2, None)]


def test_the_tool_error_names_are_tools_bases_and_its_cut_is_the_same() -> None:
    assert (_tool_unit.BAD_ARGUMENTS, _tool_unit.UNKNOWN_TOOL, _tool_unit.TOOL_TIMEOUT, _tool_unit.TOOL_MEMORY,
            _tool_unit.TOOL_CRASH) == (base.BAD_ARGUMENTS, base.UNKNOWN_TOOL, base.TOOL_TIMEOUT, base.TOOL_MEMORY,
                                       base.TOOL_CRASH)
    for text, limit in [("", 0), ("abc", 3), ("abcd", 3), ("é" * 100, 7), ("x" * 10, 0)]:
        assert _tool_unit.cut(text, limit) == base.cut(text, limit)
    marker = base.cut("xx", 1)[1:].replace("1", str(10**15))  # the marker for a quadrillion characters cut
    assert len(marker) <= _tool_unit.MARKER_CHARS


def test_the_supervisor_takes_records_in_order_and_bounded() -> None:
    check = TurnCheck(2, 10)
    assert check.add(0, None, None, "ok") and check.add(1, "ValueError", "m", None) and check.add(2, None, None, "{}")
    assert check.done and check.finish(None) == [[0.0, None, None, "ok"], [0.0, "ValueError", "m", None],
                                                 [0.0, None, None, "{}"]]
    assert not check.add(2, None, None, "{}")  # nothing after the state record
    for bad in [(1, None, None, "ok"), (0, None, None, "y" * 100), (0, "not a type", "m", None), (0, None, None, None),
                (0, "ValueError", "m", "content too"), (2, "ValueError", "m", None), (5, None, None, "ok")]:
        assert not TurnCheck(2, 10).add(*bad), bad
    worker_own = TurnCheck(1, 10)
    assert worker_own.add(0, "python_grader_server_error", "did not fit", None)
    assert worker_own.rows[0][1] == "ToolCrash"


def test_a_unit_that_failed_mid_turn_is_charged_to_the_call_it_was_on() -> None:
    check = TurnCheck(3, 10)
    check.add(0, None, None, "ok")
    assert check.finish(("ToolTimeout", "stuck")) == [[0.0, None, None, "ok"], [0.0, "ToolTimeout", "stuck", None],
                                                       [0.0, None, None, None]]
    assert load_failed_rows(("python_grader_runtime_error", "why")) == [[0.0, "python_grader_runtime_error", "why",
                                                                         None]]


def test_a_load_failure_names_the_modules_own_line() -> None:
    source = "import os\n\nx = 1 / 0\n"
    try:
        exec(compile(source, "<tools abc>", "exec"), {})
    except ZeroDivisionError as exc:
        assert load_failure(exc, "<tools abc>") == "line 3: ZeroDivisionError: division by zero"
        assert load_failure(exc, "<elsewhere>") == "ZeroDivisionError: division by zero"
