"""Benchmark of agent rollouts (issue 37): rfteval's CPU per model turn, the whole loop against a bare SDK tool loop,
and resuming finished rollouts.

The server is tests/support/fake_openai.py in its own process (this file with --serve), answering each request by
the turn its history shows: a tool call `fetch(page, size)` while the rollout's turns are not done, then a text
answer. The prompt says how many turns and how long a page (`rollout 7: 20 turns, 3200 characters a page`), so
both contenders send the same turns and get the same answers. Its CPU is never counted.

1. CPU per model turn, 100 rollouts of 20 turns whose history reaches about 64 KB at turn 20 (19 pages of 3,200
   characters, each behind its assistant message): `rfteval run` as a library call (run_eval: turn keys over the
   growing body, the store written and flushed per turn, the limiter, retries, grading with string_check, the
   result files) with an in-process tool box (the tool's own cost left out), its process CPU over the request phase
   (time.process_time, every thread) divided by the model turns; target <= 2 ms. Beside it the bare loop's CPU per
   turn (the SDK's share), and the run with the same tools as a tools.py in the python sandbox (this process's
   CPU; the sandboxes' own is bench_tools.py's).
2. The whole loop against a bare openai-SDK tool loop (AsyncOpenAI, a semaphore of the same 32 requests in flight,
   the tool called in process, nothing stored), the same rollouts, interleaved, at 0 and 50 ms of server delay;
   target: rfteval's wall time <= 1.5x the bare loop's.
3. Resuming 1,000 finished rollouts of 8 turns (small pages, the tools in the sandbox): the same run again, as a
   library call and as the `rfteval run --tools` command; it must send no request (the server's count) and run no
   tool (the tool box's count; tools.jsonl unchanged), and cost <= 0.3 ms per stored model turn (wall). Beside it,
   the same store without rollouts.jsonl (rollouts cut by a kill just before their line; its index removed too, so
   it is rebuilt from the logs): every turn replayed from responses.jsonl and tools.jsonl, again with no request
   and no tool run; and the command resuming 10 rollouts,
   whose time is the command's fixed cost (start-up, the result files), so the large resume's CPU per stored turn
   beyond it is the resume's own.

Run: .venv/bin/python bench/bench_rollout.py   (or `make bench`). Prints a table; main() returns the figures.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rfteval.data.json_types import JSONObject
    from rfteval.tools.base import ToolBox, ToolCall, ToolResult

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

TURNS, PAGE_CHARS = 20, 3200  # 19 pages behind 20 turns: about 64 KB of history at the last turn
ROLLOUTS = int(os.environ.get("BENCH_ROLLOUT_N", "100"))
CONCURRENCY = 32
DELAYS_MS = (0, 50)
REPEATS = int(os.environ.get("BENCH_ROLLOUT_REPEATS", "3"))
RESUME_ROLLOUTS = int(os.environ.get("BENCH_ROLLOUT_RESUME", "1000"))
RESUME_TURNS, RESUME_PAGE = 8, 200
SMALL = 10  # rollouts of the small resume beside the large one: the command's fixed cost
CPU_TARGET_MS, RATIO_TARGET, RESUME_TARGET_MS = 2.0, 1.5, 0.3

PROMPT = re.compile(r"(\d+) turns, (\d+) characters a page")
TOOLS: list[dict[str, Any]] = [{"type": "function", "function": {
    "name": "fetch", "description": "One page of a document.",
    "parameters": {"type": "object", "properties": {"page": {"type": "integer"}, "size": {"type": "integer"}},
                   "required": ["page", "size"]}}}]
TOOLS_PY = '''
def fetch(page: int, size: int):
    text = f"page {page}: " + "lorem ipsum dolor sit amet, consectetur adipiscing elit. " * (size // 56 + 1)
    return text[:size]
'''


def page_text(page: int, size: int) -> str:
    """What fetch returns (TOOLS_PY's function, the same text in process)."""
    text = f"page {page}: " + "lorem ipsum dolor sit amet, consectetur adipiscing elit. " * (size // 56 + 1)
    return text[:size]


# ---------------------------------------------------------------- the server (its own process)


def serve(delay_ms: float) -> int:
    from tests.support.fake_openai import FakeOpenAI, Reply, Request, serve_until_stopped

    usage = {"input_tokens": 100, "output_tokens": 10, "reasoning_tokens": 0}

    def responder(request: Request) -> Reply:
        messages = request.body.get("messages") or []
        turn = 1 + sum(1 for m in messages if isinstance(m, dict) and m.get("role") == "assistant")
        found = PROMPT.search(request.last_user_text())
        turns, size = (int(found.group(1)), int(found.group(2))) if found else (1, 0)
        if turn >= turns:
            return Reply(text="done", usage=usage)
        return Reply(tool_calls=[{"id": f"call_{turn}", "type": "function", "function": {
            "name": "fetch", "arguments": json.dumps({"page": turn, "size": size})}}], usage=usage)

    fake = FakeOpenAI(responder, delay_s=delay_ms / 1000.0)
    fake.keep_requests = False
    return serve_until_stopped(fake)


def start_server(delay_ms: float) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--serve", str(delay_ms)],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    return proc, proc.stdout.readline().strip()


def served(base_url: str) -> int:
    with urllib.request.urlopen(base_url + "/_stats", timeout=10) as resp:
        return int(json.loads(resp.read())["served"])


# ---------------------------------------------------------------- the tool boxes and files


class InProcessTools:
    """fetch called in this process: a tool of no cost, so the figures are the loop's. Counts the turns it ran."""

    def __init__(self) -> None:
        self.turns_run = 0

    @property
    def identity(self) -> str:
        return "bench-rollout-in-process-v1"

    def names(self) -> frozenset[str]:
        return frozenset({"fetch"})

    async def init_state(self, item: JSONObject) -> JSONObject:
        return {}

    async def run_turn(self, rollout_id: str, item: JSONObject, calls: Sequence[ToolCall],
                       state: JSONObject) -> tuple[list[ToolResult], JSONObject]:
        from rfteval.tools.base import ToolResult

        self.turns_run += 1
        out = []
        for call in calls:
            args = json.loads(call.arguments)
            out.append(ToolResult(call.id, call.name, page_text(int(args["page"]), int(args["size"]))))
        return out, state

    async def aclose(self) -> None:
        return None


class Counting:
    """A tool box that counts the turns it was asked to run, passing them on (its identity is the box's)."""

    def __init__(self, box: ToolBox):
        self.box, self.turns_run = box, 0

    @property
    def identity(self) -> str:
        return self.box.identity

    def names(self) -> frozenset[str]:
        return self.box.names()

    async def init_state(self, item: JSONObject) -> JSONObject:
        return await self.box.init_state(item)

    async def run_turn(self, rollout_id: str, item: JSONObject, calls: Sequence[ToolCall],
                       state: JSONObject) -> tuple[list[ToolResult], JSONObject]:
        self.turns_run += 1
        return await self.box.run_turn(rollout_id, item, calls, state)

    async def aclose(self) -> None:
        await self.box.aclose()


def write_files(tmp: Path, name: str, n: int, turns: int, size: int) -> dict[str, Path]:
    dataset = tmp / f"{name}.jsonl"
    with open(dataset, "w", encoding="utf-8") as fh:
        for i in range(n):
            fh.write(json.dumps({"id": f"r{i}", "messages": [
                {"role": "system", "content": "Read the pages you are given, then answer."},
                {"role": "user", "content": f"rollout {i}: {turns} turns, {size} characters a page"}],
                "tools": TOOLS, "reference_answer": "done"}) + "\n")
    grader = tmp / "grader.json"
    grader.write_text(json.dumps({"type": "string_check", "name": "done", "input": "{{ sample.output_text }}",
                                  "reference": "{{ item.reference_answer }}", "operation": "eq"}))
    tools = tmp / "tools.py"
    tools.write_text(TOOLS_PY, encoding="utf-8")
    return {"dataset": dataset, "grader": grader, "tools": tools}


def history_bytes(turns: int, size: int) -> int:
    """The size of the messages the last turn sends (as rfteval's provider writes them)."""
    from rfteval.data import rollout as traj

    messages: list[Any] = [{"role": "system", "content": "Read the pages you are given, then answer."},
                           {"role": "user", "content": f"rollout 0: {turns} turns, {size} characters a page"}]
    for turn in range(1, turns):
        call = {"id": f"call_{turn}", "name": "fetch", "arguments": json.dumps({"page": turn, "size": size})}
        messages.append(traj.assistant_message(None, [call]))  # type: ignore[list-item]
        messages.append({"role": "tool", "tool_call_id": f"call_{turn}", "content": page_text(turn, size)})
    return len(json.dumps(messages, separators=(",", ":")))


# ---------------------------------------------------------------- the contenders


def rfteval_run(base_url: str, files: dict[str, Path], out: Path, turns: int, tools: ToolBox | None,
                fresh: bool = True) -> dict[str, Any]:
    """`rfteval run` as a library call: its process CPU over the request phase and over the whole call."""
    from fake_server import PhaseClock

    from rfteval.run.runner import RunOptions, run_eval
    from rfteval.run.spec import build_spec, flag_overrides

    class Clock(PhaseClock):
        cpu_start = cpu_stop = 0.0

        def start(self, totals: dict[str, int]) -> None:
            super().start(totals)
            self.cpu_start = time.process_time()

        def stop(self) -> None:
            super().stop()
            self.cpu_stop = time.process_time()

    table: dict[str, object] = {"max_turns": turns, "python": str(files["tools"])}  # `tools`, when given, in its place
    spec = build_spec(None, flag_overrides(models=["base=fake-base"], dataset=str(files["dataset"]),
                                           grader=str(files["grader"]), epochs=1, base_url=base_url,
                                           concurrency=CONCURRENCY, out=str(out), tools=table))
    clock = Clock()
    sent0 = served(base_url)
    cpu, wall = time.process_time(), time.perf_counter()
    result = run_eval(spec, monitor=clock, options=RunOptions(fresh=fresh), tools=tools)
    elapsed, used = time.perf_counter() - wall, time.process_time() - cpu
    assert result.summary.errors == 0, result.summary
    return {"wall_s": elapsed, "cpu_s": used, "phase_wall_s": clock.t_stop - clock.t_start,
            "phase_cpu_s": clock.cpu_stop - clock.cpu_start, "sent": served(base_url) - sent0,
            "mean": result.summary.models["base"].mean}


def bare_loop(base_url: str, files: dict[str, Path], turns: int, raw: bool = False) -> dict[str, Any]:
    """The floor: AsyncOpenAI, a semaphore, the tool called in process, the history kept in a list; nothing
    stored, nothing graded. `raw`: the body encoded once with msgspec and posted through the SDK's client on its
    aiohttp transport, the answer parsed with msgspec (rfteval's own request path, without rfteval); else
    `chat.completions.create` on the SDK's default transport, as a user's loop would call it."""
    import httpx2
    import msgspec
    import openai

    items = [json.loads(line) for line in files["dataset"].read_text(encoding="utf-8").splitlines()]
    answers: list[str] = []
    headers = {"Content-Type": "application/json"}

    async def main() -> None:
        http = openai.DefaultAioHttpClient() if raw else None
        client = openai.AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0, http_client=http)
        sem = asyncio.Semaphore(CONCURRENCY)

        async def send(item: dict[str, Any], messages: list[Any]) -> tuple[str | None, list[dict[str, Any]]]:
            async with sem:
                if raw:
                    body = {"model": "fake-base", "messages": messages, "tools": item["tools"], "tool_choice": "auto"}
                    resp = await client.post("/chat/completions", cast_to=httpx2.Response,
                                             content=msgspec.json.encode(body),
                                             options={"timeout": 600, "headers": headers})
                    message = msgspec.json.decode(resp.content)["choices"][0]["message"]
                    return message.get("content"), message.get("tool_calls") or []
                answer = await client.chat.completions.create(model="fake-base", messages=messages,
                                                              tools=item["tools"], timeout=600)
            m = answer.choices[0].message
            return m.content, [{"id": c.id, "type": "function", "function": {
                "name": c.function.name, "arguments": c.function.arguments}}
                for c in m.tool_calls or [] if c.type == "function"]

        async def rollout(item: dict[str, Any]) -> None:
            messages = list(item["messages"])
            for _ in range(turns):
                content, calls = await send(item, messages)
                if not calls:
                    answers.append(content or "")
                    return
                messages.append({"role": "assistant", "content": content, "tool_calls": calls})
                for c in calls:
                    args = json.loads(c["function"]["arguments"])
                    messages.append({"role": "tool", "tool_call_id": c["id"],
                                     "content": page_text(int(args["page"]), int(args["size"]))})

        await asyncio.gather(*(rollout(it) for it in items))
        await client.close()

    sent0 = served(base_url)
    cpu, wall = time.process_time(), time.perf_counter()
    asyncio.run(main())
    elapsed, used = time.perf_counter() - wall, time.process_time() - cpu
    assert answers == ["done"] * len(items), answers[:3]
    return {"wall_s": elapsed, "cpu_s": used, "sent": served(base_url) - sent0}


def command(files: dict[str, Path], out: Path, base_url: str, turns: int) -> dict[str, Any]:
    """The same run as the `rfteval run --tools` command: wall time and the process's CPU (wait4)."""
    rfteval = Path(sys.executable).parent / "rfteval"
    cmd = [str(rfteval)] if rfteval.exists() else [sys.executable, "-m", "rfteval"]
    args = [*cmd, "run", "--dataset", str(files["dataset"]), "--grader", str(files["grader"]), "--model",
            "base=fake-base", "--epochs", "1", "--base-url", base_url, "--concurrency", str(CONCURRENCY),
            "--tools", str(files["tools"]), "--max-turns", str(turns), "--out", str(out), "-q", "--no-readiness"]
    wall = time.perf_counter()
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - wall
    assert os.waitstatus_to_exitcode(status) == 0, proc.stderr.read() if proc.stderr else ""
    return {"wall_s": elapsed, "cpu_s": usage.ru_utime + usage.ru_stime}


def lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines()) if path.exists() else 0


