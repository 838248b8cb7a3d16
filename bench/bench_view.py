"""Benchmark: `rfteval view` over 100,000 items x 3 epochs x 2 models (targets: open <= 3 s, a filtered item list or
an item page <= 300 ms, <= 1 GB peak).

Writes bench_compare's realistic records (rfteval.data.records) as a run directory twice: one with results.parquet
only (what the viewer reads when it has no DIR/<label>.jsonl) and one with DIR/base.jsonl and DIR/tuned.jsonl.
Each is measured in a child process (its own peak RSS): "open" is what the first Compare page needs (the pair's
comparison by compare_paths, its item table) and that page's JSON; then the served pages' JSON, each the median of
several calls: a filter (regressed), the next page of it, a search (the first one reads the output texts), an item
page; and, in a process of its own, the Readiness page (its peak alone). The HTTP layer (uvicorn, a few ms) is
left out: the figures are the library's.
Run: .venv/bin/python bench/bench_view.py [--items N] [--epochs K] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_compare import make_side  # noqa: E402

OPEN_S, PAGE_MS, TARGET_MB = 3.0, 300.0, 1024.0


def generate(items: int, epochs: int, out: Path) -> tuple[Path, Path]:
    import pyarrow.parquet as pq

    from rfteval.data.records import to_arrow, write_jsonl

    parquet_dir, jsonl_dir = out / "parquet-run", out / "jsonl-run"
    parquet_dir.mkdir(parents=True)
    jsonl_dir.mkdir(parents=True)
    base = make_side("base", items, epochs, 0.0, 1)
    tuned = make_side("tuned", items, epochs, 0.05, 2)
    # one file, both models, in row groups of 2,048 rows, as `rfteval run` writes results.parquet (run/results.py)
    pq.write_table(to_arrow(base + tuned), parquet_dir / "results.parquet", row_group_size=2048)
    write_jsonl(base, jsonl_dir / "base.jsonl")
    write_jsonl(tuned, jsonl_dir / "tuned.jsonl")
    return parquet_dir, jsonl_dir


def child(run_dir: str) -> None:
    """In the measured process: open, then each page several times; prints one JSON line of figures."""
    import statistics

    from rfteval.view.model import ViewData
    from rfteval.view.server import dumps

    def timed(fn: object, n: int = 5) -> float:
        out = []
        for _ in range(n):
            t0 = time.perf_counter()
            dumps(fn())  # type: ignore[operator]
            out.append((time.perf_counter() - t0) * 1000)
        return statistics.median(out)

    import resource

    def rss() -> float:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0

    t0, c0 = time.perf_counter(), time.process_time()
    data = ViewData([Path(run_dir)])
    data.comparison(*data.default_pair)  # compare_paths: the same call `rfteval compare` makes
    compared, compare_cpu, compare_mb = time.perf_counter() - t0, time.process_time() - c0, rss()
    dumps(data.compare_page(None, None))
    opened, open_cpu = time.perf_counter() - t0, time.process_time() - c0
    fig = {"open_s": opened, "compare_s": compared, "compare_peak_mb": compare_mb, "open_peak_mb": rss(),
           "open_cpu_s": open_cpu, "compare_cpu_s": compare_cpu}
    t1 = time.perf_counter()
    data.warm()  # what `rfteval view` does on a thread once the URL is printed: the dataset, the texts
    fig["warm_s"] = time.perf_counter() - t1
    ids = data.filtered("base", "tuned")
    t1 = time.perf_counter()
    dumps(data.compare_page(None, None, ["regressed"]))
    fig["filter_first_ms"] = (time.perf_counter() - t1) * 1000
    fig["filter_ms"] = timed(lambda: data.compare_page(None, None, ["regressed"]))
    fig["filter_next_page_ms"] = timed(lambda: data.compare_page(None, None, ["regressed"], offset=100))
    fig["filters_combined_ms"] = timed(lambda: data.compare_page(None, None, ["improved", "hardest"], offset=200))
    t1 = time.perf_counter()
    dumps(data.compare_page(None, None, [], "answer to item 4242 "))
    fig["search_first_ms"] = (time.perf_counter() - t1) * 1000  # the texts are read by warm() now
    words = iter(f"item {k}7 is 1" for k in range(100, 200))
    fig["search_ms"] = timed(lambda: data.compare_page(None, None, [], next(words)))
    picks = iter(ids[k * 997 % len(ids)] for k in range(1, 100))
    fig["item_first_ms"] = timed(lambda: data.item_page(next(picks), None, None), 1)
    fig["item_ms"] = timed(lambda: data.item_page(next(picks), None, None, ["regressed"]))
    fig["items"] = len(ids)
    print(json.dumps(fig))


def child_readiness(run_dir: str) -> None:
    """In its own measured process: open the viewer and its Readiness page (the baseline's), nothing else."""
    from rfteval.view.model import ViewData
    from rfteval.view.server import dumps

    t0 = time.perf_counter()
    data = ViewData([Path(run_dir)])
    page = data.readiness_page(None)
    dumps(page)
    print(json.dumps({"readiness_s": time.perf_counter() - t0, "readiness_items": page["total"]}))


def measure(run_dir: Path, mode: str = "--child") -> dict[str, float]:
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen([sys.executable, __file__, mode, str(run_dir)], stdout=out, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        out.seek(0)
        err.seek(0)
        if os.waitstatus_to_exitcode(status) != 0:
            sys.exit(f"bench_view child failed: {err.read().decode()[-3000:]}")
        fig = json.loads(out.read().decode().strip().splitlines()[-1])
    fig["peak_mb"] = usage.ru_maxrss / 1024.0
    return fig


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--items", type=int, default=100_000)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--keep", type=Path, default=None, help="Keep the generated runs in this directory.")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--child-readiness", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--generate", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.generate:
        generate(args.items, args.epochs, Path(args.generate))
        return 0
    if args.child:
        child(args.child)
        return 0
    if args.child_readiness:
        child_readiness(args.child_readiness)
        return 0
    tmp = args.keep or Path(tempfile.mkdtemp(prefix="bench-view-"))
    try:
        t0 = time.perf_counter()
        # in another process, as bench_compare does: a child forked from a process that held the records would
        # inherit its peak RSS (Linux keeps the high-water mark across fork), inflating every peak below
        subprocess.run([sys.executable, __file__, "--generate", str(tmp), "--items", str(args.items), "--epochs",
                        str(args.epochs)], check=True)
        runs = (tmp / "parquet-run", tmp / "jsonl-run")
        print(f"generated {args.items:,} items x {args.epochs} epochs x 2 models in {time.perf_counter() - t0:.1f} s "
              f"(load average {os.getloadavg()[0]:.1f})")
        ok = True
        for run_dir in runs:
            f = measure(run_dir)
            pages = [f[k] for k in ("filter_ms", "filter_next_page_ms", "filters_combined_ms", "search_ms", "item_ms")]
            r = measure(run_dir, "--child-readiness")
            holds = f["open_s"] <= OPEN_S and max(pages) <= PAGE_MS and max(f["peak_mb"], r["peak_mb"]) <= TARGET_MB
            ok &= holds
            print(f"{run_dir.name}: open {f['open_s']:.2f} s, {f['open_cpu_s']:.2f} CPU-s (target {OPEN_S:g}; of "
                  f"which compare_paths {f['compare_s']:.2f} s, {f['compare_cpu_s']:.2f} CPU-s, peak "
                  f"{f['compare_peak_mb']:.0f} MB after it, {f['open_peak_mb']:.0f} MB after the first page); then "
                  f"read in the background {f['warm_s']:.2f} s; filtered list {f['filter_ms']:.0f} ms "
                  f"(first {f['filter_first_ms']:.0f}), its next page {f['filter_next_page_ms']:.0f} ms, two filters "
                  f"{f['filters_combined_ms']:.0f} ms; search {f['search_ms']:.0f} ms (first "
                  f"{f['search_first_ms']:.0f} ms); item page {f['item_ms']:.0f} ms (first {f['item_first_ms']:.0f}); "
                  f"peak {f['peak_mb']:.0f} MB; the Readiness page alone (own process) {r['readiness_s']:.2f} s, "
                  f"peak {r['peak_mb']:.0f} MB (target {TARGET_MB:g}) -> {'holds' if holds else 'MISSED'}")
        return 0 if ok else 1
    finally:
        if args.keep is None:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
