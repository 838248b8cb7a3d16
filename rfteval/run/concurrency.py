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

Latency rises for a second reason that is not the server's: a busy client (its CPU shared with grading, writing,
other processes) answers its own event loop late, and every request waits in it. By Little's law the two look alike
from outside (in flight = throughput x latency either way), so the limiter measures the loop itself: a ticker that
sleeps LAG_TICK_S and records how late it woke (the time any ready callback waits). A request spans about LAG_WAITS
loop turns beyond the server's own time (its send, its answer's headers and body, its release), so its latency less
LAG_WAITS x the window's mean lag is the server's share, and only that share counts as a queue signal. A probe
settles below what was asked for (`--concurrency`) only on evidence, a queue (the server's share of latency grew with
the requests in flight while throughput stayed flat) or a measured throughput loss at the higher limit while the
client's loop was no later there than below (a loss that came with a late loop is the client's: a test suite or a
build beside the run took its CPU); otherwise it goes back to the limit it probed from, and `client_busy` counts the
windows whose latency rise (or throughput loss) was the client's own. `cap_reason` in the summary says why a cap was
kept.

`history` records each change as (seconds since start, limit), for summary.json.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

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
LAG_TICK_S = 0.01  # the loop-lag ticker's sleep
LAG_WAITS = 4  # loop turns a request spends beyond the server's time: send, headers, body, release
CLIENT_LATE_RATIO, CLIENT_LATE_S = 2.0, 0.001  # the loop's mean lateness this much higher: the client was busy


class Measured(NamedTuple):
    """One window's figures: mean requests in flight, answers/s, mean latency s, mean loop lag s."""

    in_flight: float
    throughput: float
    latency: float
    lag: float

    @property
    def server_latency(self) -> float:
        """The latency less what the client's own loop explains (module docstring)."""
        return max(0.0, self.latency - LAG_WAITS * self.lag)


