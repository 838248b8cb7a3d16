"""The judge client: model graders' calls to a judge endpoint, cached, retried, concurrent, and counted.

Graders are sync and batch-first (called from worker threads while the runner's asyncio loop generates), so a
`Judge` owns a background thread running its own event loop and provider; its sync `complete()` submits the
batch's requests there and waits. Every answer is appended to a JSONL cache keyed by the provider identity and
the full request body, which holds the judged output: re-grading the same output costs nothing. Identical
requests in flight at once are sent once.

What the model graders share on top of it (message shapes, sampling, lenient JSON reading, error mapping) is in
rfteval/graders/judged.py: this module is the client only, and imports no grader.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import hashlib
import json
import threading
from collections.abc import Coroutine, Iterator, Mapping, Sequence
from contextvars import ContextVar
from pathlib import Path
from typing import IO, Protocol, TypeVar

from rfteval.data.json_types import JSONInput, JSONMapping, JSONObject, JSONValue
from rfteval.providers.base import Generation, GenerationRequest, Provider, ProviderError
from rfteval.providers.endpoint import (
    JUDGE_CONCURRENCY,
    JUDGE_MAX_RETRIES,
    JUDGE_TIMEOUT_S,
    JudgeEndpoint,
)
from rfteval.providers.retry import (
    ConnectionWatch,
    OnRetry,
    RefusalWatch,
    RetryPolicy,
    call_with_retries,
    one_line,
    option_of,
)

T = TypeVar("T")

JudgeAnswer = Generation | ProviderError


class JudgeClient(Protocol):
    """A judge: a `Judge`, or batch_judge's stand-in that records requests instead. Model graders call
    `complete` (with `model_override`); a run also reads how it stopped and what it cost, and hooks its retries
    and its provider's warnings to the progress display."""

    model_override: str | None
    on_retry: OnRetry | None  # besides the judge's own counting: each retry, as it is about to wait
    fatal_error: ProviderError | None  # why it stopped (a refused key, an unknown model, gone); None: it did not
    fatal_model: str | None  # the judge model of the call that stopped it

    @property
    def provider(self) -> Provider: ...

    @property
    def gone(self) -> bool:
        """It answered before, then stopped answering: a run stops resumable (exit 3), not with exit 2."""
        ...

    def complete(self, requests: Sequence[GenerationRequest]) -> list[JudgeAnswer]: ...

    def usage(self) -> dict[str, dict[str, int | None]]:
        """Per judge model: calls, cache hits, shared, errors and tokens."""
        ...


class JudgedGrader(Protocol):
    """A grader as open_judge sees it (rfteval.graders.base.GraderConfig): does any grader in it call a judge?"""

    @property
    def needs_judge(self) -> bool: ...


def open_judge(endpoint: JudgeEndpoint, grader: JudgedGrader, cache_path: Path | str | None = None) -> Judge | None:
    """The judge client `grader` calls, on `endpoint`, its answers cached in `cache_path` (none: not cached); None
    when no grader in it calls a judge (nothing to connect to). The caller closes it."""
    if not grader.needs_judge:
        return None
    return Judge(endpoint.provider(), cache_path=cache_path, concurrency=endpoint.concurrency,
                 max_retries=endpoint.max_retries, timeout_s=endpoint.timeout_s, model_override=endpoint.model)


# ---- repeats (the stability check) -------------------------------------------------------------------------------

_REPEAT: ContextVar[int] = ContextVar("rfteval_judge_repeat", default=0)


@contextlib.contextmanager
def judge_repeat(index: int) -> Iterator[None]:
    """Within this block (this thread only), judge calls are repeat `index`: a separate cache slot, so a
    stability check gets K fresh answers. Repeat 0 is the ordinary slot that runs and re-runs share."""
    token = _REPEAT.set(int(index))
    try:
        yield
    finally:
        _REPEAT.reset(token)


def current_repeat() -> int:
    return _REPEAT.get()


# ---- the cache key -----------------------------------------------------------------------------------------------


