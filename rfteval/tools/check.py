"""`rfteval validate tools`: before anything is spent, do the run's tools fit the tools the dataset's items declare?

The tools are a python module (--tools), Agent RFT tool endpoints (--tool-endpoints) and MCP servers (--mcp), in
any mix, as a run takes them. Every function tool an item declares (its `tools` field, OpenAI's shape) must be
exactly one of theirs (a name two of them have is refused, as the run refuses it). A python function's parameters
must fit the tool's JSON Schema: each parameter without a default is a property the schema requires (else a call
the model may make fails to bind); each property is a parameter the function can take by name (else the model is
asked for an argument the function refuses), unless it takes **kwargs; `item` and `state`, which rfteval passes,
are not the model's to give. An MCP tool's input schema, as its server lists it, must not require an argument the
item's schema never asks the model for, nor lack one the item's schema requires. An endpoint has no schema to
check (Agent RFT's contract sends none), but its `${VAR}`s must be set. Each misfit is one `FILE:LINE: tool: what`
line naming the function's `def` (or the dataset line declaring a tool no box has). The module is then loaded in the
sandbox and each MCP server started there once, as a run does; no tool server is contacted (validate spends
nothing). The most requests a run can send is said: `max_turns` model calls per cell.
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
    tools: Path | None
    max_turns: int = MAX_TURNS
    epochs: int = 3
    timeout_s: float = TOOL_TIMEOUT_S
    memory_mb: int = TOOL_MEMORY_MB
    endpoints: Path | None = None
    mcp: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.tools is None and self.endpoints is None and not self.mcp:
            raise InputError("name the tools to check: --tools FILE, --tool-endpoints FILE or --mcp COMMAND (as the "
                             "run takes them)", field="--tools")
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
    """Every tool the dataset's items declare against the run's tools: the module's functions (loaded in the
    sandbox under `policy`, with the request's tool limits), the endpoints' names, the MCP servers' listed tools
    (each server started once in the sandbox); then the run's most requests. A dataset line, module, tools config
    or server that cannot be read or started is one InputError, raised."""
    from rfteval.data.dataset import iter_items

    declared: dict[tuple[str, str], tuple[int, JSONInput]] = {}  # (name, its schema as text) -> (line, schema)
    items = with_tools = 0
    for item in iter_items(request.dataset):
        items += 1
        tools = declared_functions(item.tools)
        with_tools += bool(tools)
        for name, schema in tools.items():
            declared.setdefault((name, json.dumps(schema, sort_keys=True)), (item.line, schema))
    boxes = open_boxes(request, policy)
    result = ToolsCheck()
    if not declared and boxes.mcp is None:
        result.problems.append(InputError("no item declares a function tool (a `tools` field): no tool would ever be "
                                          "called", request.dataset))
    result.problems += boxes.clashes()
    seen: set[str] = set()
    for (name, _), (line, schema) in declared.items():
        seen.add(name)
        owner = boxes.owner(name)
        if owner is None:
            result.problems.append(InputError(boxes.what_has_none(name), request.dataset, line,
                                              f"tools.{name}"))
        elif owner == "python" and boxes.module is not None:
            function = boxes.module.functions[name]
            result.problems += [InputError(message, boxes.module.path, function.line, name)
                                for message in misfits(function, schema)]
        elif owner == "mcp" and boxes.mcp is not None:
            server, listed = boxes.mcp[name]
            result.problems += [InputError(message, request.dataset, line, f"tools.{name}")
                                for message in mcp_misfits(server, listed, schema)]
    if boxes.module is not None:
        result.problems += init_state_problems(boxes.module)
        result.problems += load_problems(request, policy)
    if result.problems:
        return result
    result.lines = summary(request, boxes, sorted(seen), items, with_tools)
    return result


@dataclass
class Boxes:
    """What each kind of tool the request names has: the module's functions, the endpoints' names (their `${VAR}`s
    read), the MCP servers' tools by name (server shown, listed input schema)."""

    module: ToolsModule | None = None
    endpoints: list[str] | None = None
    endpoint_file: Path | None = None
    mcp: dict[str, tuple[str, JSONInput]] | None = None
    mcp_servers: list[str] = field(default_factory=list)

    def sources(self) -> list[tuple[str, str, frozenset[str]]]:
        """(kind, as shown, names) of each box the request names."""
        out: list[tuple[str, str, frozenset[str]]] = []
        if self.module is not None:
            out.append(("python", str(self.module.path), frozenset(self.module.functions)))
        if self.endpoints is not None:
            out.append(("endpoint", str(self.endpoint_file), frozenset(self.endpoints)))
        if self.mcp is not None:
            out.append(("mcp", "the MCP servers", frozenset(self.mcp)))
        return out

    def owner(self, name: str) -> str | None:
        return next((kind for kind, _, names in self.sources() if name in names), None)

    def clashes(self) -> list[InputError]:
        """A name two boxes have, refused as the run refuses it (a call could then mean either)."""
        owner: dict[str, str] = {}
        out: list[InputError] = []
        for _, shown, names in self.sources():
            for name in sorted(names):
                if name in owner:
                    out.append(InputError(f"tool {name!r} is both in {owner[name]} and in {shown}: a tool name must be "
                                          "one tool's (rename or drop one of them)", shown))
                owner.setdefault(name, shown)
        return out

    def what_has_none(self, name: str) -> str:
        """Why no box has the tool, in one line naming each box looked in."""
        shown = [f"{self.module.path} defines no function {name}()" if self.module is not None else "",
                 f"{self.endpoint_file} lists no tool {name!r}" if self.endpoints is not None else "",
                 f"no MCP server lists {name!r}" if self.mcp is not None else ""]
        return ", ".join(s for s in shown if s)


