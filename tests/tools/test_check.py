"""tools/check.py: a tool function's parameters against the JSON Schema the items declare for it, init_state's
shape, the flags, and the requests a run can send (end to end, the sandbox included: tests/cli/test_validate.py)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from rfteval.errors import InputError
from rfteval.tools.check import Boxes, ToolsCheckRequest, init_state_problems, mcp_misfits, misfits, summary
from rfteval.tools.python import ToolFunction, ToolsModule, _function


def fn(source: str) -> ToolFunction:
    node = ast.parse(source).body[0]
    assert isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
    return _function(node)


def schema(required: list[str], *properties: str) -> dict:
    return {"type": "object", "properties": {p: {"type": "string"} for p in properties}, "required": required}


@pytest.mark.parametrize("source, parameters", [
    ("def search(query, top_k=3, *, item=None, state=None): pass", schema(["query"], "query", "top_k")),
    ("def search(query, top_k=3): pass", schema(["query", "top_k"], "query", "top_k")),  # strict mode: all required
    ("def search(query, **rest): pass", schema(["query"], "query", "anything", "else")),
    ("def ping(): pass", None),
    ("def ping(*, state): pass", {"type": "object", "properties": {}}),
    ("def search(query, *args, limit=1): pass", schema(["query"], "query", "limit")),
], ids=["defaults-optional", "strict-all-required", "kwargs-takes-extra", "no-parameters", "state-only",
        "keyword-only-limit"])
def test_a_function_that_takes_what_the_schema_asks_fits(source: str, parameters: dict | None) -> None:
    assert misfits(fn(source), parameters) == []


@pytest.mark.parametrize("source, parameters, words", [
    ("def search(query, top_k): pass", schema(["query"], "query", "top_k"),
     "parameter 'top_k' has no default, but the schema does not require it"),
    ("def search(query, page): pass", schema(["query"], "query"),
     "parameter 'page' has no default and is not in the schema's properties"),
    ("def search(query): pass", schema(["query"], "query", "top_k"),
     "the schema's property 'top_k' is not a parameter of search() (add it, or **kwargs)"),
    ("def search(query): pass", schema(["query"], "query", "a", "b"),
     "the schema's properties 'a', 'b' are not parameters of search()"),
    ("def search(query, /): pass", schema(["query"], "query"),
     "parameter 'query' is positional-only, but the model's arguments come by name"),
    ("async def search(query): pass", schema(["query"], "query"), "async def is not supported"),
    ("def search(query, *, state=None): pass", schema(["query"], "query", "state"),
     "the schema asks the model for 'state', which rfteval passes"),
], ids=["required-not-required", "required-not-declared", "extra-property", "extra-properties", "positional-only",
        "async", "injected-state"])
def test_each_misfit_is_named(source: str, parameters: dict, words: str) -> None:
    found = misfits(fn(source), parameters)
    assert len(found) == 1 and words in found[0], found


def test_init_state_takes_the_item_as_its_one_argument(tmp_path: Path) -> None:
    def module(source: str) -> ToolsModule:
        return ToolsModule(tmp_path / "tools.py", source, {}, fn(source))

    assert init_state_problems(module("def init_state(item): pass")) == []
    assert init_state_problems(module("def init_state(item, seed=0): pass")) == []
    for bad in ("def init_state(): pass", "def init_state(item, seed): pass", "def init_state(*, item): pass",
                "async def init_state(item): pass"):
        (problem,) = init_state_problems(module(bad))
        assert str(problem) == f"{tmp_path / 'tools.py'}:1: init_state: must be a plain def taking the item as its one " \
                               "argument: def init_state(item)"


@pytest.mark.parametrize("flags, field", [({"max_turns": 0}, "--max-turns"), ({"epochs": 0}, "--epochs"),
                                          ({"timeout_s": 0.0}, "--tool-timeout"), ({"memory_mb": 8}, "--tool-memory")])
def test_bad_flags_are_one_line_naming_the_flag(flags: dict, field: str) -> None:
    with pytest.raises(InputError) as caught:
        ToolsCheckRequest(Path("d.jsonl"), Path("tools.py"), **flags)
    assert caught.value.field == field


def test_the_summary_says_the_most_requests_a_run_can_send(tmp_path: Path) -> None:
    module = ToolsModule(tmp_path / "tools.py", "", {"a": fn("def a(): pass"), "b": fn("def b(): pass")}, None)
    request = ToolsCheckRequest(tmp_path / "d.jsonl", tmp_path / "tools.py", max_turns=8, epochs=5)
    lines = summary(request, Boxes(module=module), ["a"], 120, 100)
    assert "1 tool fit the items' schemas (a); 100 of 120 items declare tools" in lines[0]
    assert lines[1] == ("at most 8 requests per cell (--max-turns); 120 items x 5 epochs = 600 cells per model: at "
                        "most 4,800 requests per model")
    assert lines[2] == "note: b is defined but no item declares it"


def test_an_mcp_tools_schema_misfits_the_items_both_ways_unless_it_takes_any_argument() -> None:
    listed = schema(["text"], "text", "lang")
    assert mcp_misfits("srv", listed, schema(["text"], "text")) == []
    assert mcp_misfits("srv", listed, schema(["msg"], "msg")) == [
        "MCP server 'srv' requires 'text', which the item's schema never asks the model for",
        "the item's schema requires 'msg', which MCP server 'srv''s tool does not take"]
    open_ended = {**schema([], "text"), "additionalProperties": True}
    assert mcp_misfits("srv", open_ended, schema(["msg"], "msg")) == []


def test_a_name_two_boxes_have_is_refused_and_a_missing_tool_names_each_box() -> None:
    module = ToolsModule(Path("tools.py"), "", {"a": fn("def a(): pass")}, None)
    boxes = Boxes(module=module, endpoints=["a", "b"], endpoint_file=Path("tools-config.json"), mcp={})
    assert [str(e) for e in boxes.clashes()] == [
        "tools-config.json: tool 'a' is both in tools.py and in tools-config.json: a tool name must be one tool's "
        "(rename or drop one of them)"]
    assert boxes.owner("b") == "endpoint" and boxes.owner("c") is None
    assert boxes.what_has_none("c") == ("tools.py defines no function c(), tools-config.json lists no tool 'c', no "
                                        "MCP server lists 'c'")


def test_no_tools_named_is_one_line_naming_the_flag() -> None:
    with pytest.raises(InputError) as caught:
        ToolsCheckRequest(Path("d.jsonl"), None)
    assert caught.value.field == "--tools"