def cache_key(identity: JSONMapping, body: JSONMapping, repeat: int = 0) -> str:
    """sha256 of (provider identity, full request body[, repeat]); the body includes the judged output."""
    obj: dict[str, object] = {"provider": identity, "body": body}
    if repeat:
        obj["repeat"] = repeat
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


class JudgeCache:
    """Append-only JSONL of judge answers. A torn last line (the process was killed) is skipped, not fatal."""

    def __init__(self, path: Path | None):
        self.path = path
        self.entries: dict[str, JSONObject] = {}
        self._fh: IO[str] | None = None
        if path is None:
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        needs_newline = False
        if path.exists():
            data = path.read_bytes()
            needs_newline = bool(data) and not data.endswith(b"\n")
            for raw in data.splitlines():
                try:
                    entry = json.loads(raw)
                except ValueError:
                    continue
                if isinstance(entry, dict) and isinstance(entry.get("key"), str):
                    self.entries[entry["key"]] = entry
        self._fh = open(path, "a", encoding="utf-8")
        if needs_newline:
            self._fh.write("\n")
            self._fh.flush()

    def get(self, key: str) -> JSONObject | None:
        return self.entries.get(key)

    def put(self, entry: JSONObject) -> None:
        """`entry` is a cache_entry() line, whose key is a string."""
        key = entry["key"]
        if not isinstance(key, str):
            raise TypeError(f"a judge cache entry's key must be a string, not {type(key).__name__}")
        self.entries[key] = entry
        if self._fh is not None:
            self._fh.write(json.dumps(entry, ensure_ascii=False, separators=(",", ":")) + "\n")
            self._fh.flush()

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None


def _usage_json(usage: Mapping[str, int | None] | None) -> JSONValue:
    return None if usage is None else dict(usage)


def cache_entry(key: str, model: str, answer: JudgeAnswer) -> JSONObject:
    """One judge_cache.jsonl line. Public because --batch-judge files batch answers in the same shape, so a
    synchronous re-run reads them as if it had made the calls."""
    if isinstance(answer, ProviderError):
        return {"key": key, "model": model, "refusal": str(answer), "usage": _usage_json(answer.usage)}
    return {
        "key": key, "model": model, "output_text": answer.output_text, "usage": _usage_json(answer.usage),
        "finish_reason": answer.finish_reason,
    }


def _str_or_none(value: JSONInput) -> str | None:
    return value if isinstance(value, str) else None


def _entry_usage(value: JSONInput) -> dict[str, int | None]:
    """A cache line's usage as written (token counts or null); anything else in it reads as absent."""
    if not isinstance(value, Mapping):
        return {}
    return {k: v for k, v in value.items() if v is None or isinstance(v, int)}


def answer_from_entry(entry: JSONMapping) -> JudgeAnswer:
    """The answer a cache line stands for, marked cached: a refusal stays a refusal, with its tokens."""
    if "refusal" in entry:
        refusal = ProviderError("refusal", str(entry["refusal"]), usage=_entry_usage(entry.get("usage")))
        refusal.call_id, refusal.cached, refusal.sent = _str_or_none(entry.get("key")), True, True
        return refusal
    return Generation(
        output_text=_str_or_none(entry.get("output_text")) or "", usage=_entry_usage(entry.get("usage")),
        finish_reason=_str_or_none(entry.get("finish_reason")), cached=True, call_id=_str_or_none(entry.get("key")),
    )


# ---- a cap on spend -----------------------------------------------------------------------------------------------


