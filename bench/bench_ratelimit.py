"""Benchmark of adaptive concurrency against a rate-limited endpoint (issue 15's target).

tests/support/fake_openai.py runs as its own process, answers after 100 ms and accepts at most 16 requests at once:
above that it answers 429 with Retry-After and x-ratelimit-* headers. `rfteval run` sends 2,000 requests
(500 items x 4 epochs) at --concurrency 64, adaptive (the default) and then --fixed. Measured: the share of
requests answered 429 (the server's own count), and the throughput of the request phase (monitor start to
stop) against what the cap allows, 16 / 0.1 s = 160 requests a second. Targets: <= 10% 429s, >= 80% of the cap.

The 429-share part is also asserted in tests/run/test_concurrency.py; the throughput part is timing, so it lives here.
Run: .venv/bin/python bench/bench_ratelimit.py
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
ITEMS, EPOCHS, CONCURRENCY, DELAY_MS, CAP = 500, 4, 64, 100, 16


def stats(base_url: str) -> dict[str, int]:
    with urllib.request.urlopen(base_url + "/_stats", timeout=10) as resp:  # 127.0.0.1 only
        return json.loads(resp.read())


def one(base_url: str, workdir: Path, fixed: bool) -> dict[str, Any]:
    sys.path.insert(0, str(ROOT / "bench"))
    from bench_run import write_dataset, write_grader
    from fake_server import PhaseClock

    from rfteval.run.runner import RunOptions, run_eval
    from rfteval.run.spec import build_spec, flag_overrides

    dataset = write_dataset(workdir / "items.jsonl", ITEMS)
    grader = write_grader(workdir / "grader.json")
    before = stats(base_url)
    spec = build_spec(None, flag_overrides(models=["base=fake-base"], dataset=str(dataset), grader=str(grader),
                                           epochs=EPOCHS, base_url=base_url, concurrency=CONCURRENCY,
                                           max_retries=50, out=str(workdir / ("fixed" if fixed else "adaptive"))))
    clock = PhaseClock()
    cpu = time.process_time()
    result = run_eval(spec, clock, RunOptions(fresh=True, fixed_concurrency=fixed))
    cpu = time.process_time() - cpu
    after = stats(base_url)
    served = after["served"] - before["served"]
    limited = after["rate_limited"] - before["rate_limited"]
    phase = clock.t_stop - clock.t_start
    n = ITEMS * EPOCHS
    conc = (result.summary.concurrency or {})["base"]
    return {"mode": "fixed" if fixed else "adaptive", "requests": n, "served": served, "answered_429": limited,
            "share_429": limited / (served + limited), "phase_s": phase, "throughput_per_s": n / phase,
            "cap_per_s": CAP / (DELAY_MS / 1000), "ratio_to_cap": n / phase / (CAP / (DELAY_MS / 1000)),
            "errors": result.summary.errors, "cpu_s": cpu, "episodes": conc["episodes"],
            "final_limit": conc["final"], "peak_limit": conc["peak"]}


def loadavg() -> str:
    try:
        return " ".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        return "?"


def main() -> list[dict[str, Any]]:
    sys.path.insert(0, str(ROOT / "bench"))
    from fake_server import start_server

    server, base_url = start_server(DELAY_MS, "--max-concurrent", str(CAP))
    rows = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for fixed in (False, True, False):
                rows.append(one(base_url, Path(tmp), fixed))
    finally:
        server.terminate()
        server.wait(timeout=10)
    print(f"{ITEMS * EPOCHS} requests at --concurrency {CONCURRENCY}; server: {DELAY_MS} ms, at most {CAP} in flight "
          f"(cap {CAP / (DELAY_MS / 1000):.0f}/s); load average {loadavg()}")
    print(f"{'mode':<9} {'429s':>12} {'phase':>8} {'req/s':>7} {'vs cap':>7} {'episodes':>8} {'limit end/peak':>15}")
    for r in rows:
        print(f"{r['mode']:<9} {r['answered_429']:>5} ({r['share_429']:5.1%}) {r['phase_s']:7.2f}s "
              f"{r['throughput_per_s']:7.1f} {r['ratio_to_cap']:6.1%} {r['episodes']:>8} "
              f"{r['final_limit']:>7}/{r['peak_limit']:<7}")
    print("targets: <= 10% of requests answered 429, >= 80% of the cap's throughput (adaptive rows)")
    return rows


if __name__ == "__main__":
    main()
