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

A self-hosted server with few slots (llama.cpp's `--parallel 1`, a vLLM at its batch size) sends no 429: it queues
what it cannot run, so more requests in flight only add queueing to each one's latency. The limiter therefore
measures each window of answers (about two rounds): throughput (answers/s, between the window's first and last
answer) and mean latency of the requests sent in it. When a window at a higher limit shows latency risen with the
limit while throughput did not follow, the server is saturated: the limit steps back to the previous window's,
then probes down one step per window until throughput clearly drops (under THROUGHPUT_KEPT of the server's, the
median of the windows probed), and settles one above the lowest limit that kept SETTLE_SHARE of it: the server's
slot count, and one request waiting there to cover the client's own gaps. Against an endpoint whose throughput
grows with concurrency (any large API) the rule never fires.

`history` records each change as (seconds since start, limit), for summary.json.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from rfteval.data.json_types import JSONObject

if TYPE_CHECKING:
    from rfteval.providers.base import RateInfo

LOW_REMAINING = 0.1  # under this share of a budget left: stop growing
CUT = 0.8
HISTORY_MAX = 500
WINDOW_MIN = 16  # answers per measurement window, at least (and two rounds of the limit): noise under ~10%
SATURATED_GAIN = 0.3  # throughput rose less than this share of the limit's rise ...
LATENCY_RISE = 0.5  # ... while latency rose more than this share of it: saturated
THROUGHPUT_KEPT = 0.85  # probing down goes on while throughput stays above this share of the server's
SETTLE_SHARE = 0.95  # ... and settles on the lowest cap that kept this share, plus HEADROOM
HEADROOM = 1  # one request queued at the server covers the client's gap between an answer and the next request
PROBE_STEP = 0.75
BINDING = 0.9  # a window whose mean in flight is under this share of the limit measured demand, not the server


class Window:
    """One measurement window. Throughput counts every answer after the window's first request went out (the
    server's rate, whoever sent what it answers), timed from the first of them to the last, not counting those at
    the first instant (a server that answers in bursts would otherwise count one burst too many); latency and
    concurrency count only the answers to requests sent in the window."""

    __slots__ = ("start", "size", "opened", "first", "last", "answers", "n", "latency", "in_flight")

    def __init__(self, start: float, limit: float):
        self.start = start
        self.size = max(WINDOW_MIN, int(limit))  # fixed when it opens: in slow start the limit outruns it
        self.opened: float | None = None  # when its first request went out (after a cut, the excess drains first)
        self.first: float | None = None
        self.last = 0.0
        self.answers = self.n = 0
        self.latency = self.in_flight = 0.0

    def answer(self, now: float) -> None:
        if self.first is None:
            self.first = now
        elif now > self.first:
            self.answers += 1
        self.last = now

    def add(self, latency: float, in_flight: int) -> None:
        self.n += 1
        self.latency += latency
        self.in_flight += in_flight

    def measure(self) -> tuple[float, float, float] | None:
        """(mean requests in flight, answers/s, mean latency s), or None when there is no time span to divide by."""
        if self.first is None or self.last <= self.first or not self.n:
            return None
        return self.in_flight / self.n, self.answers / (self.last - self.first), self.latency / self.n


class AdaptiveLimiter:
    """A semaphore whose size follows the endpoint's answers. acquire() → token; release(token, outcome, ...)."""

    def __init__(self, ceiling: int, start: int | None = None, *, fixed: bool = False, floor: int = 1,
                 clock: Callable[[], float] = time.monotonic, max_wait_s: float = 300.0, latency_aware: bool = True):
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
        # latency-aware: the current window, the last measured one, and once saturated the cap being probed
        self.latency_aware = latency_aware
        self._window = Window(self.t0, self.limit)
        self._previous: tuple[float, float, float] | None = None
        self.cap: int | None = None  # set once throughput stopped following the limit
        self.probing = False
        self._probed: list[tuple[int, float]] = []  # (cap, answers/s) of the windows the current probe kept
        self._windows = 0
        self._probed_ceiling = False
        self.saturations = 0

    # ---- the semaphore
    def try_acquire(self) -> float | None:
        """A slot now (the token), or None when the limit is reached or a pause runs."""
        now = self.clock()
        if now < self.resume_at or self.in_flight >= int(self.limit):
            return None
        self.in_flight += 1
        if self._window.opened is None:
            self._window.opened = now
        return now

    async def acquire(self) -> float:
        """Wait for a free slot (and for any pause to pass); the token is the start time."""
        while True:
            now = self.clock()
            if now < self.resume_at:
                await asyncio.sleep(self.resume_at - now)
                continue
            token = self.try_acquire()
            if token is not None:
                return token
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

    def release(self, token: float, outcome: str, rate: RateInfo | None = None, retry_after: float | None = None,
                unavailable: bool = False) -> None:
        """outcome: "ok", "rate_limit", "server" or anything else (no effect on the limit)."""
        self.in_flight -= 1
        if not self.fixed:
            self._adapt(token, outcome, rate, retry_after, unavailable)
        self._wake()

    # ---- the policy
    def _adapt(self, token: float, outcome: str, rate: RateInfo | None, retry_after: float | None, unavailable: bool) -> None:
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
        if self.latency_aware:
            self._measure(token, now)
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

    def _measure(self, token: float, now: float) -> None:
        """Add an answer to the window; when the window is full, judge it (see the module docstring)."""
        window = self._window
        if window.n >= window.size and now > window.last:  # full, and every answer of its last instant is in
            self._judge(window, now)
            if self._window is window:
                self._window = Window(now, self.limit)
                self._window.opened = now
            window = self._window
        if window.opened is None or now <= window.opened:
            return
        window.answer(now)
        if token < window.start:
            return  # sent under an earlier limit: its latency says nothing about this one
        window.add(now - token, self.in_flight + 1)  # what was in flight, not the limit: demand may be lower

    def _judge(self, window: Window, now: float) -> None:
        measured = window.measure()
        if measured is None:
            return
        in_flight, throughput, latency = measured
        previous, self._previous = self._previous, measured
        self._windows += 1
        if self.probing:
            self._probe(in_flight, throughput, now)
            return
        if self.cap is not None or self._windows < 2:
            return  # the first window times the start, when the first requests all went out at once
        if previous is not None and self._windows >= 3:
            p_in_flight, p_throughput, p_latency = previous
            rise = in_flight / p_in_flight - 1
            if (rise >= 0.1 and throughput < p_throughput * (1 + SATURATED_GAIN * rise)
                    and latency > p_latency * (1 + LATENCY_RISE * rise)):
                self.saturations += 1
                self._start_probe(max(throughput, p_throughput), max(self.floor, int(round(p_in_flight))), now)
                return
        if (not self._probed_ceiling and int(self.limit) >= self.ceiling and in_flight >= BINDING * self.ceiling
                and previous is not None and previous[0] >= BINDING * self.ceiling):
            # slow start reached the ceiling within a window or two, too fast to see the knee: look from above,
            # once a whole window was at the ceiling (answers lag sends by a latency: the window before did not
            # see the ceiling's throughput yet)
            self._probed_ceiling = True
            self._start_probe(throughput, self._step_down(self.ceiling), now)

    def _start_probe(self, best: float, cap: int, now: float) -> None:
        self.probing = True
        self._probed = [(int(self.limit), best)]
        self._cap_at(cap, now)

    def _step_down(self, cap: int) -> int:
        return max(self.floor, min(cap - 1, int(cap * PROBE_STEP)))

    def _probe(self, in_flight: float, throughput: float, now: float) -> None:
        """One window at the cap: lower it while throughput holds (a clear drop ends the probe), then settle."""
        assert self.cap is not None
        if in_flight < BINDING * self.cap:
            # fewer requests wanted out than the cap allows: it measured the demand, not the server
            self._settle(now)
            return
        server = statistics.median(t for _, t in self._probed)  # the server's rate: robust to one lucky window
        if throughput < THROUGHPUT_KEPT * server:
            self._settle(now)
            return
        self._probed.append((self.cap, throughput))
        if self.cap <= self.floor:
            self._settle(now)
            return
        self._cap_at(self._step_down(self.cap), now)

    def _settle(self, now: float) -> None:
        """The lowest cap probed whose throughput was within SETTLE_SHARE of the server's, plus HEADROOM: a cap
        that lost a little throughput passed the probe (which only stops at a clear drop) but would cost it all
        run long, and a real client leaves gaps between an answer and its next request (storing, grading, a
        loaded machine) that one request waiting at the server covers."""
        self.probing = False
        server = statistics.median(t for _, t in self._probed)
        settled = min(cap for cap, t in self._probed if t >= SETTLE_SHARE * server) + HEADROOM
        if settled >= self.ceiling:
            self.cap = None
            self._set(float(settled), now)
        else:
            self._cap_at(settled, now)

    def _cap_at(self, cap: int, now: float) -> None:
        self.cap = cap
        self.ssthresh = min(self.ssthresh, float(cap))
        self._set(min(self.limit, float(cap)) if self.probing else float(cap), now)
        self._window = Window(now, self.limit)

    def _pause(self, now: float, seconds: float) -> None:
        if seconds > 0:
            self.resume_at = max(self.resume_at, now + min(seconds, self.max_wait_s))

    def _set(self, value: float, now: float) -> None:
        if self.cap is not None:
            value = min(value, float(self.cap))
        before = int(self.limit)
        self.limit = value
        if int(value) != before:
            self.history.append((round(now - self.t0, 3), int(value)))
            if len(self.history) > HISTORY_MAX:  # keep the first, then every other point: a bounded curve
                self.history = self.history[:1] + self.history[1::2]

    @property
    def current(self) -> int:
        return int(self.limit)

    def summary(self) -> JSONObject:
        values = [v for _, v in self.history]
        return {"mode": "fixed" if self.fixed else "adaptive", "max": self.ceiling, "start": values[0],
                "final": int(self.limit), "min": min(values), "peak": max(values),
                "rate_limited": self.rate_limited, "episodes": self.episodes,
                "latency_cap": self.cap, "saturations": self.saturations,
                "history": [[t, v] for t, v in self.history]}
