"""Start-up: `rfteval --help`'s wall and import time, and a one-item `rfteval run`'s CPU and wall time beside a bare
`AsyncOpenAI` one-request process, for this tree and, side by side, another checkout.

1. `--help` (issue 20's target: the packages must not make `rfteval --help` slower).
2. One item (issue 31's target: a one-item `rfteval run` against the local server in <= 0.9 s of CPU). Each case is a
   fresh process whose CPU (user + system) is read with wait4: `rfteval run` on a one-item dataset at its default
   3 epochs with a string_check grader against tests/fake_openai.py (100 ms answers, as bench_run.py's); the same
   three requests, one after another, from a bare `AsyncOpenAI` (the SDK's default transport, no retries) and from
   aiohttp without the SDK; and a process that only imports the third-party
   packages such a run uses (openai, pandas, pyarrow.parquet, typer, rich), the floor a run pays before any of
   rfteval's own work; and a process that imports the SDK and writes a one-row Parquet file with pyarrow, nothing
   else: the least any run on the chosen stack (requests through the SDK, results.parquet) can cost.

`python bench/bench_startup.py --against /path/to/other/checkout` measures two trees in one run, alternating every
case so that the machine's load falls on all alike; each tree is put first on PYTHONPATH, so the same interpreter and
packages serve both. The load average is printed before and after: on a shared machine the CPU-seconds move with it
(caches and frequency), the wall time more.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DELAY_MS = 100
EPOCHS = 3  # rfteval run's default: one item is three requests
# The third-party packages a one-item run imports (the SDK pulls aiohttp, httpx2 and pydantic; pyarrow numpy)
RUN_PACKAGES = "import openai, pandas, pyarrow.parquet, typer, rich.console, rich.table"
# The chosen stack's floor for any run: the SDK imported, and a one-row Parquet file written with pyarrow (which imports
# pandas itself, through its pandas shim, as soon as it builds an array, whether or not rfteval uses pandas)
STACK_FLOOR = """
import sys, openai, pyarrow as pa, pyarrow.parquet as pq
pq.write_table(pa.table({"score": [1.0]}), sys.argv[1])
"""
BARE_REQUEST = """
import asyncio, sys
import openai

async def main() -> None:
    client = openai.AsyncOpenAI(base_url=sys.argv[1], api_key="unused", max_retries=0)
    for _ in range(int(sys.argv[2])):
        resp = await client.chat.completions.create(model="fake-base", messages=[
            {"role": "user", "content": "What is item 0? Reply with its number."}], timeout=600)
        assert resp.choices[0].message.content
    await client.close()

asyncio.run(main())
"""
# The same request without the SDK: what the HTTP client alone costs a process
BARE_AIOHTTP = """
import asyncio, json, sys
import aiohttp

async def main() -> None:
    async with aiohttp.ClientSession() as session:
        for _ in range(int(sys.argv[2])):
            async with session.post(sys.argv[1] + "/chat/completions", data=json.dumps({"model": "fake-base",
                    "messages": [{"role": "user", "content": "What is item 0? Reply with its number."}]}),
                    headers={"Content-Type": "application/json", "Authorization": "Bearer unused"}) as resp:
                assert json.loads(await resp.read())["choices"][0]["message"]["content"]

asyncio.run(main())
"""


def _env(tree: Path) -> dict[str, str]:
    # bytecode allowed: the warm-up run caches it, so neither tree pays for compiling (an installed rfteval doesn't)
    return {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"} | {"PYTHONPATH": str(tree)}


def one_run(tree: Path) -> tuple[float, float, int]:
    """(wall seconds, rfteval's cumulative import seconds, rfteval modules imported) of one `--help`."""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "rfteval", "--help"], cwd=tree, env=_env(tree),
                          capture_output=True, text=True, check=True)
    wall = time.perf_counter() - start
    cumulative, modules = 0, 0
    for line in done.stderr.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        _, cum, name = line.split("|")
        if name.strip().startswith("rfteval"):
            modules += 1
            if name.strip() in {"rfteval.cli", "rfteval.cli.app"}:
                cumulative = max(cumulative, int(cum))
    return wall, cumulative / 1e6, modules


def timed_process(cmd: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the process itself, user + system) of one command."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"{cmd[:4]} failed: {proc.stderr.read().decode() if proc.stderr else ''}")
    if proc.stderr:
        proc.stderr.close()
    return wall, usage.ru_utime + usage.ru_stime


