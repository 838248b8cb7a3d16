"""tests/support/guard.py: a hang fails the test in bounded time; a block that ends leaves nothing armed."""

from __future__ import annotations

import signal
import time

import pytest

from tests.support.guard import hang_guard


def test_a_hang_fails_with_the_guards_words() -> None:
    with pytest.raises(pytest.fail.Exception, match="the sleep did not finish within 0.05 s: a hang"):
        with hang_guard(0.05, "the sleep"):
            time.sleep(30)


def test_an_ending_block_leaves_no_alarm_and_the_handler_it_found() -> None:
    before = signal.getsignal(signal.SIGALRM)
    with hang_guard(30, "nothing"):
        pass
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    assert signal.getsignal(signal.SIGALRM) is before


def test_code_under_test_cannot_swallow_it() -> None:
    """pytest's failure is a BaseException: an `except Exception` in the guarded code lets it through."""
    swallowed = []
    with pytest.raises(pytest.fail.Exception):
        with hang_guard(0.05, "a retry loop"):
            while True:
                try:
                    time.sleep(30)
                except Exception as exc:  # noqa: BLE001 - what the code under test might do
                    swallowed.append(exc)
    assert swallowed == []
