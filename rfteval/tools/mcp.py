"""MCP tools: a run's tools served by MCP servers over stdio, driven by the official `mcp` Python SDK as the client.

`[tools] mcp = [{command = ["mcp-server-time"], env = {...}, per = "rollout", network = false}]` (flag: `--mcp
"CMD ARGS"`, repeatable) starts each server as its users run it, lists its tools (`ClientSession.list_tools`) and
routes every call the model makes to one of them to its server (`call_tool`). The listed names and input schemas
become the request's `tools` where an item declares none; an item that declares a tool no server (and no other tool
box of the run) has is one line, exit 2, before anything is sent.

A server runs inside the python sandbox's namespaces (rfteval.sandbox.host_probe.bwrap_args: user, PID, mount, IPC,
UTS and network namespaces, no capabilities, the seccomp filter, a read-only view of the system, the interpreter and
the server's own virtualenv or script, a private /tmp), with no network unless its spec says `network = true` (the
summary and the run's header say so), and --tool-memory as its address space (RLIMIT_AS: a server past it gets its
own MemoryError, shown to the model as an MCPError). What it is handed from rfteval's environment is the sandbox's
allow-list (locale, time zone, PATH) and the `env` its spec gives (a `${VAR}` there read from the environment; values
are written nowhere: the tool box's identity holds the variables' names). A server that needs what the sandbox does
not show it (a home directory, a cache, paths outside its virtualenv) fails to start, and the run stops before
anything is sent with one line naming it and the last line it printed.

One process per rollout by default, started at the rollout's first tool turn and stopped when the rollout ends, so
no state leaks between rollouts (a sqlite server's database lives in that process's private /tmp). `per = "run"` is
one process for the whole run, for a server that keeps no state (every rollout's calls go to it, concurrently).

A call's outcome, as the model is shown it: the text of the result's content blocks (other blocks as JSON, a result
with only structured content as its JSON), cut at --tool-output-limit; a result with `isError` is the tool message
`error: MCPError: <its text>`, counted as a tool error of type `MCPError`, as is a JSON-RPC error answer (an unknown
tool on the server, arguments its schema refuses); arguments that are not a JSON object are `BadArguments` (not
sent); a turn's calls share --tool-timeout, past it a call is a `ToolTimeout` (and the turn's later calls are not
sent). A server that exits mid-rollout ends the rollout as a generation error (`mcp_server_exited`: counted, never
scored); re-running the same command continues it from its stored turns. Finished tool turns are never run again:
a resumed rollout's fresh server has not seen them (nothing is replayed to it), so a stateful server's state holds
only what the rollout runs after the resume.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import itertools
import json
import os
import re
import shlex
import shutil
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rfteval.errors import InputError
from rfteval.tools.base import (
    BAD_ARGUMENTS,
    TOOL_TIMEOUT,
    UNKNOWN_TOOL,
    RolloutToolError,
    ToolCall,
    ToolLimits,
    ToolResult,
    cut,
    error_result,
)

if TYPE_CHECKING:
    from rfteval.data.json_types import JSONObject, JSONValue
    from rfteval.sandbox.policy import SandboxPolicy

MCP_ERROR = "MCPError"  # a result with isError, or a JSON-RPC error answer to tools/call
SERVER_EXITED = "mcp_server_exited"  # the rollout's generation error: its server died mid-rollout
STARTUP_TIMEOUT_S = 60.0  # a server's start and its tools/list
PER = ("rollout", "run")
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # a function name, as OpenAI takes it
_SECCOMP_FD = 3  # the shell that becomes bwrap opens the filter's file on this descriptor


@dataclass(frozen=True)
class MCPServer:
    """One `[tools] mcp` entry: the command (argv), the environment it adds (values may be `${VAR}`), one process per
    rollout or per run, and whether it keeps the network. `where` names it in a one-line error."""

    command: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    per: str = "rollout"
    network: bool = False
    where: str = "--mcp"

    @property
    def shown(self) -> str:
        """The command as a user types it (no environment value)."""
        return shlex.join(self.command)

    def summary(self) -> JSONObject:
        """What summary.json says of it: the command, the environment's names (never a value), per, network."""
        command: list[JSONValue] = list(self.command)
        env: list[JSONValue] = [*sorted(self.env)]
        return {"command": command, "env": env, "per": self.per, "network": self.network}