# ---------------------------------------------------------------- the parts


def part_turns(tmp: Path) -> dict[str, Any]:
    """1 and 2: the in-process run, the bare loop and the sandboxed run, interleaved, per server delay."""
    from rfteval.sandbox import SandboxPolicy
    from rfteval.tools.python import open_python_tools

    files = write_files(tmp, "turns", ROLLOUTS, TURNS, PAGE_CHARS)
    out: dict[str, Any] = {"history_bytes": history_bytes(TURNS, PAGE_CHARS), "model_turns": ROLLOUTS * TURNS}
    for delay in DELAYS_MS:
        proc, url = start_server(delay)
        runs: dict[str, list[dict[str, Any]]] = {"rfteval": [], "bare": [], "raw": [], "sandboxed": []}
        try:
            for _ in range(REPEATS):
                runs["bare"].append(bare_loop(url, files, TURNS))
                runs["raw"].append(bare_loop(url, files, TURNS, raw=True))
                tools = InProcessTools()
                runs["rfteval"].append(rfteval_run(url, files, tmp / "run", TURNS, tools))
                assert tools.turns_run == ROLLOUTS * (TURNS - 1), tools.turns_run
                box = open_python_tools(files["tools"], spec_tool_limits(), SandboxPolicy())
                runs["sandboxed"].append(rfteval_run(url, files, tmp / "sandboxed", TURNS, box))
        finally:
            proc.terminate()
            proc.wait()
        for rows in runs.values():
            assert all(r["sent"] == ROLLOUTS * TURNS for r in rows), [r["sent"] for r in rows]
        out[f"delay_{delay}"] = runs
    return out


