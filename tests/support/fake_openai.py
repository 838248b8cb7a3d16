"""A local OpenAI-compatible HTTP server, so tests and benchmarks drive the real `openai` client offline.

It speaks POST /v1/chat/completions, POST /v1/responses and GET /v1/models (when `models` is given) on 127.0.0.1
only; switches make it lack the Batch or Responses API or refuse keys and formats, as self-hosted servers do. Replies are
scripted: queued `Reply` objects first, then the responder (default: deterministic `echo:{model}:{last user text}`).
Run as a process: `python tests/support/fake_openai.py --port 0 --delay-ms 100` prints its base_url on the first line.
Its responder may be any function of a request: scripts/local_judge.py serves its scripted judge through it.

It also speaks the Files and Batches APIs (upload, content, create, retrieve, list, cancel), with statuses that move
one step per retrieve (validating, in_progress, finalizing, then completed / expired / failed as `batch_plans`
script them), output and error files in OpenAI's line format (unordered), `batch_expired` lines for an expired
batch, and hooks that run just before a create is answered (a test SIGKILLs its client there). `max_concurrent`
caps the requests in flight: above it the server answers 429 with Retry-After and x-ratelimit-* headers, as a
rate-limited account does; `slots` instead makes requests wait their turn, as a self-hosted server with few
slots does (llama.cpp's `--parallel`): at most that many are worked on (their delay) at once, the others queue.
`restart()` stops the server and starts it again on the same port (a server killed and restarted mid-run).
`GET /v1/_stats` reports what it served.
"""

from __future__ import annotations

import argparse
import email.parser
import email.policy
import itertools
import json
import re
import signal
import socket
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

HOST = "127.0.0.1"
# llama.cpp's server (llama-cpp-python) answering a json_schema response format: a 500 whose body is a pydantic
# validation error, the same for every request
VALIDATION_500 = ("1 validation error for CreateChatCompletionRequest\nresponse_format.type\n  Input should be "
                  "'text' or 'json_object' [type=literal_error, input_value='json_schema', input_type=str]")
# llama-cpp-python's server (0.3.x) answering a message role or content part its chat schema lacks (`developer`,
# `input_audio`): FastAPI's RequestValidationError printed into a 500 by its error wrapper, one dict per member of
# the unions pydantic tried, as the real server sends it (captured from tests/support/real_server.py's server)
LLAMA_ROLES = ("system", "user", "assistant", "tool", "function")
_PARTS = "list[union[ChatCompletionRequestMessageContentPartText,ChatCompletionRequestMessageContentPartImage]]"


def _member(role: str) -> str:
    return f"ChatCompletionRequest{role.capitalize()}Message"


def validation_list_500(index: int, message: dict[str, Any], part: int | None = None) -> str:
    """The message of that 500 for messages[index] (its role refused, or its content part `part`'s type)."""
    errors: list[dict[str, Any]] = []
    role = message.get("role")
    for member in LLAMA_ROLES:
        if member == role and part is None:  # a refused role of llama's own (`tool`): a schema without that member
            continue
        if member != role:
            errors.append({"type": "literal_error", "loc": ("body", "messages", index, _member(member), "role"),
                           "msg": f"Input should be '{member}'", "input": role, "ctx": {"expected": f"'{member}'"}})
        if member == "user" and part is not None:
            kind = message["content"][part].get("type")
            for name, want in (("Text", "text"), ("Image", "image_url")):
                errors.append({"type": "literal_error", "loc": ("body", "messages", index, _member("user"),
                               "content", _PARTS, part, f"ChatCompletionRequestMessageContentPart{name}", "type"),
                               "msg": f"Input should be '{want}'", "input": kind, "ctx": {"expected": f"'{want}'"}})
        if member == "tool":
            errors.append({"type": "missing", "loc": ("body", "messages", index, _member("tool"), "tool_call_id"),
                           "msg": "Field required", "input": message})
    errors.append({"type": "missing", "loc": ("body", "messages", index, _member("function"), "name"),
                   "msg": "Field required", "input": message})
    return (f"{len(errors)} validation errors:\n" + "".join(f"  {e}\n" for e in errors)
            + '\n  File "llama_cpp/server/app.py", line 376, in create_chat_completion\n    POST /v1/chat/completions')


def null_content_500(index: int, message: dict[str, Any]) -> str:
    """llama-cpp-python 0.3.36's 500 message for messages[index], an assistant message whose content is null beside
    its tool_calls: its validation list, one error per member of the message union, the assistant member's a
    string_type on content (captured from the real server: tests/fixtures/llama_cpp/null_content_500.json)."""
    errors: list[dict[str, Any]] = []
    for member in LLAMA_ROLES:
        if member == "assistant":
            errors.append({"type": "string_type", "loc": ("body", "messages", index, _member(member), "content"),
                           "msg": "Input should be a valid string", "input": None})
            continue
        errors.append({"type": "literal_error", "loc": ("body", "messages", index, _member(member), "role"),
                       "msg": f"Input should be '{member}'", "input": "assistant", "ctx": {"expected": f"'{member}'"}})
        if member == "tool":
            errors.append({"type": "missing", "loc": ("body", "messages", index, _member("tool"), "tool_call_id"),
                           "msg": "Field required", "input": message})
        if member == "function":
            errors.append({"type": "missing", "loc": ("body", "messages", index, _member("function"), "name"),
                           "msg": "Field required", "input": message})
    return (f"{len(errors)} validation errors:\n" + "".join(f"  {e}\n" for e in errors)
            + '\n  File "llama_cpp/server/app.py", line 376, in create_chat_completion\n    POST /v1/chat/completions')


DEFAULT_MODELS = ("fake-base", "fake-tuned")
REASONING_TOKENS = {"minimal": 4, "low": 8, "medium": 32, "high": 128}


