"""rfteval.view.server: the web stack's absence in one line, the headers every response carries, the host check,
errors as JSON, nothing written, and the API handing each page its figures already formatted."""

from __future__ import annotations

import hashlib
import json
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from rfteval.errors import InputError
from rfteval.view.model import ViewData, ViewOptions
from tests.support.view_runs import GRADING_ERRORS, graders_with_errors, not_significant, served


def test_a_missing_web_stack_is_one_line(monkeypatch):
    import importlib.util

    from rfteval.view import server

    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    with pytest.raises(InputError, match=r"pip install 'rfteval\[view\]'"):
        server.require_web_stack()


def _digest(directory: Path) -> dict[str, str]:
    return {str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(directory.rglob("*")) if p.is_file()}


def _get(url: str) -> dict[str, object]:
    with urllib.request.urlopen(url) as r:
        assert r.status == 200 and r.headers["Content-Security-Policy"], url
        return json.loads(r.read())


@pytest.mark.slow
def test_server_headers_host_check_errors_and_it_writes_nothing(tmp_path):
    base, tuned = not_significant(tmp_path)
    before = _digest(tmp_path)
    with served(ViewData([base, tuned])) as url:
        with urllib.request.urlopen(url + "compare?a=base&b=tuned&filter=regressed") as r:
            csp = r.headers["Content-Security-Policy"]
            assert "script-src 'self'" in csp and "default-src 'none'" in csp and "unsafe" not in csp
            assert r.headers["X-Content-Type-Options"] == "nosniff"
            assert b"<script src=\"/static/app.js\"" in r.read()
        for path in ("api/runs", "api/compare?filter=regressed", "api/item?id=i0", "api/readiness",
                     "api/plot/scatter.svg", "static/app.js"):
            with urllib.request.urlopen(url + path) as r:
                assert r.status == 200 and r.headers["Content-Security-Policy"], path
        with pytest.raises(urllib.error.HTTPError) as bad:
            urllib.request.urlopen(url + "api/compare?filter=bogus")
        assert bad.value.code == 400 and "unknown filter" in json.loads(bad.value.read())["error"]
        rebind = urllib.request.Request(url + "api/runs", headers={"Host": "attacker.example"})
        with pytest.raises(urllib.error.HTTPError) as refused:  # DNS rebinding: another host name is refused
            urllib.request.urlopen(rebind)
        assert refused.value.code == 400
    assert _digest(tmp_path) == before


@pytest.mark.slow
def test_the_api_hands_each_page_its_figures_formatted(tmp_path):
    """Issue 36: the page formats no figure of its own. /api/agree carries `rfteval agree`'s table (kappa, the bias
    to four places, the error records), /api/runs and /api/compare each row's figures and its verdict word."""
    base, tuned = not_significant(tmp_path)
    a, b = graders_with_errors(tmp_path)
    with served(ViewData([base, tuned], ViewOptions(agree=(a, b)))) as url:
        agree = _get(url + "api/agree")["shown"]
        runs = _get(url + "api/runs")
        compare = _get(url + "api/compare")
    assert isinstance(agree, dict)
    rows = {row[0]: row[1] for row in agree["summary"]}
    assert rows["Cohen's kappa"].count(".") == 1 and len(rows["Cohen's kappa"].split(".")[1]) == 3
    assert rows["bias (B − A)"].startswith("+") and len(rows["bias (B − A)"].split(".")[1]) == 4
    assert rows["error records A / B"] == f"0 / {GRADING_ERRORS}"
    assert agree["verdict"]["lines"][0].startswith("verdict: ")
    model = runs["models"][1]  # type: ignore[index]
    assert model["delta"]["mean"] > 0 and model["shown"]["delta"] == f"{model['delta']['mean']:+.3f}"
    assert model["shown"]["verdict"] == "no clear difference"
    overall = compare["summary"][0]  # type: ignore[index]
    assert overall["verdict"] == "no clear difference" and overall["shown"]["delta"] == model["shown"]["delta"]
