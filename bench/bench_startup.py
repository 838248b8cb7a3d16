"""`rfteval --help` start-up: wall time and rfteval's import time, for this tree and, side by side, another checkout.

Issue 20's target: the packages must not make `rfteval --help` slower (their `__init__`s stay import-light). Run
`python bench/bench_startup.py --against /path/to/other/checkout` to compare two trees in one run, alternating
them so that the machine's load falls on both alike; each tree is put first on PYTHONPATH, so the same
interpreter and packages serve both.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def one_run(tree: Path) -> tuple[float, float, int]:
    """(wall seconds, rfteval's cumulative import seconds, rfteval modules imported) of one `--help`."""
    # bytecode allowed: the warm-up run caches it, so neither tree pays for compiling (an installed rfteval doesn't)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"} | {"PYTHONPATH": str(tree)}
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "rfteval", "--help"], cwd=tree, env=env,
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", type=Path, help="another checkout of rfteval to measure beside this one")
    parser.add_argument("--runs", type=int, default=21)
    args = parser.parse_args()
    trees = {"this tree": ROOT} | ({f"{args.against}": args.against.resolve()} if args.against else {})
    figures: dict[str, list[tuple[float, float, int]]] = {name: [] for name in trees}
    for tree in trees.values():
        one_run(tree)  # warm the file cache
    for _ in range(args.runs):
        for name, tree in trees.items():
            figures[name].append(one_run(tree))
    print(f"{'tree':<40} {'--help wall, median':>20} {'best':>8} {'rfteval imports, median':>24} {'modules':>8}")
    for name, runs in figures.items():
        walls = [r[0] for r in runs]
        imports = [r[1] for r in runs]
        print(f"{name:<40} {statistics.median(walls) * 1000:>17.0f} ms {min(walls) * 1000:>5.0f} ms "
              f"{statistics.median(imports) * 1000:>21.1f} ms {runs[0][2]:>8}")


if __name__ == "__main__":
    main()
