"""Benchmark of MCP tools (issue 39, item 4): what a call to an MCP server costs through rfteval's MCPTools, beside
a bare call through the official SDK's client to the same server.

The server is the reference `mcp-server-time` from PyPI (`make mcp` installs it into .venv-mcp/time), its
`get_current_time` tool, over stdio. Kinds, each round running every kind once, one after the other (the order
rotating from round to round), CALLS calls each, one at a time (as a rollout waits for its call):
  (a) bare SDK: `stdio_client` + `ClientSession` to the server started as a plain process, `call_tool` (the floor:
      the SDK's client, the pipes and the server);
  (b) MCPTools.run_turn with 1 call, `per = "run"`: the server inside bubblewrap (rfteval's sandbox), the call's
      arguments parsed, routed, its content blocks turned into the tool message and cut at the output limit;
  (c) the same through CompositeTools (beside python tools), as a run with both holds it.
Per kind: the median over rounds of the mean wall time a call, and this process's CPU a call; rfteval's overhead
is (b) − (a). Then what a rollout's own server costs to start (`per = "rollout"`, the default): a fresh process,
initialize and tools/list, then one call; bare (a plain process) beside rfteval's (in the sandbox), STARTS times.

Run: .venv/bin/python bench/bench_mcp.py   (or `make bench`). Prints a table; main() returns the figures.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

ROUNDS = 10
CALLS = 100
STARTS = 8
SERVER = ROOT / ".venv-mcp" / "time" / "bin" / "mcp-server-time"
ARGS = {"timezone": "Europe/Paris"}


async def measure(call: Callable[[], Awaitable[object]], n: int) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process) a call, over `n` calls one at a time."""
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(n):
        await call()
    return (time.perf_counter() - wall) / n, (time.process_time() - cpu) / n


def main() -> dict[str, Any]:
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    from rfteval.sandbox.policy import SandboxPolicy
    from rfteval.tools.base import ToolCall, ToolLimits
    from rfteval.tools.composite import CompositeTools
    from rfteval.tools.mcp import open_mcp_tools
    from tests.support.toolboxes import calculator

    if not SERVER.is_file():
        raise SystemExit(f"{SERVER} is missing: `make mcp` installs it")
    command = [str(SERVER), "--local-timezone", "UTC"]
    per_run = open_mcp_tools([{"command": command, "per": "run"}], ToolLimits(), SandboxPolicy())
    both = CompositeTools([("tools.py", calculator()), ("[tools] mcp", open_mcp_tools(
        [{"command": command, "per": "run"}], ToolLimits(), SandboxPolicy()))])
    per_rollout = open_mcp_tools([{"command": command}], ToolLimits(), SandboxPolicy())
    one = [ToolCall("call_1", "get_current_time", json.dumps(ARGS))]
    params = StdioServerParameters(command=command[0], args=command[1:])
    figures: dict[str, Any] = {"cpus": os.cpu_count(), "load_before": os.getloadavg()[0]}

    async def bare_start() -> None:
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            await session.list_tools()
            await session.call_tool("get_current_time", ARGS)

    async def run() -> dict[str, list[tuple[float, float]]]:
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()

            async def bare() -> object:
                return await session.call_tool("get_current_time", ARGS)

            async def rfteval_one() -> object:
                return await per_run.run_turn("trace_bench", {}, one, {})

            async def composite() -> object:
                return await both.run_turn("trace_bench", {}, one, {})

            kinds: dict[str, Callable[[], Awaitable[object]]] = {
                "bare SDK call_tool": bare, "MCPTools (sandboxed), 1 call a turn": rfteval_one,
                "CompositeTools, 1 call a turn": composite}
            for fn in kinds.values():  # warm: servers started, code paths loaded
                await measure(fn, 20)
            out: dict[str, list[tuple[float, float]]] = {k: [] for k in kinds}
            names = list(kinds)
            for r in range(ROUNDS):  # each round in another order: no kind always runs first
                for name in names[r % len(names):] + names[:r % len(names)]:
                    out[name].append(await measure(kinds[name], CALLS))
        starts: dict[str, list[tuple[float, float]]] = {"bare: start, initialize, list, 1 call": [],
                                                        "MCPTools per rollout: the same, sandboxed": []}
        for i in range(STARTS):
            starts["bare: start, initialize, list, 1 call"].append(await measure(bare_start, 1))

            async def rollout(trace: str = f"trace_{i}") -> None:
                await per_rollout.run_turn(trace, {}, one, {})
                await per_rollout.end_rollout(trace)

            starts["MCPTools per rollout: the same, sandboxed"].append(await measure(rollout, 1))
        await per_run.aclose()
        await both.aclose()
        await per_rollout.aclose()
        return {**out, **starts}

    rounds = asyncio.run(run())
    figures["kinds"] = {name: {"wall_ms": statistics.median(w for w, _ in r) * 1e3,
                               "cpu_ms": statistics.median(c for _, c in r) * 1e3} for name, r in rounds.items()}
    figures["load_after"] = os.getloadavg()[0]
    return figures


def report(figures: dict[str, Any]) -> None:
    kinds = figures["kinds"]
    print(f"CPUs: {figures['cpus']}; {ROUNDS} rounds x {CALLS} calls a kind, one at a time, then {STARTS} starts; "
          f"load average {figures['load_before']:.2f} before, {figures['load_after']:.2f} after")
    print(f"{'kind':<44} {'wall ms':>10} {'CPU ms':>9} {'wall − bare':>12} {'CPU − bare':>11}")
    bare: dict[str, float] = {}
    for name, k in kinds.items():
        if name.startswith("bare"):
            bare = k
        print(f"{name:<44} {k['wall_ms']:>10.3f} {k['cpu_ms']:>9.3f} {k['wall_ms'] - bare['wall_ms']:>12.3f} "
              f"{k['cpu_ms'] - bare['cpu_ms']:>11.3f}")


if __name__ == "__main__":
    report(main())