@dataclasses.dataclass
class JudgeBudget:
    """What one judge may send: at most `max_calls` calls, and/or calls only while the answered ones cost less than
    `max_cost_usd` at `prices` (USD per million tokens, by judge model: pricing.price_table). Cache hits and shared
    answers are free and not counted. The cost is known only once an answer is in, so the calls in flight when it
    is reached (at most the judge's concurrency) still complete and count. A call past the cap is not sent: it ends
    as a `capped` error, and `reached` says why, for the caller to stop grading (run/runner.py)."""

    max_calls: int | None = None
    max_cost_usd: float | None = None
    prices: Mapping[str, tuple[float, ...]] = dataclasses.field(default_factory=dict)
    calls: int = 0
    cost_usd: float = 0.0
    reached: str | None = None

    def take(self) -> bool:
        """Whether one more call may go out (counted when it may); called on the judge's loop, so never twice at once."""
        if self.max_calls is not None and self.calls >= self.max_calls:
            self.reached = f"--max-judge-calls {self.max_calls} reached ({self.calls} judge calls sent)"
        elif self.max_cost_usd is not None and self.cost_usd >= self.max_cost_usd:
            self.reached = (f"--max-judge-cost {self.max_cost_usd:g} reached (judge calls so far cost "
                            f"${self.cost_usd:.4f}, {self.calls} calls)")
        else:
            self.calls += 1
            return True
        return False

    def spend(self, model: str, usage: Mapping[str, int | None] | None) -> None:
        """Add what an answered call cost (its tokens at the judge model's price)."""
        from rfteval.providers.pricing import cost_usd

        if usage:
            self.cost_usd += cost_usd(model, usage.get("input_tokens") or 0, usage.get("output_tokens") or 0,
                                      self.prices) or 0.0


# ---- the client --------------------------------------------------------------------------------------------------

_USAGE_KEYS = ("input_tokens", "output_tokens", "reasoning_tokens")


