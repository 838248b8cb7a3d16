"""Python tools: a tools.py module whose functions a rollout calls, each turn's calls run in the python sandbox.

`open_python_tools` reads the module's functions from its syntax tree (this process never runs a line of it),
checks that it loads in the sandbox, and returns a `PythonTools`, the ToolBox a run plays its rollouts against.
A turn's calls to a tool the module does not define (or the item does not declare) and arguments that are not a
JSON object are answered here, without the sandbox; the rest run in order in one fresh unit forked from the
template that imported the module once (sandbox/turns.py), from the rollout's state as JSON, and come back as a
result each and the state after. So one rollout's tools never see another rollout's, model's or run's: nothing
outlives a unit but the state this process hands the next turn.

A tool is a public top-level `def`: `def search(query: str, top_k: int = 3, *, item=None, state=None)`. Keyword-only
parameters named `item` (a fresh copy of the dataset line) and `state` (the rollout's state, a dict the call may
change in place) are passed when declared, never by the model. Its return value is the tool message: a str as it
is, anything else as JSON (`json.dumps(value, ensure_ascii=False)`), cut at the output limit (in the sandbox, by
a copy of tools.base.cut, and bounded here again). `init_state(item) -> dict`, when defined, makes a rollout's
first state; else it is {}. What a tool prints is neither shown to the model nor kept.

Every failure of a call is its result ("error: <Type>: <message>", tools.base.error_result), never an exception:
`BadArguments` (not a JSON object, or not the function's parameters: the binding's TypeError), `UnknownTool`,
the exception's own type name (`ValueError: message`, one line, no traceback), `ToolTimeout` and `ToolMemory`
(the unit's limits: the turn ends there, and its later calls are "not run" of the same type), `ToolCrash` (the
unit died otherwise). A return value that is not JSON is a TypeError result ("search returned a set, which is not
JSON ..."); a state that is not JSON after a call (or is over 1,048,576 characters of it) is that call's error,
and a call that fails in any way leaves the state as it was before it.
"""

from __future__ import annotations

import ast
import asyncio
import hashlib
import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from rfteval.errors import InputError, read_input_text
from rfteval.limits import PYTHON_MIN_MEMORY_MB
from rfteval.tools.base import BAD_ARGUMENTS, UNKNOWN_TOOL, ToolCall, ToolLimits, ToolResult, error_result

if TYPE_CHECKING:
    from rfteval.data.json_types import JSONInput, JSONObject
    from rfteval.sandbox.policy import SandboxPolicy
    from rfteval.sandbox.turns import CallOutcome, ToolPool

INIT_STATE = "init_state"
INJECTED = ("item", "state")  # keyword-only parameters rfteval passes, never the model
LOAD_LINE = re.compile(r"line (\d+): ")  # how the sandbox says where a module's load failed (_tool_unit.load_failure)


class ToolStateError(RuntimeError):
    """init_state(item) failed (raised, returned no dict, ran out of time or memory): the rollout has no first
    state. One line, naming the item and the error."""


@dataclass(frozen=True)
class Param:
    """One parameter of a tool function, as its `def` says: its kind ("positional_only", "positional" or
    "keyword_only") and whether it has no default."""

    name: str
    kind: str
    required: bool


@dataclass(frozen=True)
class ToolFunction:
    """A top-level function of the module, read from its syntax tree: its `def` line, parameters, whether it takes
    **kwargs and whether it is an `async def`."""

    name: str
    line: int
    params: tuple[Param, ...]
    var_keyword: bool
    is_async: bool

    def injected(self, name: str) -> bool:
        """Whether rfteval passes `name` ("item" or "state"): a keyword-only parameter of that name."""
        return any(p.name == name and p.kind == "keyword_only" for p in self.params)

    @property
    def model_params(self) -> tuple[Param, ...]:
        """The parameters the model's arguments fill (the injected ones left out)."""
        return tuple(p for p in self.params if not (p.kind == "keyword_only" and p.name in INJECTED))


@dataclass(frozen=True)
class ToolsModule:
    """A tools.py module: its path and source, its tools by name, and its init_state when it defines one."""

    path: Path
    source: str
    functions: dict[str, ToolFunction]
    init_state: ToolFunction | None


