"""A reverse proxy on 127.0.0.1 that records every exchange with the server behind it: the request log a real server
does not keep.

llama-cpp-python's server logs one access line per request, not its body, so "no turn was sent twice" cannot be read
from it. Put in front of the server, the proxy keeps each request's path and body, and the status and body of the
answer the server gave (None when it gave none: the server was dead, or died mid-request). It outlives the server
behind it: killed and restarted on the same port, the server answers through the same proxy and the same log. When
the server cannot be reached the proxy closes the client's connection without an answer, so the client sees what a
dead server's client sees (a connection error), not a 502 it would retry as a server error.

Standard library only; one thread per connection (ThreadingHTTPServer), one upstream connection per request.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

HOP_BY_HOP = frozenset({"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade",
                        "proxy-authorization", "proxy-authenticate", "content-length", "host"})


@dataclass(frozen=True)
class Exchange:
    """One request as the server was sent it, and its answer (status None: no answer came back)."""

    method: str
    path: str
    body: bytes
    status: int | None
    answer: bytes

    @property
    def digest(self) -> str:
        """The request body's hash: two requests with one digest are the same request sent twice."""
        return hashlib.sha256(self.body).hexdigest()

    def request_json(self) -> Any:
        return json.loads(self.body)

    def answer_json(self) -> Any:
        return json.loads(self.answer)


class LoggingProxy:
    """`with LoggingProxy(upstream_port) as proxy:` point a client at `proxy.base_url`; `proxy.exchanges` is the log
    (in arrival order of the answers)."""

    def __init__(self, upstream_port: int, timeout_s: float = 300.0) -> None:
        self.upstream_port, self.timeout_s = upstream_port, timeout_s
        self.exchanges: list[Exchange] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="logging-proxy", daemon=True)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def chat(self) -> list[Exchange]:
        """The chat completion requests so far."""
        with self._lock:
            return [x for x in self.exchanges if x.method == "POST" and x.path.endswith("/chat/completions")]

    def _record(self, exchange: Exchange) -> None:
        with self._lock:
            self.exchanges.append(exchange)

    def _forward(self, method: str, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, list[tuple[str,
                                                                                                        str]], bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.upstream_port, timeout=self.timeout_s)
        try:
            conn.request(method, path, body=body if body else None, headers=headers)
            resp = conn.getresponse()
            return resp.status, resp.getheaders(), resp.read()
        finally:
            conn.close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as the client's connection pool expects

            def _relay(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
                try:
                    status, answer_headers, answer = proxy._forward(self.command, self.path, body, headers)
                except (OSError, http.client.HTTPException):
                    # the server is gone: no answer, and the client's connection closed as a dead server's would be
                    proxy._record(Exchange(self.command, self.path, body, None, b""))
                    self.close_connection = True
                    return
                proxy._record(Exchange(self.command, self.path, body, status, answer))
                self.send_response(status)
                for name, value in answer_headers:
                    if name.lower() not in HOP_BY_HOP and name.lower() not in ("server", "date"):
                        self.send_header(name, value)
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            do_GET = do_POST = _relay

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
                pass  # the log is `exchanges`; nothing on the test's stderr

        return Handler

    def start(self) -> LoggingProxy:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    def __enter__(self) -> LoggingProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