class Judge:
    """A judge endpoint for model graders; thread-safe sync API over a private event loop. Close it when done."""

    def __init__(
        self,
        provider: Provider,
        cache_path: Path | str | None = None,
        concurrency: int = JUDGE_CONCURRENCY,
        max_retries: int = JUDGE_MAX_RETRIES,
        timeout_s: float = JUDGE_TIMEOUT_S,
        model_override: str | None = None,
        retry_policy: RetryPolicy | None = None,
        on_retry: OnRetry | None = None,
    ):
        if concurrency < 1:
            raise ValueError("concurrency must be >= 1")
        self.provider = provider
        self.timeout_s = timeout_s
        self.model_override = model_override
        self.policy = retry_policy or RetryPolicy(max_retries=max_retries)
        self.on_retry = on_retry
        # a 401 / unknown judge model, a request shape the server refuses every time, an endpoint not there or
        # gone: later calls fail at once, unsent, and every command stops with this one line (judge_stopped)
        self.fatal_error: ProviderError | None = None
        self.fatal_model: str | None = None  # the judge model of the call that was refused
        # the models' rules (run/runner.py uses the same watches): a handful of alike refusals before any answer,
        # or connection failures to an endpoint never reached or gone, and the judge stops
        self._refusals = RefusalWatch()
        self._connections = ConnectionWatch()
        self.gone = False  # the endpoint answered before, then stopped: a run stops resumable (exit 3), not exit 2
        self.budget: JudgeBudget | None = None  # a cap on the calls sent (rfteval run --max-judge-calls/-cost)
        self._identity = provider.identity()
        self._cache = JudgeCache(Path(cache_path) if cache_path is not None else None)
        # FORMAT_LEVELS: how far the endpoint made the judge step down its output format, as the cache remembers
        self.format_level = remembered_format_level(self._cache, self._identity)
        self._lock = threading.Lock()
        self._usage: dict[str, dict[str, int | None]] = {}
        self._stats = {"requests": 0, "calls": 0, "cache_hits": 0, "shared": 0, "retries": 0, "errors": 0}
        self._inflight: dict[str, asyncio.Future[JudgeAnswer]] = {}
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="rfteval-judge", daemon=True)
        self._thread.start()
        self._sem: asyncio.Semaphore = self._run(self._make_semaphore(concurrency))
        self._closed = False

    def __repr__(self) -> str:
        return f"Judge({self.provider!r}, model_override={self.model_override!r})"

    # sync API (any thread but the judge's own)
    def complete(self, requests: Sequence[GenerationRequest]) -> list[JudgeAnswer]:
        """One answer per request, in order: a Generation, or the ProviderError it ended with after retries."""
        if self._closed:
            raise RuntimeError("the judge is closed")
        if threading.current_thread() is self._thread:
            raise RuntimeError("Judge.complete() called from the judge's own loop")
        if not requests:
            return []
        return self._run(self._complete_all(list(requests), current_repeat()))

    def usage(self) -> dict[str, dict[str, int | None]]:
        """Per judge model: requests asked, calls sent, cache hits, requests shared with a call in flight, errors
        and tokens; cached and shared answers cost no tokens."""
        with self._lock:
            return copy.deepcopy(self._usage)

    def stats(self) -> dict[str, int]:
        """Counters for a progress display: requests asked, calls sent, cache hits, shared, retries, errors."""
        with self._lock:
            return dict(self._stats)

    @property
    def cache(self) -> JudgeCache:
        """The answers by request key: batch_judge fills it from a Batch API output file and reads it to skip
        calls already answered, so a batch and a synchronous run share one cache and pay for nothing twice."""
        return self._cache

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        # calls still in flight (Ctrl-C left the caller's wait, or a caller gave up) are cancelled on the loop first:
        # a loop closed under them printed "Task was destroyed but it is pending!" and an "Event loop is closed"
        # traceback per call when they were collected
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(self._cancel_pending(), self._loop).result(timeout=10)
        with contextlib.suppress(Exception):
            self._run(self.provider.aclose())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()
        self._cache.close()

    def __enter__(self) -> Judge:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # internals (the judge's loop)
    def _run(self, coro: Coroutine[object, object, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    @staticmethod
    async def _make_semaphore(n: int) -> asyncio.Semaphore:
        return asyncio.Semaphore(n)

    @staticmethod
    async def _cancel_pending() -> None:
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _count(self, model: str, field: str, n: int = 1) -> None:
        with self._lock:
            # reasoning tokens stay None until the endpoint reports some: "never reported" is not zero
            # shared: a request equal to one in flight, answered by that call; requests: every one asked, so
            # requests − calls − cache_hits − shared were not sent (the judge had stopped, or the body failed)
            empty: dict[str, int | None] = {"requests": 0, "calls": 0, "cache_hits": 0, "shared": 0, "errors": 0,
                                            **dict.fromkeys(_USAGE_KEYS, 0), "reasoning_tokens": None}
            row = self._usage.setdefault(model, empty)
            row[field] = (row[field] or 0) + n

    def _bump(self, field: str, n: int = 1) -> None:
        with self._lock:
            self._stats[field] += n

    async def _complete_all(self, requests: list[GenerationRequest], repeat: int) -> list[JudgeAnswer]:
        return list(await asyncio.gather(*(self._one(r, repeat) for r in requests)))

    async def _one(self, request: GenerationRequest, repeat: int) -> JudgeAnswer:
        if self.model_override:
            request = dataclasses.replace(request, model=self.model_override)
        self._bump("requests")
        self._count(request.model, "requests")
        try:
            body = self.provider.request_body(request)
        except ProviderError as exc:
            return exc
        key = cache_key(self._identity, body, repeat)
        entry = self._cache.get(key)
        if entry is not None:
            self._bump("cache_hits")
            self._count(request.model, "cache_hits")
            return answer_from_entry(entry)
        pending = self._inflight.get(key)
        if pending is not None:
            self._bump("shared")
            self._count(request.model, "shared")
            return await asyncio.shield(pending)
        future: asyncio.Future[JudgeAnswer] = self._loop.create_future()
        self._inflight[key] = future
        try:
            answer = await self._call(request)
            if isinstance(answer, Generation):
                answer = dataclasses.replace(answer, call_id=key)
            elif answer.sent:
                answer.call_id = key  # a call went out (refused or failed): it is counted on the record
            if isinstance(answer, Generation) or answer.kind == "refusal":
                self._cache.put(cache_entry(key, request.model, answer))  # a refusal is an answer too: not paid twice
            future.set_result(answer)
            return answer
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # mark retrieved: waiters re-raise it themselves
            raise
        finally:
            del self._inflight[key]

    def _note_retry(self, n: int, exc: BaseException, wait: float) -> None:
        self._bump("retries")
        if self.on_retry is not None:
            self.on_retry(n, exc, wait)

    async def _call(self, request: GenerationRequest) -> JudgeAnswer:
        if self.fatal_error is not None:
            return _not_sent(self.fatal_error)
        async with self._sem:
            if self.fatal_error is not None:
                return _not_sent(self.fatal_error)
            if self.budget is not None and not self.budget.take():
                return ProviderError("capped", f"not sent: {self.budget.reached}")
            self._bump("calls")
            self._count(request.model, "calls")
            try:
                gen = await call_with_retries(lambda: self._attempt(request), self.policy, self._note_retry)
            except ProviderError as exc:
                if exc.fatal and self.fatal_error is None:
                    self.fatal_error, self.fatal_model = exc, request.model
                self._bump("errors")
                self._count(request.model, "errors")
                self._count_usage(request.model, exc.usage)  # a refusal was answered: its tokens were billed
                exc.sent = True
                return exc
            except Exception as exc:  # a client bug must not crash grading: it becomes this cell's error
                self._bump("errors")
                self._count(request.model, "errors")
                failed = ProviderError("server", f"{type(exc).__name__}: {exc}"[:300])
                failed.sent = True
                return failed
        self._count_usage(request.model, gen.usage)
        return gen

    async def _attempt(self, request: GenerationRequest) -> Generation:
        """One attempt, watched: the attempt that shows the endpoint refuses every request alike, or is not there,
        stops the judge (fatal_error), and the attempts of calls waiting to retry end at once, not retried."""
        if self.fatal_error is not None:
            raise _final(self.fatal_error)
        try:
            gen = await self._generate(request)
        except ProviderError as exc:
            with self._lock:
                stop = self._stop_reason(exc, request)
                if stop is not None and self.fatal_error is None:
                    self.fatal_error, self.fatal_model = stop, request.model
            if stop is not None:
                raise _final(stop) from None
            raise
        with self._lock:
            self._refusals.ok()
            self._connections.ok()
        return gen

    def _stop_reason(self, exc: ProviderError, request: GenerationRequest) -> ProviderError | None:
        """The judge-stopping error this failed attempt completes, if any (called under the lock)."""
        if self._refusals.failed(exc):
            option = option_of(str(exc), self.provider.request_body(request))
            fix = "" if option == "the request" else f", caused by {option}"
            return ProviderError(exc.kind, f"the server refused {self._refusals.count} judge requests alike{fix}: "
                                 f"{one_line(str(exc), 400)}", exc.status)
        verdict = self._connections.failed(exc)
        if verdict == "unreachable":
            return ProviderError("connection", f"{one_line(str(exc), 300)} ({self._connections.unreached} attempts, "
                                 "none answered)")
        if verdict == "gone":
            self.gone = True
            return ProviderError("connection", f"the judge endpoint stopped answering: {one_line(str(exc), 300)} "
                                 f"({self._connections.count} attempts in a row over "
                                 f"{self._connections.seconds:.1f}s could not connect)")
        return None

    async def _generate(self, request: GenerationRequest) -> Generation:
        """One attempt, in the strongest output format the endpoint takes. The judge's format is rfteval's choice,
        not the user's (a score or a label as JSON), so a server that refuses structured outputs (llama.cpp's
        server takes only `text` and `json_object`) is asked for JSON mode with the same schema, then for plain
        text, which the lenient answer parser reads; the step down is remembered for every later call."""
        while True:
            level = self.format_level
            current = with_format_level(request, level)
            try:
                return await self.provider.generate(current, self.timeout_s)
            except ProviderError as exc:
                if not refuses_format(current, exc) or level >= len(FORMAT_LEVELS) - 1:
                    raise
                with self._lock:
                    if self.format_level == level:  # concurrent calls refused alike step down once
                        self.format_level += 1
                        self._cache.put(format_entry(self._identity, self.format_level))

    def _count_usage(self, model: str, usage: Mapping[str, int | None] | None) -> None:
        if self.budget is not None:
            self.budget.spend(model, usage)
        for k in _USAGE_KEYS:
            value = usage.get(k) if usage else None
            if isinstance(value, int):
                self._count(model, k, value)


# A judge's output format, strongest first: structured outputs as the grader asks, JSON mode carrying the same
# schema (llama.cpp's server constrains to it; others ignore the extra key), then no format at all.
FORMAT_LEVELS = ("as asked", "json_object", "none")
_FORMAT_WORDS = ("response_format", "json_schema", "json_object", "text.format")


def format_key(identity: JSONMapping) -> str:
    """The judge cache line remembering how far an endpoint made the judge step down: a key no answer has (answers
    are bare sha256 digests), so a second invocation starts at that level and pays no refused request again."""
    return "format_level:" + cache_key(identity, {})


def format_entry(identity: JSONMapping, level: int) -> JSONObject:
    return {"key": format_key(identity), "format_level": level, "format": FORMAT_LEVELS[level]}


def remembered_format_level(cache: JudgeCache, identity: JSONMapping) -> int:
    """The step-down level a cache line remembers for this endpoint (0 when none does, or it is unreadable)."""
    entry = cache.get(format_key(identity))
    level = entry.get("format_level") if entry is not None else None
    return level if isinstance(level, int) and 0 <= level < len(FORMAT_LEVELS) else 0


def with_format_level(request: GenerationRequest, level: int) -> GenerationRequest:
    """The request with its response format stepped down to FORMAT_LEVELS[level] (the same object at level 0,
    or when it asks for no JSON schema)."""
    rf = request.sampling.response_format
    if level == 0 or not rf or rf.get("type") in ("json_object", "text"):
        return request
    if FORMAT_LEVELS[level] == "json_object":
        wrapped = rf.get("json_schema")
        inner: JSONObject = wrapped if isinstance(wrapped, dict) else rf
        fmt: JSONObject | None = {"type": "json_object", "schema": inner.get("schema", {})}
    else:
        fmt = None
    return dataclasses.replace(request, sampling=dataclasses.replace(request.sampling, response_format=fmt))


def refuses_format(request: GenerationRequest, exc: ProviderError) -> bool:
    """A 4xx or 500 naming the response format, to a request that asked for one: the endpoint will not take that
    format (retrying it cannot help)."""
    if not request.sampling.response_format or exc.kind not in ("bad_request", "server"):
        return False
    if exc.status is not None and exc.status >= 502:  # a gateway's transient failure, whatever its text
        return False
    text = str(exc).lower()
    return any(word in text for word in _FORMAT_WORDS)


def _final(error: ProviderError) -> ProviderError:
    """A copy of the judge's fatal error that is never retried (the attempt of a call already under way)."""
    copy_ = ProviderError(error.kind, str(error), error.status)
    copy_.final = True
    return copy_


def judge_stopped(judge: JudgeClient | None) -> str | None:
    """One line saying why a judge stopped (refused key, unknown model, a request the server refuses every time,
    an endpoint not there or gone), or None: the commands that grade with a judge end with it instead of a table
    of errors that would read as scores."""
    if judge is None or judge.fatal_error is None:
        return None
    error = judge.fatal_error
    model = judge.fatal_model or judge.model_override or "judge"
    verb = {"auth": "refused", "not_found": "refused", "connection": "is not answering"}.get(error.kind, "stopped")
    return f"the judge ({model}) {verb}: {error.kind}: {one_line(str(error), 600)}"


def raise_if_stopped(judge: JudgeClient | None, outcome: str) -> None:
    """InputError (one line, exit 2) when the judge stopped: `outcome` says what was not done ("no records were
    written"), so a command never prints grades that are the judge's refusals."""
    line = judge_stopped(judge)
    if line is not None:
        from rfteval.errors import InputError

        raise InputError(f"{line}; {outcome}")


def _not_sent(error: ProviderError) -> ProviderError:
    """The judge's fatal error (a refused key, an unknown model) for a request it did not send: a copy that is not
    `sent`, so the one call that failed is counted once and the unsent ones not at all."""
    return ProviderError(error.kind, str(error), error.status)
