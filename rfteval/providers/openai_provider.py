"""Any OpenAI-compatible endpoint through the `openai` SDK, Chat Completions or Responses: the transport, and its
failures classified.

The provider sends the body openai_request.py builds and hands the answer to openai_response.py; what it holds itself
is the connection (the SDK client, its TLS context and transport), what it learns of the server while a run goes on
(an output-limit key or a null content it refuses), the preflight's probes and the naming of a failed request.
The request and response modules' public names are importable from here too, where the run, the CLI, the benchmark
and the tests import them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import functools
import json
import logging
import os
import re
import socket
import ssl
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Literal

from rfteval.data.json_types import JSONMapping, JSONObject, JSONValue
from rfteval.errors import InputError
from rfteval.providers.base import Generation, GenerationRequest, ProviderError, asks_for_json
from rfteval.providers.history import STEP_DOWN, HistoryShape, empty_tool_content, refuses_null_content
from rfteval.providers.openai_request import (
    DEVELOPER_AS,
    LIMIT_KEYS,
    chat_body,
    chat_tool_choice,
    check_developer_as,
    developer_as_system,
    responses_body,
    responses_input,
    responses_tool,
    responses_tool_choice,
)
from rfteval.providers.openai_response import (
    parse_chat,
    parse_duration,
    parse_responses,
    parse_retry_after,
    rate_info,
    status_kind,
)

if TYPE_CHECKING:
    import openai  # the annotations only: the module is imported when a provider is built

__all__ = [
    "OPENAI_BASE_URL", "PLACEHOLDER_KEY", "SERVICE_TIERS", "TRANSPORTS", "PROBE_TIMEOUT_S", "OpenAIProvider",
    "share_endpoint_state", "default_transport", "shared_tls_context", "connection_message", "connection_failure",
    "unsupported_key",
    # openai_request's and openai_response's, handed on
    "DEVELOPER_AS", "LIMIT_KEYS", "chat_body", "chat_tool_choice", "check_developer_as", "developer_as_system",
    "responses_body", "responses_input", "responses_tool", "responses_tool_choice", "parse_chat", "parse_duration",
    "parse_responses", "parse_retry_after", "rate_info", "status_kind",
]

OPENAI_BASE_URL = "https://api.openai.com/v1"
PLACEHOLDER_KEY = "unused"  # local servers (vLLM, Ollama, the test server) accept any key
SERVICE_TIERS = ("auto", "default", "flex", "priority")
TRANSPORTS = ("aiohttp", "httpx")
PROBE_TIMEOUT_S = 3.0  # the preflight's GET /models and API probes: a server that does not answer is skipped
log = logging.getLogger("rfteval")


def _is_openai_url(base_url: str) -> bool:
    return "api.openai.com" in base_url


def share_endpoint_state(providers: Iterable[object]) -> None:
    """Providers that reach one endpoint (base URL and API), as a run's base and tuned labels on one server do, share
    what it was found to take of an agent's history: its step-down is paid with one refused request and said in
    one line per endpoint, not per label."""
    shapes: dict[tuple[str, str], HistoryShape] = {}
    for p in providers:
        if isinstance(p, OpenAIProvider):
            p.history = shapes.setdefault((p.base_url, p.api), p.history)


def default_transport() -> str:
    """aiohttp when the SDK's aiohttp extra is installed: it costs less CPU per request than the default httpx2
    transport, whose connection-pool bookkeeping grows with concurrency (bench/README.md has the figures)."""
    try:
        import aiohttp  # noqa: F401
    except ImportError:
        return "httpx"
    return "aiohttp"


@functools.cache
def shared_tls_context() -> ssl.SSLContext:
    """One TLS context for every client this process makes. Building one loads the CA bundle, which costs more
    than the rest of a client; a run makes a client per model and one for the judge, and a test suite hundreds."""
    import httpx2

    return httpx2.create_ssl_context()


class OpenAIProvider:
    """One endpoint. The SDK never retries (`max_retries=0`): the runner retries, and counts each retry.

    Requests go through the SDK client's own `post` (its auth, base URL, connection pool and error classes) with
    the body already encoded, and answers come back raw and are parsed here: the typed `create()` runs every
    request through the SDK's TypedDict transform and every answer through its pydantic models, which together
    were most of the client's CPU per request, and rfteval needs a few fields. The raw answer also carries the
    rate-limit headers that adaptive concurrency steers by.
    `service_tier` goes with every request but not into the cache key: flex and default sample the same model.
    """

    def __init__(
        self,
        base_url: str | None = None,
        api_key_env: str = "OPENAI_API_KEY",
        api: Literal["chat", "responses"] = "chat",
        extra_headers: dict[str, str] | None = None,
        service_tier: str | None = None,
        transport: str | None = None,
        developer_as: str | None = None,
    ):
        if api not in ("chat", "responses"):
            raise InputError(f"unknown api {api!r}; expected 'chat' or 'responses'", field="api")
        if service_tier is not None and service_tier not in SERVICE_TIERS:
            raise InputError(f"unknown service tier {service_tier!r}; expected one of {', '.join(SERVICE_TIERS)}",
                             field="--service-tier")
        self.developer_as = check_developer_as(developer_as)
        transport = transport or default_transport()
        if transport not in TRANSPORTS:
            raise InputError(f"unknown transport {transport!r}; expected one of {', '.join(TRANSPORTS)}",
                             field="transport")
        self.service_tier = service_tier
        self.transport = transport
        self.base_url = (base_url or OPENAI_BASE_URL).rstrip("/")
        self.api = api
        self.api_key_env = api_key_env
        self._extra_headers = dict(extra_headers or {})
        key = os.environ.get(api_key_env) or ""
        if not key:
            if _is_openai_url(self.base_url):
                raise InputError(
                    f"environment variable {api_key_env} is not set; it must hold the API key for {self.base_url}",
                    field="api_key_env",
                )
            key = PLACEHOLDER_KEY
        self._secrets = [s for s in [key, *self._extra_headers.values()] if len(s) >= 6 and s != PLACEHOLDER_KEY]

        import openai  # heavy: imported only when a provider is built

        self._openai = openai
        if transport == "aiohttp":
            import httpx2

            # as many connections as the SDK's default pool (1,000), not aiohttp's 100
            http_client: httpx2.AsyncClient = openai.DefaultAioHttpClient(
                limits=httpx2.Limits(max_connections=1000, max_keepalive_connections=1000),
                verify=shared_tls_context())
        else:  # the SDK's own defaults (pool, timeouts, redirects), with the process's one TLS context
            http_client = openai.DefaultAsyncHttpxClient(verify=shared_tls_context())
        self._client = openai.AsyncOpenAI(
            api_key=key, base_url=self.base_url, max_retries=0, default_headers=self._extra_headers or None,
            http_client=http_client,
        )
        import httpx2

        self._raw_response = httpx2.Response
        self._path = "/chat/completions" if api == "chat" else "/responses"
        # Endpoints other than OpenAI's get the output limit under both names (llama.cpp's server reads only
        # max_tokens, vLLM both); a key the server answers 400 "unsupported" to is dropped for the rest of the
        # run. The cache key (request_body) keeps both, so it does not depend on what the server refused.
        self._both_limits = not _is_openai_url(self.base_url)
        self.dropped_keys: set[str] = set()
        # an agent's assistant turns with tool calls and no text go as content null (OpenAI's shape) until the server
        # refuses null (llama-cpp-python's), then as "" (rfteval.providers.history): the cache key keeps null. Shared
        # with the run's other providers of this endpoint (share_endpoint_state)
        self.history = HistoryShape()
        self._limit_warned: set[str] = set()
        self.on_warning: Callable[[str], None] | None = None  # run_eval points it at the run's monitor
        self.max_epoch: int | None = None  # a server answers any epoch

    @property
    def empty_tool_content(self) -> bool:
        """Whether this endpoint is sent "" for the null content of an assistant turn with tool calls."""
        return self.history.empty_tool_content

    @property
    def client(self) -> openai.AsyncOpenAI:
        """The SDK client (the batch path uses its Files and Batches resources)."""
        return self._client

    @property
    def header_names(self) -> tuple[str, ...]:
        """The extra headers' names, sorted; never their values, which may be secrets."""
        return tuple(sorted(self._extra_headers))

    def endpoint_path(self) -> str:
        return "/v1/chat/completions" if self.api == "chat" else "/v1/responses"

    def __repr__(self) -> str:
        return f"OpenAIProvider(base_url={self.base_url!r}, api={self.api!r}, api_key_env={self.api_key_env!r})"

    def identity(self) -> JSONObject:
        ident: JSONObject = {"provider": "openai", "base_url": self.base_url, "api": self.api}
        if self._extra_headers:
            ident["extra_headers"] = list(self.header_names)
        return ident

    def request_body(self, request: GenerationRequest) -> JSONObject:
        request = self._roles(request)
        if self.api == "chat":
            return chat_body(request, both_limits=self._both_limits)
        return responses_body(request)

    def _roles(self, request: GenerationRequest) -> GenerationRequest:
        """The request with its `developer` messages sent as `system` when the endpoint is told so
        (--developer-as system: llama-cpp-python's server refuses the developer role)."""
        if self.developer_as != "system" or not any(
                isinstance(m, dict) and m.get("role") == "developer" for m in request.messages):
            return request
        return dataclasses.replace(request, messages=developer_as_system(request.messages))

    async def generate(self, request: GenerationRequest, timeout_s: float) -> Generation:
        request = self._roles(request)
        if self.api == "chat":
            body = chat_body(request, copy_messages=False, both_limits=self._both_limits)
            for key in self.dropped_keys:
                body.pop(key, None)
            if self.empty_tool_content:
                body["messages"] = empty_tool_content(request.messages)
        else:
            body = responses_body(request)
        if self.service_tier is not None:
            body["service_tier"] = self.service_tier
        while True:
            try:
                async with asyncio.timeout(timeout_s):
                    raw = await self._client.post(self._path, cast_to=self._raw_response, content=_dumps(body),
                                                  options={"timeout": timeout_s, "headers": _JSON})
                    content = raw.content
                break
            except Exception as exc:
                refused = self._refused_limit_key(exc, body)
                if refused is not None:  # the server does not take this spelling: the other one carries the limit
                    self.dropped_keys.add(refused)
                    body.pop(refused)
                    continue
                if self._step_down_null_content(exc, request, body):  # tried once, then "" for the rest of the run
                    continue
                err = self._classify(exc, timeout_s)
                if err is None:
                    raise  # not an endpoint failure but a bug: let it show
                raise err from None
        data = _loads(content)
        if not isinstance(data, dict):
            raise ProviderError("malformed", f"response body is not a JSON object: {content[:200]!r}")
        parse = parse_chat if self.api == "chat" else parse_responses
        gen = parse(data, structured=asks_for_json(request.sampling.response_format))
        gen.rate = rate_info(raw.headers)
        tier = data.get("service_tier")
        gen.tier = tier if isinstance(tier, str) else None
        self._check_limit(request, gen)
        return gen

    def _refused_limit_key(self, exc: Exception, body: JSONMapping) -> str | None:
        """The output-limit key a 400/422 names as unsupported, when the body also has the other one."""
        if not isinstance(exc, self._openai.APIStatusError) or exc.status_code not in (400, 422):
            return None
        if not all(k in body for k in LIMIT_KEYS):
            return None
        return unsupported_key(f"{_error_message(exc)} {exc.body if not isinstance(exc.body, dict) else ''}",
                               LIMIT_KEYS)

    def _step_down_null_content(self, exc: Exception, request: GenerationRequest, body: JSONObject) -> bool:
        """On a 4xx or 500 refusing the null content of an assistant turn with tool calls that the request sent:
        send "" from now on (said once, in one line), and have the request sent again (rfteval.providers.history).
        A request that went out with null before a concurrent one stepped down is sent again with "" too."""
        if not isinstance(exc, self._openai.APIStatusError):
            return False
        messages = body.get("messages")
        if exc.status_code not in (400, 422, 500) or not isinstance(messages, list):
            return False
        message = _error_message(exc)
        if not refuses_null_content(message, messages):  # also False once its body holds no null content
            return False
        if not self.empty_tool_content:
            from rfteval.providers.retry import one_line

            self.history.empty_tool_content = True
            self.warn(f"model {request.model}: " + STEP_DOWN.format(
                reason=one_line(self._scrub(f"HTTP {exc.status_code}: {message}"), 160)))
        body["messages"] = empty_tool_content(request.messages)
        return True

    def _check_limit(self, request: GenerationRequest, gen: Generation) -> None:
        """Warn once per model when an answer ran past --max-output-tokens: the server ignored the limit."""
        limit = request.sampling.max_output_tokens
        used = gen.usage.get("output_tokens")
        if limit is None or not isinstance(used, int) or used <= limit or request.model in self._limit_warned:
            return
        self._limit_warned.add(request.model)
        keys = ([k for k in LIMIT_KEYS if k in self.request_body(request) and k not in self.dropped_keys]
                if self.api == "chat" else ["max_output_tokens"])
        self.warn(f"model {request.model}: the server ignored the output limit ({used} output tokens under a "
                  f"limit of {limit}, sent as {' and '.join(keys)})")

    def warn(self, text: str) -> None:
        """One line for the user: through the run's monitor when there is one, else the `rfteval` logger."""
        if self.on_warning is not None:
            self.on_warning(text)
        else:
            log.warning("rfteval: %s", text)

    # ---- what the server offers (the preflight, rfteval/run/preflight.py) -------------------------------

    def _sync_client(self, timeout_s: float) -> openai.OpenAI:
        """A synchronous client on the same endpoint and key: the preflight runs before the run's event loop,
        and the async client's connection pool belongs to that loop."""
        oa = self._openai
        return oa.OpenAI(api_key=self._client.api_key, base_url=self.base_url, max_retries=0, timeout=timeout_s,
                         default_headers=self._extra_headers or None,
                         http_client=oa.DefaultHttpxClient(verify=shared_tls_context(), timeout=timeout_s))

    def _probe(self, method: str, path: str, timeout_s: float) -> tuple[int, JSONValue] | None:
        """(status, parsed body) of one small request; None when the server does not answer in time."""
        try:
            with self._sync_client(timeout_s) as client:
                if method == "GET":
                    raw = client.get(path, cast_to=self._raw_response)
                else:
                    raw = client.post(path, cast_to=self._raw_response, body={})
                status, content = raw.status_code, raw.content
        except self._openai.APIStatusError as exc:
            status, content = exc.status_code, exc.response.content
        except Exception:  # unreachable, timed out, TLS: the run's own requests will say so, named
            return None
        try:
            return status, json.loads(content)
        except (ValueError, UnicodeDecodeError):
            return status, None

    def list_models(self, timeout_s: float = PROBE_TIMEOUT_S) -> list[str] | None:
        """The model ids GET /models lists, or None when it does not answer with a list (404, error, timeout)."""
        got = self._probe("GET", "/models", timeout_s)
        listed = got[1].get("data") if got is not None and got[0] == 200 and isinstance(got[1], dict) else None
        if not isinstance(listed, list):
            return None
        ids = [m.get("id") for m in listed if isinstance(m, dict)]
        return [i for i in ids if isinstance(i, str)] or None

    def missing_api(self, which: Literal["batch", "responses"], timeout_s: float = PROBE_TIMEOUT_S) -> str | None:
        """"METHOD PATH: HTTP 404" when the endpoint lacks the Files/Batches or the Responses API, else None
        (it has it, or did not answer: then the run's own calls say what is wrong).

        Batches: GET /batches?limit=1 lists at most one batch. Responses: POST /responses with an empty body,
        which a server with the API refuses as a bad request (400) without generating anything; a 404 that
        is not about a model, or a 405, means no such route."""
        path = "/batches?limit=1" if which == "batch" else "/responses"
        method = "GET" if which == "batch" else "POST"
        got = self._probe(method, path, timeout_s)
        if got is None or got[0] not in (404, 405):
            return None
        if got[0] == 404 and "model" in json.dumps(got[1]).lower() and which == "responses":
            return None  # a model-not-found answer: the route exists
        from urllib.parse import urlsplit

        return f"{method} {urlsplit(self.base_url).path.rstrip('/')}{path.split('?')[0]}: HTTP {got[0]}"

    async def aclose(self) -> None:
        await self._client.close()

    # errors
    def _scrub(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text

    def classify(self, exc: Exception, timeout_s: float = 600.0) -> ProviderError | None:
        """An SDK exception as a ProviderError (None: not an endpoint failure, a bug)."""
        return self._classify(exc, timeout_s)

    def _classify(self, exc: Exception, timeout_s: float) -> ProviderError | None:
        oa = self._openai
        if isinstance(exc, (TimeoutError, oa.APITimeoutError)) and not _not_a_timeout(exc):
            return ProviderError("timeout", f"no answer within {timeout_s:g}s")
        if isinstance(exc, oa.APIConnectionError):
            return ProviderError("connection", self._scrub(connection_message(self.base_url, connection_failure(exc),
                                                                              _connecting(exc))))
        if isinstance(exc, oa.APIStatusError):
            status = exc.status_code
            message = self._scrub(f"HTTP {status}: {_error_message(exc)}")
            kind = status_kind(status)
            headers = exc.response.headers
            retry_after = parse_retry_after(headers, time.time()) if kind in ("rate_limit", "server") else None
            unavailable = kind == "rate_limit" and _is_unavailable(exc)
            return ProviderError(kind, message, status=status, retry_after=retry_after, rate=rate_info(headers),
                                 unavailable=unavailable)
        if isinstance(exc, (oa.APIResponseValidationError, json.JSONDecodeError, UnicodeDecodeError)):
            # a 2xx whose body the SDK could not parse
            return ProviderError("malformed", self._scrub(f"unparseable response: {type(exc).__name__}: {exc}"[:300]))
        return None


def _chain(exc: BaseException) -> list[BaseException]:
    """The exception and its causes, outermost first (aiohttp's connector errors carry theirs as `os_error`)."""
    out: list[BaseException] = []
    node: BaseException | None = exc
    while node is not None and all(node is not seen for seen in out):
        out.append(node)
        os_error = getattr(node, "os_error", None)
        if isinstance(os_error, BaseException) and all(os_error is not seen for seen in out):
            out.append(os_error)
        node = node.__cause__ or node.__context__
    return out


# aiohttp's names for a connection the server dropped (killed, restarted) before it answered
_DROPPED = ("ServerDisconnectedError", "ClientConnectionResetError")


def _not_a_timeout(exc: BaseException) -> bool:
    """The aiohttp transport reports a failed connect (refused, DNS, TLS) and a connection the server dropped
    mid-request (killed, restarted: ServerDisconnectedError) as a connect *timeout*; each is a connection error,
    and no timeout was waited for (a run whose server was killed said "timeout: no answer within 600s")."""
    for e in _chain(exc)[1:]:
        if "Cannot connect to host" in str(e) or (isinstance(e, OSError) and not isinstance(e, TimeoutError)):
            return True
        if type(e).__name__ in _DROPPED:
            return True
    return False


def _connecting(exc: BaseException) -> bool:
    """Whether it failed while connecting (no request was sent), as the transports name it."""
    return any(type(e).__name__ in ("ClientConnectorError", "ConnectError") or "Cannot connect to host" in str(e)
               for e in _chain(exc))


# what connection_failure names when the server is likely not there any more (killed, restarted, crashed)
_GONE = ("connection refused", "connection reset", "the server closed the connection without an answer")


def connection_message(base_url: str, failure: str, connecting: bool = True) -> str:
    """A failed connection's line: "cannot reach" when it failed while connecting, "lost the connection" when the
    server dropped a request it had taken; refused, reset or dropped also say the likely cause, a server gone."""
    verb = "cannot reach" if connecting else "lost the connection to"
    return f"{verb} {base_url}: {failure}" + (" (server gone?)" if failure in _GONE else "")


_TEXT_FAILURES = (
    (re.compile(r"certificate|ssl|tls", re.I), "TLS"),
    (re.compile(r"name or service not known|nodename nor servname|getaddrinfo|name resolution|"
                r"no address associated|dns", re.I), "DNS"),
    (re.compile(r"refused|errno 111|connect call failed", re.I), "refused"),
    (re.compile(r"reset by peer|errno 104|connection reset", re.I), "reset"),
    (re.compile(r"disconnected|closed the connection|without sending|incomplete|peer closed", re.I), "closed"),
)
_ERRNOS = {errno.ETIMEDOUT: "connect timed out", errno.ENETUNREACH: "network unreachable",
           errno.EHOSTUNREACH: "host unreachable"}
_NAMES = {"TLS": "TLS error", "DNS": "DNS lookup failed", "refused": "connection refused",
          "reset": "connection reset", "closed": "the server closed the connection without an answer"}


def connection_failure(exc: BaseException) -> str:
    """A failed connection named as it is (refused, reset, DNS lookup failure, TLS), from the first cause in the
    chain that says: the transports wrap the OSError once or twice and name only the wrapper."""
    chain = _chain(exc)
    for e in chain:
        if isinstance(e, ssl.SSLError) or "SSL" in type(e).__name__ or "Certificate" in type(e).__name__:
            reason = getattr(e, "reason", None) or getattr(e, "verify_message", None)
            return _NAMES["TLS"] + (f" ({str(reason).lower().replace('_', ' ')})" if reason else "")
        if isinstance(e, socket.gaierror) or "DNS" in type(e).__name__:
            return _NAMES["DNS"]
        if isinstance(e, ConnectionRefusedError):
            return _NAMES["refused"]
        if isinstance(e, ConnectionResetError):
            return _NAMES["reset"]
        if isinstance(e, OSError) and e.errno in _ERRNOS:
            return _ERRNOS[e.errno]
    for e in chain:
        for pattern, kind in _TEXT_FAILURES:
            if pattern.search(f"{type(e).__name__} {e}"):
                return _NAMES[kind]
    return type(chain[-1]).__name__


_UNSUPPORTED = re.compile(r"unsupported|not supported|unknown|unrecogni[sz]ed|extra (inputs?|fields?|keys?)|"
                          r"not permitted|not allowed|unexpected|additional propert", re.I)


def unsupported_key(message: str, keys: tuple[str, ...]) -> str | None:
    """The key a server's 400 message names as one it does not take ("Unsupported parameter: 'max_tokens' ...
    Use 'max_completion_tokens' instead" names the refused one first), or None when it names none of `keys` or
    does not say it is unsupported (a bad value is not an unknown key)."""
    if not _UNSUPPORTED.search(message):
        return None
    found = []
    for key in keys:
        m = re.search(rf"(?<![A-Za-z_]){re.escape(key)}(?![A-Za-z_])", message)
        if m is not None:
            found.append((m.start(), key))
    return min(found)[1] if found else None

_JSON = {"Content-Type": "application/json"}


def _dumps(body: JSONMapping) -> bytes:
    """The request body as JSON bytes (msgspec, json for what it refuses)."""
    import msgspec

    try:
        return msgspec.json.encode(body)
    except (TypeError, msgspec.EncodeError):
        return json.dumps(body, ensure_ascii=False, default=str).encode()


def _loads(content: bytes) -> JSONValue:
    """JSON of an answer body; msgspec is several times faster than json and both give plain dicts."""
    import msgspec

    try:
        return msgspec.json.decode(content)
    except msgspec.DecodeError:
        try:
            return json.loads(content)
        except (ValueError, UnicodeDecodeError):
            raise ProviderError("malformed", f"response body is not JSON: {content[:200]!r}") from None


def _is_unavailable(exc: openai.APIStatusError) -> bool:
    """Flex processing's 429 when capacity is short ("Resource unavailable"), as opposed to a rate limit."""
    body = exc.body if isinstance(getattr(exc, "body", None), dict) else {}
    err = body.get("error", body) if isinstance(body, dict) else {}
    text = f"{err.get('code') or ''} {err.get('message') or ''}".lower() if isinstance(err, dict) else ""
    return "resource_unavailable" in text or "resource unavailable" in text


def _error_message(exc: openai.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict) and err.get("message"):
            code = f" ({err['code']})" if err.get("code") else ""
            return f"{err['message']}{code}"
        # FastAPI's own error body, which servers built on it send (transformers serve: a prompt past the context)
        if isinstance(body.get("detail"), str) and body["detail"]:
            return str(body["detail"])
    return str(getattr(exc, "message", exc))[:300]


