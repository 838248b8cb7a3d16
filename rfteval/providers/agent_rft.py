"""Agent RFT's HTTP endpoints, called as its service called them: tool servers (rfteval.tools.endpoint) and
`endpoint` graders (rfteval.graders.endpoint). Both follow one contract, which Microsoft publishes with its samples
(microsoft-foundry/fine-tuning: Demos/Agentic_RFT_PrivatePreview/README.md, its RFT_ToolCall and RFT_EndpointGrader
demos, Demos/ZavaRetailAgent), so what they share lives here, below the graders and the tools that use it:

- `${VAR}` in a header value (or a URL) is the environment variable VAR, read when the endpoint is opened. Such a
  value is a secret: it is sent, and written nowhere (no file, log, record, summary or error message), and where a
  server echoes it back (an error page quoting the request) it is replaced by `[redacted]` before anything keeps
  or shows the text. Credential-like headers written out in the file (`Authorization`, `X-Functions-Key`) are
  treated the same way. A URL is shown without its query (Azure Functions take a key as `?code=`).
- 1 MB (1,048,576 bytes) each way: a body over it is not sent, an answer over it is not read past the limit.
- 10 minutes per call at most.
- A 5xx or a dropped connection is retried 3 times (with the project's one retry policy: jittered backoff,
  Retry-After honoured), then the call has failed. What a failed call means is the caller's: a tool call's ends
  its rollout as a generation error, a grader's is a grading error.

The HTTP itself is httpx's; nothing here speaks the protocol by hand.
"""

from __future__ import annotations

import asyncio
import os
import re
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar
from urllib.parse import urlsplit

from rfteval.errors import InputError
from rfteval.limits import ENDPOINT_TIMEOUT_S
from rfteval.providers.base import ProviderError
from rfteval.providers.retry import RetryPolicy, call_with_retries, one_line

if TYPE_CHECKING:
    import httpx  # imported where a call is made: loading a grader config must not load an HTTP client

T = TypeVar("T")

MAX_BYTES = 1_048_576  # Agent RFT's 1 MB, each way
CALL_TIMEOUT_S = ENDPOINT_TIMEOUT_S  # Agent RFT waits 10 minutes for a tool or a grader, no longer
RETRIES = 3  # a 5xx or a dropped connection: retried this many times, then the call failed
ENDPOINT_CONCURRENCY = 16  # an endpoint grader's requests in flight (its rate_limit paces them further)
REDACTED = "[redacted]"
_MIN_SECRET = 4  # a shorter value is no credential; replacing it everywhere would only garble the text
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_CREDENTIAL = re.compile(r"authorization|key|token|secret|password|cookie|signature", re.I)


def new_trace_id() -> str:
    """A rollout's trace id, as Agent RFT made them ("trace_" and a UUID): every tool call of the rollout carries
    it, and an endpoint grader is sent it, so a grader can join its tool server's logs of that rollout."""
    return f"trace_{uuid.uuid4()}"


def variables(text: str) -> list[str]:
    """The environment variables `${VAR}` in `text` names, in order."""
    return _VAR.findall(text)


def check_placeholders(text: str) -> str:
    """`text` when every `${` in it opens a well-formed `${VAR}`; else ValueError naming what is wrong."""
    stripped = _VAR.sub("", text)
    if "${" in stripped:
        raise ValueError(f"a ${{...}} must name an environment variable (letters, digits, _): {text!r}")
    return text


def shown_url(url: str) -> str:
    """`url` as it may be written or shown: without its query, fragment or credentials (an Azure Functions URL
    carries its key as `?code=...`), the cut marked."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "<a URL that does not parse>"
    cut = "?…" if parts.query or parts.fragment else ""
    return f"{parts.scheme}://{host}{port}{parts.path}{cut}"


@dataclass(frozen=True)
class Secrets:
    """Values that must never be written or shown: replaced wherever a server's answer or an error holds them."""

    values: tuple[str, ...] = ()

    def scrub(self, text: str) -> str:
        for value in self.values:
            if value in text:
                text = text.replace(value, REDACTED)
        return text

    def __add__(self, other: Secrets) -> Secrets:
        return Secrets(tuple(dict.fromkeys(self.values + other.values)))


@dataclass(frozen=True)
class Resolved:
    """An endpoint ready to call: its URL and headers with every `${VAR}` read, and the secrets among them."""

    url: str
    headers: dict[str, str]
    secrets: Secrets


def _expand(text: str, environ: Mapping[str, str], missing: Callable[[str], InputError]) -> tuple[str, list[str]]:
    found: list[str] = []

    def value(match: re.Match[str]) -> str:
        name = match.group(1)
        if not environ.get(name):
            raise missing(name)
        found.append(environ[name])
        return environ[name]

    return _VAR.sub(value, text), found


def resolve(url: str, headers: Mapping[str, str], source: str | Path | None, where: str = "",
            environ: Mapping[str, str] | None = None) -> Resolved:
    """`url` and `headers` with their `${VAR}`s read from the environment; an unset (or empty) variable is one line
    naming the file, the field and the variable, never a value. `where` prefixes the fields (`[2]`: the third entry
    of a tools config)."""
    env = os.environ if environ is None else environ
    secrets: list[str] = []

    def missing_in(field: str) -> Callable[[str], InputError]:
        return lambda name: InputError(f"${{{name}}} is not set in the environment: export {name} before the run "
                                       "(its value is sent, and written nowhere)", source, field=field)

    prefix = f"{where}." if where else ""
    full_url, found = _expand(url, env, missing_in(f"{prefix}{'server_url' if where else 'url'}"))
    secrets += found
    out: dict[str, str] = {}
    for name, raw in headers.items():
        value, found = _expand(raw, env, missing_in(f"{prefix}headers.{name}"))
        secrets += found
        if not found and _CREDENTIAL.search(name):  # a credential written out in the file: a secret all the same
            secrets += [value, *value.split()[1:]]  # "Bearer TOKEN": the token alone too
        out[name] = value
    return Resolved(full_url, out, Secrets(tuple(dict.fromkeys(s for s in secrets if len(s) >= _MIN_SECRET))))


