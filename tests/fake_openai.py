"""A local OpenAI-compatible HTTP server, so tests and benchmarks drive the real `openai` client offline.

It speaks POST /v1/chat/completions, POST /v1/responses and GET /v1/models on 127.0.0.1 only. Replies are
scripted: queued `Reply` objects first, then the responder (default: deterministic `echo:{model}:{last user text}`).
Run as a process: `python tests/fake_openai.py --port 0 --delay-ms 100` prints its base_url on the first line.
"""

from __future__ import annotations

import argparse
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
        message: dict[str, Any] = {"role": "assistant", "content": reply.text, "refusal": reply.refusal}
        if reply.tool_calls:
            message["tool_calls"] = reply.tool_calls
        choices.append({"index": index, "message": message, "finish_reason": finish, "logprobs": None})
    return {
        "id": f"chatcmpl-fake{rid}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": req.model,
        "system_fingerprint": "fp_fake",
        "choices": choices,
        "usage": {
            "prompt_tokens": usage["input_tokens"],
            "completion_tokens": usage["output_tokens"] * int(n),
            "total_tokens": usage["input_tokens"] + usage["output_tokens"] * int(n),
            "prompt_tokens_details": {"cached_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": usage["reasoning_tokens"] * int(n)},
        },
    }


def responses_body(req: Request, reply: Reply, rid: int) -> dict[str, Any]:
    usage = compute_usage(req.body, "responses", reply)
    output: list[dict[str, Any]] = []
    if usage["reasoning_tokens"]:
        output.append({"type": "reasoning", "id": f"rs_fake{rid}", "summary": []})
    content: list[dict[str, Any]] = []
    if reply.text is not None:
        content.append({"type": "output_text", "text": reply.text, "annotations": []})
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
    ):
        self.responder: Responder = responder or echo_responder
        self.delay_s = delay_s
        self.models = list(models) if models is not None else None  # when set, other models get 404
        self.api_key = api_key  # when set, other bearer tokens get 401
        self.requests: list[Request] = []
        self._queue: deque[Reply] = deque()
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._stopping = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._conns: set[socket.socket] = set()
        self.base_url = ""

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
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, name="fake-openai", daemon=True
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
            self.requests.append(req)
            queued = self._queue.popleft() if self._queue else None
        if queued is not None:
            return queued
        out = self.responder(req)
        return Reply(text=out) if isinstance(out, str) else out

    def _next_id(self) -> int:
        with self._lock:
            return next(self._ids)


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

    def do_GET(self) -> None:
        path = self.path.split("?")[0].rstrip("/")
        models = self.owner.models if self.owner.models is not None else list(DEFAULT_MODELS)
        if path == "/v1/models":
            data = [{"id": m, "object": "model", "created": 0, "owned_by": "fake"} for m in models]
            self._send_json(200, {"object": "list", "data": data})
        elif path.startswith("/v1/models/") and path.removeprefix("/v1/models/") in models:
            self._send_json(200, {"id": path.removeprefix("/v1/models/"), "object": "model", "created": 0, "owned_by": "fake"})
        elif path.startswith("/v1/models/"):
            self._send_json(404, error_body(404, path.removeprefix("/v1/models/")))
        else:
            self._send_json(404, _invalid_url("GET", self.path))

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        path = self.path.split("?")[0].rstrip("/")
        api = {"/v1/chat/completions": "chat", "/v1/responses": "responses"}.get(path)
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
        headers = {k.lower(): v for k, v in self.headers.items()}
        model = str(body.get("model", ""))
        req = Request(path=path, body=body, headers=headers, model=model, api=api)
        owner = self.owner
        try:
            reply = owner._record(req)
        except Exception as exc:  # a broken test responder: answer 500 rather than hang the client
            self._send_json(500, error_body(500, model, f"fake-openai responder failed: {exc!r}"))
            return
        delay = owner.delay_s + reply.delay_s
        if delay > 0 and owner._stopping.wait(delay):
            self.close_connection = True
            return  # stopping: drop the connection without an answer
        auth = headers.get("authorization", "")
        if owner.api_key is not None and auth != f"Bearer {owner.api_key}":
            self._send_json(401, error_body(401, model, auth=auth))
        elif owner.models is not None and model not in owner.models:
            self._send_json(404, error_body(404, model))
        elif reply.raw_body is not None:
            self._send(reply.status, reply.raw_body, reply.headers)
        elif reply.status >= 400:
            self._send_json(reply.status, error_body(reply.status, model, reply.text, auth), reply.headers)
        elif body.get("stream"):
            self._send_json(400, error_body(400, model, "fake-openai does not stream; send stream=false."))
        else:
            make = chat_body if api == "chat" else responses_body
            self._send_json(reply.status, make(req, reply, owner._next_id()), reply.headers)


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="A local OpenAI-compatible server for tests (127.0.0.1 only).")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--delay-ms", type=float, default=0.0, help="sleep before every answer")
    parser.add_argument("--script", help="JSON file of scripted replies")
    parser.add_argument("--models", help="comma-separated known models; others get 404 model_not_found")
    args = parser.parse_args(argv)
    queued, responder = load_script(args.script) if args.script else ([], echo_responder)
    models = [m for m in args.models.split(",") if m] if args.models else None
    fake = FakeOpenAI(responder, delay_s=args.delay_ms / 1000.0, models=models)
    fake.queue(*queued)
    fake.start(args.port)
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


if __name__ == "__main__":
    sys.exit(main())