def spec_tool_limits() -> Any:
    """The tool limits a run's spec gives by default (so the box's identity is a run's)."""
    from rfteval.run.spec import build_spec

    return build_spec(None, {"dataset": "x.jsonl", "grader": "g.json", "models": {"base": {"model": "m"}},
                             "tools": {"python": "tools.py"}}).tool_limits()


def part_resume(tmp: Path) -> dict[str, Any]:
    """3: a store of RESUME_ROLLOUTS finished rollouts, resumed as a library call and as a command; then without
    rollouts.jsonl, every turn replayed."""
    from rfteval.sandbox import SandboxPolicy
    from rfteval.tools.python import open_python_tools

    (tmp / "small").mkdir()
    files = write_files(tmp, "resume", RESUME_ROLLOUTS, RESUME_TURNS, RESUME_PAGE)
    stored_turns = RESUME_ROLLOUTS * RESUME_TURNS
    run_dir = tmp / "resume-run"
    proc, url = start_server(0)
    figures: dict[str, Any] = {"rollouts": RESUME_ROLLOUTS, "stored_turns": stored_turns}
    try:
        box = Counting(open_python_tools(files["tools"], spec_tool_limits(), SandboxPolicy()))
        figures["generate"] = rfteval_run(url, files, run_dir, RESUME_TURNS, box)
        assert figures["generate"]["sent"] == stored_turns and box.turns_run == RESUME_ROLLOUTS * (RESUME_TURNS - 1)
        store = run_dir / "store"
        before = {name: lines(store / name) for name in ("responses.jsonl", "tools.jsonl", "rollouts.jsonl")}
        figures["store_lines"] = before
        figures["store_bytes"] = sum(p.stat().st_size for p in store.iterdir())
        cut = tmp / "cut-run"
        shutil.copytree(run_dir, cut)
        # a kill before the rollouts' lines: rollouts.jsonl gone, and the index (derived, rebuilt from the logs when
        # missing) with it, since it would still hold them
        for name in ("rollouts.jsonl", "index.sqlite", "index.sqlite-wal", "index.sqlite-shm"):
            (cut / "store" / name).unlink(missing_ok=True)
        for kind, where in (("finished", run_dir), ("cut", cut)):
            rows = []
            for _ in range(REPEATS):
                here = tmp / f"{kind}-copy"
                shutil.rmtree(here, ignore_errors=True)
                shutil.copytree(where, here)
                box = Counting(open_python_tools(files["tools"], spec_tool_limits(), SandboxPolicy()))
                row = rfteval_run(url, files, here, RESUME_TURNS, box, fresh=False)
                row["tools_run"] = box.turns_run
                row["tools_lines"] = lines(here / "store" / "tools.jsonl")
                assert row["sent"] == 0 and box.turns_run == 0 and row["tools_lines"] == before["tools.jsonl"], row
                rows.append(row)
            figures[kind] = rows
        # the command's fixed cost (start-up, the result files) apart: the same resume of SMALL rollouts beside it
        small_files = write_files(tmp / "small", "resume", SMALL, RESUME_TURNS, RESUME_PAGE)
        small_dir = tmp / "small" / "run"
        box = Counting(open_python_tools(small_files["tools"], spec_tool_limits(), SandboxPolicy()))
        rfteval_run(url, small_files, small_dir, RESUME_TURNS, box)
        for kind, where, fs in (("command", run_dir, files), ("command_small", small_dir, small_files)):
            rows = []
            tool_lines = lines(where / "store" / "tools.jsonl")
            for _ in range(REPEATS):
                sent0 = served(url)
                row = command(fs, where, url, RESUME_TURNS)
                row["sent"] = served(url) - sent0
                row["tools_lines"] = lines(where / "store" / "tools.jsonl")
                assert row["sent"] == 0 and row["tools_lines"] == tool_lines, row
                rows.append(row)
            figures[kind] = rows
    finally:
        proc.terminate()
        proc.wait()
    return figures


