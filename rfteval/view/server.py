"""`rfteval view`'s web server: Starlette routes over ViewData, served by uvicorn on 127.0.0.1.

The page is static (rfteval/view/static: no build step, nothing from the network) and asks /api/* for JSON.
Every response carries a strict Content-Security-Policy (scripts and styles from this origin only, no inline
code, no request to another origin), and only requests for the host it bound are answered (a web page elsewhere
cannot reach it through DNS rebinding). JSON is written with every non-ASCII character escaped, so texts that
are not valid Unicode (lone surrogates) still travel.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
from collections.abc import Awaitable, Callable
from importlib import resources
from typing import TYPE_CHECKING

from rfteval.errors import InputError

if TYPE_CHECKING:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response

    from rfteval.view.model import ViewData

CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
       "base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
HEADERS = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer",
           "Cross-Origin-Opener-Policy": "same-origin", "Cross-Origin-Resource-Policy": "same-origin",
           "Cache-Control": "no-store"}
PAGES = ("/", "/runs", "/compare", "/item", "/series", "/agree", "/readiness")
STATIC = {"app.js": "text/javascript; charset=utf-8", "app.css": "text/css; charset=utf-8"}
LOOPBACK = ("127.0.0.1", "localhost", "::1")
MISSING = "rfteval view needs Starlette and uvicorn: pip install 'rfteval[view]'"


def require_web_stack() -> None:
    """One line naming what to install when the optional web stack is missing (exit 2 through InputError)."""
    import importlib.util

    if importlib.util.find_spec("starlette") is None or importlib.util.find_spec("uvicorn") is None:
        raise InputError(MISSING, field="view")


def static_text(name: str) -> str:
    return resources.files("rfteval.view").joinpath("static", name).read_text(encoding="utf-8")


def dumps(value: object) -> str:
    """JSON for the page: ASCII only (lone surrogates survive as escapes), no NaN (strict parsers refuse it)."""
    return json.dumps(value, ensure_ascii=True, allow_nan=False, separators=(",", ":"))


def _params(request: Request) -> dict[str, str]:
    return {k: v for k, v in request.query_params.items()}


def _filters(p: dict[str, str]) -> list[str]:
    return [f for f in p.get("filter", "").split(",") if f]


def _int(p: dict[str, str], name: str, default: int) -> int:
    try:
        return int(p.get(name, default))
    except ValueError:
        raise InputError(f"must be an integer, got {p.get(name)!r}", field=name) from None


def make_app(data: ViewData, hosts: tuple[str, ...] = LOOPBACK) -> Starlette:
    """The viewer as an ASGI app over `data` (nothing here writes a file)."""
    from starlette.applications import Starlette
    from starlette.middleware import Middleware
    from starlette.middleware.trustedhost import TrustedHostMiddleware
    from starlette.responses import Response
    from starlette.routing import Route

    def respond(body: str, media: str, status: int = 200) -> Response:
        return Response(body, status_code=status, media_type=media, headers=HEADERS)

    def api(fn: Callable[[dict[str, str]], object]) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            from starlette.concurrency import run_in_threadpool

            try:
                value = await run_in_threadpool(fn, _params(request))
            except InputError as exc:
                return respond(dumps({"error": str(exc)}), "application/json", 400)
            if isinstance(value, str):
                return respond(value, "text/plain; charset=utf-8")
            return respond(dumps(value), "application/json")
        return endpoint

    async def page(request: Request) -> Response:
        return respond(static_text("index.html"), "text/html; charset=utf-8")

    async def static(request: Request) -> Response:
        name = request.path_params["name"]
        if name not in STATIC:
            return respond("not found", "text/plain", 404)
        return respond(static_text(name), STATIC[name])

    async def plot(request: Request) -> Response:
        p = _params(request)
        try:
            from starlette.concurrency import run_in_threadpool

            svg = await run_in_threadpool(data.plot, p.get("a"), p.get("b"), request.path_params["name"])
        except InputError as exc:
            return respond(str(exc), "text/plain; charset=utf-8", 400)
        return respond(svg, "image/svg+xml")

    async def no_icon(request: Request) -> Response:
        return Response(status_code=204, headers=HEADERS)

    routes = [Route(path, page) for path in PAGES] + [
        Route("/favicon.ico", no_icon),
        Route("/static/{name}", static),
        Route("/api/plot/{name}.svg", plot),
        Route("/api/runs", api(lambda p: data.runs_page())),
        Route("/api/compare", api(lambda p: data.compare_page(
            p.get("a"), p.get("b"), _filters(p), p.get("q", ""), p.get("slice") or None, _int(p, "offset", 0),
            _int(p, "limit", 100), p.get("stop") or None, p.get("sort", "")))),
        Route("/api/item", api(lambda p: data.item_page(
            p.get("id", ""), p.get("a"), p.get("b"), _filters(p), p.get("q", ""), p.get("slice") or None,
            p.get("stop") or None, p.get("sort", "")))),
        Route("/api/text", api(lambda p: data.full_text(p.get("label", ""), p.get("id", ""), _int(p, "epoch", 0),
                                                        p.get("field", "output_text")))),
        Route("/api/result", api(lambda p: data.full_result(p.get("label", ""), p.get("id", ""), _int(p, "epoch", 0),
                                                            _int(p, "call", -1)))),
        Route("/api/series", api(lambda p: data.series_page())),
        Route("/api/agree", api(lambda p: data.agree_page(p.get("a"), p.get("b")))),
        Route("/api/readiness", api(lambda p: data.readiness_page(p.get("label")))),
    ]
    return Starlette(routes=routes, middleware=[Middleware(TrustedHostMiddleware, allowed_hosts=list(hosts))])


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on host:port (0: a free port), so the URL is known before the server starts."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise InputError(f"cannot listen on {host}:{port} ({exc.strerror})", field="--port") from None
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def url_of(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://{'[' + host + ']' if ':' in host else host}:{port}/"


def can_open_browser() -> bool:
    """A display to open a browser on: macOS and Windows always, elsewhere an X or Wayland display."""
    import os

    return sys.platform in ("darwin", "win32") or bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def serve(data: ViewData, sock: socket.socket, open_browser: bool, hosts: tuple[str, ...] = LOOPBACK,
          path: str = "compare") -> None:
    """Serve until Ctrl-C; the data's slower parts (dataset, texts) are read on a thread meanwhile."""
    import uvicorn

    url = url_of(sock)
    threading.Thread(target=_quietly(data.warm), daemon=True).start()
    config = uvicorn.Config(make_app(data, hosts), log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    if open_browser:
        import webbrowser

        threading.Timer(0.5, lambda: webbrowser.open(url + path)).start()
    server.run(sockets=[sock])


def _quietly(fn: Callable[[], None]) -> Callable[[], None]:
    def run() -> None:
        try:
            fn()
        except Exception:  # noqa: BLE001 - warming is an optimisation: the page that needs it reports the error
            pass
    return run
