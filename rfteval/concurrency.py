"""Adaptive concurrency: how many requests to keep in flight against an endpoint whose limit is unknown.

At scale the ceiling is the provider's requests and tokens per minute, not this machine; a fixed concurrency
above it turns every extra request into a 429 and a retry. The limiter is AIMD, as TCP's congestion window
and inspect_ai's adaptive connections are:

- it starts below the ceiling (`--concurrency`) and grows by one per success (slow start) until the first
  sign of the limit, then by one per round of requests (additive increase);
- a 429 cuts the limit ×0.8, once per *episode*: 429s from requests sent before the cut are the same
  overload seen late, and do not cut again;
- after a cut, and whenever an answer says a budget is exhausted, no new request starts until `Retry-After`
  or `x-ratelimit-reset-*` has passed (asking earlier only earns another 429);
- when `x-ratelimit-remaining-*` falls under 10% of the limit it stops growing before the first 429 (as
  promptfoo does) until a whole round of requests sent after that signal comes back without it; 5xx answers
  pause growth without cutting;
- it never goes above the ceiling nor below 1. `fixed=True` keeps it at the ceiling.

`history` records each change as (seconds since start, limit), for summary.json.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

LOW_REMAINING = 0.1  # under this share of a budget left: stop growing
CUT = 0.8
HISTORY_MAX = 500


class AdaptiveLimiter:
    """A semaphore whose size follows the endpoint's answers. acquire() → token; release(token, outcome, ...)."""

    def __init__(self, ceiling: int, start: int | None = None, *, fixed: bool = False, floor: int = 1,
                 clock: Callable[[], float] = time.monotonic, max_wait_s: float = 300.0):
        self.ceiling = max(1, int(ceiling))
        self.floor = max(1, min(floor, self.ceiling))
        self.fixed = fixed
        if fixed:
            start = self.ceiling
        elif start is None:
            start = max(self.floor, min(self.ceiling, max(4, self.ceiling // 4)))
        self.limit = float(max(self.floor, min(self.ceiling, start)))
        self.ssthresh = float(self.ceiling)
        self.in_flight = 0
        self.clock = clock
        self.max_wait_s = max_wait_s
        self.t0 = clock()
        self.last_cut = -1.0  # time of the last cut; requests started before it belong to that episode
        self.last_low = -1.0  # time an answer last said a budget was nearly spent
        self.resume_at = 0.0  # no new request before this (Retry-After, x-ratelimit-reset-*)
        self.rate_limited = 0
        self.episodes = 0
        self.history: list[tuple[float, int]] = [(0.0, int(self.limit))]
        self._waiters: list[asyncio.Future[None]] = []

    # ---- the semaphore
    async def acquire(self) -> float:
        """Wait for a free slot (and for any pause to pass); the token is the start time."""
        while True:
            now = self.clock()
            if now < self.resume_at:
                await asyncio.sleep(self.resume_at - now)
                continue
            if self.in_flight < int(self.limit):
                self.in_flight += 1
                return now
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.append(fut)
            try:
                await fut
            except asyncio.CancelledError:
                if fut in self._waiters:
                    self._waiters.remove(fut)
                raise

    def _wake(self) -> None:
        free = int(self.limit) - self.in_flight
        while free > 0 and self._waiters:
            fut = self._waiters.pop(0)
            if not fut.done():
                fut.set_result(None)
                free -= 1

    def release(self, token: float, outcome: str, rate: Any = None, retry_after: float | None = None,
                unavailable: bool = False) -> None:
        """outcome: "ok", "rate_limit", "server" or anything else (no effect on the limit)."""
        self.in_flight -= 1
        if not self.fixed:
            self._adapt(token, outcome, rate, retry_after, unavailable)
        self._wake()

    # ---- the policy
    def _adapt(self, token: float, outcome: str, rate: Any, retry_after: float | None, unavailable: bool) -> None:
        now = self.clock()
        if rate is not None:
            wait = rate.exhausted_wait()
            if wait is not None and outcome != "ok":
                self._pause(now, wait)
        if outcome == "rate_limit":
            if unavailable:  # flex capacity, not our rate: wait, but keep the limit
                self._pause(now, retry_after or 0.0)
                return
            self.rate_limited += 1
            if retry_after:
                self._pause(now, retry_after)
            if token >= self.last_cut:  # sent after the last cut: a new episode
                self.episodes += 1
                self.last_cut = now
                self._set(max(self.floor, self.limit * CUT), now)
                self.ssthresh = self.limit
            return
        if outcome == "server":
            self.ssthresh = min(self.ssthresh, self.limit)  # pause growth, no cut
            return
        if outcome != "ok":
            return
        if token < self.last_cut:
            return  # an answer to a request sent before the cut says nothing about the new limit
        if rate is not None and rate.low(LOW_REMAINING):
            self.ssthresh = min(self.ssthresh, self.limit)
            self.last_low = now
            return
        if token < self.last_low:
            return  # sent before the budget was seen running low: no growth until a round passes without it
        if self.limit < self.ssthresh:
            self._set(min(self.ceiling, self.limit + 1), now)
        else:
            self._set(min(self.ceiling, self.limit + 1 / self.limit), now)

    def _pause(self, now: float, seconds: float) -> None:
        if seconds > 0:
            self.resume_at = max(self.resume_at, now + min(seconds, self.max_wait_s))

    def _set(self, value: float, now: float) -> None:
        before = int(self.limit)
        self.limit = value
        if int(value) != before:
            self.history.append((round(now - self.t0, 3), int(value)))
            if len(self.history) > HISTORY_MAX:  # keep the first, then every other point: a bounded curve
                self.history = self.history[:1] + self.history[1::2]

    @property
    def current(self) -> int:
        return int(self.limit)

    def summary(self) -> dict[str, Any]:
        values = [v for _, v in self.history]
        return {"mode": "fixed" if self.fixed else "adaptive", "max": self.ceiling, "start": values[0],
                "final": int(self.limit), "min": min(values), "peak": max(values),
                "rate_limited": self.rate_limited, "episodes": self.episodes,
                "history": [[t, v] for t, v in self.history]}