def main() -> dict[str, Any]:
    # what a run imports once per process, in a thread while its first requests are in flight (pandas, pyarrow):
    # imported here, so that no contender's request phase pays it and the repeats are alike
    import pandas  # noqa: F401
    import pyarrow.parquet  # noqa: F401
    from bench_grading import others_cpu

    figures: dict[str, Any] = {"cpus": os.cpu_count(), "load_before": os.getloadavg()[0]}
    busy0 = others_cpu()
    with tempfile.TemporaryDirectory() as tmp:
        figures["turns"] = part_turns(Path(tmp))
        figures["resume"] = part_resume(Path(tmp))
    busy1 = others_cpu()
    figures["others_cpu_s"] = busy1 - busy0 if busy0 is not None and busy1 is not None else None
    figures["load_after"] = os.getloadavg()[0]
    report(figures)
    return figures


def best(rows: list[dict[str, Any]], key: str) -> float:
    return float(min(r[key] for r in rows))


def median(rows: list[dict[str, Any]], key: str) -> float:
    return float(statistics.median(r[key] for r in rows))


def report(figures: dict[str, Any]) -> None:
    print(f"CPUs: {figures['cpus']}; load average {figures['load_before']:.2f} before, {figures['load_after']:.2f} "
          f"after" + (f"; other processes took {figures['others_cpu_s']:.1f} CPU-s meanwhile"
                      if figures["others_cpu_s"] is not None else ""))
    t = figures["turns"]
    n = t["model_turns"]
    print(f"{ROLLOUTS} rollouts x {TURNS} turns ({n:,} model turns, {ROLLOUTS * (TURNS - 1):,} tool turns), history "
          f"{t['history_bytes'] / 1024:.1f} KB at turn {TURNS}; {REPEATS} runs each, interleaved; best (median)")
    print(f"{'':<44}{'wall s':>16}{'CPU ms / turn':>18}{'x bare wall':>14}")
    for delay in DELAYS_MS:
        runs = t[f"delay_{delay}"]
        bare = runs["bare"]
        print(f"server delay {delay} ms")
        for name, label, key in (("bare", "bare AsyncOpenAI tool loop", "cpu_s"),
                                 ("raw", "the same, bodies pre-encoded, aiohttp", "cpu_s"),
                                 ("rfteval", "rfteval run, in-process tools (phase)", "phase_cpu_s"),
                                 ("sandboxed", "rfteval run, tools.py in the sandbox (phase)", "phase_cpu_s")):
            rows = runs[name]
            wall_key = "wall_s" if name in ("bare", "raw") else "phase_wall_s"
            ratio = best(rows, wall_key) / best(bare, "wall_s")
            ratio_med = median(rows, wall_key) / median(bare, "wall_s")
            print(f"  {label:<42}{best(rows, wall_key):>7.2f} ({median(rows, wall_key):>5.2f})"
                  f"{1000 * best(rows, key) / n:>9.2f} ({1000 * median(rows, key) / n:>5.2f})"
                  f"{ratio:>7.2f} ({ratio_med:.2f})")
        whole = runs["rfteval"]
        print(f"  {'  the whole run_eval call (in-process tools)':<42}{best(whole, 'wall_s'):>7.2f} "
              f"({median(whole, 'wall_s'):>5.2f}){1000 * best(whole, 'cpu_s') / n:>9.2f} "
              f"({1000 * median(whole, 'cpu_s') / n:>5.2f}){best(whole, 'wall_s') / best(bare, 'wall_s'):>7.2f}")
    d0 = t[f"delay_{DELAYS_MS[0]}"]
    cpu = 1000 * median(d0["rfteval"], "phase_cpu_s") / n
    print(f"rfteval's CPU per model turn at {t['history_bytes'] / 1024:.0f} KB and {TURNS} turns (median, delay 0): "
          f"{cpu:.2f} ms  [{'ok' if cpu <= CPU_TARGET_MS else 'MISSED'}; target <= {CPU_TARGET_MS:g} ms]")
    for delay in DELAYS_MS:
        runs = t[f"delay_{delay}"]
        ratio = median(runs["rfteval"], "phase_wall_s") / median(runs["bare"], "wall_s")
        print(f"the whole loop / the bare SDK loop, delay {delay} ms (median): {ratio:.2f}x  "
              f"[{'ok' if ratio <= RATIO_TARGET else 'MISSED'}; target <= {RATIO_TARGET:g}x]")
    r = figures["resume"]
    s = r["stored_turns"]
    print(f"resume: {r['rollouts']:,} finished rollouts of {RESUME_TURNS} turns ({s:,} stored model turns; store "
          f"{r['store_bytes'] / 1e6:.1f} MB: {r['store_lines']}); generated in {r['generate']['wall_s']:.1f} s")
    for kind, label in (("finished", "library call, finished rollouts"), ("cut", "library call, cut: every turn replayed"),
                        ("command", "the command, finished rollouts")):
        rows = r[kind]
        print(f"  {label:<40} wall {best(rows, 'wall_s'):.2f} s ({median(rows, 'wall_s'):.2f}); "
              f"{1000 * best(rows, 'wall_s') / s:.3f} ms per stored turn ({1000 * median(rows, 'wall_s') / s:.3f}); "
              f"CPU {median(rows, 'cpu_s'):.2f} s; requests {max(x['sent'] for x in rows)}; "
              f"tools run {max(x.get('tools_run', 0) for x in rows)}")
    small = r["command_small"]
    marginal = (median(r["command"], "cpu_s") - median(small, "cpu_s")) / (s - SMALL * RESUME_TURNS)
    print(f"  the command on {SMALL} finished rollouts: wall {median(small, 'wall_s'):.2f} s, CPU "
          f"{median(small, 'cpu_s'):.2f} s (its fixed cost); the large resume's CPU beyond it: "
          f"{1000 * marginal:.3f} ms per stored turn")
    per = 1000 * median(r["finished"], "wall_s") / s
    print(f"resuming finished rollouts, per stored turn (median, library call): {per:.3f} ms  "
          f"[{'ok' if per <= RESUME_TARGET_MS else 'MISSED'}; target <= {RESUME_TARGET_MS:g} ms]")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--serve":
        sys.exit(serve(float(sys.argv[2])))
    main()