def server_from(value: object, where: str) -> MCPServer:
    """One entry of `[tools] mcp` (a table, or a --mcp "CMD ARGS" string), checked; a problem is one line naming it."""
    if isinstance(value, str):
        try:
            value = {"command": shlex.split(value)}
        except ValueError as exc:
            raise InputError(f"cannot split the command ({exc})", field=where) from None
    if not isinstance(value, Mapping):
        raise InputError("an MCP server is a table {command = [...], env = {...}, per = \"rollout\", network = false} "
                         "or a --mcp \"CMD ARGS\" string", field=where)
    unknown = sorted(set(value) - {"command", "env", "per", "network"})
    if unknown:
        raise InputError(f"unknown key {unknown[0]!r} (an MCP server has command, env, per, network)", field=where)
    command = value.get("command")
    if isinstance(command, str):
        command = shlex.split(command)
    if not isinstance(command, list) or not command or not all(isinstance(a, str) and a for a in command):
        raise InputError("command must be the server's argv, a non-empty list of strings", field=f"{where}.command")
    env = value.get("env") or {}
    if not isinstance(env, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
        raise InputError("env must be a table of names and string values", field=f"{where}.env")
    per = value.get("per", "rollout")
    if per not in PER:
        raise InputError(f"per must be \"rollout\" (one process per rollout: no state leaks between rollouts) or "
                         f"\"run\" (one process for the run, for a stateless server), got {per!r}", field=f"{where}.per")
    network = value.get("network", False)
    if not isinstance(network, bool):
        raise InputError("network must be true or false", field=f"{where}.network")
    return MCPServer(tuple(command), dict(env), str(per), network, where)


def mcp_tools(tools: Sequence[JSONValue]) -> list[JSONValue]:
    """OpenAI function tools of MCP tools already listed (as JSON: name, description, inputSchema)."""
    out: list[JSONValue] = []
    for tool in tools:
        if isinstance(tool, dict):
            function: JSONObject = {"name": tool.get("name"), "parameters": tool.get("inputSchema") or {
                "type": "object", "properties": {}}}
            if tool.get("description"):
                function["description"] = tool.get("description")
            out.append({"type": "function", "function": function})
    return out


def result_text(result: Any) -> str:
    """A CallToolResult as the model's text: its text blocks joined by newlines, other blocks as JSON; a result
    with no content but structured content, that as JSON."""
    parts: list[str] = []
    for block in result.content or []:
        text = getattr(block, "text", None)
        if getattr(block, "type", None) == "text" and isinstance(text, str):
            parts.append(text)
        else:
            parts.append(json.dumps(block.model_dump(mode="json", by_alias=True, exclude_none=True), ensure_ascii=False))
    if not parts and result.structured_content is not None:
        return json.dumps(result.structured_content, ensure_ascii=False)
    return "\n".join(parts)


class _Launch:
    """How a server's process is started: the argv (bubblewrap around the command, or the command itself in unsafe
    mode), its environment, and where its stderr goes (its last line names why it did not start)."""

    def __init__(self, server: MCPServer, policy: SandboxPolicy, workdir: str, environ: Mapping[str, str],
                 memory_mb: int | None = None):
        from rfteval.sandbox.host_probe import host, sandbox_problem
        from rfteval.sandbox.policy import worker_env

        self.server = server
        env = worker_env(policy.never_pass)
        executable = shutil.which(server.command[0], path=env.get("PATH")) if "/" not in server.command[0] else (
            server.command[0] if os.access(server.command[0], os.X_OK) else None)
        if executable is None:
            raise InputError(f"MCP server {server.shown!r}: no such command ({server.command[0]!r} is not an "
                             "executable file, nor on PATH)", field=server.where)
        for name, value in server.env.items():
            unset = [v for v in _VAR.findall(value) if v not in environ]
            if unset:
                raise InputError(f"MCP server {server.shown!r}: environment variable {unset[0]} is not set",
                                 field=f"{server.where}.env.{name}")
            env[name] = _VAR.sub(lambda m: environ[m.group(1)], value)
        self.env = env
        self.workdir = workdir
        # a venv's python is itself only by this path; a relative path argument (a script) is made absolute, since
        # the server starts in its sandbox's /tmp
        argv = [os.path.abspath(executable), *(os.path.abspath(a) if _is_path(a) else a for a in server.command[1:])]
        found = host()
        self.sandboxed = found.refused is None
        if not self.sandboxed:
            problem = sandbox_problem(policy)
            if problem is not None:
                raise InputError(f"MCP server {server.shown!r} cannot run in the sandbox: {problem}",
                                 field=server.where)
            self.argv = argv
            return
        seccomp = os.path.join(workdir, "seccomp.bpf")
        if not os.path.exists(seccomp):
            from rfteval.sandbox.host_probe import seccomp_program

            Path(seccomp).write_bytes(seccomp_program())
        args = _bwrap(policy.disk_mb << 20, visible(argv), server.network)
        # the shell opens the filter on its descriptor, then becomes bwrap (the SDK's spawn passes no descriptors)
        # --tool-memory binds the server as it binds a python tool unit: its address space (RLIMIT_AS, inherited
        # by what it starts), set by the shell before it becomes bwrap; a server past it gets its own MemoryError
        limit = f"ulimit -v {memory_mb << 10}; " if memory_mb else ""
        self.argv = ["/bin/sh", "-c", f'exec {_SECCOMP_FD}<"$1"; shift; {limit}exec "$@"', "sh", seccomp,
                     found.bwrap or "bwrap", *args, "--", *argv]


def _is_path(arg: str) -> bool:
    return not arg.startswith("-") and ("/" in arg or arg.endswith(".py")) and os.path.exists(arg)


def _bwrap(tmp: int, also: list[str], network: bool) -> list[str]:
    from rfteval.sandbox.host_probe import bwrap_args

    return bwrap_args(tmp, _SECCOMP_FD, also_ro=also, network=network)


def visible(argv: Sequence[str]) -> list[str]:
    """What a server needs to see besides the system and rfteval's interpreter: its executable's virtualenv (the
    directory holding pyvenv.cfg, and the Python that venv was made from) or else its directory, and each argument
    that names an existing file or directory (a script, a data folder), all read-only."""
    out: list[str] = []
    exe = Path(argv[0])
    root = exe.parent.parent if (exe.parent.parent / "pyvenv.cfg").is_file() else None
    if root is not None:
        out.append(str(root))
        home = _venv_home(root / "pyvenv.cfg")
        if home is not None:
            out.append(str(Path(home).parent))
    else:
        out.append(str(exe.parent))
    out += [a for a in argv[1:] if a.startswith("/") and os.path.exists(a)]
    return out


def _venv_home(cfg: Path) -> str | None:
    try:
        for line in cfg.read_text().splitlines():
            key, _, value = line.partition("=")
            if key.strip() == "home" and value.strip():
                return value.strip()
    except OSError:
        return None
    return None


_COUNT = itertools.count()


class _Process:
    """One running server: its SDK session, held open by a task of its own (the SDK's transport is entered and left
    in one task), which other tasks call through; its stderr in a file of its own."""

    def __init__(self, launch: _Launch):
        self.launch = launch
        self.errlog = os.path.join(launch.workdir, f"server-{next(_COUNT)}.stderr")
        self.session: Any = None
        self.tools: list[Any] = []
        self._ready = asyncio.Event()
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.failure: BaseException | None = None
        self.exited = False

    async def start(self) -> None:
        self._task = asyncio.create_task(self._hold())
        try:
            async with asyncio.timeout(STARTUP_TIMEOUT_S):
                await self._ready.wait()
        except TimeoutError:
            await self.stop()
            raise _StartFailed(f"no answer to initialize and tools/list within {STARTUP_TIMEOUT_S:g} s") from None
        if self.session is None:
            why = self.why(f"{type(self.failure).__name__}: {self.failure}" if self.failure is not None else None)
            await self.stop()
            raise _StartFailed(why)

    def why(self, otherwise: str | None = None) -> str:
        """The last line the server printed on stderr (why it did not start, or died), else `otherwise`."""
        try:
            lines = Path(self.errlog).read_text("utf-8", "replace").strip().splitlines()
        except OSError:
            lines = []
        return lines[-1].strip()[:300] if lines else otherwise or "it printed nothing on stderr"

    async def _hold(self) -> None:
        from mcp.client.session import ClientSession
        from mcp.client.stdio import StdioServerParameters, stdio_client

        launch = self.launch
        params = StdioServerParameters(command=launch.argv[0], args=launch.argv[1:], env=launch.env)
        try:
            with open(self.errlog, "w", encoding="utf-8") as errlog:
                async with stdio_client(params, errlog=errlog) as (read, write):
                    async with ClientSession(read, write) as session:
                        await session.initialize()
                        tools: list[Any] = []
                        cursor: str | None = None
                        while True:
                            from mcp_types import PaginatedRequestParams

                            listed = await session.list_tools(
                                params=PaginatedRequestParams(cursor=cursor) if cursor else None)
                            tools += listed.tools
                            cursor = listed.next_cursor
                            if not cursor:
                                break
                        self.tools, self.session = tools, session
                        self._ready.set()
                        await self._stop.wait()
        except BaseException as exc:  # noqa: BLE001 - kept for start() to say; the task ends either way
            self.failure = exc
        finally:
            self.exited = True
            self._ready.set()

    async def call(self, name: str, arguments: JSONObject, timeout_s: float) -> Any:
        return await self.session.call_tool(name, arguments, read_timeout_seconds=timeout_s)

    async def stop(self) -> None:
        self._stop.set()
        if self._task is not None:
            task, self._task = self._task, None
            with contextlib.suppress(BaseException):
                await task
        with contextlib.suppress(OSError):
            os.remove(self.errlog)


class _StartFailed(Exception):
    pass


def _json_tool(tool: Any) -> JSONObject:
    out: JSONObject = {"name": tool.name, "inputSchema": tool.input_schema}
    if tool.description:
        out["description"] = tool.description
    return out


class MCPTools:
    """MCP servers as a run's ToolBox (tools.base): each call routed to the server that listed its tool."""

    def __init__(self, servers: Sequence[MCPServer], limits: ToolLimits, policy: SandboxPolicy,
                 environ: Mapping[str, str] | None = None):
        self.servers, self.limits = list(servers), limits
        self._dir = tempfile.mkdtemp(prefix="rfteval-mcp-")
        try:
            self._launches = [_Launch(s, policy, self._dir, os.environ if environ is None else environ,
                                      limits.memory_mb)
                              for s in self.servers]
            listed = asyncio.run(self._list_all())
        except BaseException:
            shutil.rmtree(self._dir, ignore_errors=True)
            raise
        self.listed: list[list[JSONObject]] = listed
        self._route: dict[str, int] = {}
        for i, tools in enumerate(listed):
            for tool in tools:
                name = str(tool["name"])
                if name in self._route:
                    other = self.servers[self._route[name]].shown
                    raise InputError(f"tool {name!r} is listed by MCP servers {other!r} and {self.servers[i].shown!r}: "
                                     "a tool name must be one tool's", field=self.servers[i].where)
                self._route[name] = i
        self.offered: list[JSONValue] = mcp_tools([t for tools in listed for t in tools])
        self._per_run: dict[int, _Process] = {}
        self._per_rollout: dict[str, dict[int, _Process]] = {}
        self._lock: asyncio.Lock | None = None
        what = {"servers": [{"command": list(s.command), "env": sorted(s.env), "per": s.per, "network": s.network}
                            for s in self.servers],
                "timeout_s": limits.timeout_s, "memory_mb": limits.memory_mb, "output_chars": limits.output_chars}
        self._identity = hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()

    async def _list_all(self) -> list[list[JSONObject]]:
        """Each server started once, its tools listed, and stopped: what the run's requests offer and route."""
        out: list[list[JSONObject]] = []
        for launch in self._launches:
            process = _Process(launch)
            try:
                await process.start()
            except _StartFailed as exc:
                where = "in the sandbox (it sees the system, Python and its own virtualenv, read-only; no home, " \
                    "no network)" if launch.sandboxed and not launch.server.network else "in the sandbox" \
                    if launch.sandboxed else "(unsafe mode: no sandbox)"
                raise InputError(f"MCP server {launch.server.shown!r} did not start {where}: {exc}",
                                 field=launch.server.where) from None
            try:
                tools = [_json_tool(t) for t in process.tools]
            finally:
                await process.stop()
            bad = [str(t["name"]) for t in tools if not _NAME.match(str(t["name"]))]
            if bad:
                raise InputError(f"MCP server {launch.server.shown!r} lists tool {bad[0]!r}, which is not a function "
                                 "name a model can call (letters, digits, _ and -, at most 64)", field=launch.server.where)
            out.append(tools)
        return out

    @property
    def identity(self) -> str:
        """A hash of the servers' commands, their environment's names (never a value), per, network, the timeout
        and the output limit."""
        return self._identity

    def names(self) -> frozenset[str]:
        return frozenset(self._route)

    def isolation(self) -> str:
        return "bubblewrap namespaces and seccomp" if all(x.sandboxed for x in self._launches) else "unsafe: no sandbox"

    async def init_state(self, item: JSONObject) -> JSONObject:
        return {}  # a server keeps its own state, per process

    async def _process(self, rollout_id: str, index: int) -> _Process:
        """The server `index` this rollout's calls go to, started when first needed (a per-run server that died is
        started again for the rollouts after)."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        if self.servers[index].per != "run":
            held = self._per_rollout.setdefault(rollout_id, {})
            if index not in held:
                held[index] = await self._start(index)
            return held[index]
        async with self._lock:
            process = self._per_run.get(index)
            if process is None or process.exited:
                if process is not None:
                    await process.stop()
                process = self._per_run[index] = await self._start(index)
            return process

    async def _start(self, index: int) -> _Process:
        process = _Process(self._launches[index])
        try:
            await process.start()
        except _StartFailed as exc:
            raise RolloutToolError("mcp_server_start", f"MCP server {self.servers[index].shown!r} did not start: "
                                   f"{exc}") from None
        return process

    async def run_turn(self, rollout_id: str, item: JSONObject, calls: Sequence[ToolCall],
                       state: JSONObject) -> tuple[list[ToolResult], JSONObject]:
        """The turn's calls, in order, each to its tool's server (this rollout's process, or the run's), within the
        turn's --tool-timeout; the state as it came."""
        deadline = time.monotonic() + self.limits.timeout_s
        results: list[ToolResult] = []
        for call in calls:
            left = deadline - time.monotonic()
            if left <= 0:
                results.append(self._error(call, TOOL_TIMEOUT, f"not run: the turn's {self.limits.timeout_s:g} s "
                                           "(--tool-timeout) ran out before it"))
                continue
            results.append(await self._call(rollout_id, call, left))
        return results, state

    async def _call(self, rollout_id: str, call: ToolCall, left: float) -> ToolResult:
        from mcp.shared.exceptions import MCPError
        from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT

        index = self._route.get(call.name)
        if index is None:
            known = ", ".join(sorted(self._route))
            return error_result(call, UNKNOWN_TOOL, f"no tool named {call.name!r} (the tools are: {known})")
        try:
            arguments = json.loads(call.arguments) if call.arguments.strip() else {}
        except ValueError as exc:
            return self._error(call, BAD_ARGUMENTS, f"the arguments are not JSON ({exc})")
        if not isinstance(arguments, dict):
            return self._error(call, BAD_ARGUMENTS, f"the arguments must be a JSON object, got {type(arguments).__name__}")
        process = await self._process(rollout_id, index)
        server = self.servers[index]
        try:
            result = await process.call(call.name, arguments, left)
        except MCPError as exc:
            if exc.code == REQUEST_TIMEOUT:
                return self._error(call, TOOL_TIMEOUT, f"no answer within {self.limits.timeout_s:g} s (--tool-timeout)")
            if exc.code == CONNECTION_CLOSED or process.exited:
                raise RolloutToolError(SERVER_EXITED, f"MCP server {server.shown!r} exited mid-rollout: "
                                       f"{process.why()}") from None
            return self._error(call, MCP_ERROR, exc.message)
        except Exception as exc:  # noqa: BLE001 - a result the SDK could not read (a bad answer from the server)
            if process.exited:
                raise RolloutToolError(SERVER_EXITED, f"MCP server {server.shown!r} exited mid-rollout: "
                                       f"{process.why()}") from None
            return self._error(call, MCP_ERROR, f"{type(exc).__name__}: {exc}"[:1000])
        text = result_text(result)
        if result.is_error:
            return self._error(call, MCP_ERROR, text)
        return ToolResult(call.id, call.name, cut(text, self.limits.output_chars))

    def _error(self, call: ToolCall, kind: str, message: str) -> ToolResult:
        result = error_result(call, kind, message)
        return ToolResult(result.call_id, result.name, cut(result.content, self.limits.output_chars), result.error)

    async def end_rollout(self, rollout_id: str) -> None:
        """The rollout is over: its own server processes are stopped (per-run ones stay for the others)."""
        for process in (self._per_rollout.pop(rollout_id, None) or {}).values():
            await process.stop()

    async def aclose(self) -> None:
        processes = [p for held in self._per_rollout.values() for p in held.values()] + list(self._per_run.values())
        self._per_rollout, self._per_run = {}, {}
        await asyncio.gather(*(p.stop() for p in processes), return_exceptions=True)
        shutil.rmtree(self._dir, ignore_errors=True)

    def close(self) -> None:
        """Outside an event loop (a run refused after the box was opened): the directory removed; no process runs
        then (each is started in the run's loop)."""
        shutil.rmtree(self._dir, ignore_errors=True)


def open_mcp_tools(entries: Sequence[object], limits: ToolLimits, policy: SandboxPolicy,
                   environ: Mapping[str, str] | None = None) -> MCPTools:
    """The MCP servers `entries` describe ([tools] mcp's tables, --mcp strings), each started once in the sandbox to
    list its tools: a server that does not start, or a tool name two servers list, is one line, before anything is
    sent."""
    try:
        import mcp.client.stdio  # noqa: F401
    except ImportError:
        raise InputError("MCP tools need the official MCP Python SDK: pip install 'rfteval[mcp]' (mcp>=2)",
                         field="--mcp") from None
    servers = [server_from(e, f"[tools] mcp[{i}]" if not isinstance(e, str) else "--mcp")
               for i, e in enumerate(entries)]
    return MCPTools(servers, limits, policy, environ)


def check_declared(dataset: str | Path, names: frozenset[str], limit: int | None = None) -> None:
    """Every function tool an item declares is one the run's tools have: the first that is not is one line naming
    the dataset, its line and the tool."""
    from rfteval.data.dataset import iter_items
    from rfteval.tools.python import declared_functions

    for n, item in enumerate(iter_items(dataset)):
        if limit is not None and n >= limit:
            return
        tools = item.tools
        if not tools:
            continue
        for name in declared_functions(tools):
            if name not in names:
                known = ", ".join(sorted(names))
                raise InputError(f"the item declares tool {name!r}, which no MCP server (nor other tool) of the run "
                                 f"has (they have: {known})", dataset, item.line, "tools")

