"""Benchmark of a tool turn in the python sandbox (issue 37): its wall time, beside the bare fork cost.

Target (issue 37): a tool turn in the sandbox (a fork from the template, 1-3 calls) takes at most 5 ms of wall
time. Measured side by side in one run, each kind in turn within every round (so all see the same machine), one
at a time (the time a rollout waits for its turn), on started sandboxes:
  (a) a bare fork: os.fork(), the child _exits at once, waitpid: the price of a fresh process, in a plain
      interpreter holding about what a tools template holds (timed by itself) and in this process (larger);
  (b) a grading unit of a one-line grader through a WorkerPool: a fork from the template, one call and the
      clean-up, as python graders pay it (the unit tool turns are built on);
  (c) tool turns through a ToolPool: 0 calls (the unit alone), 1 and 3 calls of a small tool that reads and
      changes the rollout's state;
  (d) the same 1- and 3-call turns through PythonTools.run_turn, the ToolBox a run calls (screening, JSON of the
      state, the event loop, the future handed between threads).
Then turns per second with 32 rollouts in flight (asyncio, as a run plays them), and the CPU a turn costs there
(this process and every sandbox process).

Run: .venv/bin/python bench/bench_tools.py   (or `make bench`). Prints a table; main() returns the figures.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rfteval.data.json_types import JSONObject
    from rfteval.tools.base import ToolCall
    from rfteval.tools.python import PythonTools

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

ROUNDS = 300
TARGET_MS = 5.0
ROLLOUTS, TURNS = 32, 10  # the throughput phase: rollouts in flight, turns each (2 calls a turn)

GRADER = "def grade(sample, item):\n    return 1.0\n"
TOOLS = '''
def search(query: str, top_k: int = 3, *, state=None):
    state["searches"] = state.get("searches", 0) + 1
    return [f"{query}: result {i}" for i in range(top_k)]

def lookup(id: str, *, item=None):
    return {"id": id, "item": item["id"]}
'''
STATE: JSONObject = {"searches": 0, "notes": ["a note"] * 8}


def bare_fork() -> None:
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)


# A plain interpreter holding about what a tools template holds (json, marshal, inspect), timing its own forks:
# the price of a fresh process of the template's size, without the sandbox's hand-offs and clean-up.
PLAIN_FORKER = """
import inspect, json, marshal, os, sys, time
for line in sys.stdin:
    t0 = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    print(time.perf_counter() - t0, flush=True)