@dataclass
class Reply:
    """What the server answers to one request."""

    status: int = 200
    text: str | None = None  # the assistant's output text (for an error status: the error message)
    tool_calls: list[dict[str, Any]] | None = None  # chat-style [{"id","type":"function","function":{...}}]
    refusal: str | None = None
    headers: dict[str, str] = field(default_factory=dict)  # e.g. {"Retry-After": "1"}
    delay_s: float = 0.0  # sleep before answering (a hang = a long delay)
    raw_body: bytes | None = None  # sent as is, with Content-Type application/json (malformed bodies)
    usage: dict[str, int] | None = None  # {"input_tokens","output_tokens","reasoning_tokens"}; default: counted
    finish_reason: str | None = None  # chat vocabulary; default "tool_calls" with tools else "stop"
    # reasoning models: the thinking sent apart (chat message fields; Responses: a reasoning item's summary), or as
    # a leading think block in the content (`think`: "<think>THINK</think>\n\n" before `text`)
    reasoning_content: str | None = None  # SGLang, llama.cpp, DeepSeek, older vLLM
    reasoning: str | None = None  # newer vLLM, OpenRouter
    think: str | None = None
    reports_reasoning_tokens: bool = True  # False: usage without reasoning_tokens, as most local servers answer

    @classmethod
    def error(cls, status: int, message: str | None = None, **kw: Any) -> Reply:
        return cls(status=status, text=message, **kw)


@dataclass
class Request:
    """One request as the server received it; `headers` keys are lower-case."""

    path: str
    body: dict[str, Any]
    headers: dict[str, str]
    model: str
    api: str  # "chat" | "responses" | "models"

    def user_texts(self) -> list[str]:
        """The text of each user message (chat `messages`, or Responses `input`), in order."""
        if self.api == "responses":
            inp = self.body.get("input")
            if isinstance(inp, str):
                return [inp]
            msgs = [m for m in inp or [] if isinstance(m, dict) and m.get("type", "message") == "message"]
        else:
            msgs = [m for m in self.body.get("messages") or [] if isinstance(m, dict)]
        return [_content_text(m.get("content")) for m in msgs if m.get("role") == "user"]

    def user_text(self) -> str:
        """All user text, joined by newlines."""
        return "\n".join(self.user_texts())

    def last_user_text(self) -> str:
        texts = self.user_texts()
        return texts[-1] if texts else ""


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type") in ("text", "input_text")
        )
    return ""


def echo_responder(request: Request) -> Reply:
    """Deterministic per (prompt, model), so repeated runs and cache tests can predict every output."""
    return Reply(text=f"echo:{request.model}:{request.last_user_text()}")


def count_tokens(text: str) -> int:
    """A stand-in tokenizer: words and punctuation marks; deterministic so tests can compute usage."""
    return len(re.findall(r"\w+|[^\w\s]", text))


def _all_text(body: dict[str, Any], api: str) -> str:
    if api == "responses":
        inp = body.get("input")
        if isinstance(inp, str):
            return inp
        parts = []
        for m in inp or []:
            if isinstance(m, dict):
                parts.append(_content_text(m.get("content")) + str(m.get("output", "")) + str(m.get("arguments", "")))
        return "\n".join(parts)
    return "\n".join(_content_text(m.get("content")) for m in body.get("messages") or [] if isinstance(m, dict))


def _reasoning_effort(body: dict[str, Any], api: str) -> str | None:
    if api == "responses":
        reasoning = body.get("reasoning")
        return reasoning.get("effort") if isinstance(reasoning, dict) else None
    return body.get("reasoning_effort")


def compute_usage(body: dict[str, Any], api: str, reply: Reply) -> dict[str, int]:
    """Usage as the fake counts it: input = request text; output = text + tool args + reasoning tokens."""
    if reply.usage is not None:
        return {"input_tokens": 0, "output_tokens": 0, "reasoning_tokens": 0, **reply.usage}
    reasoning = REASONING_TOKENS.get(_reasoning_effort(body, api) or "", 0)
    out = count_tokens(reply.text or "") + count_tokens(reply.refusal or "")
    for call in reply.tool_calls or []:
        fn = call.get("function", {})
        out += count_tokens(str(fn.get("name", ""))) + count_tokens(str(fn.get("arguments", "")))
    return {"input_tokens": count_tokens(_all_text(body, api)), "output_tokens": out + reasoning, "reasoning_tokens": reasoning}


# ---- error bodies, as OpenAI sends them -------------------------------------------------------------------------


def _mask_key(auth: str) -> str:
    key = auth.removeprefix("Bearer ").strip()
    return key[:3] + "*" * max(len(key) - 7, 0) + key[-4:] if len(key) > 8 else "*" * len(key)


def error_body(status: int, model: str, message: str | None = None, auth: str = "") -> dict[str, Any]:
    """OpenAI's {"error": {message, type, param, code}} for a status."""
    kinds: dict[int, tuple[str, str | None, str]] = {
        400: ("invalid_request_error", None, "Invalid request."),
        401: (
            "invalid_request_error",
            "invalid_api_key",
            f"Incorrect API key provided: {_mask_key(auth)}. You can find your API key at "
            "https://platform.openai.com/account/api-keys.",
        ),
        403: ("invalid_request_error", "unsupported_country_region_territory", "Country, region, or territory not supported"),
        404: ("invalid_request_error", "model_not_found", f"The model `{model}` does not exist or you do not have access to it."),
        422: ("invalid_request_error", None, "Unprocessable request."),
        429: (
            "requests",
            "rate_limit_exceeded",
            f"Rate limit reached for {model} in organization org-fake on requests per min (RPM): "
            "Limit 3, Used 3, Requested 1. Please try again in 20s.",
        ),
        503: ("server_error", None, "The engine is currently overloaded, please try again later."),
    }
    default = ("server_error", None, "The server had an error while processing your request. Sorry about that!")
    etype, code, default_message = kinds.get(status, default if status >= 500 else ("invalid_request_error", None, "Error."))
    return {"error": {"message": message or default_message, "type": etype, "param": None, "code": code}}


# ---- success bodies -----------------------------------------------------------------------------------------------


