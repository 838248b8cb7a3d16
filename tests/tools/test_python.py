"""tools/python.py: a tools.py module as a run's tool box. Its functions read without running it; each turn in a
fresh sandbox unit, the state carried as JSON between turns and never between rollouts; every way a call fails
is its result, "error: <Type>: <message>", counted by type."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from rfteval.errors import InputError
from rfteval.sandbox import SandboxPolicy, host
from rfteval.sandbox.turns import ToolPool
from rfteval.tools.base import ToolCall, ToolLimits, ToolResult, cut
from rfteval.tools.python import (
    Param,
    PythonTools,
    ToolStateError,
    declared_functions,
    open_python_tools,
    read_tools_module,
)
from tests.support.guard import hang_guard
from tests.support.optional import sandbox_refused

LIMITS = ToolLimits(timeout_s=2.0, memory_mb=256, output_chars=40)

TOOLS = '''
import time

CALLS = 0  # a module global: every unit starts from the template's, whatever an earlier unit did to it

def init_state(item):
    return {"cart": [], "user": item["user"]}

def add_to_cart(sku: str, qty: int = 1, *, state=None):
    state["cart"].append([sku, qty])
    return {"items": len(state["cart"]), "user": state["user"]}

def calls_so_far():
    global CALLS
    CALLS += 1
    return CALLS

def whoami(*, item=None):
    item["user"] = "mallory"  # a copy: nothing else sees this
    return item["id"]

def no_item(**kwargs):
    return sorted(kwargs)

def fail(reason: str):
    raise ValueError(reason)

def sleep(seconds: float):
    time.sleep(seconds)

def allocate(mb: int):
    return len(bytearray(mb << 20))

def a_set():
    return {1}

def essay():
    return "word " * 100
'''


def item(user: str, id: str = "q1", tools: list[str] | None = None) -> dict:
    line: dict = {"id": id, "user": user, "messages": [{"role": "user", "content": "shop"}]}
    if tools is not None:
        line["tools"] = [{"type": "function", "function": {"name": name, "parameters": {}}} for name in tools]
    return line


def call(name: str, arguments: object = None, id: str = "c1") -> ToolCall:
    return ToolCall(id, name, arguments if isinstance(arguments, str) else json.dumps(arguments or {}))


def turn(box: PythonTools, line: dict, calls: list[ToolCall], state: dict) -> tuple[list[ToolResult], dict]:
    with hang_guard(120, "a tool turn"):
        return asyncio.run(box.run_turn("r1", line, calls, state))


@pytest.fixture(scope="module")
def tools_py(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tools") / "tools.py"
    path.write_text(TOOLS, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def box(tools_py: Path) -> Iterator[PythonTools]:
    if (refused := host().refused) is not None:
        sandbox_refused(refused, host().bwrap is not None)
    tools = open_python_tools(tools_py, LIMITS, SandboxPolicy(unsafe=False))
    yield tools
    tools.close()


@pytest.fixture
def unstarted(tools_py: Path) -> Iterator[PythonTools]:
    """A tool box whose sandbox never starts: for the calls answered in this process."""
    pool = ToolPool(workers=1)
    yield PythonTools(read_tools_module(tools_py), LIMITS, pool)
    pool.close()


# ---------------------------------------------------------------- the module, read without running it


def test_the_tools_are_the_public_top_level_defs(tmp_path: Path) -> None:
    path = tmp_path / "tools.py"
    path.write_text("import os\nfrom json import dumps\n\ndef _private(): pass\n\nclass Thing: pass\n\n"
                    "def search(q, /, k=3, *args, item=None, state, **kw): pass\n\n"
                    "async def later(): pass\n\ndef init_state(item): return {}\n", encoding="utf-8")
    module = read_tools_module(path)
    assert sorted(module.functions) == ["later", "search"] and module.init_state is not None
    search = module.functions["search"]
    assert search.line == 8 and search.var_keyword and not search.is_async and module.functions["later"].is_async
    assert search.params == (Param("q", "positional_only", True), Param("k", "positional", False),
                             Param("item", "keyword_only", False), Param("state", "keyword_only", True))
    assert [p.name for p in search.model_params] == ["q", "k"]


def test_a_module_that_does_not_parse_is_one_line_naming_its_line(tmp_path: Path) -> None:
    path = tmp_path / "tools.py"
    path.write_text("def ok():\n    return 1\n\ndef broken(:\n", encoding="utf-8")
    with pytest.raises(InputError) as caught:
        read_tools_module(path)
    assert str(caught.value).startswith(f"{path}:4: does not parse")
    with pytest.raises(InputError, match="no such file"):
        read_tools_module(tmp_path / "missing.py")


def test_declared_tools_are_read_in_chat_and_responses_shapes() -> None:
    tools = [{"type": "function", "function": {"name": "a", "parameters": {"type": "object"}}},
             {"type": "function", "name": "b", "parameters": {"properties": {}}},
             {"type": "web_search"}, "junk", {"type": "function", "function": {"name": 3}}]
    assert declared_functions(tools) == {"a": {"type": "object"}, "b": {"properties": {}}}
    assert declared_functions(None) == {}


# ---------------------------------------------------------------- calls answered here, no sandbox


def test_unknown_tools_and_bad_argument_json_are_answered_without_a_unit(unstarted: PythonTools) -> None:
    calls = [call("nope", {}, "c1"), call("fail", "{not json", "c2"), call("fail", "[1, 2]", "c3"),
             call("whoami", {}, "c4")]
    results, state = asyncio.run(unstarted.run_turn("r", item("ann", tools=["fail", "nope"]), calls, {"s": 1}))
    assert [(r.call_id, r.error) for r in results] == [("c1", "UnknownTool"), ("c2", "BadArguments"),
                                                       ("c3", "BadArguments"), ("c4", "UnknownTool")]
    assert results[0].content.startswith("error: UnknownTool: no tool named 'nope' (the tools are: a_set, ")
    assert results[1].content.startswith("error: BadArguments: the arguments are not JSON (")
    assert results[2].content == "error: BadArguments: the arguments are a JSON array, not an object"
    assert results[3].content == "error: UnknownTool: 'whoami' is not one of this item's tools"
    assert state == {"s": 1}
    assert unstarted._pool.pids == []  # nothing was sent to a sandbox


def test_identity_changes_with_the_source_and_the_limits(unstarted: PythonTools, tools_py: Path) -> None:
    pool = ToolPool(workers=1)
    try:
        same = PythonTools(read_tools_module(tools_py), LIMITS, pool)
        other_limit = PythonTools(read_tools_module(tools_py), ToolLimits(2.0, 256, 41), pool)
        module = read_tools_module(tools_py)
        edited = PythonTools(type(module)(module.path, module.source + "\n", module.functions, module.init_state),
                             LIMITS, pool)
    finally:
        pool.close()
    assert unstarted.identity == same.identity
    assert len({unstarted.identity, other_limit.identity, edited.identity}) == 3
    assert "init_state" not in unstarted.names() and {"add_to_cart", "fail"} <= unstarted.names()


# ---------------------------------------------------------------- through the sandbox


@pytest.mark.slow
def test_state_is_carried_across_turns_and_never_between_rollouts(box: PythonTools) -> None:
    ann, bob = item("ann", "q1"), item("bob", "q2")
    ann_state = asyncio.run(box.init_state(ann))
    bob_state = asyncio.run(box.init_state(bob))
    assert ann_state == {"cart": [], "user": "ann"} and bob_state == {"cart": [], "user": "bob"}
    (a1,), ann_state = turn(box, ann, [call("add_to_cart", {"sku": "apple"})], ann_state)
    (b1,), bob_state = turn(box, bob, [call("add_to_cart", {"sku": "pear", "qty": 2})], bob_state)
    (a2,), ann_state = turn(box, ann, [call("add_to_cart", {"sku": "fig"})], ann_state)
    (b2,), bob_state = turn(box, bob, [call("calls_so_far")], bob_state)
    assert [a1.content, b1.content, a2.content] == ['{"items": 1, "user": "ann"}', '{"items": 1, "user": "bob"}',
                                                    '{"items": 2, "user": "ann"}']
    assert ann_state == {"cart": [["apple", 1], ["fig", 1]], "user": "ann"}
    assert bob_state == {"cart": [["pear", 2]], "user": "bob"}
    assert b2.content == "1"  # a module global counted in no earlier unit: every turn starts from the template


@pytest.mark.slow
def test_the_item_is_passed_only_to_a_tool_that_declares_it(box: PythonTools) -> None:
    results, _ = turn(box, item("ann", "q7"), [call("whoami"), call("no_item", {"x": 1}), call("whoami")], {})
    assert [r.content for r in results] == ["q7", '["x"]', "q7"]  # **kwargs gets the model's arguments only


@pytest.mark.slow
def test_every_failure_is_an_error_result_of_its_type(box: PythonTools) -> None:
    calls = [call("add_to_cart", {"sku": "a", "colour": "red"}), call("fail", {"reason": "out of stock"}),
             call("a_set"), call("nope"), call("fail", "{bad")]
    results, state = turn(box, item("ann"), calls, {"cart": [], "user": "ann"})
    assert [r.error for r in results] == ["BadArguments", "ValueError", "TypeError", "UnknownTool", "BadArguments"]
    assert results[0].content == "error: BadArguments: got an unexpected keyword argument 'colour'"
    assert results[1].content == "error: ValueError: out of stock"
    assert results[2].content.startswith("error: TypeError: a_set returned a set, which is not JSON")
    assert state == {"cart": [], "user": "ann"}


@pytest.mark.slow
def test_a_turn_past_its_time_or_memory_ends_there(box: PythonTools) -> None:
    start = {"cart": [], "user": "ann"}
    results, state = turn(box, item("ann"), [call("add_to_cart", {"sku": "a"}), call("sleep", {"seconds": 30}),
                                             call("add_to_cart", {"sku": "b"})], start)
    assert [r.error for r in results] == [None, "ToolTimeout", "ToolTimeout"]
    assert results[1].content == "error: ToolTimeout: sleep ran past the turn's 2 s time limit"
    assert results[2].content.startswith("error: ToolTimeout: not run: ")
    assert state == {"cart": [["a", 1]], "user": "ann"}  # what ran before the timeout is kept
    results, state = turn(box, item("ann"), [call("allocate", {"mb": 1024}), call("calls_so_far")], start)
    assert [r.error for r in results] == ["ToolMemory", "ToolMemory"] and "256 MB" in results[0].content
    assert state == start


@pytest.mark.slow
def test_a_long_result_is_cut_at_the_output_limit(box: PythonTools) -> None:
    (result,), _ = turn(box, item("ann"), [call("essay")], {})
    assert result.content == cut("word " * 100, 40) and result.error is None


@pytest.mark.slow
def test_empty_arguments_are_no_arguments(box: PythonTools) -> None:
    (result,), _ = turn(box, item("ann"), [call("calls_so_far", "")], {})
    assert result.content == "1"


@pytest.mark.slow
def test_a_failing_init_state_stops_the_rollout_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "tools.py"
    path.write_text("def init_state(item):\n    raise KeyError('user')\n\ndef t():\n    return 1\n", encoding="utf-8")
    plain = tmp_path / "plain.py"
    plain.write_text("def t():\n    return 1\n", encoding="utf-8")
    with hang_guard(120, "init_state"):
        box = open_python_tools(path, LIMITS, SandboxPolicy(unsafe=False))
        try:
            with pytest.raises(ToolStateError, match=r"init_state\(item q1\) failed: KeyError: 'user'"):
                asyncio.run(box.init_state(item("ann")))
        finally:
            box.close()
        without = open_python_tools(plain, LIMITS, SandboxPolicy(unsafe=False))
        try:
            assert asyncio.run(without.init_state(item("ann"))) == {}
        finally:
            without.close()


@pytest.mark.slow
def test_a_module_that_does_not_load_is_refused_before_any_request(tmp_path: Path) -> None:
    path = tmp_path / "tools.py"
    path.write_text("import json\n\nCONFIG = json.loads('{')\n", encoding="utf-8")
    with pytest.raises(InputError) as caught, hang_guard(120, "loading"):
        open_python_tools(path, LIMITS, SandboxPolicy(unsafe=False))
    assert str(caught.value).startswith(f"{path}:3: does not load in the sandbox: JSONDecodeError: ")


@pytest.mark.parametrize("limits, words", [
    (ToolLimits(output_chars=2_000_000), "--tool-output-limit: must be 1 to 1,000,000 characters"),
    (ToolLimits(timeout_s=0.0), "--tool-timeout: must be a number of seconds > 0"),
    (ToolLimits(memory_mb=8), "--tool-memory: must be at least 16 (MB)")])
def test_limits_the_sandbox_cannot_hold_are_refused(tools_py: Path, limits: ToolLimits, words: str) -> None:
    with pytest.raises(InputError, match=re.escape(words)):
        open_python_tools(tools_py, limits, SandboxPolicy(unsafe=False))
