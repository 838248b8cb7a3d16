"""Adaptive concurrency: the AIMD limiter alone (a fake clock), then a run against a rate-limited test server."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from rfteval.providers.base import RateInfo
from rfteval.run.concurrency import AdaptiveLimiter, Measured
from rfteval.run.runner import RunOptions, run_eval
from rfteval.run.spec import build_spec, flag_overrides
from tests.support.cli_run_files import write_run_files
from tests.support.fake_openai import FakeOpenAI

FAKE_OPENAI = Path(__file__).resolve().parents[1] / "support" / "fake_openai.py"


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def acquire(lim: AdaptiveLimiter) -> float:
    return asyncio.run(lim.acquire())


def test_starts_below_the_ceiling_and_never_goes_above_it() -> None:
    clock = Clock()
    lim = AdaptiveLimiter(64, clock=clock)
    assert lim.current == 16
    for _ in range(500):
        token = acquire(lim)
        clock.t += 0.01
        lim.release(token, "ok")
    assert lim.current == 64  # grew to the ceiling and stopped there
    assert max(v for _, v in lim.history) == 64


def test_a_429_episode_cuts_once_by_a_fifth() -> None:
    clock = Clock()
    lim = AdaptiveLimiter(64, 20, clock=clock)
    tokens = [acquire(lim) for _ in range(10)]  # ten requests in flight, all sent before the 429s
    clock.t += 0.1
    for token in tokens:
        lim.release(token, "rate_limit")
    assert lim.current == 16  # 20 x 0.8, once: the other nine 429s belong to the same episode
    assert lim.rate_limited == 10 and lim.episodes == 1
    clock.t += 0.1
    token = acquire(lim)  # sent after the cut: its 429 is a new episode
    clock.t += 0.1
    lim.release(token, "rate_limit")
    assert lim.current == 12 and lim.episodes == 2


def test_after_a_cut_growth_is_additive() -> None:
    clock = Clock()
    lim = AdaptiveLimiter(64, 20, clock=clock)
    t = acquire(lim)
    clock.t += 0.1
    lim.release(t, "rate_limit")
    assert lim.current == 16
    for _ in range(16):  # one round of successes at 16 adds about one
        clock.t += 0.01
        t = acquire(lim)
        lim.release(t, "ok")
    assert lim.current == 16 or lim.current == 17
    assert lim.limit < 17.1


def test_retry_after_pauses_new_requests() -> None:
    clock = Clock()
    lim = AdaptiveLimiter(8, 4, clock=clock)
    t = acquire(lim)
    lim.release(t, "rate_limit", retry_after=2.0)
    assert lim.resume_at == pytest.approx(clock.t + 2.0)

    async def blocked() -> bool:
        task = asyncio.ensure_future(lim.acquire())
        await asyncio.sleep(0.05)
        done = task.done()
        task.cancel()
        return done

    assert asyncio.run(blocked()) is False  # waits out Retry-After


def test_an_exhausted_budget_waits_for_its_reset() -> None:
    clock = Clock()
    lim = AdaptiveLimiter(8, 4, clock=clock)
    t = acquire(lim)
    lim.release(t, "rate_limit", rate=RateInfo(limit_requests=100, remaining_requests=0, reset_requests_s=6.0))
    assert lim.resume_at == pytest.approx(clock.t + 6.0)


def test_low_remaining_stops_growth_before_any_429() -> None:
    clock = Clock()
    lim = AdaptiveLimiter(64, 10, clock=clock)
    low = RateInfo(limit_requests=100, remaining_requests=5, reset_requests_s=1.0)
    for _ in range(50):
        t = acquire(lim)
        clock.t += 0.01
        lim.release(t, "ok", rate=low)
    assert lim.current == 10 and lim.rate_limited == 0


def test_server_errors_pause_growth_without_cutting() -> None:
    clock = Clock()
    lim = AdaptiveLimiter(64, 10, clock=clock)
    t = acquire(lim)
    lim.release(t, "server")
    assert lim.current == 10 and lim.ssthresh == 10


def test_flex_unavailable_waits_but_keeps_the_limit() -> None:
    clock = Clock()
    lim = AdaptiveLimiter(64, 10, clock=clock)
    t = acquire(lim)
    lim.release(t, "rate_limit", retry_after=1.0, unavailable=True)
    assert lim.current == 10 and lim.episodes == 0 and lim.resume_at > clock.t


def test_fixed_never_moves() -> None:
    lim = AdaptiveLimiter(32, 4, fixed=True)
    assert lim.current == 32
    for _ in range(5):
        lim.release(acquire(lim), "rate_limit", retry_after=1.0)
    assert lim.current == 32 and lim.resume_at == 0.0


# ---------------------------------------------------------------- against the rate-limited test server


N_REQUESTS = 2000
CAP = 16


def _files(tmp: Path, n: int) -> tuple[Path, Path]:
    files = write_run_files(tmp, n, reference="x")
    return files["dataset"], files["grader"]


@pytest.mark.slow
def test_2000_requests_at_concurrency_64_against_a_cap_of_16(tmp_path: Path) -> None:
    """The issue's target, 429 share part: at most 10% of the requests sent are answered 429. (The throughput
    part, >= 80% of what the cap allows, is timing: it is measured in bench/bench_ratelimit.py, not asserted.)

    The server runs in its own process, as a real one does: in this one it shared the client's interpreter lock, saw
    requests late while the client was busy, and answered a slow start that had run far past its cap with a burst of
    429s no separate server sends (11.7% once in CI)."""
    ds, grader = _files(tmp_path, N_REQUESTS)
    proc = subprocess.Popen([sys.executable, str(FAKE_OPENAI), "--port", "0", "--delay-ms", "30",
                             "--max-concurrent", str(CAP)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        base_url = proc.stdout.readline().strip()
        spec = build_spec(None, flag_overrides(models=["base=fake-base"], dataset=str(ds), grader=str(grader),
                                               epochs=1, base_url=base_url, concurrency=64,
                                               out=str(tmp_path / "run")))
        result = run_eval(spec, options=RunOptions(handle_signals=False, backoff_base_s=0.05, checkpoint_s=0))
        with urllib.request.urlopen(f"{base_url}/_stats", timeout=10) as answer:
            stats = json.load(answer)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert result.summary.cells == N_REQUESTS
    assert result.summary.errors == 0 and result.summary.missing == 0
    sent = stats["served"] + stats["rate_limited"]
    assert stats["served"] == N_REQUESTS
    assert stats["rate_limited"] / sent <= 0.10, stats
    conc = result.summary.concurrency["base"]
    assert conc["mode"] == "adaptive" and conc["max"] == 64
    assert conc["rate_limited"] == stats["rate_limited"]
    assert all(1 <= v <= 64 for _, v in conc["history"])
    assert conc["start"] < 64


@pytest.mark.slow
def test_fixed_concurrency_hammers_the_cap(tmp_path: Path) -> None:
    """The contrast: --fixed keeps 64 in flight against a cap of 16, and most requests sent are 429s."""
    ds, grader = _files(tmp_path, 200)
    with FakeOpenAI(delay_s=0.03, max_concurrent=CAP, retry_after_ms=5) as fake:
        spec = build_spec(None, flag_overrides(models=["base=fake-base"], dataset=str(ds), grader=str(grader),
                                               epochs=1, base_url=fake.base_url, concurrency=64, max_retries=100,
                                               out=str(tmp_path / "run")))
        result = run_eval(spec, options=RunOptions(handle_signals=False, backoff_base_s=0.005, backoff_max_s=0.02,
                                                   checkpoint_s=0, fixed_concurrency=True))
        stats = dict(fake.stats)
    assert result.summary.errors == 0
    assert result.summary.concurrency["base"]["mode"] == "fixed"
    assert stats["rate_limited"] / (stats["served"] + stats["rate_limited"]) > 0.10


@pytest.mark.slow
def test_flex_resource_unavailable_is_retried_longer(tmp_path: Path) -> None:
    ds, grader = _files(tmp_path, 3)
    with FakeOpenAI() as fake:
        fake.flex_unavailable = 2
        spec = build_spec(None, flag_overrides(models=["base=fake-base"], dataset=str(ds), grader=str(grader),
                                               epochs=1, base_url=fake.base_url, out=str(tmp_path / "run")))
        result = run_eval(spec, options=RunOptions(handle_signals=False, backoff_base_s=0.001, checkpoint_s=0,
                                                   service_tier="flex"))
        bodies = [r.body for r in fake.requests_for("chat")]
    assert result.summary.errors == 0 and fake.stats["flex_unavailable"] == 2
    assert all(b.get("service_tier") == "flex" for b in bodies)
    assert result.summary.concurrency["base"]["episodes"] == 0  # capacity, not our rate: no cut
    store = (tmp_path / "run" / "store" / "responses.jsonl").read_text().splitlines()
    assert {json.loads(line).get("tier") for line in store} == {"flex"}  # billed at batch prices


def test_progress_line_shows_the_limit_and_batch_status() -> None:
    import io

    from rich.console import Console

    from rfteval.report.run_table import RichMonitor

    buf = io.StringIO()
    monitor = RichMonitor(Console(file=buf, width=160, force_terminal=False))
    monitor.start({"base": 10})
    monitor.concurrency("base", 12)
    monitor.batch("base-0001", "base", "in_progress", {"total": 10, "completed": 4, "failed": 1})
    monitor.advance("base")
    monitor.stop()
    out = buf.getvalue()
    assert "limit 12" in out and "batch base-0001: in_progress (5/10, 1 failed)" in out


# ---------------------------------------------------------------- a server with few slots (latency, no 429s)


def simulate(slots: int, ceiling: int, n: int = 1500, service_s: float = 1.0, jitter: float = 0.0,
             seed: int = 0, latency_aware: bool = True) -> tuple[AdaptiveLimiter, float, list[float]]:
    """A queue model of a server with `slots` slots (FIFO, each request `service_s` ± jitter of work) driven by
    the limiter on a fake clock: (limiter, answers/s over the run, latency of each answer)."""
    import heapq
    import itertools
    import random
    from collections import deque

    rng = random.Random(seed)
    clock = Clock()
    t0 = clock.t
    lim = AdaptiveLimiter(ceiling, clock=clock, latency_aware=latency_aware)
    finishing: list[tuple[float, int, float]] = []  # (finish time, order, token)
    waiting: deque[float] = deque()
    order = itertools.count()
    busy = sent = 0
    latencies: list[float] = []

    def fill() -> None:
        nonlocal busy, sent
        while sent < n and (token := lim.try_acquire()) is not None:
            sent += 1
            waiting.append(token)
        while busy < slots and waiting:
            busy += 1
            work = service_s * (1 + rng.uniform(-jitter, jitter))
            heapq.heappush(finishing, (clock.t + work, next(order), waiting.popleft()))

    fill()
    while finishing:
        clock.t, _, token = heapq.heappop(finishing)
        busy -= 1
        latencies.append(clock.t - token)
        lim.release(token, "ok")
        fill()
    return lim, n / (clock.t - t0), latencies


@pytest.mark.parametrize("slots", [1, 2, 4])
@pytest.mark.parametrize("jitter", [0.0, 0.3])
def test_a_server_with_few_slots_gets_about_that_many_requests(slots: int, jitter: float) -> None:
    lim, throughput, latencies = simulate(slots, ceiling=32, jitter=jitter, seed=slots)
    assert lim.cap is not None and not lim.probing
    assert slots < lim.current <= slots + 2  # the slots and one waiting (HEADROOM), not the ceiling of 32
    assert throughput >= 0.95 * slots  # the bare maximum: every slot busy all along
    settled = latencies[len(latencies) // 2:]
    assert sum(settled) / len(settled) < 2.2  # service time 1 s: little queueing left (32/slots s at the ceiling)


def test_without_the_latency_rule_the_limit_climbs_to_the_ceiling() -> None:
    """The same server against a limiter that only knows 429s: what the rule is for (the test above can fail)."""
    lim, throughput, latencies = simulate(1, ceiling=32, latency_aware=False)
    assert lim.current == 32 and lim.cap is None
    settled = latencies[len(latencies) // 2:]
    assert sum(settled) / len(settled) > 20  # mostly queueing


def test_an_endpoint_whose_throughput_follows_the_limit_is_never_capped() -> None:
    lim, throughput, _ = simulate(1000, ceiling=64, n=3000, jitter=0.3)
    assert lim.cap is None and lim.current == 64 and lim.saturations == 0 and not lim.probing


def test_a_server_with_more_slots_than_the_start_settles_near_them() -> None:
    lim, throughput, _ = simulate(24, ceiling=64, n=6000, jitter=0.2)
    assert lim.cap is not None and 24 <= lim.current <= 32
    assert throughput >= 0.9 * 24


# ---------------------------------------------------------------- a busy client (its own loop late, the server idle)


def simulate_busy_client(ceiling: int, n: int = 6000, server_s: float = 0.1, cost_s: float = 1 / 300,
                         report_lag: bool = True, seed: int = 0) -> tuple[AdaptiveLimiter, float]:
    """An asyncio-like client loop on a fake clock against a server with room for everything (each answer after
    `server_s` ± 20%): every loop turn takes the answers that arrived, spends `cost_s` of CPU on each (parsing,
    storing, grading: the client's own work), each answer's slot going to the next request at once; a ticker due every LAG_TICK_S
    reports how late the turn let it run, as AdaptiveLimiter's own ticker does. The client, not the server, is
    the bottleneck: about 1/cost_s answers/s whatever the limit. (limiter, answers/s)."""
    import heapq
    import random

    from rfteval.run.concurrency import LAG_TICK_S

    rng = random.Random(seed)
    clock = Clock()
    t0 = clock.t
    lim = AdaptiveLimiter(ceiling, clock=clock)
    arriving: list[tuple[float, float]] = []  # (answer's arrival, token)
    sent = done = 0
    tick_due = clock.t + LAG_TICK_S

    def send() -> None:
        nonlocal sent
        while sent < n and (token := lim.try_acquire()) is not None:
            sent += 1
            heapq.heappush(arriving, (clock.t + server_s * rng.uniform(0.8, 1.2), token))

    while done < n:
        send()
        ready = []
        while arriving and arriving[0][0] <= clock.t:
            ready.append(heapq.heappop(arriving))
        if not ready:
            clock.t = min(arriving[0][0], tick_due) if arriving else tick_due
        for _, token in ready:
            clock.t += cost_s
            lim.release(token, "ok")
            done += 1
            send()  # the released slot's waiter sends at once, as the runner's workers do
        if clock.t >= tick_due:
            if report_lag:
                lim.note_lag(clock.t - tick_due)
            tick_due = clock.t + LAG_TICK_S
    return lim, n / (clock.t - t0)


def test_a_busy_client_keeps_the_concurrency_asked_for() -> None:
    """Issue 31: latency that rose because the client's own loop was late is no queue at the server; without a
    429, a queue or a measured throughput loss the limit stays at --concurrency, and the summary says what it saw."""
    lim, throughput = simulate_busy_client(64)
    assert lim.cap is None and lim.current == 64, lim.summary()
    summary = lim.summary()
    assert "cap_reason" not in summary and summary["unfounded_probes"] == 1  # probed down, found nothing, went back
    assert isinstance(summary["loop_lag_ms"], float) and summary["loop_lag_ms"] > 10
    assert throughput >= 0.95 * 300


def test_a_probe_that_finds_nothing_returns_to_the_limit_it_left() -> None:
    """Back to where the probe started, not to the ceiling: a limit a 429 had cut stays cut (the jump to 64 against
    a cap of 16 once sent a burst that was all answered 429, and the run's 429 share went from 2% to 14%)."""
    clock = Clock()
    lim = AdaptiveLimiter(64, 20, clock=clock)
    token = acquire(lim)
    clock.t += 0.1
    lim.release(token, "rate_limit")
    assert lim.current == 16 and lim.ssthresh == 16
    flat = Measured(in_flight=16, throughput=100.0, latency=0.16, lag=0.0)
    lim._start_probe(flat, 12, clock.t, top=flat)
    assert lim.current == 12 and lim.probing
    lim._probed.append((12, flat))  # the lower cap served as well: no loss up there, no queue
    lim._settle(clock.t)
    assert lim.cap is None and lim.unfounded == 1
    assert lim.current == 16 and lim.ssthresh == 16


def test_a_busy_client_whose_lag_goes_unmeasured_is_capped() -> None:
    """The same client with the loop's lateness unreported: the rule above is what keeps the limit (this fails
    when it is gone)."""
    lim, throughput = simulate_busy_client(64, report_lag=False, cost_s=1 / 500)
    assert lim.current < 64 and throughput < 0.97 * simulate_busy_client(64, cost_s=1 / 500)[1]


def test_a_queueing_server_is_capped_for_its_queue() -> None:
    lim, _, _ = simulate(2, ceiling=32)
    assert lim.cap is not None and lim.summary()["cap_reason"] == "queue"


def test_a_throughput_loss_that_came_with_a_late_loop_keeps_no_cap() -> None:
    """Issue 31, seen in bench_run at 20,000 requests beside a test run: the probe's top window lost throughput
    because another process took the client's CPU (its loop ran late), and the limit settled at 49 of 64. A loss
    counts as the server's only when the client's loop was no later at the top than below."""
    lim = AdaptiveLimiter(64)
    low = Measured(in_flight=47.0, throughput=600.0, latency=0.105, lag=0.0005)
    lim._top = Measured(in_flight=64.0, throughput=520.0, latency=0.125, lag=0.004)  # the loop 8x later up there
    assert lim._evidence(low) is None and lim.client_busy == 1
    lim._top = Measured(in_flight=64.0, throughput=520.0, latency=0.125, lag=0.0006)  # the loop on time: the server
    assert lim._evidence(low) == "throughput"