def chat_body(req: Request, reply: Reply, rid: int) -> dict[str, Any]:
    n = req.body.get("n") or 1
    usage = compute_usage(req.body, "chat", reply)
    finish = reply.finish_reason or ("tool_calls" if reply.tool_calls else "stop")
    choices = []
    for index in range(int(n)):
        message: dict[str, Any] = {"role": "assistant", "content": _content(reply), "refusal": reply.refusal}
        if reply.tool_calls:
            message["tool_calls"] = reply.tool_calls
        if reply.reasoning_content is not None:
            message["reasoning_content"] = reply.reasoning_content
        if reply.reasoning is not None:
            message["reasoning"] = reply.reasoning
        choices.append({"index": index, "message": message, "finish_reason": finish, "logprobs": None})
    return {
        "id": f"chatcmpl-fake{rid}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": req.model,
        "system_fingerprint": "fp_fake",
        "service_tier": "flex" if req.body.get("service_tier") == "flex" else "default",
        "choices": choices,
        "usage": {
            "prompt_tokens": usage["input_tokens"],
            "completion_tokens": usage["output_tokens"] * int(n),
            "total_tokens": usage["input_tokens"] + usage["output_tokens"] * int(n),
            "prompt_tokens_details": {"cached_tokens": 0},
            **({"completion_tokens_details": {"reasoning_tokens": usage["reasoning_tokens"] * int(n)}}
               if reply.reports_reasoning_tokens else {}),
        },
    }


def _content(reply: Reply) -> str | None:
    """The content as a server without a reasoning parser sends it: the think block first."""
    if reply.think is None:
        return reply.text
    return f"<think>{reply.think}</think>\n\n{reply.text or ''}"


def responses_body(req: Request, reply: Reply, rid: int) -> dict[str, Any]:
    usage = compute_usage(req.body, "responses", reply)
    output: list[dict[str, Any]] = []
    shown = reply.reasoning if reply.reasoning is not None else reply.reasoning_content
    if usage["reasoning_tokens"] or shown is not None:
        summary = [{"type": "summary_text", "text": shown}] if shown else []
        output.append({"type": "reasoning", "id": f"rs_fake{rid}", "summary": summary})
    content: list[dict[str, Any]] = []
    if _content(reply) is not None:
        content.append({"type": "output_text", "text": _content(reply), "annotations": []})
    if reply.refusal is not None:
        content.append({"type": "refusal", "refusal": reply.refusal})
    if content:
        output.append(
            {"type": "message", "id": f"msg_fake{rid}", "status": "completed", "role": "assistant", "content": content}
        )
    for i, call in enumerate(reply.tool_calls or []):
        fn = call.get("function", {})
        output.append(
            {
                "type": "function_call",
                "id": f"fc_fake{rid}_{i}",
                "call_id": call.get("id", f"call_{rid}_{i}"),
                "name": fn.get("name"),
                "arguments": fn.get("arguments", "{}"),
                "status": "completed",
            }
        )
    incomplete = reply.finish_reason == "length"
    body = req.body
    return {
        "id": f"resp_fake{rid}",
        "object": "response",
        "created_at": int(time.time()),
        "status": "incomplete" if incomplete else "completed",
        "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
        "error": None,
        "model": req.model,
        "output": output,
        "instructions": body.get("instructions"),
        "metadata": {},
        "parallel_tool_calls": True,
        "temperature": body.get("temperature", 1.0),
        "top_p": body.get("top_p", 1.0),
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": body.get("tools", []),
        "max_output_tokens": body.get("max_output_tokens"),
        "reasoning": body.get("reasoning") or {"effort": None, "summary": None},
        "text": body.get("text") or {"format": {"type": "text"}},
        "usage": {
            "input_tokens": usage["input_tokens"],
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": usage["output_tokens"],
            "output_tokens_details": {"reasoning_tokens": usage["reasoning_tokens"]},
            "total_tokens": usage["input_tokens"] + usage["output_tokens"],
        },
    }


# ---- the server -------------------------------------------------------------------------------------------------


class FifoSlots:
    """`n` slots taken in arrival order, as a server's request queue serves them (a Semaphore lets a newcomer
    take a slot that frees up ahead of those already waiting, starving some requests for seconds)."""

    def __init__(self, n: int):
        self._cond = threading.Condition()
        self._free = n
        self._line: deque[object] = deque()

    def acquire(self, stopping: threading.Event) -> bool:
        """Wait for this request's turn and a free slot; False when the server is stopping."""
        me = object()
        with self._cond:
            self._line.append(me)
            while not (self._free > 0 and self._line[0] is me):
                if stopping.is_set():
                    self._line.remove(me)
                    self._cond.notify_all()
                    return False
                self._cond.wait(0.05)
            self._line.popleft()
            self._free -= 1
            self._cond.notify_all()  # the next in line may find a slot free too
            return True

    def release(self) -> None:
        with self._cond:
            self._free += 1
            self._cond.notify_all()


class _Server(ThreadingHTTPServer):
    request_queue_size = 1024  # socketserver's default of 5 drops connections when a runner opens many at once
    daemon_threads = True

Responder = Callable[[Request], "Reply | str"]


