"""What the benches against tests/support/fake_openai.py share: starting the server, and a monitor that times the request
phase alone (monitor start to stop), so that start-up and the result files do not count in a throughput.

Imports rfteval's runner: a bench that measures its own memory before the run imports this module lazily."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from rfteval.run.monitor import RunMonitor

ROOT = Path(__file__).resolve().parent.parent


def start_server(delay_ms: int, *flags: str) -> tuple[subprocess.Popen[str], str]:
    """tests/support/fake_openai.py in its own process on a free port, answering after `delay_ms` (plus its `flags`:
    --max-concurrent, --slots, ...); the process and its base URL."""
    proc = subprocess.Popen([sys.executable, str(ROOT / "tests" / "support" / "fake_openai.py"), "--port", "0", "--delay-ms",
                             str(delay_ms), *flags], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    return proc, proc.stdout.readline().strip()


class PhaseClock(RunMonitor):
    """Records when the request phase starts and stops (perf_counter)."""

    t_start = t_stop = 0.0

    def start(self, totals: dict[str, int]) -> None:
        self.t_start = time.perf_counter()

    def stop(self) -> None:
        self.t_stop = time.perf_counter()