def open_boxes(request: ToolsCheckRequest, policy: SandboxPolicy) -> Boxes:
    """Each box the request names, read (the module parsed, the tools config read with its `${VAR}`s, each MCP server
    started once in the sandbox to list its tools, then stopped); nothing is sent to a tool server."""
    boxes = Boxes()
    limits = ToolLimits(timeout_s=request.timeout_s, memory_mb=request.memory_mb)
    if request.tools is not None:
        boxes.module = read_tools_module(request.tools)
    if request.endpoints is not None:
        from rfteval.tools.endpoint import open_tool_endpoints

        endpoints = open_tool_endpoints(request.endpoints, limits)
        boxes.endpoints, boxes.endpoint_file = sorted(endpoints.names()), request.endpoints
    if request.mcp:
        from rfteval.tools.mcp import open_mcp_tools

        mcp = open_mcp_tools(list(request.mcp), limits, policy)
        try:
            boxes.mcp = {str(tool["name"]): (server.shown, tool.get("inputSchema"))
                         for server, tools in zip(mcp.servers, mcp.listed, strict=True) for tool in tools}
            boxes.mcp_servers = [f"{server.shown!r} ({len(tools)} tool{'s' if len(tools) != 1 else ''})"
                                 for server, tools in zip(mcp.servers, mcp.listed, strict=True)]
        finally:
            mcp.close()
    return boxes


def mcp_misfits(server: str, listed: JSONInput, declared: JSONInput) -> list[str]:
    """How the item's schema for a tool fails the input schema its MCP server lists: an argument the server requires
    that the model is never asked for fails every call; one the item requires that the server does not take is
    refused by a server that checks its input (most do)."""
    def props_required(schema: JSONInput) -> tuple[set[str], set[str]]:
        properties = schema.get("properties") if isinstance(schema, dict) else None
        listed_required = schema.get("required") if isinstance(schema, dict) else None
        return (set(properties) if isinstance(properties, dict) else set(),
                {r for r in listed_required if isinstance(r, str)} if isinstance(listed_required, list) else set())

    server_props, server_required = props_required(listed)
    item_props, item_required = props_required(declared)
    out = [f"MCP server {server!r} requires {name!r}, which the item's schema never asks the model for"
           for name in sorted(server_required - item_props)]
    open_ended = isinstance(listed, dict) and listed.get("additionalProperties") not in (None, False)
    if not open_ended:
        out += [f"the item's schema requires {name!r}, which MCP server {server!r}'s tool does not take"
                for name in sorted(item_required - server_props)]
    return out


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
    if request.tools is None:
        return []
    try:
        open_python_tools(request.tools, limits, policy).close()
    except InputError as exc:
        return [exc]
    return []


def summary(request: ToolsCheckRequest, boxes: Boxes, tools: list[str], items: int, with_tools: int) -> list[str]:
    cells = items * request.epochs
    lines: list[str] = []
    by_kind: dict[str, list[str]] = {}
    for name in tools:
        by_kind.setdefault(boxes.owner(name) or "", []).append(name)

    def listed(names: list[str]) -> str:
        return f"{len(names)} tool{'s' if len(names) != 1 else ''}" + (f" ({', '.join(names)})" if names else "")

    if boxes.module is not None:  # a python-only run's line, as it always read
        names = by_kind.get("python", [])
        lines.append(f"{request.tools}: {len(names)} tool{'s' if len(names) != 1 else ''} fit the items' schemas "
                     f"({', '.join(names)}); {with_tools} of {items} items declare tools; the module loads in the "
                     "sandbox")
    if boxes.endpoints is not None:
        lines.append(f"{boxes.endpoint_file}: {listed(by_kind.get('endpoint', []))} at Agent RFT tool endpoints; "
                     "every ${VAR} is set; no server contacted (validate sends nothing)")
    if boxes.mcp is not None:
        lines.append(f"MCP: {', '.join(boxes.mcp_servers)} started in the sandbox; {listed(by_kind.get('mcp', []))} "
                     "fit the items' schemas" + (f"; every MCP tool offered to the {items - with_tools} items that "
                                                 "declare none" if with_tools < items else ""))
    if boxes.module is None:
        lines.append(f"{with_tools} of {items} items declare tools")
    lines.append(f"at most {request.max_turns:,} requests per cell (--max-turns); {items:,} items x {request.epochs} "
                 f"epochs = {cells:,} cells per model: at most {request.max_turns * cells:,} requests per model")
    defined: set[str] = set(boxes.module.functions) if boxes.module is not None else set()
    for kind, offered in (("python", defined), ("endpoint", set(boxes.endpoints or ()))):
        unused = sorted(offered - set(tools))
        if unused:
            verb = "is defined" if kind == "python" else "is listed"
            verb = verb if len(unused) == 1 else verb.replace("is", "are")
            lines.append(f"note: {', '.join(unused)} {verb} but no item declares {'it' if len(unused) == 1 else 'them'}")
    return lines
