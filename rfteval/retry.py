"""Retry policy for endpoint calls: exponential backoff with full jitter, honouring Retry-After.

Full jitter (a uniform wait in [0, base·2^attempt], capped) spreads the retries of many concurrent requests, so a
rate-limited endpoint is not hit again by all of them at the same instant. When the server says how long to wait
(Retry-After), that is a floor: waiting less only earns another 429.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar

from rfteval.providers.base import RETRYABLE, ProviderError

T = TypeVar("T")
OnRetry = Callable[[int, BaseException, float], None]  # (retry number from 1, the error, seconds about to wait)


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long to retry; `retryable` names the ProviderError kinds worth another try."""

    max_retries: int = 10
    base_s: float = 0.5
    max_backoff_s: float = 60.0
    max_retry_after_s: float = 300.0  # a server asking for longer is capped, not obeyed blindly
    retryable: frozenset[str] = field(default=RETRYABLE)
    # flex's 429 "resource unavailable" is a capacity shortage that lasts minutes, not a rate limit that resets
    # in seconds: its waits are this many times longer, and never under half their cap (no near-zero jitter)
    unavailable_factor: float = 10.0

    def should_retry(self, exc: BaseException, retries_done: int) -> bool:
        if retries_done >= self.max_retries:
            return False
        return isinstance(exc, ProviderError) and exc.kind in self.retryable

    def backoff(self, retry: int, rng: random.Random | None = None) -> float:
        """Full-jitter wait before retry number `retry` (1-based)."""
        cap = min(self.max_backoff_s, self.base_s * (2 ** (retry - 1)))
        return (rng or random).uniform(0.0, cap)

    def delay(self, retry: int, exc: BaseException, rng: random.Random | None = None) -> float:
        """The wait before retry number `retry`: the jittered backoff, but never less than Retry-After."""
        if getattr(exc, "unavailable", False):
            cap = min(self.max_backoff_s, self.base_s * self.unavailable_factor * (2 ** (retry - 1)))
            wait = (rng or random).uniform(cap / 2, cap)
        else:
            wait = self.backoff(retry, rng)
        retry_after = getattr(exc, "retry_after", None)
        if retry_after is not None and retry_after > 0:
            wait = max(wait, min(float(retry_after), self.max_retry_after_s))
        return wait


async def call_with_retries(
    fn: Callable[[], Awaitable[T]],
    policy: RetryPolicy,
    on_retry: OnRetry | None = None,
    *,
    rng: random.Random | None = None,
    sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
) -> T:
    """Await `fn()` until it succeeds, the error is not retryable, or the retries are spent (the last error raises).

    `fn` is a factory: each attempt needs a fresh coroutine. `on_retry` lets a caller count retries (progress bars).
    """
    retries = 0
    while True:
        try:
            return await fn()
        except BaseException as exc:  # noqa: BLE001 - only ProviderErrors of retryable kinds are retried
            if isinstance(exc, (asyncio.CancelledError, KeyboardInterrupt, SystemExit)):
                raise
            if not policy.should_retry(exc, retries):
                raise
            retries += 1
            wait = policy.delay(retries, exc, rng)
            if on_retry is not None:
                on_retry(retries, exc, wait)
            await sleep(wait)