def read_tools_module(path: str | Path) -> ToolsModule:
    """The module's tools, read without running it: its public top-level `def`s (init_state apart). A file that
    cannot be read or parsed is one line (InputError)."""
    path = Path(path)
    source = read_input_text(path, "a python file")
    try:
        tree = ast.parse(source, filename=str(path))
    except SyntaxError as exc:
        raise InputError(f"does not parse: {exc.msg}", path, exc.lineno) from None
    except (ValueError, RecursionError, MemoryError) as exc:
        raise InputError(f"does not parse: {exc}", path) from None
    functions: dict[str, ToolFunction] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not node.name.startswith("_"):
            functions[node.name] = _function(node)  # a name defined twice: the last def, as Python has it
    init = functions.pop(INIT_STATE, None)
    return ToolsModule(path, source, functions, init)


def _function(node: ast.FunctionDef | ast.AsyncFunctionDef) -> ToolFunction:
    args = node.args
    positional = [*args.posonlyargs, *args.args]
    first_default = len(positional) - len(args.defaults)
    params = [Param(a.arg, "positional_only" if i < len(args.posonlyargs) else "positional", i < first_default)
              for i, a in enumerate(positional)]
    params += [Param(a.arg, "keyword_only", default is None) for a, default in zip(args.kwonlyargs, args.kw_defaults)]
    return ToolFunction(node.name, node.lineno, tuple(params), args.kwarg is not None,
                        isinstance(node, ast.AsyncFunctionDef))


def declared_functions(tools: JSONInput) -> dict[str, JSONInput]:
    """An item's `tools` as {name: parameters schema} for its function tools, in chat's shape ({"type":
    "function", "function": {"name", "parameters"}}) or Responses' ({"type": "function", "name", "parameters"})."""
    out: dict[str, JSONInput] = {}
    for tool in tools if isinstance(tools, Sequence) and not isinstance(tools, str) else ():
        if not isinstance(tool, dict) or tool.get("type", "function") != "function":
            continue
        spec = tool.get("function") if isinstance(tool.get("function"), dict) else tool
        name = spec.get("name") if isinstance(spec, dict) else None
        if isinstance(spec, dict) and isinstance(name, str):
            out[name] = spec.get("parameters")
    return out


def open_python_tools(path: Path, limits: ToolLimits, policy: SandboxPolicy) -> PythonTools:
    """The tools of `path`, loaded once in the sandbox to see that they load (before any request is spent):
    an unreadable module, one that does not parse or load, or a sandbox that cannot be built here is one line
    (InputError). The sandbox's limits are the tools' (`limits`), the rest of `policy` as given."""
    from rfteval.sandbox._tool_unit import MAX_OUTPUT_CHARS
    from rfteval.sandbox.host_probe import sandbox_problem
    from rfteval.sandbox.turns import ToolPool

    if not 1 <= limits.output_chars <= MAX_OUTPUT_CHARS:
        raise InputError(f"must be 1 to {MAX_OUTPUT_CHARS:,} characters, got {limits.output_chars}",
                         field="--tool-output-limit")
    if not (math.isfinite(limits.timeout_s) and limits.timeout_s > 0):
        raise InputError(f"must be a number of seconds > 0, got {limits.timeout_s:g}", field="--tool-timeout")
    if limits.memory_mb is not None and limits.memory_mb < PYTHON_MIN_MEMORY_MB:
        raise InputError(f"must be at least {PYTHON_MIN_MEMORY_MB} (MB), got {limits.memory_mb}", field="--tool-memory")
    module = read_tools_module(path)
    problem = sandbox_problem(policy)
    if problem is not None:
        raise InputError(problem, path)
    pool = ToolPool(policy=replace(policy, timeout_s=limits.timeout_s, memory_mb=limits.memory_mb))
    try:
        failed = pool.load(module.source)
    except BaseException:
        pool.close()
        raise
    if failed is not None:
        pool.close()
        where = LOAD_LINE.match(failed[1])
        message = failed[1][where.end():] if where else failed[1]
        raise InputError(f"does not load in the sandbox: {message}", path, int(where.group(1)) if where else None)
    return PythonTools(module, limits, pool)