# ---------------------------------------------------------------- one call


@dataclass(frozen=True)
class Answer:
    """What an endpoint answered: its status and body (empty when it was over MAX_BYTES, `over` then set)."""

    status: int
    body: bytes
    over: bool = False


class EndpointFailed(Exception):
    """A call that got no usable answer after its retries: `kind` is "server" (a 5xx), "connection" (refused or
    dropped), "timeout" (past its time), or "rate_limit" (a 429, where the caller retries those). The message is
    one line, secrets scrubbed."""

    def __init__(self, kind: str, message: str, status: int | None = None):
        super().__init__(message)
        self.kind, self.status = kind, status


def _retry_after(value: str | None) -> float | None:
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


async def _read(response: httpx.Response, limit: int) -> tuple[bytes, bool]:
    """The body, read no further than `limit` bytes: (body, False), or (b"", True) when it is longer."""
    length = response.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > limit:
        return b"", True
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        size += len(chunk)
        if size > limit:
            return b"", True
        chunks.append(chunk)
    return b"".join(chunks), False


async def _excerpt(response: httpx.Response, limit: int = 2000) -> str:
    """The start of an error answer, for the one-line message."""
    got = b""
    async for chunk in response.aiter_bytes():
        got += chunk
        if len(got) >= limit:
            break
    return got[:limit].decode("utf-8", "replace")


async def post(client: httpx.AsyncClient, endpoint: Resolved, payload: bytes, *, timeout_s: float = CALL_TIMEOUT_S,
               retries: int = RETRIES, retry_timeouts: bool = False, retry_statuses: frozenset[int] = frozenset(),
               base_s: float = 0.5, pace: Callable[[], Awaitable[None]] | None = None) -> Answer:
    """POST `payload` (JSON bytes) to the endpoint and read its answer (at most MAX_BYTES of it). A 5xx, a refused
    or dropped connection, and where asked a timeout or one of `retry_statuses` (a grader's 429), are retried
    `retries` times; then EndpointFailed. Any other status is the answer, for the caller to read. `timeout_s` is
    the whole call's, each attempt's; `pace` is awaited before each attempt (a grader's rate_limit)."""
    import httpx

    kinds = {"server", "connection"} | ({"timeout"} if retry_timeouts else set()) | (
        {"rate_limit"} if retry_statuses else set())
    policy = RetryPolicy(max_retries=retries, base_s=base_s, max_backoff_s=30.0, retryable=frozenset(kinds))
    scrub = endpoint.secrets.scrub
    headers = {**endpoint.headers, "Content-Type": "application/json"}

    async def attempt() -> Answer:
        if pace is not None:
            await pace()
        try:
            async with asyncio.timeout(timeout_s):
                async with client.stream("POST", endpoint.url, content=payload, headers=headers) as response:
                    status = response.status_code
                    if status >= 500 or status in retry_statuses:
                        text = one_line(scrub(await _excerpt(response)), 300)
                        raise ProviderError("server" if status >= 500 else "rate_limit", f"HTTP {status}: {text}",
                                            status, retry_after=_retry_after(response.headers.get("retry-after")))
                    body, over = await _read(response, MAX_BYTES)
                    return Answer(status, body, over)
        except (TimeoutError, httpx.TimeoutException):
            raise ProviderError("timeout", f"no answer within {timeout_s:g} s") from None
        except httpx.TransportError as exc:  # refused, reset, dropped mid-answer
            raise ProviderError("connection", one_line(scrub(f"{type(exc).__name__}: {exc}"), 300)) from None

    try:
        return await call_with_retries(attempt, policy)
    except ProviderError as exc:
        tries = "" if exc.kind not in kinds else f" (after {retries} retries)"
        raise EndpointFailed(exc.kind, f"{exc}{tries}", exc.status) from None


def new_client(timeout_s: float = CALL_TIMEOUT_S) -> httpx.AsyncClient:
    """The HTTP client endpoint calls go through: no redirects followed (a tool server answers where it is)."""
    import httpx

    return httpx.AsyncClient(timeout=httpx.Timeout(timeout_s), follow_redirects=False,
                             limits=httpx.Limits(max_connections=256, max_keepalive_connections=64))


class Pacer:
    """At most `per_second` call starts a second, across every thread and event loop that shares it (an endpoint
    grader's `rate_limit`): each start takes the next free slot, 1/per_second after the one before."""

    def __init__(self, per_second: float | None):
        self.interval = None if per_second is None else 1.0 / per_second
        self._next = 0.0
        self._lock = threading.Lock()

    async def __call__(self) -> None:
        if self.interval is None:
            return
        with self._lock:
            now = time.monotonic()
            slot = max(now, self._next)
            self._next = slot + self.interval
        if slot > now:
            await asyncio.sleep(slot - now)


def run_sync(make: Callable[[], Coroutine[object, object, T]]) -> T:
    """Run the coroutine `make()` makes to its end from synchronous code: in this thread when no event loop runs in
    it, else in a thread of its own (a reward called from inside a trainer's event loop cannot start a second loop
    in that thread)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(make())
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(lambda: asyncio.run(make())).result()
