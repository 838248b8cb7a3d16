"""Any OpenAI-compatible endpoint through the `openai` SDK, Chat Completions or Responses, errors classified."""

from __future__ import annotations

import asyncio
import copy
import email.utils
import functools
import json
import os
import re
import ssl
import time
from typing import Any, Literal

from rfteval.errors import InputError
from rfteval.providers.base import ErrorKind, Generation, GenerationRequest, ProviderError, RateInfo
from rfteval.sample import parse_output_json

OPENAI_BASE_URL = "https://api.openai.com/v1"
PLACEHOLDER_KEY = "unused"  # local servers (vLLM, Ollama, the test server) accept any key
SERVICE_TIERS = ("auto", "default", "flex", "priority")
TRANSPORTS = ("aiohttp", "httpx")


def _is_openai_url(base_url: str) -> bool:
    return "api.openai.com" in base_url


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
    ):
        if api not in ("chat", "responses"):
            raise InputError(f"unknown api {api!r}; expected 'chat' or 'responses'", field="api")
        if service_tier is not None and service_tier not in SERVICE_TIERS:
            raise InputError(f"unknown service tier {service_tier!r}; expected one of {', '.join(SERVICE_TIERS)}",
                             field="--service-tier")
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
            http_client: Any = openai.DefaultAioHttpClient(
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

    @property
    def client(self) -> Any:
        """The SDK client (the batch path uses its Files and Batches resources)."""
        return self._client

    def endpoint_path(self) -> str:
        return "/v1/chat/completions" if self.api == "chat" else "/v1/responses"

    def __repr__(self) -> str:
        return f"OpenAIProvider(base_url={self.base_url!r}, api={self.api!r}, api_key_env={self.api_key_env!r})"

    def identity(self) -> dict[str, Any]:
        ident: dict[str, Any] = {"provider": "openai", "base_url": self.base_url, "api": self.api}
        if self._extra_headers:
            ident["extra_headers"] = sorted(self._extra_headers)  # names only: values may be secrets
        return ident

    def request_body(self, request: GenerationRequest) -> dict[str, Any]:
        return chat_body(request) if self.api == "chat" else responses_body(request)

    async def generate(self, request: GenerationRequest, timeout_s: float) -> Generation:
        body = chat_body(request, copy_messages=False) if self.api == "chat" else responses_body(request)
        if self.service_tier is not None:
            body["service_tier"] = self.service_tier
        try:
            async with asyncio.timeout(timeout_s):
                raw = await self._client.post(self._path, cast_to=self._raw_response, content=_dumps(body),
                                              options={"timeout": timeout_s, "headers": _JSON})
                content = raw.content
        except Exception as exc:
            err = self._classify(exc, timeout_s)
            if err is None:
                raise  # not an endpoint failure but a bug: let it show
            raise err from None
        data = _loads(content)
        if not isinstance(data, dict):
            raise ProviderError("malformed", f"response body is not a JSON object: {content[:200]!r}")
        parse = parse_chat if self.api == "chat" else parse_responses
        gen = parse(data, structured=bool(request.sampling.response_format))
        gen.rate = rate_info(raw.headers)
        tier = data.get("service_tier")
        gen.tier = tier if isinstance(tier, str) else None
        return gen

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
        if isinstance(exc, (TimeoutError, oa.APITimeoutError)) and not _refused(exc):
            return ProviderError("timeout", f"no answer within {timeout_s:g}s")
        if isinstance(exc, oa.APIConnectionError):
            cause = exc.__cause__ or exc.__context__
            detail = f": {type(cause).__name__}" if cause is not None else ""
            return ProviderError("connection", self._scrub(f"cannot reach {self.base_url}{detail}"))
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


def _refused(exc: BaseException) -> bool:
    """The aiohttp transport reports a refused connection as a connect *timeout*; it is a connection error."""
    cause = exc.__cause__ or exc.__context__
    return cause is not None and "Cannot connect to host" in str(cause)


_JSON = {"Content-Type": "application/json"}


def _dumps(body: dict[str, Any]) -> bytes:
    """The request body as JSON bytes (msgspec, json for what it refuses)."""
    import msgspec

    try:
        return msgspec.json.encode(body)
    except (TypeError, msgspec.EncodeError):
        return json.dumps(body, ensure_ascii=False, default=str).encode()


def _loads(content: bytes) -> Any:
    """JSON of an answer body; msgspec is several times faster than json and both give plain dicts."""
    import msgspec

    try:
        return msgspec.json.decode(content)
    except msgspec.DecodeError:
        try:
            return json.loads(content)
        except (ValueError, UnicodeDecodeError):
            raise ProviderError("malformed", f"response body is not JSON: {content[:200]!r}") from None


def _is_unavailable(exc: Any) -> bool:
    """Flex processing's 429 when capacity is short ("Resource unavailable"), as opposed to a rate limit."""
    body = exc.body if isinstance(getattr(exc, "body", None), dict) else {}
    err = body.get("error", body) if isinstance(body, dict) else {}
    text = f"{err.get('code') or ''} {err.get('message') or ''}".lower() if isinstance(err, dict) else ""
    return "resource_unavailable" in text or "resource unavailable" in text


_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")


def parse_duration(text: str | None) -> float | None:
    """`x-ratelimit-reset-*` durations ("1s", "6m0s", "200ms", "1h2m3.5s") in seconds; None when absent or bad."""
    if not text:
        return None
    text = text.strip()
    try:
        return max(0.0, float(text))
    except ValueError:
        pass
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        return None
    scale = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
    return sum(float(n) * scale[u] for n, u in parts)


def _int(value: str | None) -> int | None:
    try:
        return int(float(value)) if value is not None else None
    except ValueError:
        return None


def rate_info(headers: Any) -> RateInfo | None:
    """The x-ratelimit-* headers of an answer, or None when it sent none (most local servers)."""
    get = headers.get
    if get("x-ratelimit-remaining-requests") is None and get("x-ratelimit-remaining-tokens") is None:
        return None
    return RateInfo(limit_requests=_int(get("x-ratelimit-limit-requests")),
                    remaining_requests=_int(get("x-ratelimit-remaining-requests")),
                    reset_requests_s=parse_duration(get("x-ratelimit-reset-requests")),
                    limit_tokens=_int(get("x-ratelimit-limit-tokens")),
                    remaining_tokens=_int(get("x-ratelimit-remaining-tokens")),
                    reset_tokens_s=parse_duration(get("x-ratelimit-reset-tokens")))


def status_kind(status: int) -> ErrorKind:
    """HTTP status → error kind; 408/409 are retryable as OpenAI's own SDK treats them."""
    if status == 429:
        return "rate_limit"
    if status in (401, 403):
        return "auth"
    if status == 404:
        return "not_found"
    if status == 408:
        return "timeout"
    if status == 409 or status >= 500:
        return "server"
    return "bad_request"


def _error_message(exc: Any) -> str:
    body = exc.body
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict) and err.get("message"):
            code = f" ({err['code']})" if err.get("code") else ""
            return f"{err['message']}{code}"
    return str(getattr(exc, "message", exc))[:300]


