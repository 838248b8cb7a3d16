"""`rfteval validate tools`: before anything is spent, does tools.py fit the tools the dataset's items declare?

Every function tool an item declares (its `tools` field, OpenAI's shape) must have a function in the module whose
parameters fit the tool's JSON Schema: each parameter without a default is a property the schema requires (else
a call the model may make fails to bind); each property is a parameter the function can take by name (else the
model is asked for an argument the function refuses), unless it takes **kwargs; `item` and `state`, which rfteval
passes, are not the model's to give. Each misfit is one `FILE:LINE: tool: what` line naming the function's `def`
(or the dataset line declaring a tool the module lacks). The module is then loaded in the sandbox as a run loads
it, and the most requests a run can send is said: `max_turns` model calls per cell.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from rfteval.errors import InputError
from rfteval.limits import MAX_TURNS, PYTHON_MIN_MEMORY_MB, TOOL_MEMORY_MB, TOOL_TIMEOUT_S
from rfteval.tools.base import ToolLimits
from rfteval.tools.python import INJECTED, ToolFunction, ToolsModule, declared_functions, read_tools_module

if TYPE_CHECKING:
    from rfteval.data.json_types import JSONInput
    from rfteval.sandbox.policy import SandboxPolicy


@dataclass(frozen=True)
class ToolsCheckRequest:
    """`validate tools`' flags, checked when made (one line naming the flag)."""

    dataset: Path
    tools: Path
    max_turns: int = MAX_TURNS
    epochs: int = 3
    timeout_s: float = TOOL_TIMEOUT_S
    memory_mb: int = TOOL_MEMORY_MB

    def __post_init__(self) -> None:
        for flag, value in (("--max-turns", self.max_turns), ("--epochs", self.epochs)):
            if value < 1:
                raise InputError(f"must be at least 1, got {value}", field=flag)
        if not self.timeout_s > 0:
            raise InputError(f"must be a number of seconds > 0, got {self.timeout_s:g}", field="--tool-timeout")
        if self.memory_mb < PYTHON_MIN_MEMORY_MB:
            raise InputError(f"must be at least {PYTHON_MIN_MEMORY_MB} (MB), got {self.memory_mb}", field="--tool-memory")


@dataclass
class ToolsCheck:
    """What the check found: the misfits (each one line), and what to print when there is none."""

    problems: list[InputError] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)


def check_tools(request: ToolsCheckRequest, policy: SandboxPolicy) -> ToolsCheck:
    """Every tool the dataset's items declare against the module's functions, the module loaded in the sandbox
    (under `policy`, with the request's tool limits), and the run's most requests. A dataset line or module that
    cannot be read is one InputError, raised."""
    from rfteval.data.dataset import iter_items

    module = read_tools_module(request.tools)
    declared: dict[tuple[str, str], tuple[int, JSONInput]] = {}  # (name, its schema as text) -> (line, schema)
    items = with_tools = 0
    for item in iter_items(request.dataset):
        items += 1
        tools = declared_functions(item.tools)
        with_tools += bool(tools)
        for name, schema in tools.items():
            declared.setdefault((name, json.dumps(schema, sort_keys=True)), (item.line, schema))
    result = ToolsCheck()
    if not declared:
        result.problems.append(InputError("no item declares a function tool (a `tools` field): no tool would ever be "
                                          "called", request.dataset))
    seen: set[str] = set()
    for (name, _), (line, schema) in declared.items():
        seen.add(name)
        function = module.functions.get(name)
        if function is None:
            result.problems.append(InputError(f"{request.tools} defines no function {name}()", request.dataset, line,
                                              f"tools.{name}"))
            continue
        result.problems += [InputError(message, request.tools, function.line, name)
                            for message in misfits(function, schema)]
    result.problems += init_state_problems(module)
    result.problems += load_problems(request, policy)
    if result.problems:
        return result
    result.lines = summary(request, module, sorted(seen), items, with_tools)
    return result


def misfits(function: ToolFunction, schema: JSONInput) -> list[str]:
    """How a function's parameters fail the tool's JSON Schema (`parameters`), each in words; none when it fits."""
    properties = schema.get("properties") if isinstance(schema, dict) else None
    props = set(properties) if isinstance(properties, dict) else set()
    listed = schema.get("required") if isinstance(schema, dict) else None
    required = {r for r in listed if isinstance(r, str)} if isinstance(listed, list) else set()
    out = [f"async def is not supported: make {function.name} a plain def"] if function.is_async else []
    named = set()
    for param in function.model_params:
        named.add(param.name)
        if param.kind == "positional_only" and (param.required or param.name in props):
            out.append(f"parameter {param.name!r} is positional-only, but the model's arguments come by name")
        elif not param.required:
            continue
        elif param.name not in props:
            out.append(f"parameter {param.name!r} has no default and is not in the schema's properties (the model "
                       "is never asked for it)")
        elif param.name not in required:
            out.append(f"parameter {param.name!r} has no default, but the schema does not require it (a call "
                       "without it fails)")
    for name in sorted(props & set(INJECTED)):
        if function.injected(name):
            out.append(f"the schema asks the model for {name!r}, which rfteval passes (a keyword-only parameter)")
    extra = sorted(props - named - {n for n in INJECTED if function.injected(n)})
    if extra and not function.var_keyword:
        listed_extra = ", ".join(repr(p) for p in extra)
        out.append(f"the schema's properties {listed_extra} are not parameters of {function.name}() (add them, "
                   "or **kwargs)" if len(extra) > 1 else
                   f"the schema's property {listed_extra} is not a parameter of {function.name}() (add it, or "
                   "**kwargs)")
    return out


def init_state_problems(module: ToolsModule) -> list[InputError]:
    """init_state, when defined, must take the item as its one argument."""
    init = module.init_state
    if init is None:
        return []
    positional = [p for p in init.params if p.kind != "keyword_only"]
    others = [p for p in init.params[1:] if p.required]
    if init.is_async or not positional or others:
        return [InputError("must be a plain def taking the item as its one argument: def init_state(item)",
                           module.path, init.line, "init_state")]
    return []


def load_problems(request: ToolsCheckRequest, policy: SandboxPolicy) -> list[InputError]:
    """The module loaded in the sandbox as a run loads it: a failure to load is one line."""
    from rfteval.tools.python import open_python_tools

    limits = ToolLimits(timeout_s=request.timeout_s, memory_mb=request.memory_mb)
    try:
        open_python_tools(request.tools, limits, policy).close()
    except InputError as exc:
        return [exc]
    return []


def summary(request: ToolsCheckRequest, module: ToolsModule, tools: list[str], items: int,
            with_tools: int) -> list[str]:
    cells = items * request.epochs
    unused = sorted(set(module.functions) - set(tools))
    lines = [f"{request.tools}: {len(tools)} tool{'s' if len(tools) != 1 else ''} fit the items' schemas "
             f"({', '.join(tools)}); {with_tools} of {items} items declare tools; the module loads in the sandbox",
             f"at most {request.max_turns:,} requests per cell (--max-turns); {items:,} items x {request.epochs} "
             f"epochs = {cells:,} cells per model: at most {request.max_turns * cells:,} requests per model"]
    if unused:
        lines.append(f"note: {', '.join(unused)} {'is' if len(unused) == 1 else 'are'} defined but no item declares "
                     f"{'it' if len(unused) == 1 else 'them'}")
    return lines
