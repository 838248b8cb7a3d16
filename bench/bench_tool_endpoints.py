"""Benchmark of Agent RFT tool endpoints (issue 39): what a call costs through rfteval's EndpointTools, beside a bare
httpx POST of the same body to the same local tool server.

The server is tests/support/agent_rft_server.py (ZavaRetailAgent-style retail tools, stdlib ThreadingHTTPServer) in
a process of its own, so this process's CPU time is the client's alone. The item is a ZavaRetailAgent-sized line
(a 4 KB policy as the developer message, the 11 retail tools' schemas, references): about 9 KB a call. Each round
runs every kind once, one after the other (the order rotating from round to round), CALLS calls each, one at a
time (as a rollout waits for its call):
  (a) bare: an httpx.AsyncClient, kept open, POSTs the same JSON body the contract sends and reads the answer's
      `output` (the floor: the HTTP client and the server);
  (b) EndpointTools.run_turn with 1 call: the body built and serialised, the 1 MB checks, the retry wrapper, the
      answer read in a stream, parsed, scrubbed of secrets and cut at the output limit;
  (c) the same with 3 calls a turn (per call);
  (d) CompositeTools in front of (b), as a run with both python and endpoint tools holds it.
Per kind: the median over rounds of the mean wall time a call, and this process's CPU a call; rfteval's overhead is
(b) − (a).

Run: .venv/bin/python bench/bench_tool_endpoints.py   (or `make bench`). Prints a table; main() returns the figures.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

ROUNDS = 15
CALLS = 200
SERVER = """
import sys
from tests.support.agent_rft_server import AgentRFTServer
server = AgentRFTServer(key="bench-key-0000").start()
print(server.base_url, flush=True)
sys.stdin.read()
server.stop()
"""


def start_server() -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen([sys.executable, "-c", SERVER], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.stdout is not None
    return proc, proc.stdout.readline().strip()


def item() -> dict[str, Any]:
    from tests.support.agent_rft_server import RETAIL_TOOLS

    policy = "# Retail agent policy\n" + "- Authenticate the user by email, or by name and zip code first.\n" * 64
    return {"id": "q0", "messages": [{"role": "developer", "content": policy},
                                     {"role": "user", "content": "I'm Ava Moore from 78234; is my order delivered?"}],
            "tools": RETAIL_TOOLS, "reference_policy_args": [{"order_id": "#W4817420", "item_ids": ["3812493782"]}],
            "reference_tool_calls": ["find_user_id_by_name_zip", "list_user_orders", "get_order_details"]}


ARGS = json.dumps({"first_name": "Ava", "last_name": "Moore", "zip": "78234"})


async def measure(call: Callable[[], Awaitable[object]], n: int) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process) a call, over `n` calls one at a time."""
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(n):
        await call()
    return (time.perf_counter() - wall) / n, (time.process_time() - cpu) / n


def main() -> dict[str, Any]:
    import httpx

    from rfteval.tools.base import ToolCall, ToolLimits
    from rfteval.tools.composite import CompositeTools
    from rfteval.tools.endpoint import open_tool_endpoints
    from tests.support.agent_rft_server import tools_config
    from tests.support.toolboxes import calculator

    proc, base = start_server()
    line = item()
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "tools-config.json"
        config.write_text(json.dumps(tools_config(f"{base}/tools", {"X-Functions-Key": "${BENCH_TOOLS_KEY}"})))
        env = {"BENCH_TOOLS_KEY": "bench-key-0000"}
        box = open_tool_endpoints(config, ToolLimits(), environ=env)
        both = CompositeTools([("tools.py", calculator()), (str(config), open_tool_endpoints(config, ToolLimits(),
                                                                                             environ=env))])
    one = [ToolCall("call_1", "find_user_id_by_name_zip", ARGS)]
    three = [ToolCall(f"call_{i}", "find_user_id_by_name_zip", ARGS) for i in range(3)]
    body = {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "find_user_id_by_name_zip",
            "arguments": ARGS, "trace_id": "trace_bench", "item": line}
    figures: dict[str, Any] = {"cpus": os.cpu_count(), "load_before": os.getloadavg()[0],
                               "payload_bytes": len(json.dumps(body, separators=(",", ":")))}

    async def run() -> dict[str, list[tuple[float, float]]]:
        async with httpx.AsyncClient() as client:
            async def bare() -> str:
                r = await client.post(f"{base}/tools", json=body, headers={"X-Functions-Key": "bench-key-0000"})
                return str(r.json()["output"])

            async def rfteval_one() -> object:
                return await box.run_turn("trace_bench", line, one, {})

            async def rfteval_three() -> object:
                return await box.run_turn("trace_bench", line, three, {})

            async def composite() -> object:
                return await both.run_turn("trace_bench", line, one, {})

            kinds: dict[str, tuple[Callable[[], Awaitable[object]], int]] = {
                "bare httpx POST": (bare, 1), "EndpointTools, 1 call a turn": (rfteval_one, 1),
                "EndpointTools, 3 calls a turn": (rfteval_three, 3), "CompositeTools, 1 call a turn": (composite, 1)}
            for fn, _ in kinds.values():  # warm: connections open, code paths loaded
                await measure(fn, 20)
            out: dict[str, list[tuple[float, float]]] = {k: [] for k in kinds}
            names = list(kinds)
            for r in range(ROUNDS):  # each round in another order: no kind always runs first
                for name in names[r % len(names):] + names[:r % len(names)]:
                    fn, per = kinds[name]
                    wall, cpu = await measure(fn, CALLS // per)
                    out[name].append((wall / per, cpu / per))
            await box.aclose()
            await both.aclose()
            return out

    try:
        rounds = asyncio.run(run())
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(timeout=10)
    figures["kinds"] = {name: {"wall_ms": statistics.median(w for w, _ in r) * 1e3,
                               "cpu_ms": statistics.median(c for _, c in r) * 1e3} for name, r in rounds.items()}
    figures["load_after"] = os.getloadavg()[0]
    return figures


def report(figures: dict[str, Any]) -> None:
    kinds = figures["kinds"]
    bare = kinds["bare httpx POST"]
    print(f"CPUs: {figures['cpus']}; {ROUNDS} rounds x {CALLS} calls a kind, one at a time; a call's body "
          f"{figures['payload_bytes']:,} bytes; load average {figures['load_before']:.2f} before, "
          f"{figures['load_after']:.2f} after")
    print(f"{'kind':<34} {'wall ms/call':>13} {'CPU ms/call':>12} {'wall − bare':>12} {'CPU − bare':>11}")
    for name, k in kinds.items():
        print(f"{name:<34} {k['wall_ms']:>13.3f} {k['cpu_ms']:>12.3f} {k['wall_ms'] - bare['wall_ms']:>12.3f} "
              f"{k['cpu_ms'] - bare['cpu_ms']:>11.3f}")


if __name__ == "__main__":
    report(main())
