"""Benchmark of adaptive concurrency against a server with few slots (issue 23): no 429s, only queueing.

tests/support/fake_openai.py runs as its own process with `--slots 2`: it works on two requests at once (50 ms each) and
queues the rest, as llama.cpp's server with `--parallel 2` does; the bare maximum is 2 / 0.05 s = 40 requests a
second. `rfteval run` sends 600 requests at --concurrency 32 twice: with the latency-aware limiter (the default)
and with the latency rule off (the limiter as it was: it only reacts to 429s). Measured: throughput of the
request phase against the bare maximum, mean latency per request (from the store; over all requests, and over
the second half, once the limit has settled), and the limit it ended at.
Target: throughput >= 95% of the bare maximum with the limit near 2, latency near 50 ms rather than 32 x 25 ms.
Run: .venv/bin/python bench/bench_slots.py
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
ITEMS, EPOCHS, CONCURRENCY, DELAY_MS, SLOTS = 300, 2, 32, 50, 2


def one(base_url: str, workdir: Path, latency_aware: bool) -> dict[str, Any]:
    bare = SLOTS / (DELAY_MS / 1000)
    sys.path.insert(0, str(ROOT / "bench"))
    from bench_run import write_dataset, write_grader
    from fake_server import PhaseClock

    import rfteval.run.concurrency as concurrency
    from rfteval.run.runner import RunOptions, run_eval
    from rfteval.run.spec import build_spec, flag_overrides

    original = concurrency.AdaptiveLimiter.__init__

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **{**kwargs, "latency_aware": latency_aware})

    concurrency.AdaptiveLimiter.__init__ = init  # type: ignore[method-assign]
    try:
        out = workdir / ("aware" if latency_aware else "unaware")
        spec = build_spec(None, flag_overrides(
            models=["base=fake-base"], dataset=str(write_dataset(workdir / "items.jsonl", ITEMS)),
            grader=str(write_grader(workdir / "grader.json")), epochs=EPOCHS, base_url=base_url,
            concurrency=CONCURRENCY, out=str(out)))
        clock = PhaseClock()
        result = run_eval(spec, clock, RunOptions(fresh=True, checkpoint_s=0))
    finally:
        concurrency.AdaptiveLimiter.__init__ = original  # type: ignore[method-assign]
    rows = [json.loads(line) for line in (out / "store" / "responses.jsonl").open()]
    from datetime import datetime

    rows.sort(key=lambda r: r["at"])
    latencies = [r["latency_s"] for r in rows]
    settled = latencies[len(latencies) // 2:]
    times = [datetime.fromisoformat(r["at"]).timestamp() for r in rows[len(rows) // 2:]]
    n = ITEMS * EPOCHS
    phase = clock.t_stop - clock.t_start
    conc = (result.summary.concurrency or {})["base"]
    return {"mode": "latency-aware" if latency_aware else "429s only", "phase_s": phase, "per_s": n / phase,
            "ratio": n / phase / bare, "latency_ms": 1000 * sum(latencies) / len(latencies),
            "settled_ms": 1000 * sum(settled) / len(settled),
            "settled_ratio": (len(times) - 1) / (times[-1] - times[0]) / bare,
            "final": conc["final"], "peak": conc["peak"], "errors": result.summary.errors}


def main() -> list[dict[str, Any]]:
    sys.path.insert(0, str(ROOT / "bench"))
    from fake_server import start_server

    server, base_url = start_server(DELAY_MS, "--slots", str(SLOTS))
    rows = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for aware in (True, False):
                rows.append(one(base_url, Path(tmp), aware))
    finally:
        server.terminate()
        server.wait(timeout=10)
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"{ITEMS * EPOCHS} requests at --concurrency {CONCURRENCY}; server: {SLOTS} slots of {DELAY_MS} ms, the "
          f"rest queue (bare maximum {SLOTS / (DELAY_MS / 1000):.0f}/s); load average {load}")
    print(f"{'mode':<14} {'phase':>8} {'req/s':>7} {'vs bare':>8} {'2nd half':>9} {'latency':>9} {'2nd half':>9} "
          f"{'limit end/peak':>15}")
    for r in rows:
        print(f"{r['mode']:<14} {r['phase_s']:7.2f}s {r['per_s']:7.1f} {r['ratio']:7.1%} {r['settled_ratio']:8.1%} "
              f"{r['latency_ms']:7.0f}ms {r['settled_ms']:7.0f}ms {r['final']:>7}/{r['peak']:<7}")
    print("target: the latency-aware row at >= 95% of the bare maximum, its limit near the slots, latency near the "
          "work's")
    return rows


if __name__ == "__main__":
    main()