def parse_retry_after(headers: Any, now: float) -> float | None:
    """Seconds to wait from `retry-after-ms`, or `Retry-After` as seconds or an HTTP date; None if absent/bad."""
    ms = headers.get("retry-after-ms")
    if ms is not None:
        try:
            value = float(ms) / 1000.0
            if value >= 0:
                return value
        except ValueError:
            pass
    raw = headers.get("retry-after")
    if raw is None:
        return None
    try:
        value = float(raw)
        return value if value >= 0 else None
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - now)


# ---- request bodies (pure: also the response-cache key) -----------------------------------------------------------


def _json_schema(rf: dict[str, Any]) -> dict[str, Any]:
    """Sampling.response_format → {name, schema, strict?}; an already-wrapped chat format is unwrapped."""
    if rf.get("type") == "json_schema" and isinstance(rf.get("json_schema"), dict):
        rf = rf["json_schema"]
    out: dict[str, Any] = {"name": rf.get("name") or "response", "schema": rf.get("schema", {})}
    if rf.get("strict") is not None:
        out["strict"] = bool(rf["strict"])
    return out


def chat_body(request: GenerationRequest, copy_messages: bool = True) -> dict[str, Any]:
    """`copy_messages=False` when the body is encoded at once and never kept (the request path): no deep copy."""
    s = request.sampling
    messages = copy.deepcopy(request.messages) if copy_messages else request.messages
    body: dict[str, Any] = {"model": request.model, "messages": messages}
    if request.tools:
        body["tools"] = [_chat_tool(t) for t in request.tools]
    if s.response_format:
        rf = s.response_format
        if rf.get("type") in ("json_object", "text"):
            body["response_format"] = {"type": rf["type"]}
        else:
            body["response_format"] = {"type": "json_schema", "json_schema": _json_schema(rf)}
    if s.reasoning_effort is not None:
        body["reasoning_effort"] = s.reasoning_effort
    if s.max_output_tokens is not None:
        body["max_completion_tokens"] = s.max_output_tokens
    if s.temperature is not None:
        body["temperature"] = s.temperature
    if s.top_p is not None:
        body["top_p"] = s.top_p
    if s.seed is not None:
        body["seed"] = s.seed
    return body


