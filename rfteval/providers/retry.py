"""Retry policy for endpoint calls: exponential backoff with full jitter, honouring Retry-After.

Full jitter (a uniform wait in [0, base·2^attempt], capped) spreads the retries of many concurrent requests, so a
rate-limited endpoint is not hit again by all of them at the same instant. When the server says how long to wait
(Retry-After), that is a floor: waiting less only earns another 429.
"""

from __future__ import annotations

import asyncio
import random
import re
import time
from collections.abc import Awaitable, Callable, Mapping
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
        return isinstance(exc, ProviderError) and exc.kind in self.retryable and not exc.final

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


# ---------------------------------------------------------------- what retrying cannot fix

REJECT_AFTER = 4  # identical refusals, before any success, that stop a model: a handful of requests, not hundreds
REJECT_5XX = frozenset({500, 501})  # 502/503/504 say "overloaded or restarting": transient by definition
# A request key named in a server's refusal → the rfteval option that put it in the request (first match wins)
_OPTION_OF_KEY: tuple[tuple[str, str], ...] = (
    ("response_format", "--response-format"), ("json_schema", "--response-format"),
    ("json_object", "--response-format"), ("tool_choice", "the dataset's tools"), ("tools", "the dataset's tools"),
    ("max_completion_tokens", "--max-output-tokens"), ("max_output_tokens", "--max-output-tokens"),
    ("max_tokens", "--max-output-tokens"), ("reasoning_effort", "--reasoning-effort"), ("seed", "--seed"),
    ("temperature", "--temperature"), ("top_p", "--top-p"), ("service_tier", "--service-tier"),
    ("text.format", "--response-format"), ("reasoning.effort", "--reasoning-effort"),  # the Responses API's names
)
# keys a message may name that travel inside another request key
_SENT_AS = {"json_schema": "response_format", "json_object": "response_format", "tool_choice": "tools",
            "text.format": "text", "reasoning.effort": "reasoning"}
_VALIDATION_HEADER = re.compile(r"^\d+ validation errors? for ", re.IGNORECASE)


# FastAPI's RequestValidationError as a server prints it into its 500 (llama-cpp-python's server): a header
# "N validation errors:" naming nothing, then one Python dict repr per error ({'type', 'loc', 'msg', 'input'})
_LIST_HEADER = re.compile(r"^\d+ validation errors?:?$", re.IGNORECASE)
# pydantic's union-member steps of a `loc`: a model's class name, a TypedDict, a type ("str", "list[union[...]]")
_UNION_TAG = re.compile(r"^(typed-dict|function-\w+|str|int|float|bool|(list|dict|union|tuple)\[.*\]|[A-Z]\w*)$")


def _loc_path(loc: object) -> tuple[str, int]:
    """('body', 'messages', 0, 'ChatCompletionRequestSystemMessage', 'role') → (messages[0].role, 3): the request
    field, without the body prefix and the union members pydantic tried, and how deep it lies."""
    out, depth = "", 0
    for step in loc if isinstance(loc, (list, tuple)) else [loc]:
        if isinstance(step, int):
            out += f"[{step}]"
        elif step == "body" and not out or isinstance(step, str) and _UNION_TAG.match(step):
            continue
        else:
            out += f".{step}" if out else str(step)
        depth += 1
    return out or "the request", depth


def validation_summary(lines: list[str]) -> str | None:
    """The field and value a FastAPI validation list refuses, as "FIELD: Input should be 'a', 'b' or 'c' (input:
    VALUE)": the errors with a value (not "Field required" of the union members it was not meant to be) grouped
    by field and value; the deepest field is shown (a content part's type, not the role every other member of the
    message union wanted), the others counted. None when the lines are not such a list."""
    import ast

    errors = []
    for ln in lines:
        if not ln.startswith("{"):
            continue
        try:
            err = ast.literal_eval(ln)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            continue
        if isinstance(err, dict) and "msg" in err:
            errors.append(err)
    if not errors:
        return None
    errors = _own_member(errors)
    groups: dict[tuple[str, str], list[str]] = {}
    depths: dict[str, int] = {}
    valued = [e for e in errors if e.get("type") != "missing"] or errors
    for err in valued:
        shown = "" if err.get("type") == "missing" else repr(err.get("input"))[:80]
        path, depths[path] = _loc_path(err.get("loc"))
        groups.setdefault((path, shown), []).append(str(err.get("msg")))
    (path, shown), msgs = max(groups.items(), key=lambda g: depths[g[0][0]])  # the first of the deepest
    expected = [m.removeprefix("Input should be ") for m in msgs if m.startswith("Input should be ")]
    if len(expected) > 1:
        msg = "Input should be " + ", ".join(expected[:-1]) + " or " + expected[-1]
    else:
        msg = "; ".join(dict.fromkeys(msgs))
    more = f" (+{len(groups) - 1} more)" if len(groups) > 1 else ""
    return f"{path}: {msg}" + (f" (input: {shown})" if shown else "") + more


def _own_member(errors: list[dict[str, object]]) -> list[dict[str, object]]:
    """The errors of the union member a message was meant to be, when its role names one: a message refused for its
    content is listed with every other member's "Input should be 'system'" for its role, which says nothing (an
    assistant message with null content beside tool calls: its content is the reason, not its role)."""
    roles = {str(e.get("input")) for e in errors if e.get("type") == "literal_error"
             and isinstance(loc := e.get("loc"), (list, tuple)) and loc and loc[-1] == "role"}
    if len(roles) != 1:
        return errors
    member = f"ChatCompletionRequest{roles.pop().capitalize()}Message"
    own = [e for e in errors if isinstance(loc := e.get("loc"), (list, tuple)) and member in loc]
    return own or errors


