"""A guard against a hang, for tests whose subject could wait forever (a stopped sandbox, a dead server): never a speed
check. Tests assert counts and events (requests sent, retries, a process gone); speed lives in bench/. The guard's
limit is far above what the block needs, so only a hang reaches it, and then the test fails in bounded time instead
of stalling the suite."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

import pytest


@contextmanager
def hang_guard(seconds: float, what: str) -> Iterator[None]:
    """Fail the test when the block has not finished after `seconds` (SIGALRM: the main thread only, where pytest
    runs tests). pytest's failure is a BaseException, so no `except Exception` in the code under test swallows it."""
    assert threading.current_thread() is threading.main_thread(), "hang_guard needs the main thread"

    def expired(signum: int, frame: FrameType | None) -> None:
        pytest.fail(f"{what} did not finish within {seconds:g} s: a hang (this is a guard, not a timing check)",
                    pytrace=False)

    before = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, before)
