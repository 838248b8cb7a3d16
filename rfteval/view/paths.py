"""`rfteval view PATH...`: the flags checked into a ViewRequest, then served (server.py) or bundled (bundle.py)."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from rfteval.errors import InputError
from rfteval.view.model import ViewData, ViewOptions

if TYPE_CHECKING:
    from rfteval.compare.agree import AgreeOptions

LOOPBACK = ("127.0.0.1", "localhost", "::1")


@dataclass
class ViewRequest:
    """What `rfteval view` was asked for; building it checks the flags before any record is read."""

    paths: list[Path]
    dataset: Path | None = None
    by: list[str] = field(default_factory=list)
    agree: tuple[Path, Path] | None = None
    host: str = "127.0.0.1"
    port: int = 0
    open_browser: bool = True
    bundle: Path | None = None
    bundle_items: int = 500
    agree_options: AgreeOptions | None = None  # --pass-threshold, --min-kappa, --max-bias: the Agree page's

    def __post_init__(self) -> None:
        if not self.paths:
            if self.agree is None:
                raise InputError("give a run directory or record files to view (or --agree A B)", field="PATH")
            self.paths = [self.agree[0]]
        if not 0 <= self.port < 65536:
            raise InputError(f"must be 0..65535, got {self.port}", field="--port")
        if self.bundle_items < 1:
            raise InputError(f"must be at least 1, got {self.bundle_items}", field="--bundle-items")
        if self.by and self.dataset is None:
            raise InputError("--by needs --dataset (the items' fields live in the dataset)", field="--by")
        if self.bundle is not None:
            from rfteval.compare.paths import compare_inputs

            inputs = compare_inputs(*self.paths, self.dataset, *(self.agree or ()))
            if self.bundle.exists() and not self.bundle.is_dir():
                raise InputError("exists and is not a directory (a bundle is a directory of files)", self.bundle,
                                 field="--bundle")
            if any(self.bundle.resolve() == p.resolve() for p in inputs):
                raise InputError("is one of the inputs: give a new directory", self.bundle, field="--bundle")

    @property
    def first_page(self) -> str:
        """The page printed and opened: --agree's pair of graders, else the comparison."""
        return "agree" if self.agree is not None else "compare"

    def data(self) -> ViewData:
        return ViewData(self.paths, ViewOptions(dataset=self.dataset, by=tuple(self.by), agree=self.agree,
                                                agree_options=self.agree_options))


def view_request(request: ViewRequest) -> str:
    """Serve the viewer until Ctrl-C, or write the bundle; returns the line to print last."""
    if request.bundle is not None:
        from rfteval.view.bundle import write_bundle

        data = request.data()
        note = write_bundle(data, request.bundle, request.bundle_items)
        return f"wrote {request.bundle}/index.html ({note}); open it in a browser, no server needed"
    from rfteval.view import server

    server.require_web_stack()
    # on loopback only requests for a loopback name are answered (DNS rebinding); bound elsewhere on purpose, the
    # viewer answers whatever name reaches it, after the warning below
    hosts = LOOPBACK if request.host in LOOPBACK else ("*",)
    if request.host not in LOOPBACK:
        print(f"rfteval: warning: --host {request.host}: the viewer has no authentication; anyone who can reach "
              "this address can read every prompt, output and score it shows", file=sys.stderr)
    data = request.data()
    page = request.first_page
    if page == "agree":  # the first page's numbers before the URL is printed
        data.agree_page()
    else:
        data.comparison(*data.default_pair)
    sock = server.bind(request.host, request.port)
    print(f"rfteval view: {server.url_of(sock)}{page}  (Ctrl-C stops it)", flush=True)
    open_it = request.open_browser and server.can_open_browser()
    try:
        server.serve(data, sock, open_it, hosts, path=page)
    except KeyboardInterrupt:
        pass
    return "rfteval view: stopped"