def one_line(text: str, limit: int = 160) -> str:
    """A server's message as one short line: its first non-empty line (a pydantic "N validation error for X"
    header names no field, so the lines after it that do are joined on; a FastAPI list of validation errors is
    condensed to the field and value it refuses), cut to `limit` characters."""
    lines = [ln.strip() for ln in str(text).splitlines() if ln.strip()]
    if not lines:
        return ""
    line = lines[0]
    tail = line.split(": ", 1)[-1]
    if _LIST_HEADER.match(tail) and len(lines) > 1:
        summary = validation_summary(lines[1:])
        if summary is not None:
            line = f"{line} {summary}"
    elif _VALIDATION_HEADER.search(tail) and len(lines) > 1:
        line = ": ".join([line, *lines[1:3]])
    line = " ".join(line.split())
    return line if len(line) <= limit else line[: limit - 1].rstrip() + "…"


DEVELOPER_FIX = "the developer role (send it as system: --developer-as system)"
_DEVELOPER = re.compile(r"""role\b.*['"]?developer['"]?|['"]developer['"].*\brole|developer role""", re.I | re.S)


def refuses_developer(message: str) -> bool:
    """A refusal of the `developer` message role (llama-cpp-python's 500 lists "Input should be 'system'" for
    `messages[0].role`, input 'developer'; other servers say "invalid role developer")."""
    return bool(_DEVELOPER.search(message)) and "developer" in message.lower()


def option_of(message: str, body: Mapping[str, object] | None = None) -> str:
    """The option that put the refused key in the request: the first key the message names (preferring keys the
    request carries), else "the request"."""
    text = message.lower()
    if refuses_developer(message):
        return DEVELOPER_FIX
    named = [(text.find(key), key, option) for key, option in _OPTION_OF_KEY
             if re.search(rf"(?<![a-z_]){re.escape(key)}(?![a-z_])", text)]
    if body is not None:
        def sent(key: str) -> bool:
            return key in body or key in _SENT_AS and _SENT_AS[key] in body

        named = [n for n in named if sent(n[1])] or named
    return min(named)[2] if named else "the request"


def refusal_line(error: BaseException) -> str | None:
    """The normalised message when `error` is a refusal that may be the request's shape, else None: a 4xx that is
    not 408/409/429 (status_kind's bad_request), or a 500/501."""
    if not isinstance(error, ProviderError):
        return None
    if error.kind == "bad_request" or (error.kind == "server" and error.status in REJECT_5XX):
        return one_line(str(error), 400)
    return None


@dataclass
class RefusalWatch:
    """Per endpoint (model): has the server refused the same request shape every time so far?

    Fed every attempt's outcome. Before the first success, REJECT_AFTER refusals with one identical message mean
    the server will not take what rfteval sends (llama.cpp answers 500 "Input should be 'text' or 'json_object'" to
    every json_schema response format): retrying each cell would send the same request hundreds of times. After a
    success, or with messages that differ, refusals are per cell (a prompt too long) and are retried or recorded
    as today."""

    after: int = REJECT_AFTER
    settled: bool = False  # a success, or two different refusals: from now on refusals are per cell
    message: str | None = None
    count: int = 0

    def ok(self) -> None:
        self.settled = True

    def failed(self, error: BaseException) -> bool:
        """Note a failed attempt; True when the model's requests are refused for good."""
        if self.settled:
            return False
        line = refusal_line(error)
        if line is None:
            return False
        if self.message is not None and line != self.message:
            self.settled = True
            return False
        self.message = line
        self.count += 1
        return self.count >= self.after


UNREACHABLE_AFTER = 3  # connection failures to an endpoint that has never answered, before it is given up
# An endpoint that answered before and now only refuses connections has died (a killed server, a lost tunnel):
# once this many attempts in a row, spread over at least DEAD_WINDOW_S, failed to connect, it is given up instead
# of letting every request in flight spend its retries (minutes of backoff) on a server that is not there.
DEAD_AFTER = 3
DEAD_WINDOW_S = 2.0


@dataclass
class ConnectionWatch:
    """Per endpoint: is it there? Fed every attempt's outcome, as RefusalWatch is; the run's models and every
    judge use one each, so a missing or dead endpoint stops the command in seconds, not after every retry."""

    answered: bool = False
    unreached: int = 0  # connection failures before the first answer
    since: float | None = None  # the first connection failure since the last answer
    count: int = 0  # connection failures since the last answer
    seconds: float = 0.0  # what the last `failed` measured, for the message

    def ok(self) -> None:
        self.answered, self.since, self.count = True, None, 0

    def failed(self, error: BaseException, now: float | None = None) -> str | None:
        """Note a failed attempt: "unreachable" (it never answered, UNREACHABLE_AFTER connection failures), "gone"
        (it answered before, then DEAD_AFTER failures in a row over DEAD_WINDOW_S), else None."""
        if not isinstance(error, ProviderError) or error.kind != "connection":
            return None
        if not self.answered:
            self.unreached += 1
            return "unreachable" if self.unreached >= UNREACHABLE_AFTER else None
        now = time.monotonic() if now is None else now
        if self.since is None:
            self.since = now
        self.count += 1
        self.seconds = now - self.since
        return "gone" if self.count >= DEAD_AFTER and self.seconds >= DEAD_WINDOW_S else None