class FakeOpenAI:
    """The server. `queue()` replies are served first, in order; then `responder` answers."""

    def __init__(
        self,
        responder: Responder | None = None,
        delay_s: float = 0.0,
        *,
        models: Iterable[str] | None = None,
        api_key: str | None = None,
        max_concurrent: int | None = None,
        retry_after_ms: float | None = None,
        slots: int | None = None,
    ):
        self.responder: Responder = responder or echo_responder
        self.delay_s = delay_s
        # when set, other models get 404, and GET /v1/models lists these; when None, any model is served and
        # GET /v1/models answers 404 (a server that lists nothing: rfteval's model check then says nothing)
        self.models = list(models) if models is not None else None
        self.listed: list[str] | None = None  # when set, what GET /v1/models lists (a gateway that routes others)
        # What a self-hosted server may lack or refuse (llama.cpp's, vLLM's): no Files/Batches routes, no
        # /v1/responses route (both 404 "Invalid URL"), request keys answered with 400 "Unsupported parameter"
        # (e.g. {"max_tokens"}), response format types refused with 400 (e.g. {"json_schema"})
        self.no_batches = False
        self.no_responses = False
        self.unsupported_keys: set[str] = set()
        self.refused_formats: set[str] = set()
        # llama-cpp-python's schema: message roles (e.g. {"developer"}) and content part types (e.g.
        # {"input_audio"}) answered with its 500 validation list; a context size answered, when the request's text
        # and output limit exceed it, with its 400 context_length_exceeded
        self.refused_roles: set[str] = set()
        self.refused_parts: set[str] = set()
        self.context_tokens: int | None = None
        # llama-cpp-python's schema again: an assistant message whose content is null beside its tool_calls (as
        # OpenAI sends a turn that only calls tools) is answered with its 500 validation list; "" is taken
        self.refuse_null_tool_content = False
        # an output limit honoured as a real server does: the reply cut after max_tokens tokens, finish "length"
        self.honour_max_tokens = False
        self.api_key = api_key  # when set, other bearer tokens get 401
        self.requests: list[Request] = []
        self.keep_requests = True  # False: `requests` stays empty (a long-running stand-in such as the local judge)
        self._queue: deque[Reply] = deque()
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._stopping = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._conns: set[socket.socket] = set()
        self.base_url = ""
        # rate limits: at most `max_concurrent` generation requests in flight; above it, 429
        self.max_concurrent = max_concurrent
        self.retry_after_ms = retry_after_ms  # default: the answer delay (about when a slot frees up)
        self.stats = {"served": 0, "rate_limited": 0, "in_flight": 0, "max_in_flight": 0, "flex_unavailable": 0}
        self.slots = slots
        self._slots = FifoSlots(slots) if slots is not None else None
        self.flex_unavailable = 0  # the next N requests with service_tier "flex" get 429 "Resource unavailable"
        # Files and Batches
        self.files: dict[str, dict[str, Any]] = {}
        self.batches: dict[str, dict[str, Any]] = {}  # in creation order
        self.batch_plans: deque[dict[str, Any]] = deque()  # per created batch, in order: see _finish_batch
        self.batch_responder: Responder | None = None  # answers batch lines (default: `responder`)
        self.max_batch_lines = 50_000
        self.batch_creates = 0
        self.file_uploads = 0
        self.on_file_uploaded: Callable[[dict[str, Any]], None] | None = None  # runs before the upload is answered
        self.on_batch_created: Callable[[dict[str, Any]], None] | None = None  # runs before the create is answered

    # lifecycle
    def start(self, port: int = 0) -> FakeOpenAI:
        fake = self

        class Handler(_Handler):
            owner = fake

        self._stopping.clear()
        self._server = _Server((HOST, port), Handler)
        self.port = self._server.server_address[1]
        self.base_url = f"http://{HOST}:{self.port}/v1"
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.005}, name="fake-openai", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is None:
            return
        self._stopping.set()  # wakes delayed handlers, which then drop their connection
        self._server.shutdown()
        self._server.server_close()
        with self._lock:
            conns, self._conns = list(self._conns), set()
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server = None

    def restart(self) -> FakeOpenAI:
        """Stop, then serve again on the same port; what was received and scripted is kept."""
        port = self.port
        self.stop()
        return self.start(port)

    def __enter__(self) -> FakeOpenAI:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # scripting
    def queue(self, *replies: Reply) -> None:
        with self._lock:
            self._queue.extend(replies)

    def reset(self) -> None:
        """Forget received requests and queued replies."""
        with self._lock:
            self.requests.clear()
            self._queue.clear()

    def requests_for(self, api: str | None = None) -> list[Request]:
        with self._lock:
            return [r for r in self.requests if api is None or r.api == api]

    # internals used by the handler
    def _record(self, req: Request) -> Reply:
        with self._lock:
            if self.keep_requests:
                self.requests.append(req)
            queued = self._queue.popleft() if self._queue else None
        if queued is not None:
            return queued
        out = self.responder(req)
        return Reply(text=out) if isinstance(out, str) else out

    def _next_id(self) -> int:
        with self._lock:
            return next(self._ids)

    # ---- rate limits
    def _enter(self) -> tuple[bool, dict[str, str]]:
        """Admit one generation request, or refuse it (429) above the cap; the x-ratelimit-* headers to send."""
        with self._lock:
            cap = self.max_concurrent
            if cap is not None and self.stats["in_flight"] >= cap:
                self.stats["rate_limited"] += 1
                return False, self._limit_headers(0)
            self.stats["in_flight"] += 1
            self.stats["max_in_flight"] = max(self.stats["max_in_flight"], self.stats["in_flight"])
            return True, ({} if cap is None else self._limit_headers(cap - self.stats["in_flight"]))

    def _leave(self, served: bool) -> None:
        with self._lock:
            self.stats["in_flight"] -= 1
            self.stats["served"] += served

    def _limit_headers(self, remaining: int) -> dict[str, str]:
        wait_ms = self.retry_after_ms if self.retry_after_ms is not None else max(self.delay_s * 1000, 10.0)
        return {"x-ratelimit-limit-requests": str(self.max_concurrent),
                "x-ratelimit-remaining-requests": str(max(remaining, 0)),
                "x-ratelimit-reset-requests": f"{wait_ms:g}ms",
                **({} if remaining > 0 else {"retry-after-ms": f"{wait_ms:g}",
                                              "Retry-After": str(max(1, int(wait_ms / 1000 + 0.999)))})}

    def _take_flex_unavailable(self, body: dict[str, Any]) -> bool:
        with self._lock:
            if body.get("service_tier") == "flex" and self.flex_unavailable > 0:
                self.flex_unavailable -= 1
                self.stats["flex_unavailable"] += 1
                return True
            return False

    # ---- Files and Batches
    def _new_id(self, prefix: str) -> str:
        return f"{prefix}-fake{self._next_id()}"

    def add_file(self, data: bytes, purpose: str, filename: str) -> dict[str, Any]:
        obj: dict[str, Any] = {"id": self._new_id("file"), "object": "file", "bytes": len(data),
               "created_at": int(time.time()),
               "filename": filename, "purpose": purpose, "status": "processed", "status_details": None}
        with self._lock:
            self.files[obj["id"]] = {"meta": obj, "data": data}
        return obj

    def create_batch(self, body: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            plan = self.batch_plans.popleft() if self.batch_plans else {}
            self.batch_creates += 1
        batch = {"id": self._new_id("batch"), "object": "batch", "endpoint": body.get("endpoint"), "errors": None,
                 "input_file_id": body.get("input_file_id"), "completion_window": body.get("completion_window", "24h"),
                 "status": "validating", "output_file_id": None, "error_file_id": None,
                 "created_at": int(time.time()), "in_progress_at": None, "expires_at": int(time.time()) + 86400,
                 "finalizing_at": None, "completed_at": None, "failed_at": None, "expired_at": None,
                 "cancelling_at": None, "cancelled_at": None,
                 "request_counts": {"total": 0, "completed": 0, "failed": 0},
                 "metadata": body.get("metadata") or None}
        with self._lock:
            self.batches[batch["id"]] = {"obj": batch, "plan": plan, "lines": None, "polls": 0}
        return batch

    def retrieve_batch(self, batch_id: str) -> dict[str, Any] | None:
        """The batch after one more step of its life: each retrieve moves a live batch on by one status."""
        with self._lock:
            entry = self.batches.get(batch_id)
        if entry is None:
            return None
        b = entry["obj"]
        entry["polls"] += 1
        if entry["polls"] % max(1, int(entry["plan"].get("polls_per_step", 1))):
            return json.loads(json.dumps(b))
        now = int(time.time())
        if b["status"] == "validating":
            problem = self._validate_batch(entry)
            if problem is not None:
                b.update(status="failed", failed_at=now,
                         errors={"object": "list", "data": [{"code": problem[0], "message": problem[1],
                                                             "param": None, "line": problem[2]}]})
            elif entry["plan"].get("outcome") == "failed":
                b.update(status="failed", failed_at=now, errors={"object": "list", "data": [
                    {"code": "server_error", "message": entry["plan"].get("message", "The batch failed."),
                     "param": None, "line": None}]})
            else:
                b.update(status="in_progress", in_progress_at=now)
                b["request_counts"]["total"] = len(entry["lines"])
        elif b["status"] == "in_progress":
            b.update(status="finalizing", finalizing_at=now)
            b["request_counts"]["completed"] = len(entry["lines"]) // 2
        elif b["status"] == "finalizing":
            self._finish_batch(entry, cancelled=False)
        elif b["status"] == "cancelling":
            self._finish_batch(entry, cancelled=True)
        return json.loads(json.dumps(b))

    def cancel_batch(self, batch_id: str) -> dict[str, Any] | None:
        with self._lock:
            entry = self.batches.get(batch_id)
        if entry is None:
            return None
        b = entry["obj"]
        if b["status"] in ("validating", "in_progress", "finalizing"):
            if entry["lines"] is None:
                self._validate_batch(entry)
            b.update(status="cancelling", cancelling_at=int(time.time()))
        return json.loads(json.dumps(b))

    def list_batches(self, limit: int, after: str | None) -> dict[str, Any]:
        with self._lock:
            objs = [e["obj"] for e in reversed(self.batches.values())]  # newest first, as OpenAI lists them
        if after is not None:
            ids = [o["id"] for o in objs]
            objs = objs[ids.index(after) + 1:] if after in ids else []
        page = objs[:limit]
        return {"object": "list", "data": json.loads(json.dumps(page)), "first_id": page[0]["id"] if page else None,
                "last_id": page[-1]["id"] if page else None, "has_more": len(objs) > limit}

    def _validate_batch(self, entry: dict[str, Any]) -> tuple[str, str, int | None] | None:
        """Parse the input file as OpenAI does; the first problem fails the whole batch."""
        b = entry["obj"]
        entry["lines"] = []
        with self._lock:
            f = self.files.get(b["input_file_id"])
        if f is None:
            return "invalid_file", f"No such file: {b['input_file_id']}", None
        models: set[str] = set()
        seen: set[str] = set()
        for n, raw in enumerate(f["data"].splitlines(), 1):
            if not raw.strip():
                continue
            try:
                line = json.loads(raw)
            except ValueError:
                return "invalid_json_line", "This line is not parseable as valid JSON.", n
            cid = line.get("custom_id")
            if not isinstance(cid, str) or cid in seen:
                return "duplicate_custom_id", "The custom_id for this request is a duplicate or missing.", n
            seen.add(cid)
            if line.get("url") != b["endpoint"] or line.get("method") != "POST":
                return "invalid_url", f"The URL provided for this request does not match the batch endpoint {b['endpoint']}.", n
            models.add(str((line.get("body") or {}).get("model")))
            entry["lines"].append(line)
        if len(models) > 1:
            return "model_mismatch", "Requests in a batch must all use the same model.", None
        if not entry["lines"]:
            return "empty_file", "The input file has no requests.", None
        if len(entry["lines"]) > self.max_batch_lines:
            return "too_many_requests", f"A batch holds at most {self.max_batch_lines} requests.", None
        return None

    def _finish_batch(self, entry: dict[str, Any], cancelled: bool) -> None:
        """Answer every line; the plan decides the end: {"outcome": "completed" (default) | "expired" | "failed",
        "complete": N (expired: lines answered before the window closed), "drop_files": true (completed with
        neither an output nor an error file)}."""
        b, plan = entry["obj"], entry["plan"]
        now = int(time.time())
        lines = entry["lines"] or []
        answer_n = len(lines)
        if plan.get("outcome") == "expired":
            answer_n = int(plan.get("complete", len(lines) // 2))
        if cancelled:
            answer_n = int(plan.get("complete", 0))
        out, err = [], []
        responder = self.batch_responder or self.responder
        for i, line in enumerate(lines):
            rid = self._next_id()
            if i >= answer_n:
                code = "batch_cancelled" if cancelled else "batch_expired"
                err.append({"id": f"batch_req_fake{rid}", "custom_id": line["custom_id"], "response": None,
                            "error": {"code": code, "message": "This request could not be executed before the "
                                      "completion window expired." if not cancelled else "The batch was cancelled."}})
                continue
            body = line.get("body") or {}
            api = "responses" if line["url"].endswith("/responses") else "chat"
            req = Request(path=line["url"], body=body, headers={}, model=str(body.get("model", "")), api=api)
            reply = responder(req)
            reply = Reply(text=reply) if isinstance(reply, str) else reply
            if reply.status >= 400:
                err.append({"id": f"batch_req_fake{rid}", "custom_id": line["custom_id"],
                            "response": {"status_code": reply.status, "request_id": f"req_fake{rid}",
                                         "body": error_body(reply.status, req.model, reply.text)}, "error": None})
            else:
                make = chat_body if api == "chat" else responses_body
                out.append({"id": f"batch_req_fake{rid}", "custom_id": line["custom_id"],
                            "response": {"status_code": 200, "request_id": f"req_fake{rid}",
                                         "body": make(req, reply, rid)}, "error": None})
        out.reverse()  # unordered, as the Batch API says: a client must match on custom_id
        if out and not plan.get("drop_files"):
            b["output_file_id"] = self.add_file(_jsonl(out), "batch_output", "batch_output.jsonl")["id"]
        if err and not plan.get("drop_files"):
            b["error_file_id"] = self.add_file(_jsonl(err), "batch_output", "batch_errors.jsonl")["id"]
        b["request_counts"] = {"total": len(lines), "completed": len(out), "failed": len(err)}
        if cancelled:
            b.update(status="cancelled", cancelled_at=now)
        elif plan.get("outcome") == "expired":
            b.update(status="expired", expired_at=now)
        else:
            b.update(status="completed", completed_at=now)


class _Handler(BaseHTTPRequestHandler):
    owner: FakeOpenAI
    protocol_version = "HTTP/1.1"  # keep-alive, as the openai client expects
    server_version = "fake-openai/1"

    def setup(self) -> None:
        # headers and body go out in two writes: without TCP_NODELAY, Nagle + delayed ACK adds ~40 ms a request
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        super().setup()
        with self.owner._lock:
            self.owner._conns.add(self.connection)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            with self.owner._lock:
                self.owner._conns.discard(self.connection)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - silence per-request logging
        pass

    def handle(self) -> None:
        try:
            super().handle()
        except (ConnectionError, OSError):
            pass  # the client gave up (timeout test) or the server is stopping

    def _send(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        if not headers or "Content-Type" not in headers:
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("x-request-id", f"req_fake{self.owner._next_id()}")
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)
        self.wfile.flush()

    def _send_json(self, status: int, obj: Any, headers: dict[str, str] | None = None) -> None:
        self._send(status, json.dumps(obj).encode(), headers)

    def _authorized(self) -> bool:
        auth = self.headers.get("Authorization", "")
        if self.owner.api_key is not None and auth != f"Bearer {self.owner.api_key}":
            self._send_json(401, error_body(401, "", auth=auth))
            return False
        return True

    def _query(self) -> dict[str, str]:
        from urllib.parse import parse_qsl

        return dict(parse_qsl(self.path.partition("?")[2]))

    def do_GET(self) -> None:
        path = self.path.split("?")[0].rstrip("/")
        owner = self.owner
        models = owner.listed if owner.listed is not None else (
            owner.models if owner.models is not None else list(DEFAULT_MODELS))
        if path == "/v1/_stats":
            with owner._lock:
                stats = dict(owner.stats, batch_creates=owner.batch_creates, file_uploads=owner.file_uploads)
            self._send_json(200, stats)
            return
        if (owner.no_batches and path.startswith(("/v1/files", "/v1/batches"))) or (
                owner.models is None and owner.listed is None and path == "/v1/models"):
            self._send_json(404, _invalid_url("GET", self.path))
            return
        if path.startswith(("/v1/files", "/v1/batches")) and not self._authorized():
            return
        if path == "/v1/batches":
            q = self._query()
            self._send_json(200, owner.list_batches(int(q.get("limit", 20)), q.get("after")))
        elif path.startswith("/v1/batches/"):
            found = owner.retrieve_batch(path.removeprefix("/v1/batches/"))
            self._send_json(200, found) if found else self._send_json(404, _not_found("batch", path))
        elif path.startswith("/v1/files/") and path.endswith("/content"):
            f = owner.files.get(path.removeprefix("/v1/files/").removesuffix("/content"))
            if f is None:
                self._send_json(404, _not_found("file", path))
            else:
                self._send(200, f["data"], {"Content-Type": "application/octet-stream"})
        elif path.startswith("/v1/files/"):
            f = owner.files.get(path.removeprefix("/v1/files/"))
            self._send_json(200, f["meta"]) if f else self._send_json(404, _not_found("file", path))
        elif path == "/v1/models":
            data = [{"id": m, "object": "model", "created": 0, "owned_by": "fake"} for m in models]
            self._send_json(200, {"object": "list", "data": data})
        elif path.startswith("/v1/models/") and path.removeprefix("/v1/models/") in models:
            self._send_json(200, {"id": path.removeprefix("/v1/models/"), "object": "model", "created": 0, "owned_by": "fake"})
        elif path.startswith("/v1/models/"):
            self._send_json(404, error_body(404, path.removeprefix("/v1/models/")))
        else:
            self._send_json(404, _invalid_url("GET", self.path))

    def _post_batch_api(self, path: str, raw: bytes) -> None:
        owner = self.owner
        if not self._authorized():
            return
        if path == "/v1/files":
            fields = _multipart(self.headers.get("Content-Type", ""), raw)
            filename, data = fields.get("file", (None, b""))
            purpose = fields.get("purpose", (None, b""))[1].decode()
            obj = owner.add_file(data, purpose, filename or "upload.jsonl")
            with owner._lock:
                owner.file_uploads += 1
            if owner.on_file_uploaded is not None:
                owner.on_file_uploaded(obj)
            self._send_json(200, obj)
        elif path == "/v1/batches":
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                self._send_json(400, error_body(400, "", "We could not parse the JSON body of your request."))
                return
            if body.get("input_file_id") not in owner.files:
                self._send_json(400, error_body(400, "", f"Invalid input_file_id: {body.get('input_file_id')}"))
                return
            batch = owner.create_batch(body)
            if owner.on_batch_created is not None:
                owner.on_batch_created(batch)
            self._send_json(200, batch)
        elif path.startswith("/v1/batches/") and path.endswith("/cancel"):
            found = owner.cancel_batch(path.removeprefix("/v1/batches/").removesuffix("/cancel"))
            self._send_json(200, found) if found else self._send_json(404, _not_found("batch", path))
        else:
            self._send_json(404, _invalid_url("POST", self.path))

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        path = self.path.split("?")[0].rstrip("/")
        api = {"/v1/chat/completions": "chat", "/v1/responses": "responses"}.get(path)
        if (self.owner.no_batches and path.startswith(("/v1/files", "/v1/batches"))) or (
                self.owner.no_responses and api == "responses"):
            self._send_json(404, _invalid_url("POST", self.path))
            return
        if api is None and path.startswith(("/v1/files", "/v1/batches")):
            self._post_batch_api(path, raw)
            return
        if api is None:
            self._send_json(404, _invalid_url("POST", self.path))
            return
        try:
            body = json.loads(raw or b"{}")
            if not isinstance(body, dict):
                raise ValueError("not an object")
        except ValueError:
            self._send_json(400, error_body(400, "", "We could not parse the JSON body of your request."))
            return
        if "model" not in body:  # as OpenAI does; rfteval's Responses probe relies on it costing nothing
            self._send_json(400, error_body(400, "", "Missing required parameter: 'model'."))
            return
        refused = self._refused(body, api)
        if refused is not None:
            self._send_json(400, error_body(400, str(body.get("model")), refused))
            return
        invalid = self._invalid(body) if api == "chat" else None
        if invalid is not None:
            with self.owner._lock:
                self.owner.stats["invalid"] = self.owner.stats.get("invalid", 0) + 1
            self._send_json(invalid[0], {"error": invalid[1]})
            return
        headers = {k.lower(): v for k, v in self.headers.items()}
        model = str(body.get("model", ""))
        req = Request(path=path, body=body, headers=headers, model=model, api=api)
        owner = self.owner
        admitted, limit_headers = owner._enter()
        if not admitted:
            self._send_json(429, error_body(429, model), limit_headers)
            return
        left = False

        def leave() -> None:
            nonlocal left
            if not left:
                left = True
                owner._leave(served=True)

        try:
            self._generate(req, body, model, headers, limit_headers, leave)
        finally:
            leave()

    def _refused(self, body: dict[str, Any], api: str) -> str | None:
        """The 400 message for a key or response format this server is set to refuse (not recorded)."""
        owner = self.owner
        for key in sorted(owner.unsupported_keys):
            if key in body:
                return f"Unsupported parameter: '{key}' is not supported by this server."
        fmt = body.get("response_format") if api == "chat" else (body.get("text") or {}).get("format")
        if isinstance(fmt, dict) and fmt.get("type") in owner.refused_formats:
            return f"response_format type {fmt.get('type')!r} is not supported; expected one of text, json_object"
        return None

    def _invalid(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]] | None:
        """llama-cpp-python's answer to a role or part its schema lacks, or to a prompt past its context."""
        owner = self.owner
        for i, m in enumerate(body.get("messages") or []):
            if not isinstance(m, dict):
                continue
            if m.get("role") in owner.refused_roles:
                return 500, {"message": validation_list_500(i, m),
                             "type": "internal_server_error", "param": None, "code": None}
            if (owner.refuse_null_tool_content and m.get("role") == "assistant" and m.get("content") is None
                    and m.get("tool_calls")):
                return 500, {"message": null_content_500(i, m),
                             "type": "internal_server_error", "param": None, "code": None}
            content = m.get("content")
            parts: list[Any] = content if isinstance(content, list) else []
            for j, part in enumerate(parts):
                if isinstance(part, dict) and part.get("type") in owner.refused_parts:
                    return 500, {"message": validation_list_500(i, m, j),
                                 "type": "internal_server_error", "param": None, "code": None}
        if owner.context_tokens is not None:
            prompt = count_tokens(_all_text(body, "chat"))
            limit = body.get("max_tokens") or body.get("max_completion_tokens") or 0
            if prompt + limit > owner.context_tokens:
                return 400, {"message": f"This model's maximum context length is {owner.context_tokens} tokens. "
                             f"However, you requested {prompt + limit} tokens ({prompt} in the messages, {limit} in "
                             "the completion). Please reduce the length of the messages or completion.",
                             "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}
        return None

    def _generate(self, req: Request, body: dict[str, Any], model: str, headers: dict[str, str],
                  limit_headers: dict[str, str], leave: Callable[[], None]) -> None:
        """Answer one admitted request. `leave` frees its rate slot once the work is done and before the answer is
        written, as a server with a concurrency cap does: freed after the write, a client that sends its next request
        the moment an answer lands would race this thread's bookkeeping and draw 429s no real server sends."""
        owner = self.owner
        try:
            reply = owner._record(req)
        except Exception as exc:  # a broken test responder: answer 500 rather than hang the client
            self._send_json(500, error_body(500, model, f"fake-openai responder failed: {exc!r}"))
            return
        if owner._take_flex_unavailable(body):
            self._send_json(429, {"error": {"message": "Resource unavailable. Please try again later.",
                                            "type": "server_error", "param": None, "code": "resource_unavailable"}})
            return
        reply_headers = {**limit_headers, **reply.headers}
        delay = owner.delay_s + reply.delay_s
        slots = owner._slots
        if slots is not None and not slots.acquire(owner._stopping):  # wait in line for a slot, hold it while working
            self.close_connection = True
            return
        try:
            if delay > 0 and owner._stopping.wait(delay):
                self.close_connection = True
                return  # stopping: drop the connection without an answer
        finally:
            if slots is not None:
                slots.release()
        leave()
        limit = body.get("max_tokens") or body.get("max_completion_tokens")
        if owner.honour_max_tokens and limit and reply.text and count_tokens(reply.text) > limit:
            reply = _cut(reply, int(limit))
        auth = headers.get("authorization", "")
        if owner.api_key is not None and auth != f"Bearer {owner.api_key}":
            self._send_json(401, error_body(401, model, auth=auth))
        elif owner.models is not None and model not in owner.models:
            self._send_json(404, error_body(404, model))
        elif reply.raw_body is not None:
            self._send(reply.status, reply.raw_body, reply_headers)
        elif reply.status >= 400:
            self._send_json(reply.status, error_body(reply.status, model, reply.text, auth), reply_headers)
        elif body.get("stream"):
            self._send_json(400, error_body(400, model, "fake-openai does not stream; send stream=false."))
        else:
            make = chat_body if req.api == "chat" else responses_body
            self._send_json(reply.status, make(req, reply, owner._next_id()), reply_headers)


def _cut(reply: Reply, limit: int) -> Reply:
    """The reply's text cut after `limit` tokens (count_tokens' tokens), finish reason "length"."""
    import dataclasses

    text = reply.text or ""
    ends = [m.end() for m in re.finditer(r"\w+|[^\w\s]", text)]
    return dataclasses.replace(reply, text=text[: ends[limit - 1]] if limit > 0 else "", finish_reason="length")


def _jsonl(rows: list[dict[str, Any]]) -> bytes:
    return b"".join(json.dumps(r).encode() + b"\n" for r in rows)


def _multipart(content_type: str, raw: bytes) -> dict[str, tuple[str | None, bytes]]:
    """multipart/form-data fields → {name: (filename, data)} (the stdlib email parser reads MIME)."""
    msg = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
        b"Content-Type: " + content_type.encode() + b"\r\nMIME-Version: 1.0\r\n\r\n" + raw)
    fields: dict[str, tuple[str | None, bytes]] = {}
    for part in msg.iter_parts():
        name = part.get_param("name", header="content-disposition")
        data = part.get_payload(decode=True) or b""
        fields[str(name)] = (part.get_filename(), data if isinstance(data, bytes) else str(data).encode())
    return fields


def _not_found(kind: str, path: str) -> dict[str, Any]:
    return {"error": {"message": f"No such {kind}: {path.rsplit('/', 1)[-1]}", "type": "invalid_request_error",
                      "param": None, "code": None}}


def _invalid_url(method: str, path: str) -> dict[str, Any]:
    return {
        "error": {"message": f"Invalid URL ({method} {path})", "type": "invalid_request_error", "param": None, "code": None}
    }


# ---- as a process -----------------------------------------------------------------------------------------------


def reply_from_json(obj: Any) -> Reply:
    """A Reply from a script entry: a string (the text) or an object with Reply's fields."""
    if isinstance(obj, str):
        return Reply(text=obj)
    if not isinstance(obj, dict):
        raise ValueError(f"a reply must be a string or an object, got {type(obj).__name__}")
    obj = dict(obj)
    if "raw_body" in obj and isinstance(obj["raw_body"], str):
        obj["raw_body"] = obj["raw_body"].encode()
    return Reply(**obj)


def load_script(path: str) -> tuple[list[Reply], Responder]:
    """Script file: a JSON list of replies (queued), or {"queue": [...], "by_prompt": {last user text: reply}}.

    Prompts not in `by_prompt` get the echo reply.
    """
    with open(path, encoding="utf-8") as fh:
        script = json.load(fh)
    if isinstance(script, list):
        script = {"queue": script}
    queued = [reply_from_json(r) for r in script.get("queue", [])]
    by_prompt = {k: reply_from_json(v) for k, v in script.get("by_prompt", {}).items()}

    def responder(req: Request) -> Reply:
        return by_prompt.get(req.last_user_text()) or echo_responder(req)

    return queued, responder


def serve_until_stopped(fake: FakeOpenAI, port: int = 0) -> int:
    """Run as a process: start on `port` (0: a free one), print the base_url as the first line, serve until SIGTERM
    or Ctrl-C. The test server's command line and the scripted local judge (scripts/local_judge.py) both end here."""
    fake.start(port)
    print(fake.base_url, flush=True)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    try:
        while not done.wait(0.5):
            pass
    except KeyboardInterrupt:
        pass
    fake.stop()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="A local OpenAI-compatible server for tests (127.0.0.1 only).")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--delay-ms", type=float, default=0.0, help="sleep before every answer")
    parser.add_argument("--script", help="JSON file of scripted replies")
    parser.add_argument("--models", help="comma-separated known models; others get 404 model_not_found")
    parser.add_argument("--max-concurrent", type=int, help="answer 429 (with rate-limit headers) above this")
    parser.add_argument("--no-batches", action="store_true", help="no Files/Batches API (404 Invalid URL)")
    parser.add_argument("--no-responses", action="store_true", help="no Responses API (404 Invalid URL)")
    parser.add_argument("--slots", type=int, help="work on at most this many requests at once; the others queue")
    args = parser.parse_args(argv)
    queued, responder = load_script(args.script) if args.script else ([], echo_responder)
    models = [m for m in args.models.split(",") if m] if args.models else None
    fake = FakeOpenAI(responder, delay_s=args.delay_ms / 1000.0, models=models, max_concurrent=args.max_concurrent,
                      slots=args.slots)
    fake.no_batches, fake.no_responses = args.no_batches, args.no_responses
    fake.queue(*queued)
    return serve_until_stopped(fake, args.port)


if __name__ == "__main__":
    sys.exit(main())