"""


class PlainForker:
    """The helper running PLAIN_FORKER: each call is one fork there, its time as the helper measured it."""

    def __init__(self) -> None:
        import subprocess

        self.proc = subprocess.Popen([sys.executable, "-I", "-c", PLAIN_FORKER], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)

    def __call__(self) -> float:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("\n")
        self.proc.stdin.flush()
        return float(self.proc.stdout.readline())

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait()


def timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> dict[str, Any]:
    from bench_grading import cpu, others_cpu, tree_cpu

    from rfteval.sandbox import SandboxPolicy, WorkerPool
    from rfteval.tools.base import ToolCall, ToolLimits
    from rfteval.tools.python import open_python_tools

    figures: dict[str, Any] = {"cpus": os.cpu_count(), "load_before": os.getloadavg()[0]}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "tools.py"
        path.write_text(TOOLS, encoding="utf-8")
        box = open_python_tools(path, ToolLimits(), SandboxPolicy())
        grading = WorkerPool()
        loop = asyncio.new_event_loop()
        try:
            item: JSONObject = {"id": "q1", "messages": [{"role": "user", "content": "find it"}]}
            pool = box._pool  # the ToolPool under the ToolBox: (c) measures it without the ToolBox's part
            one: list[tuple[str, JSONObject]] = [("search", {"query": "rfteval"})]
            three: list[tuple[str, JSONObject]] = [("search", {"query": "rfteval"}), ("lookup", {"id": "x1"}),
                                                   ("search", {"query": "x", "top_k": 1})]
            calls_one = [ToolCall("c1", "search", '{"query": "rfteval"}')]
            calls_three = [*calls_one, ToolCall("c2", "lookup", '{"id": "x1"}'),
                           ToolCall("c3", "search", '{"query": "x", "top_k": 1}')]
            state_text = json.dumps(STATE, separators=(",", ":"))
            kinds: dict[str, Callable[[], object]] = {
                "bare fork (this process, larger)": bare_fork,
                "grading unit, one-line grader": lambda: grading.grade(GRADER, [({"output_text": "x"}, item)]),
                "tool turn, 0 calls (ToolPool)": lambda: pool.load(TOOLS),
                "tool turn, 1 call (ToolPool)": lambda: pool.turn(TOOLS, item, state_text, one, 20_000).result(),
                "tool turn, 3 calls (ToolPool)": lambda: pool.turn(TOOLS, item, state_text, three, 20_000).result(),
                "run_turn, 1 call (the ToolBox)": lambda: loop.run_until_complete(
                    box.run_turn("r", item, calls_one, dict(STATE))),
                "run_turn, 3 calls (the ToolBox)": lambda: loop.run_until_complete(
                    box.run_turn("r", item, calls_three, dict(STATE))),
            }
            for fn in kinds.values():  # every sandbox started, every template made
                for _ in range(3 * grading.workers):
                    fn()
            results, _ = loop.run_until_complete(box.run_turn("r", item, calls_three, dict(STATE)))
            assert all(r.error is None for r in results), results
            times: dict[str, list[float]] = {"bare fork (a plain python)": [], **{name: [] for name in kinds}}
            forker = PlainForker()
            busy0 = others_cpu()
            for _ in range(ROUNDS):
                times["bare fork (a plain python)"].append(forker())
                for name, fn in kinds.items():
                    times[name].append(timed(fn))
            busy1 = others_cpu()
            forker.close()
            figures["sequential"] = {name: {"median_ms": 1000 * statistics.median(t),
                                            "p90_ms": 1000 * statistics.quantiles(t, n=10)[-1],
                                            "min_ms": 1000 * min(t)} for name, t in times.items()}
            figures["others_cpu_s"] = busy1 - busy0 if busy0 is not None and busy1 is not None else None
            figures["throughput"] = throughput(box, loop, item, calls_one + calls_three[1:2], cpu, tree_cpu,
                                               pool.pids)
        finally:
            loop.run_until_complete(box.aclose())
            loop.close()
            grading.close()
    figures["load_after"] = os.getloadavg()[0]
    report(figures)
    return figures


def throughput(box: PythonTools, loop: asyncio.AbstractEventLoop, item: JSONObject, calls: list[ToolCall],
               cpu: Callable[[int], float], tree_cpu: Callable[[list[int]], float], pids: list[int]) -> dict[str, float]:
    """ROLLOUTS rollouts of TURNS turns (2 calls each) in flight at once, as a run plays them."""

    async def rollout(n: int) -> None:
        state = dict(STATE)
        for _ in range(TURNS):
            _, state = await box.run_turn(f"r{n}", item, calls, state)
        assert state["searches"] == TURNS, state

    async def all_of_them() -> None:
        await asyncio.gather(*(rollout(n) for n in range(ROLLOUTS)))

    self0, boxes0 = cpu(resource.RUSAGE_SELF), tree_cpu(pids)
    wall = timed(lambda: loop.run_until_complete(all_of_them()))
    self1, boxes1 = cpu(resource.RUSAGE_SELF), tree_cpu(pids)
    turns = ROLLOUTS * TURNS
    return {"turns": turns, "wall_s": wall, "turns_per_s": turns / wall, "workers": len(pids),
            "cpu_ms_per_turn_here": 1000 * (self1 - self0) / turns,
            "cpu_ms_per_turn_sandboxes": 1000 * (boxes1 - boxes0) / turns}


def report(figures: dict[str, Any]) -> None:
    seq = figures["sequential"]
    fork = seq["bare fork (a plain python)"]["median_ms"]
    print(f"CPUs: {figures['cpus']}; {ROUNDS} rounds, each kind once a round, one at a time; load average "
          f"{figures['load_before']:.2f} before, {figures['load_after']:.2f} after"
          + (f"; other processes took {figures['others_cpu_s']:.1f} CPU-s meanwhile"
             if figures["others_cpu_s"] is not None else ""))
    print(f"{'wall time of one':<36}{'median ms':>10}{'p90 ms':>9}{'min ms':>9}{'x bare fork':>13}")
    for name, f in seq.items():
        print(f"{'  ' + name:<36}{f['median_ms']:>10.2f}{f['p90_ms']:>9.2f}{f['min_ms']:>9.2f}"
              f"{f['median_ms'] / fork:>13.1f}")
    t = figures["throughput"]
    print(f"{ROLLOUTS} rollouts x {TURNS} turns of 2 calls in flight, {t['workers']} sandboxes: {t['turns_per_s']:,.0f} "
          f"turns/s ({t['wall_s']:.2f} s); CPU per turn {t['cpu_ms_per_turn_here']:.2f} ms here + "
          f"{t['cpu_ms_per_turn_sandboxes']:.2f} ms in the sandboxes")
    for calls in ("1 call", "3 calls"):
        worst = max(seq[f"tool turn, {calls} (ToolPool)"]["median_ms"], seq[f"run_turn, {calls} (the ToolBox)"]["median_ms"])
        verdict = "ok" if worst <= TARGET_MS else f"OVER {TARGET_MS:g} ms"
        print(f"a tool turn of {calls} in the sandbox, median: {worst:.2f} ms  [{verdict}; target <= {TARGET_MS:g} ms]")


if __name__ == "__main__":
    main()