class Window:
    """One measurement window. Throughput counts every answer after the window's first request went out (the
    server's rate, whoever sent what it answers), timed from the first of them to the last, not counting those at
    the first instant (a server that answers in bursts would otherwise count one burst too many); latency and
    concurrency count only the answers to requests sent in the window."""

    __slots__ = ("start", "size", "opened", "first", "last", "answers", "n", "latency", "in_flight", "lag", "ticks")

    def __init__(self, start: float, limit: float):
        self.start = start
        self.size = max(WINDOW_MIN, int(limit))  # fixed when it opens: in slow start the limit outruns it
        self.opened: float | None = None  # when its first request went out (after a cut, the excess drains first)
        self.first: float | None = None
        self.last = 0.0
        self.answers = self.n = 0
        self.latency = self.in_flight = 0.0
        self.lag = 0.0  # the loop ticker's lateness, summed over its ticks in this window
        self.ticks = 0

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

    def measure(self) -> Measured | None:
        """The window's figures, or None when there is no time span to divide by."""
        if self.first is None or self.last <= self.first or not self.n:
            return None
        return Measured(self.in_flight / self.n, self.answers / (self.last - self.first), self.latency / self.n,
                        self.lag / self.ticks if self.ticks else 0.0)


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
        self._previous: Measured | None = None
        self.cap: int | None = None  # set once throughput stopped following the limit
        self.cap_reason: str | None = None  # what showed the cap was the server's: "queue" or "throughput"
        self.probing = False
        self._probed: list[tuple[int, Measured]] = []  # (cap, figures) of the windows the current probe kept
        self._windows = 0
        self._probed_ceiling = False
        self.saturations = 0
        self.client_busy = 0  # windows whose latency rise the client's own loop explained
        self.unfounded = 0  # probes that found no queue and no throughput loss, and went back up
        self.lag_s = 0.0  # the ticker's lateness over the whole run, and its ticks
        self.lag_ticks = 0
        self._ticker: asyncio.Task[None] | None = None
        self._top: Measured | None = None
        self._before_probe = (self.limit, self.ssthresh)  # restored when a probe finds no evidence

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
        if self.latency_aware and not self.fixed and (self._ticker is None or self._ticker.done()):
            self._ticker = asyncio.get_running_loop().create_task(self._tick())
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

    async def _tick(self) -> None:
        """Measure the loop's lateness while requests are out (then stop: a long-lived loop keeps no task)."""
        while self.in_flight or self._waiters:
            before = time.perf_counter()
            await asyncio.sleep(LAG_TICK_S)
            self.note_lag(max(0.0, time.perf_counter() - before - LAG_TICK_S))

    def note_lag(self, seconds: float) -> None:
        """One tick's lateness of the client's own loop (the ticker, or a simulation)."""
        self._window.lag += seconds
        self._window.ticks += 1
        self.lag_s += seconds
        self.lag_ticks += 1

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
        in_flight = measured.in_flight
        previous, self._previous = self._previous, measured
        self._windows += 1
        if self.probing:
            self._probe(measured, now)
            return
        if self.cap is not None or self._windows < 2:
            return  # the first window times the start, when the first requests all went out at once
        if previous is not None and self._windows >= 3:
            rise = in_flight / previous.in_flight - 1
            if rise >= 0.1 and measured.throughput < previous.throughput * (1 + SATURATED_GAIN * rise):
                if _latency_rose(previous.server_latency, measured.server_latency, rise):
                    self.saturations += 1
                    best = max(measured, previous, key=lambda m: m.throughput)
                    self._start_probe(best, max(self.floor, int(round(previous.in_flight))), now, top=measured)
                    return
                if _latency_rose(previous.latency, measured.latency, rise):
                    self.client_busy += 1  # the rise was the client's own loop, not a queue at the server
        if (not self._probed_ceiling and int(self.limit) >= self.ceiling and in_flight >= BINDING * self.ceiling
                and previous is not None and previous.in_flight >= BINDING * self.ceiling):
            # slow start reached the ceiling within a window or two, too fast to see the knee: look from above,
            # once a whole window was at the ceiling (answers lag sends by a latency: the window before did not
            # see the ceiling's throughput yet)
            self._probed_ceiling = True
            self._start_probe(measured, self._step_down(self.ceiling), now, top=measured)

    def _start_probe(self, best: Measured, cap: int, now: float, *, top: Measured) -> None:
        self.probing = True
        self._before_probe = (self.limit, self.ssthresh)
        self._probed = [(int(self.limit), best)]
        self._top = top  # the window with the most in flight, which the settled cap must beat on evidence
        self._cap_at(cap, now)

    def _step_down(self, cap: int) -> int:
        return max(self.floor, min(cap - 1, int(cap * PROBE_STEP)))

    def _probe(self, measured: Measured, now: float) -> None:
        """One window at the cap: lower it while throughput holds (a clear drop ends the probe), then settle."""
        assert self.cap is not None
        if measured.in_flight < BINDING * self.cap:
            # fewer requests wanted out than the cap allows: it measured the demand, not the server
            self._settle(now)
            return
        server = statistics.median(m.throughput for _, m in self._probed)  # robust to one lucky window
        if measured.throughput < THROUGHPUT_KEPT * server:
            self._settle(now)
            return
        self._probed.append((self.cap, measured))
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
        server = statistics.median(m.throughput for _, m in self._probed)
        low_cap, low = min(((cap, m) for cap, m in self._probed if m.throughput >= SETTLE_SHARE * server),
                           key=lambda entry: entry[0])
        settled = low_cap + HEADROOM
        reason = self._evidence(low) if settled < self.ceiling else None
        if reason is None:
            if settled < self.ceiling:
                self.unfounded += 1  # no queue, no loss: what was asked for stands
            self.cap = None
            # back to where the probe started, not to the ceiling: a limit 429s had cut stays cut (a jump to the
            # ceiling against a rate limit sent a burst of requests that were all answered 429)
            limit, self.ssthresh = self._before_probe
            self._set(limit, now)
        else:
            self.cap_reason = reason
            self._cap_at(settled, now)

    def _evidence(self, low: Measured) -> str | None:
        """What shows that fewer requests in flight serve as well, against the probe's highest limit: a measured
        throughput loss up there, or a queue (the server's share of latency grew with the requests in flight)."""
        top = self._top
        if top is None:
            return None
        if top.throughput < SETTLE_SHARE * low.throughput:
            if not _client_late(low, top):
                return "throughput"
            self.client_busy += 1  # the loss came with the client's own loop running late: not the server's
            return None
        rise = top.in_flight / low.in_flight - 1 if low.in_flight else 0.0
        if rise > 0 and _latency_rose(low.server_latency, top.server_latency, rise):
            return "queue"
        return None

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
        """The limiter's figures for summary.json. What the latency rule decided is added only when it decided
        something (a cap kept, a probe undone, a rise put down to the client), so other runs' files stay as
        they were."""
        values = [v for _, v in self.history]
        out: JSONObject = {"mode": "fixed" if self.fixed else "adaptive", "max": self.ceiling, "start": values[0],
                           "final": int(self.limit), "min": min(values), "peak": max(values),
                           "rate_limited": self.rate_limited, "episodes": self.episodes,
                           "latency_cap": self.cap, "saturations": self.saturations,
                           "history": [[t, v] for t, v in self.history]}
        if self.cap is not None:
            out["cap_reason"] = self.cap_reason
        if self.client_busy or self.unfounded:
            out["client_busy"] = self.client_busy
            out["unfounded_probes"] = self.unfounded
        if self.cap is not None or self.client_busy or self.unfounded:
            out["loop_lag_ms"] = round(1000 * self.lag_s / self.lag_ticks, 2) if self.lag_ticks else None
        return out


def _client_late(low: Measured, top: Measured) -> bool:
    """The client's own loop ran clearly later in the top window than in the low one (another process took the
    CPU, or the client's own work did): a throughput loss then measures the client, and no cap is kept for it."""
    return top.lag > max(CLIENT_LATE_RATIO * low.lag, low.lag + CLIENT_LATE_S)


def _latency_rose(before: float, after: float, rise: float) -> bool:
    """Latency grew by more than LATENCY_RISE of the requests in flight's relative rise."""
    return after > before * (1 + LATENCY_RISE * rise)
