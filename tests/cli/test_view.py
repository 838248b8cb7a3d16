"""`rfteval view` end to end: the URL it prints and opens (the Agree page for --agree, issue 36), served until Ctrl-C
(the pages themselves: tests/view/)."""

from __future__ import annotations

import json
import signal
import subprocess
import urllib.request

import pytest
from typer.testing import CliRunner

from rfteval.cli.app import app
from tests.support.view_runs import RFTEVAL, ROOT, graders_with_errors, not_significant

runner = CliRunner()


@pytest.mark.slow
@pytest.mark.parametrize("agree", [True, False], ids=["agree", "compare"])
def test_the_url_printed_and_opened_is_the_page_asked_for(monkeypatch, tmp_path, agree):
    """Issue 36: `rfteval view --agree A B` printed and opened /compare. The browser opens the URL printed: /agree
    with --agree, else /compare."""
    from rfteval.view import server

    opened: list[tuple[bool, str]] = []
    monkeypatch.setattr(server, "can_open_browser", lambda: True)
    monkeypatch.setattr(server, "serve", lambda data, sock, open_it, hosts, path="compare": opened.append(
        (open_it, path)))
    paths = graders_with_errors(tmp_path) if agree else not_significant(tmp_path)
    args = ["view", "--agree", *map(str, paths)] if agree else ["view", *map(str, paths)]
    done = runner.invoke(app, args)
    assert done.exit_code == 0, done.output
    page = "agree" if agree else "compare"
    line = next(x for x in done.stdout.splitlines() if x.startswith("rfteval view: http"))
    assert line.split()[2].endswith(f"/{page}")
    assert opened == [(True, page)]


@pytest.mark.slow
@pytest.mark.parametrize("agree", [True, False], ids=["agree", "compare"])
def test_the_command_prints_its_url_serves_and_stops_on_ctrl_c(tmp_path, agree):
    paths = graders_with_errors(tmp_path) if agree else not_significant(tmp_path)
    args = ["--agree", *map(str, paths)] if agree else list(map(str, paths))
    proc = subprocess.Popen([*RFTEVAL, "view", *args, "--no-open"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("rfteval view: http://127.0.0.1:"), line + (proc.stderr.read() if proc.stderr else "")
        url = line.split()[2]
        page = "agree" if agree else "compare"
        assert url.endswith("/" + page)
        with urllib.request.urlopen(url, timeout=60) as r:  # the page's HTML, on the route printed
            assert b"/static/app.js" in r.read()
        with urllib.request.urlopen(url.removesuffix(page) + "api/" + page, timeout=60) as r:
            body = json.loads(r.read())
        assert body["page"] == page and (not agree or body["paths"] == list(map(str, paths)))
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
