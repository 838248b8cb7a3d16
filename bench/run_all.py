"""`make bench`: run every bench/bench_*.py in its own process (so peak-memory figures are its own)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path


def main() -> int:
    here = Path(__file__).resolve().parent
    only = sys.argv[1:]
    failed = []
    for script in sorted(here.glob("bench_*.py")):
        if only and not any(name in script.stem for name in only):
            continue
        print(f"\n=== {script.name} ===", flush=True)
        start = time.perf_counter()
        code = subprocess.call([sys.executable, str(script)], cwd=here.parent)
        print(f"({script.name}: {time.perf_counter() - start:.1f} s, exit {code})", flush=True)
        if code:
            failed.append(script.name)
    if failed:
        print(f"\nfailed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
