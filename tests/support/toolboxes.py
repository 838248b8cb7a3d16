"""Tool boxes for tests: plain python functions in this process (the run's real one runs tools.py in the sandbox,
rfteval.tools.python), and scripted agents the fake server plays.

`FunctionTools` keeps the ToolBox contract (rfteval/tools/base.py): one turn's calls in order, from a state dict
that crosses as JSON (a copy in, a copy out), `item` and `state` passed to a function only when it declares them,
and every failure a result the model is shown ("error: <Type>: <message>"), never an exception. It counts what it
ran, so a test can say "no tool re-ran".
"""

from __future__ import annotations

import hashlib
import inspect
import json
from collections.abc import Callable, Sequence
from typing import Any

from rfteval.tools.base import (
    BAD_ARGUMENTS,
    UNKNOWN_TOOL,
    ToolCall,
    ToolLimits,
    ToolResult,
    cut,
    error_result,
)
from tests.support.fake_openai import Reply, Request


class FunctionTools:
    """A ToolBox over python functions, run in process. `version` stands for the tools' source: another version
    is another identity (changed tools re-run)."""

    def __init__(self, functions: dict[str, Callable[..., Any]], init: Callable[[dict[str, Any]], dict[str, Any]]
                 | None = None, limits: ToolLimits | None = None, version: str = "v1"):
        self.functions, self.init, self.limits, self.version = functions, init, limits or ToolLimits(), version
        self.turns_run: list[tuple[str, list[str]]] = []  # (rollout id, the turn's tool names), in order
        self.inits = 0
        self.closed = False

    @property
    def identity(self) -> str:
        text = json.dumps([sorted(self.functions), self.version, self.limits.timeout_s, self.limits.memory_mb,
                           self.limits.output_chars])
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def names(self) -> frozenset[str]:
        return frozenset(self.functions)

    async def init_state(self, item: dict[str, Any]) -> dict[str, Any]:
        self.inits += 1
        return json.loads(json.dumps(self.init(item))) if self.init is not None else {}

    async def run_turn(self, rollout_id: str, item: dict[str, Any], calls: Sequence[ToolCall],
                       state: dict[str, Any]) -> tuple[list[ToolResult], dict[str, Any]]:
        state = json.loads(json.dumps(state))  # as it crosses the sandbox's wire
        self.turns_run.append((rollout_id, [c.name for c in calls]))
        return [await self._call(call, item, state) for call in calls], state

    async def _call(self, call: ToolCall, item: dict[str, Any], state: dict[str, Any]) -> ToolResult:
        fn = self.functions.get(call.name)
        if fn is None:
            return error_result(call, UNKNOWN_TOOL, f"no tool named {call.name!r}")
        try:
            args = json.loads(call.arguments) if call.arguments.strip() else {}
        except ValueError as exc:
            return error_result(call, BAD_ARGUMENTS, f"arguments are not JSON ({exc})")
        if not isinstance(args, dict):
            return error_result(call, BAD_ARGUMENTS, "arguments are not a JSON object")
        params = inspect.signature(fn).parameters
        extra = {name: value for name, value in (("item", item), ("state", state)) if name in params}
        try:
            inspect.signature(fn).bind(**args, **extra)
        except TypeError as exc:
            return error_result(call, BAD_ARGUMENTS, str(exc))
        try:
            value = fn(**args, **extra)
            if inspect.isawaitable(value):  # an async tool: awaited, so a cancelled run cancels it mid-turn
                value = await value
        except Exception as exc:  # noqa: BLE001 - a tool's exception is a result the model sees
            return error_result(call, type(exc).__name__, str(exc))
        text = value if isinstance(value, str) else json.dumps(value)
        return ToolResult(call.id, call.name, cut(text, self.limits.output_chars))

    async def aclose(self) -> None:
        self.closed = True


def calculator(**more: Callable[..., Any]) -> FunctionTools:
    """add(a, b), and a counter tool that keeps its count in the rollout's state."""

    def add(a: float, b: float) -> float:
        return a + b

    def count(*, state: dict[str, Any]) -> int:
        state["n"] = state.get("n", 0) + 1
        return int(state["n"])

    return FunctionTools({"add": add, "count": count, **more})


def tool_call(name: str, arguments: Any, call_id: str = "call_1") -> dict[str, Any]:
    """One tool call as a chat completion carries it."""
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": text}}


def tool_messages(request: Request) -> list[dict[str, Any]]:
    """The `tool` messages of a chat request's history."""
    return [m for m in request.body.get("messages") or [] if isinstance(m, dict) and m.get("role") == "tool"]


def turn_of(request: Request) -> int:
    """Which turn of its rollout a chat request is: 1 + the assistant messages in its history."""
    return 1 + sum(1 for m in request.body.get("messages") or [] if isinstance(m, dict) and m.get("role") == "assistant")


def scripted_agent(plan: Callable[[Request, int], Reply]) -> Callable[[Request], Reply]:
    """A fake-server responder that answers each request by its turn: plan(request, turn)."""
    return lambda request: plan(request, turn_of(request))


def adding_agent(request: Request, turn: int) -> Reply:
    """Turn 1 calls add(2, 3); turn 2 answers with what the tool returned ("sum: 5.0")."""
    if turn == 1:
        return Reply(text=None, tool_calls=[tool_call("add", {"a": 2, "b": 3})])
    results = tool_messages(request)
    return Reply(text=f"sum: {results[-1]['content'] if results else '?'}")


def adding_each_user_message(request: Request) -> Reply:
    """After each user message (the prompt's, then each scripted follow-up's), add the two numbers it names; after
    the tool's answer, say the sum. Each turn's call has its own id (c1, c2, ...)."""
    messages = request.body["messages"]
    last = messages[-1]
    if last["role"] == "user":
        a, b = (int(w) for w in last["content"].split() if w.isdigit())
        turn = sum(1 for m in messages if m["role"] == "assistant") + 1
        return Reply(tool_calls=[tool_call("add", {"a": a, "b": b}, f"c{turn}")])
    return Reply(text=f"sum: {last['content']}")


ADD_TOOLS_PY = "def add(a: float, b: float):\n    return a + b\n"  # TOOLS_SCHEMA's add as a tools.py the sandbox runs


TOOLS_SCHEMA: list[dict[str, Any]] = [
    {"type": "function", "function": {"name": "add", "description": "Add two numbers.",
                                      "parameters": {"type": "object", "properties": {"a": {"type": "number"},
                                                                                      "b": {"type": "number"}},
                                                     "required": ["a", "b"]}}},
    {"type": "function", "function": {"name": "count", "description": "Count up.",
                                      "parameters": {"type": "object", "properties": {}}}},
]