def responses_body(request: GenerationRequest) -> dict[str, Any]:
    """The Responses API has no `seed`; it is left out rather than rejected by the server."""
    s = request.sampling
    body: dict[str, Any] = {"model": request.model, "input": responses_input(request.messages)}
    if request.tools:
        body["tools"] = [responses_tool(t) for t in request.tools]
    if s.response_format:
        rf = s.response_format
        fmt = {"type": rf["type"]} if rf.get("type") in ("json_object", "text") else {"type": "json_schema", **_json_schema(rf)}
        body["text"] = {"format": fmt}
    if s.reasoning_effort is not None:
        body["reasoning"] = {"effort": s.reasoning_effort}
    if s.max_output_tokens is not None:
        body["max_output_tokens"] = s.max_output_tokens
    if s.temperature is not None:
        body["temperature"] = s.temperature
    if s.top_p is not None:
        body["top_p"] = s.top_p
    body["store"] = False  # an eval must not fill the account's stored responses
    return body


def _chat_tool(tool: dict[str, Any]) -> dict[str, Any]:
    """A Responses-shaped function tool given to a chat model is wrapped back into chat's shape."""
    if tool.get("type") == "function" and "function" not in tool and "name" in tool:
        fn = {k: v for k, v in tool.items() if k != "type"}
        return {"type": "function", "function": fn}
    return copy.deepcopy(tool)


def responses_tool(tool: dict[str, Any]) -> dict[str, Any]:
    """Chat's {"type":"function","function":{name, description, parameters, strict}} → Responses' flat shape."""
    if tool.get("type") == "function" and isinstance(tool.get("function"), dict):
        fn = tool["function"]
        out: dict[str, Any] = {"type": "function", "name": fn.get("name")}
        for key in ("description", "parameters", "strict"):
            if key in fn:
                out[key] = copy.deepcopy(fn[key])
        return out
    return copy.deepcopy(tool)


def _responses_parts(content: Any, role: str) -> Any:
    if not isinstance(content, list):
        return content
    text_type = "output_text" if role == "assistant" else "input_text"
    parts = []
    for part in content:
        if not isinstance(part, dict):
            parts.append(part)
        elif part.get("type") == "text":
            parts.append({"type": text_type, "text": part.get("text", "")})
        elif part.get("type") == "image_url":
            image = part.get("image_url")
            url = image.get("url") if isinstance(image, dict) else image
            parts.append({"type": "input_image", "image_url": url})
        else:
            parts.append(copy.deepcopy(part))
    return parts


