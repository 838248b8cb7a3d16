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


def _bundled(out) -> dict:
    text = (out / "data.js").read_text(encoding="ascii")
    return json.loads(text.removeprefix("window.RFTEVAL_BUNDLE = ").rstrip().removesuffix(";"))


@pytest.mark.slow
def test_view_takes_agrees_pass_threshold_and_gate(tmp_path):
    """Issue 36 leftover: on records with no pass verdict the Agree page told the user to "give --pass-threshold",
    which `rfteval view` refused as no such option. It takes agree's --pass-threshold, --min-kappa and --max-bias
    now: the page carries agree's kappa and its gate's verdict, as `rfteval agree` prints them."""
    a, b = graders_with_errors(tmp_path, verdict=False)
    flags = ["--pass-threshold", "0.5", "--min-kappa", "0.6", "--max-bias", "0.3"]
    done = runner.invoke(app, ["view", "--agree", str(a), str(b), *flags, "--bundle", str(tmp_path / "v")])
    assert done.exit_code == 0, done.output
    page = _bundled(tmp_path / "v")["agree"]
    agreed = runner.invoke(app, ["agree", str(a), str(b), *flags, "--format", "json"])
    assert agreed.exit_code == 1, agreed.output  # B's grading errors are past --max-error-rate: the gate fails
    expected = json.loads(agreed.stdout)
    assert page["summary"]["pass"]["kappa"] == expected["pass"]["kappa"] and expected["pass"]["kappa"]["value"]
    assert page["summary"]["gate"] == expected["gate"]
    verdict = page["shown"]["verdict"]
    assert verdict["gated"] and not verdict["passed"]
    assert verdict["failures"] == [f"gate failed: {line}" for line in expected["gate"]["failures"]]
    # the advice is one the command follows: without the threshold, --min-kappa is refused in one line naming it
    done = runner.invoke(app, ["view", "--agree", str(a), str(b), "--min-kappa", "0.6", "--bundle",
                               str(tmp_path / "w")])
    said = [line for line in done.output.splitlines() if line.startswith("rfteval: ")]
    assert done.exit_code == 2 and len(said) == 1 and "--min-kappa" in said[0] and "give --pass-threshold X" in said[0]
    assert not (tmp_path / "w").exists()