class PythonTools:
    """A tools.py module as a run's ToolBox (tools.base): each turn in a fresh sandbox unit, the state as JSON."""

    def __init__(self, module: ToolsModule, limits: ToolLimits, pool: ToolPool):
        self.module = module
        self.limits = limits
        self._pool = pool
        self._names = frozenset(module.functions)
        what = {"source": module.source, "timeout_s": limits.timeout_s, "memory_mb": limits.memory_mb,
                "output_chars": limits.output_chars}
        self._identity = hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()

    @property
    def identity(self) -> str:
        """A hash of the module's source and the limits: whatever could change a result."""
        return self._identity

    def names(self) -> frozenset[str]:
        return self._names

    async def init_state(self, item: JSONObject) -> JSONObject:
        """The module's init_state(item), run in the sandbox ({} when it defines none). Raises ToolStateError
        when it fails: a rollout has no first state then."""
        if self.module.init_state is None:
            return {}
        outcome = await asyncio.wrap_future(self._pool.init_state(self.module.source, item))
        (result,) = outcome.calls
        state = _state(outcome.state)
        if result.error is not None or state is None:
            problem = f"{result.error}: {result.text}" if result.error is not None else "it returned no JSON object"
            raise ToolStateError(f"{self.module.path}: init_state(item {item.get('id', '?')!s}) failed: {problem}")
        return state

    async def run_turn(self, rollout_id: str, item: JSONObject, calls: Sequence[ToolCall],
                       state: JSONObject) -> tuple[list[ToolResult], JSONObject]:
        """One turn's calls, in order, from `state`: a result per call and the state after. Every turn is a fresh
        unit, so `rollout_id` selects nothing: the state passed in is all a turn sees of the rollout."""
        declared = declared_functions(item.get("tools")) if isinstance(item.get("tools"), list) else None
        results: list[ToolResult | None] = []
        runnable: list[tuple[int, str, JSONObject]] = []
        for index, call in enumerate(calls):
            screened = self._screen(call, declared)
            if isinstance(screened, ToolResult):
                results.append(screened)
            else:
                results.append(None)
                runnable.append((index, call.name, screened))
        after = state
        if runnable:
            text = json.dumps(state, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
            future = self._pool.turn(self.module.source, item, text, [(name, args) for _, name, args in runnable],
                                     self.limits.output_chars)
            outcome = await asyncio.wrap_future(future)
            for (index, _, _), one in zip(runnable, outcome.calls, strict=True):
                results[index] = _result(calls[index], one)
            changed = _state(outcome.state)
            after = state if changed is None else changed
        return [r for r in results if r is not None], after

    def _screen(self, call: ToolCall, declared: dict[str, JSONInput] | None) -> ToolResult | JSONObject:
        """A call answered here (an unknown tool, arguments that are not a JSON object), or its arguments."""
        if call.name not in self._names:
            known = ", ".join(sorted(self._names)) or "none"
            return error_result(call, UNKNOWN_TOOL, f"no tool named {call.name!r} (the tools are: {known})")
        if declared is not None and call.name not in declared:
            return error_result(call, UNKNOWN_TOOL, f"{call.name!r} is not one of this item's tools")
        text = call.arguments if call.arguments.strip() else "{}"  # some servers send "" for a call without any
        try:
            args = json.loads(text)
        except json.JSONDecodeError as exc:
            return error_result(call, BAD_ARGUMENTS, f"the arguments are not JSON ({exc.msg} at character {exc.pos})")
        except RecursionError:
            return error_result(call, BAD_ARGUMENTS, "the arguments are nested too deeply")
        if not isinstance(args, dict):
            return error_result(call, BAD_ARGUMENTS, f"the arguments are a JSON {_json_kind(args)}, not an object")
        return args

    async def aclose(self) -> None:
        await asyncio.to_thread(self._pool.close)

    def close(self) -> None:
        """Stop the sandboxes (aclose, from synchronous code)."""
        self._pool.close()


def _result(call: ToolCall, outcome: CallOutcome) -> ToolResult:
    if outcome.error is None:
        return ToolResult(call.id, call.name, outcome.text)
    return error_result(call, outcome.error, outcome.text)


def _state(text: str | None) -> JSONObject | None:
    """The state after a turn, from the sandbox's JSON text; None when unchanged (or not a JSON object, which
    only a unit that rewrote its own json module could send)."""
    if text is None:
        return None
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def _json_kind(value: object) -> str:
    return {list: "array", str: "string", bool: "boolean", type(None): "null"}.get(type(value), "number")
