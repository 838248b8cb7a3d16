"""rfteval/tools/composite.py: python tools and endpoint tools as one tool box: calls routed by name, in order, the
state carried through; a name both have refused in one line."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from rfteval.errors import InputError
from rfteval.tools.base import ToolCall
from rfteval.tools.composite import CompositeTools
from tests.support.toolboxes import FunctionTools, calculator


def remote() -> FunctionTools:
    """A stand-in for endpoint tools: no state of its own, the state it is handed passed back."""
    return FunctionTools({"lookup": lambda key: f"value of {key}"}, version="remote")


def run(box: CompositeTools, calls: list[tuple[str, str]], state: dict[str, Any]) -> Any:
    wanted = [ToolCall(f"c{i}", name, args) for i, (name, args) in enumerate(calls)]
    return asyncio.run(box.run_turn("trace_x", {"id": "q"}, wanted, state))


def test_calls_go_to_their_box_in_order_with_the_state_carried_through():
    local, far = calculator(), remote()
    box = CompositeTools([("tools.py", local), ("tools-config.json", far)])
    assert box.names() == frozenset({"add", "count", "lookup"})
    results, state = run(box, [("count", "{}"), ("count", "{}"), ("lookup", '{"key": "k"}'), ("count", "{}"),
                               ("nope", "{}")], {"n": 10})
    assert [r.content for r in results] == ["11", "12", "value of k", "13", results[-1].content]
    assert results[-1].error == "UnknownTool" and "(the tools are: add, count, lookup)" in results[-1].content
    assert state == {"n": 13}
    # a stretch of one box's calls is one of its turns (a python turn stays one sandbox unit), the trace passed on
    assert local.turns_run == [("trace_x", ["count", "count"]), ("trace_x", ["count"])]
    assert far.turns_run == [("trace_x", ["lookup"])]


def test_the_first_state_merges_each_boxs_and_the_identity_follows_every_box():
    local = FunctionTools({"add": lambda a, b: a + b}, init=lambda item: {"seen": item["id"]})
    box = CompositeTools([("tools.py", local), ("tools-config.json", remote())])
    assert asyncio.run(box.init_state({"id": "q3"})) == {"seen": "q3"}
    other = CompositeTools([("tools.py", local), ("tools-config.json", FunctionTools({"lookup": str}, version="v2"))])
    assert box.identity != other.identity
    assert CompositeTools([("tools.py", local), ("tools-config.json", remote())]).identity == box.identity


def test_a_name_in_two_boxes_is_one_line():
    with pytest.raises(InputError) as caught:
        CompositeTools([("tools.py", calculator()), ("tools-config.json", FunctionTools({"add": max}))])
    assert str(caught.value) == ("tools-config.json: --tool-endpoints: tool 'add' is both in tools.py and in "
                                 "tools-config.json: a tool name must be one tool's (rename or drop one of them)")


def test_closing_closes_every_box():
    local, far = calculator(), remote()
    asyncio.run(CompositeTools([("tools.py", local), ("tools-config.json", far)]).aclose())
    assert local.closed and far.closed