def one_item_cases(trees: dict[str, Path], base_url: str, work: Path) -> dict[str, list[str]]:
    """The commands of part 2: each tree's one-item run, the same requests bare (with and without the SDK), the
    run's packages imported alone."""
    dataset = work / "one.jsonl"
    dataset.write_text(json.dumps({"id": "item-0", "messages": [
        {"role": "user", "content": "What is item 0? Reply with its number."}], "reference_answer": "0"}) + "\n")
    grader = work / "grader.json"
    grader.write_text(json.dumps({"type": "string_check", "name": "mentions-number",
                                  "input": "{{ sample.output_text }}", "reference": "{{ item.reference_answer }}",
                                  "operation": "like"}))
    cases = {f"rfteval run, {name}": [sys.executable, "-m", "rfteval", "run", "--dataset", str(dataset), "--grader",
                                      str(grader), "--model", "base=fake-base", "--epochs", str(EPOCHS), "--base-url",
                                      base_url, "--out", str(work / f"run-{i}"), "--fresh", "--quiet"]
             for i, name in enumerate(trees)}
    cases["bare AsyncOpenAI, same requests"] = [sys.executable, "-c", BARE_REQUEST, base_url, str(EPOCHS)]
    cases["bare aiohttp, same requests (no SDK)"] = [sys.executable, "-c", BARE_AIOHTTP, base_url, str(EPOCHS)]
    cases["imports alone (the run's packages)"] = [sys.executable, "-c", RUN_PACKAGES]
    cases["SDK + one-row Parquet (stack floor)"] = [sys.executable, "-c", STACK_FLOOR, str(work / "floor.parquet")]
    return cases


def loadavg() -> str:
    try:
        return " ".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        return "?"


def help_part(trees: dict[str, Path], runs: int) -> None:
    figures: dict[str, list[tuple[float, float, int]]] = {name: [] for name in trees}
    for tree in trees.values():
        one_run(tree)  # warm the file cache
    for _ in range(runs):
        for name, tree in trees.items():
            figures[name].append(one_run(tree))
    print(f"{'tree':<40} {'--help wall, median':>20} {'best':>8} {'rfteval imports, median':>24} {'modules':>8}")
    for name, results in figures.items():
        walls = [r[0] for r in results]
        imports = [r[1] for r in results]
        print(f"{name:<40} {statistics.median(walls) * 1000:>17.0f} ms {min(walls) * 1000:>5.0f} ms "
              f"{statistics.median(imports) * 1000:>21.1f} ms {results[0][2]:>8}")


def one_item_part(trees: dict[str, Path], runs: int) -> dict[str, list[tuple[float, float]]]:
    sys.path.insert(0, str(ROOT / "bench"))
    from fake_server import start_server

    server, base_url = start_server(DELAY_MS)
    figures: dict[str, list[tuple[float, float]]] = {}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            cases = one_item_cases(trees, base_url, Path(tmp))
            tree_of = {name: trees[name.removeprefix("rfteval run, ")] if name.startswith("rfteval run, ")
                       else ROOT for name in cases}
            for name, cmd in cases.items():  # warm-up: bytecode, the file cache, the server's threads
                timed_process(cmd, _env(tree_of[name]), tree_of[name])
            for _ in range(runs):  # interleaved, so drift in the machine's load hits every case alike
                for name, cmd in cases.items():
                    figures.setdefault(name, []).append(timed_process(cmd, _env(tree_of[name]), tree_of[name]))
    finally:
        server.terminate()
        server.wait(timeout=10)
    bare = statistics.median(c for _, c in figures["bare AsyncOpenAI, same requests"])
    print(f"\none item x {EPOCHS} epochs ({EPOCHS} requests, {DELAY_MS} ms answers), {runs} runs of each, interleaved; "
          f"fresh processes, CPU from wait4")
    print(f"{'case':<40} {'CPU, median':>12} {'best':>7} {'vs bare':>8} {'wall, median':>13} {'best':>7}")
    for name, results in figures.items():
        walls = [w for w, _ in results]
        cpus = [c for _, c in results]
        print(f"{name:<40} {statistics.median(cpus):>10.2f} s {min(cpus):>5.2f} s "
              f"{statistics.median(cpus) / bare:>7.2f}x {statistics.median(walls):>11.2f} s {min(walls):>5.2f} s")
    print("target (issue 31): the one-item run <= 0.9 s of CPU")
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", type=Path, help="another checkout of rfteval to measure beside this one")
    parser.add_argument("--runs", type=int, default=21, help="--help runs per tree")
    parser.add_argument("--item-runs", type=int, default=7, help="runs of each one-item case")
    parser.add_argument("--only", choices=("help", "item"), help="one part only")
    args = parser.parse_args()
    trees = {"this tree": ROOT} | ({f"{args.against}": args.against.resolve()} if args.against else {})
    print(f"load average before: {loadavg()}")
    if args.only != "item":
        help_part(trees, args.runs)
    if args.only != "help":
        one_item_part(trees, args.item_runs)
    print(f"load average after: {loadavg()}")


if __name__ == "__main__":
    main()