def responses_input(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Chat messages → Responses input items; assistant tool calls and tool results become function items."""
    items: list[dict[str, Any]] = []
    for msg in messages:
        role = msg.get("role")
        if role == "tool":
            output = msg.get("content")
            if not isinstance(output, str):
                output = json.dumps(output)
            items.append({"type": "function_call_output", "call_id": msg.get("tool_call_id"), "output": output})
            continue
        content = msg.get("content")
        if content is not None and content != "":
            items.append({"role": role, "content": _responses_parts(content, str(role))})
        for call in msg.get("tool_calls") or []:
            fn = call.get("function", {})
            items.append(
                {"type": "function_call", "call_id": call.get("id"), "name": fn.get("name"), "arguments": fn.get("arguments", "")}
            )
    return items


# ---- responses → Generation ---------------------------------------------------------------------------------------


def _output_json(text: str, structured: bool) -> Any:
    parsed = parse_output_json(text)
    if parsed is None and structured and text.strip():
        try:
            return json.loads(text)
        except ValueError:
            return None
    return parsed


def parse_chat(data: dict[str, Any], structured: bool = False) -> Generation:
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise ProviderError("malformed", "response has no choices")
    message = choices[0].get("message")
    if not isinstance(message, dict):
        raise ProviderError("malformed", "choices[0] has no message")
    if message.get("refusal"):
        raise ProviderError("refusal", str(message["refusal"]), usage=_chat_usage(data))
    text = message.get("content") or ""
    if not isinstance(text, str):
        raise ProviderError("malformed", "choices[0].message.content is not text")
    tools = []
    for call in message.get("tool_calls") or []:
        fn = call.get("function") or {}
        tools.append(
            {"id": call.get("id"), "type": "function", "function": {"name": fn.get("name"), "arguments": fn.get("arguments")}}
        )
    return Generation(
        output_text=text,
        output_tools=tools,
        output_json=_output_json(text, structured),
        choices=[_compact(c) for c in choices],
        usage=_chat_usage(data),
        finish_reason=choices[0].get("finish_reason"),
        reasoning=_chat_reasoning(message),
    )


def _chat_reasoning(message: dict[str, Any]) -> str | None:
    """The thinking a server sent beside the content: `reasoning_content` (SGLang, llama.cpp, DeepSeek, older
    vLLM) or `reasoning` (newer vLLM, OpenRouter); None when neither is text."""
    texts = [v for v in (message.get("reasoning_content"), message.get("reasoning")) if isinstance(v, str)]
    return next((t for t in texts if t), texts[0] if texts else None)


def _chat_usage(data: dict[str, Any]) -> dict[str, Any]:
    usage = data.get("usage") or {}
    details = usage.get("completion_tokens_details") or {}
    return {"input_tokens": usage.get("prompt_tokens"), "output_tokens": usage.get("completion_tokens"),
            "reasoning_tokens": details.get("reasoning_tokens")}


def _responses_usage(data: dict[str, Any]) -> dict[str, Any]:
    usage = data.get("usage") or {}
    details = usage.get("output_tokens_details") or {}
    return {"input_tokens": usage.get("input_tokens"), "output_tokens": usage.get("output_tokens"),
            "reasoning_tokens": details.get("reasoning_tokens")}


def _compact(obj: Any) -> Any:
    """Drop the null fields the SDK fills in, so choices look like what the server sent."""
    if isinstance(obj, dict):
        return {k: _compact(v) for k, v in obj.items() if v is not None}
    if isinstance(obj, list):
        return [_compact(v) for v in obj]
    return obj


def parse_responses(data: dict[str, Any], structured: bool = False) -> Generation:
    output = data.get("output")
    if not isinstance(output, list):
        raise ProviderError("malformed", "response has no output")
    texts: list[str] = []
    tools: list[dict[str, Any]] = []
    reasoning: list[str] | None = None
    for item in output:
        if not isinstance(item, dict):
            continue
        if item.get("type") == "reasoning":
            reasoning = (reasoning or []) + _reasoning_texts(item)
        elif item.get("type") == "message":
            for part in item.get("content") or []:
                if part.get("type") == "output_text":
                    texts.append(part.get("text") or "")
                elif part.get("type") == "refusal":
                    raise ProviderError("refusal", str(part.get("refusal") or "refused"), usage=_responses_usage(data))
        elif item.get("type") == "function_call":
            tools.append(
                {
                    "id": item.get("call_id"),
                    "type": "function",
                    "function": {"name": item.get("name"), "arguments": item.get("arguments")},
                }
            )
    if data.get("status") == "failed":
        err = data.get("error") or {}
        raise ProviderError("server", f"response failed: {err.get('message') if isinstance(err, dict) else err}")
    text = "".join(texts)
    incomplete = data.get("incomplete_details") or {}
    if data.get("status") == "incomplete":
        finish = "length" if incomplete.get("reason") == "max_output_tokens" else "content_filter"
    else:
        finish = "tool_calls" if tools else "stop"
    return Generation(
        output_text=text,
        output_tools=tools,
        output_json=_output_json(text, structured),
        choices=None,
        usage=_responses_usage(data),
        finish_reason=finish,
        reasoning=None if reasoning is None else "\n\n".join(reasoning),
    )


def _reasoning_texts(item: dict[str, Any]) -> list[str]:
    """A reasoning item's text: its summaries (OpenAI shows only those, and only when asked), else its
    reasoning_text parts (open-weight models served with a Responses API show the thinking itself)."""
    texts = [part.get("text") or "" for part in item.get("summary") or []
             if isinstance(part, dict) and part.get("type") == "summary_text"]
    if not texts:
        texts = [part.get("text") or "" for part in item.get("content") or []
                 if isinstance(part, dict) and part.get("type") == "reasoning_text"]
    return [t for t in texts if t]
