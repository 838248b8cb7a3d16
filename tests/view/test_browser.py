"""`rfteval view` in a real browser: Debian's headless Chromium driven by Playwright for Python (never Playwright's
own browser download). The ChipStack and Accordance demo runs, made here with `rfteval run` as scripts/demo.sh
makes them; the hostile records of tests/support/view_runs.py; the bundle opened from disk. Every request the page makes
is recorded and must stay on the viewer's own origin (or, from disk, on file://)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from rfteval.view.bundle import write_bundle
from rfteval.view.model import ViewData, ViewOptions
from tests.support.optional import missing, require
from tests.support.view_runs import (
    BAD_ARGUMENTS,
    CHROMIUM,
    CHROMIUM_ARGS,
    ERROR_RESULT,
    GRADING_ERRORS,
    LONG_RESULT,
    PWNED_IMG,
    PWNED_LINK,
    PWNED_SCRIPT,
    RLO,
    XSS_IMG,
    XSS_SCRIPT,
    accordance_run,
    agent_records,
    chipstack_run,
    graders_with_errors,
    hostile_records,
    not_significant,
    run,
    served,
)

pytestmark = pytest.mark.slow

if not os.path.exists(CHROMIUM):
    missing(f"Debian's chromium is not installed ({CHROMIUM}): the viewer's browser tests did not run", "browser")
require("playwright.sync_api", "setup")  # the dev extra, as are the view extra's server packages
require("uvicorn", "setup")


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


class Page:
    """A new page that records every request, page error and console error."""

    def __init__(self, browser: object) -> None:
        self.page = browser.new_page(viewport={"width": 1280, "height": 900})  # type: ignore[attr-defined]
        self.requests: list[str] = []
        self.errors: list[str] = []
        self.page.on("request", lambda r: self.requests.append(r.url))
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)

    def goto(self, url: str) -> None:
        self.page.goto(url)
        self.page.wait_for_selector("main :is(h1, .error)")

    def main(self) -> str:
        return self.page.inner_text("main")

    def xss(self) -> object:
        return self.page.evaluate("window.__xss")

    def only_from(self, origin: str) -> None:
        outside = [u for u in self.requests if not u.startswith(origin)]
        assert not outside, outside


@pytest.fixture(scope="module")
def chip(tmp_path_factory) -> Path:
    return chipstack_run(tmp_path_factory.mktemp("browser") / "demo-chipstack")


def test_chipstack_compare_filter_search_item_and_keyboard(browser, chip):
    with served(ViewData([chip])) as url:
        p = Page(browser)
        p.goto(url + "compare")
        assert "+0.115" in p.page.inner_text("#summary") and "[+0.045, +0.184]" in p.page.inner_text("#summary")
        assert "24 of 24 items" in p.page.inner_text("#count")
        p.page.check("input[value=regressed]")
        p.page.wait_for_url(re.compile(r"filter=regressed"))
        p.page.wait_for_selector("#count")
        assert "6 of 24 items" in p.page.inner_text("#count")
        assert all(d.startswith("-") for d in p.page.locator("#items tbody tr td:nth-child(5)").all_inner_texts())
        p.page.fill("input[name=q]", "AXI_PROTOCOL")
        p.page.keyboard.press("Enter")
        p.page.wait_for_url(re.compile(r"q=AXI_PROTOCOL"))
        p.page.wait_for_selector("#count")
        searched = p.page.inner_text("#count")
        assert "of 24 items" in searched and "regressed" in p.page.url
        p.goto(url + "compare?a=base&b=tuned&filter=regressed")
        first, second = p.page.locator("#items tbody tr").nth(0).get_attribute("data-id"), \
            p.page.locator("#items tbody tr").nth(1).get_attribute("data-id")
        p.page.keyboard.press("j")
        p.page.keyboard.press("Enter")
        p.page.wait_for_url(re.compile(r"/item\?id="))
        p.page.wait_for_selector(".pair")
        text = p.main()
        assert f"Item {first}" in text and "item 1 of 6 in this filter" in text
        assert "base · epoch 1" in text and "tuned · epoch 3" in text  # both models' samples, every epoch
        assert len(p.page.locator(".pair").all()) == 3 and p.page.locator("#prompt .msg").count() >= 2
        assert p.page.locator("#diff del, #diff ins").count() > 0  # the word diff of two different outputs
        p.page.keyboard.press("n")
        p.page.wait_for_url(re.compile("id=" + re.escape(str(second))))
        p.page.wait_for_selector(".pair")
        assert f"Item {second}" in p.main() and "item 2 of 6" in p.main()
        p.page.keyboard.press("p")
        p.page.wait_for_url(re.compile("id=" + re.escape(str(first))))
        p.page.wait_for_selector(".pair")
        p.page.keyboard.press("u")
        p.page.wait_for_url(re.compile(r"/compare\?"))
        p.page.wait_for_selector("#count")
        assert "6 of 24" in p.page.inner_text("#count")
        p.goto(url + "runs")
        assert "0.764" in p.page.inner_text("#models") and "verdict: READY" in p.main()
        p.goto(url + "readiness")
        assert "verdict: READY" in p.main() and p.page.locator("#readiness-items tr").count() > 20
        p.goto(url + "series")
        assert "Per item" in p.main()
        assert p.page.evaluate("[...document.images].every(i => i.complete && i.naturalWidth > 0)")
        p.only_from(url)
        assert not p.errors, p.errors


def test_accordance_item_shows_the_judges_steps(browser, tmp_path):
    run_dir = accordance_run(tmp_path / "demo-accordance")
    data = ViewData([run_dir])
    with served(data) as url:
        p = Page(browser)
        p.goto(url + "compare?filter=judged")
        p.page.locator("#items tbody tr a").first.click()
        p.page.wait_for_selector(".pair")
        assert p.page.locator(".steps").count() >= 6  # three epochs, two models
        step = p.page.locator(".steps li").first.inner_text()
        assert step.strip()
        assert "judge steps" in p.main() and "score" in p.main()
        p.goto(url + "runs")
        import json

        calls = json.loads((run_dir / "summary.json").read_text())["judge"]["local-scripted-judge"]["calls"]
        judge = p.page.locator("#run-judge tbody tr").first.inner_text().split("\t")  # the judge's calls, tokens, cost
        assert judge[:3] == ["local-scripted-judge", "this invocation", str(calls)]
        p.only_from(url)
        assert not p.errors, p.errors


def _hostile_data(tmp_path: Path) -> ViewData:
    base, tuned, dataset = hostile_records(tmp_path)
    return ViewData([base, tuned], ViewOptions(dataset=dataset))


def _check_inert(p: Page) -> None:
    assert p.xss() is None  # nothing set it: no script, handler or link ran
    sources = p.page.evaluate("[...document.scripts].map(s => s.getAttribute('src'))")
    assert sources in (["/static/app.js"], ["data.js", "static/app.js"])  # ours only (a bundle: its data too)
    assert p.page.evaluate("[...document.images].every(i => i.closest('.plots'))")  # no image from the data
    assert p.page.evaluate("[...document.links].every(a => !a.href.startsWith('javascript:'))")


def test_every_hostile_case_renders_as_text_and_runs_nothing(browser, tmp_path):
    data = _hostile_data(tmp_path)
    with served(data) as url:
        p = Page(browser)
        p.page.add_init_script("window.addEventListener('securitypolicyviolation', e => "
                               "(window.__csp = (window.__csp || []).concat(e.violatedDirective)))")
        p.goto(url + "compare")
        _check_inert(p)
        ids = p.page.locator("#items tbody tr").evaluate_all("rows => rows.map(r => r.dataset.id)")
        assert len(ids) == 7 and "<img src=x onerror=window.__xss='id'>" in p.page.inner_text("#items")
        assert "\u27e8U+202E\u27e9" in p.page.inner_text("#items")  # the override shown, not obeyed
        for n in range(len(ids)):
            p.goto(url + "compare")
            p.page.locator("#items tbody tr a").nth(n).click()
            p.page.wait_for_selector(".pair")
            p.page.evaluate("document.querySelectorAll('details').forEach(d => d.open = true)")
            _check_inert(p)
        p.goto(url + "item?id=xss-script")
        text = p.main()
        assert XSS_SCRIPT in text and XSS_IMG in text  # the prompt, the reference, the output, the stdout: as text
        p.goto(url + "item?id=xss-link")
        assert "javascript:window.__xss='link'" in p.main() and "judge steps" in p.main()
        p.goto(url + "item?" + "id=" + RLO.replace("\u202e", "%E2%80%AE"))
        assert "\u27e8U+202E\u27e9" in p.main()
        p.goto(url + "item?id=surrogate")
        assert "bad \ufffd unicode" in p.main()
        p.goto(url + "item?id=big")
        assert "more characters not shown" in p.main()
        assert p.page.locator("a[target=_blank]").first.get_attribute("href").startswith("/api/text?")
        assert p.page.evaluate("window.__csp") is None  # nothing even tried to break the policy
        p.only_from(url)
        assert not p.errors, p.errors


def test_the_bundle_opens_from_disk_with_no_server(browser, chip, tmp_path):
    out = tmp_path / "bundle"
    write_bundle(ViewData([chip]), out, limit=10)
    p = Page(browser)
    p.goto((out / "index.html").as_uri() + "#/compare?filter=regressed")
    assert "lowest-delta items of 24" in p.page.inner_text("#note")
    assert "6 of 24 items" in p.page.inner_text("#count") and "+0.115" in p.page.inner_text("#summary")
    assert "look at the 10 in this bundle" in p.page.inner_text("#count")
    p.page.locator("#items tbody tr a").first.click()
    p.page.wait_for_selector(".pair")
    assert "base · epoch 1" in p.main() and "item 1 of 6" in p.main()
    p.page.keyboard.press("n")
    # a function, not an expression: when the first check is false, Playwright polls a string expression with
    # eval, which the bundle's CSP (script-src 'self') refuses: a race that failed one CI run
    p.page.wait_for_function("() => document.body.innerText.includes('item 2 of 6')")
    p.goto((out / "index.html").as_uri() + "#/runs")
    assert "0.764" in p.page.inner_text("#models")
    p.only_from("file://")
    assert not p.errors, p.errors
    hostile = tmp_path / "hostile-bundle"
    write_bundle(_hostile_data(tmp_path), hostile)
    q = Page(browser)
    q.goto(hostile.joinpath("index.html").as_uri() + "#/compare")
    _check_inert(q)
    q.goto(hostile.joinpath("index.html").as_uri() + "#/item?id=xss-script")
    q.page.evaluate("document.querySelectorAll('details').forEach(d => d.open = true)")
    assert XSS_SCRIPT in q.main()
    _check_inert(q)
    q.only_from("file://")


def test_the_readme_screenshots_are_made_by_their_script_and_not_blank():
    """scripts/make_screenshots.py --check: the Compare and Item pages of the demo run show their text, the shots
    are not blank, and docs/view-*.png (the README's) exist at the same size."""
    import subprocess
    import sys

    from tests.support.view_runs import ROOT

    done = subprocess.run([sys.executable, str(ROOT / "scripts/make_screenshots.py"), "--check"], capture_output=True,
                          text=True, cwd=ROOT, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]


def test_the_agree_page_shows_both_graders_side_by_side(browser, tmp_path):
    import json

    rows_a, rows_b = [], []
    for i in range(8):
        common = {"model_label": "base", "item_id": f"q{i}", "epoch": 1, "output_text": f"answer {i}", "error": None}
        rows_a.append({**common, "score": 0.0, "grade_details": {"steps": [f"old judge on q{i}"]}})
        rows_b.append({**common, "score": float(i % 2), "grade_details": {"steps": [f"new judge on q{i}"]}})
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text("".join(json.dumps(r) + "\n" for r in rows_a))
    b.write_text("".join(json.dumps(r) + "\n" for r in rows_b))
    with served(ViewData([a], ViewOptions(agree=(a, b)))) as url:
        p = Page(browser)
        p.goto(url + "agree")
        assert p.page.locator("#agree-items tbody").count() == 4  # the four items they disagree on
        p.page.locator("#agree-items details summary").first.click()
        text = p.main()
        assert "old judge on q" in text and "new judge on q" in text
        p.only_from(url)
        assert not p.errors, p.errors


def _lines(text: str) -> list[str]:
    """Text as lines with each run of spaces or tabs made one (a terminal table's padding, a page table's cells)."""
    return [" ".join(line.split()) for line in text.splitlines()]


def _row(p: Page, table: str, first: str) -> str:
    return " ".join(p.page.locator(f"{table} tr", has_text=first).first.inner_text().split())


def test_the_agree_page_shows_what_rfteval_agree_prints(browser, tmp_path):
    """Issue 36: kappa with its interval, the bias as the terminal prints it (not JSON), the grading errors by side
    and type, and the verdict, in the page's text, on the server's page and a bundle's."""
    a, b = graders_with_errors(tmp_path)
    done = run(["agree", str(a), str(b)])
    assert done.returncode == 0, done.stderr
    printed = _lines(done.stdout)
    kappa = next(line for line in printed if line.startswith("Cohen's kappa"))
    bias = next(line for line in printed if line.startswith("bias (B − A)"))
    verdict = next(line for line in printed if line.startswith("verdict: "))
    errors = f"errors in B: {GRADING_ERRORS} of 96 records (20.8%): judge_error {GRADING_ERRORS}"
    assert "95% CI [" in kappa and errors in printed
    data = ViewData([a], ViewOptions(agree=(a, b)))
    out = tmp_path / "bundle"
    write_bundle(data, out)
    with served(data) as url:
        for where in (url + "agree", out.joinpath("index.html").as_uri() + "#/agree"):
            p = Page(browser)
            p.goto(where)
            assert _row(p, "#agree-summary", "Cohen's kappa") == kappa
            assert _row(p, "#agree-summary", "bias (B") == bias
            assert all(" ".join(r.split()) in printed for r in p.page.locator("#agree-summary tr").all_inner_texts())
            assert errors in _lines(p.page.inner_text("#agree-errors"))
            assert verdict in _lines(p.page.inner_text("#agree-verdict"))
            text = p.main()
            assert "{" not in text and "}" not in text  # no JSON: the samples' grader details stay folded
            p.only_from("file://" if where.startswith("file:") else url)
            assert not p.errors, p.errors


def test_the_runs_page_is_tables_and_a_delta_not_shown_to_differ_is_neutral(browser, chip, tmp_path):
    """Issue 36: the Runs page showed JSON where a table belongs, and a delta the test does not show was coloured
    as a win. A run's summary is tables of text, and a delta's colour follows its verdict (stats.direction)."""
    import json

    base, tuned = not_significant(tmp_path)
    with served(ViewData([base, tuned])) as url:
        p = Page(browser)
        for page, table in (("runs", "#models"), ("compare", "#summary")):
            p.goto(url + page)
            row = p.page.locator(f"{table} tbody tr").nth(1 if page == "runs" else 0)
            delta, plain = row.locator("td.delta"), row.locator("td").nth(1)
            assert delta.inner_text().startswith("+") and "no clear difference" in row.inner_text()
            assert delta.evaluate("e => [...e.classList]") == ["num", "delta"]
            colour = "e => getComputedStyle(e).color"
            assert delta.evaluate(colour) == plain.evaluate(colour)  # the colour of any other figure
        assert not p.errors, p.errors
    summary = json.loads((chip / "summary.json").read_text())
    with served(ViewData([chip])) as url:
        p = Page(browser)
        p.goto(url + "runs")
        p.page.locator("details summary", has_text="spec").click()
        text = p.main()
        assert "{" not in text and "}" not in text and "epochs\t3" in p.page.inner_text("#run-spec")
        for label, m in summary["models"].items():
            cells = p.page.locator("#run-models tbody tr", has_text=label).first.inner_text().split("\t")
            assert cells[0] == label and f"{m['mean']:.3f}" in cells and f"{m['pass_at_k']['3']:.3f}" in cells
        tuned_delta = p.page.locator("#models tbody tr").nth(1).locator("td.delta")
        assert "better" in p.page.locator("#models tbody tr").nth(1).inner_text()  # shown: coloured as a gain
        assert tuned_delta.evaluate("e => getComputedStyle(e).color") == "rgb(46, 139, 87)"
        p.only_from(url)
        assert not p.errors, p.errors


# ------------------------------------------------------------------ agent runs (issue 37): trajectories


def _pwned(p: Page) -> None:
    """Nothing from the transcripts ran: no flag set, no image, no javascript: link, no script but the page's."""
    assert p.page.evaluate("window.__pwned") is None
    assert p.page.evaluate("[...document.images].every(i => i.closest('.plots'))")
    assert p.page.evaluate("[...document.links].every(a => !a.href.startsWith('javascript:'))")
    sources = p.page.evaluate("[...document.scripts].map(s => s.getAttribute('src'))")
    assert sources in (["/static/app.js"], ["data.js", "static/app.js"])


def _expand_every_result(p: Page) -> None:
    """Click every "show all" of the page and wait until each cut result holds its whole text."""
    count = p.page.locator("button.show-all").count()
    for _ in range(count):  # a clicked button is disabled while it loads, then gone
        p.page.locator("button.show-all:not([disabled])").first.click()
    p.page.wait_for_function("n => document.querySelectorAll('.cut-note button').length === 0 && "
                             "document.querySelectorAll('.cut-note').length === n", arg=count)


def _first_card(p: Page) -> object:
    return p.page.locator(".pair").first.locator(".sample").first


def test_an_agents_trajectory_renders_in_order_and_a_cut_result_expands(browser, tmp_path):
    base, tuned, parquet, dataset = agent_records(tmp_path)
    with served(ViewData([base, tuned], ViewOptions(dataset=dataset))) as url:
        p = Page(browser)
        p.goto(url + "item?id=search")
        assert p.page.locator(".pair").count() == 2  # both epochs, base and tuned side by side
        card = _first_card(p)
        assert card.locator(".turn-label").all_text_contents() == ["turn 1", "turn 2", "turn 3"]
        assert card.locator(".tool-name").all_text_contents() == ["search", "fetch"]
        assert "stop: no_tool_calls" in card.locator(".traj-head").inner_text()
        turns = card.locator(".turn")
        assert "I'll look that up." in turns.nth(0).inner_text() and '"top_k": 3' in turns.nth(0).inner_text()
        assert turns.nth(2).locator(".output").inner_text().strip() == "Paris."  # the answer, in its turn, once
        assert card.locator(".output").count() == 1
        result = turns.nth(1).locator("pre.result")
        assert "END OF THE FETCHED PAGE" not in result.text_content()
        note = turns.nth(1).locator(".cut-note")
        assert f"the first 2,000 of {len(LONG_RESULT):,} characters" in note.inner_text()
        note.locator("button").click()
        p.page.wait_for_function("() => document.querySelector('.turn:nth-child(2) pre.result').textContent"
                                 ".endsWith('END OF THE FETCHED PAGE')")
        assert result.text_content() == LONG_RESULT and "all 24,343 characters" in note.inner_text()

        p.goto(url + "item?id=errors")
        card = _first_card(p)
        badges = card.locator(".badge").all_text_contents()
        assert badges == ["BadArguments \u00d71", "ValueError \u00d71", "arguments are not JSON", "error: BadArguments",
                          "error: ValueError"]
        assert BAD_ARGUMENTS in card.inner_text() and ERROR_RESULT in card.inner_text()
        p.goto(url + "item?id=loop")
        tuned_card = p.page.locator(".pair").first.locator(".sample").nth(1)
        assert tuned_card.locator(".turn").count() == 8
        assert "stop: max_turns" in tuned_card.locator(".badge").first.inner_text()
        assert "no result" in tuned_card.locator(".turn").nth(7).inner_text()
        p.only_from(url)
        assert not p.errors, p.errors


def test_tool_results_are_hostile_text_and_run_nothing(browser, tmp_path):
    base, tuned, parquet, dataset = agent_records(tmp_path)
    with served(ViewData([parquet], ViewOptions(dataset=dataset))) as url:
        p = Page(browser)
        p.page.add_init_script("window.addEventListener('securitypolicyviolation', e => "
                               "(window.__csp = (window.__csp || []).concat(e.violatedDirective)))")
        p.goto(url + "item?id=hostile")
        p.page.evaluate("document.querySelectorAll('details').forEach(d => d.open = true)")
        _pwned(p)
        _expand_every_result(p)
        _pwned(p)
        text = p.main()
        assert PWNED_SCRIPT in text and PWNED_IMG in text and PWNED_LINK in text  # name, arguments, results: text
        assert "javascript:window.__pwned='args'" in text and "\u27e8U+202E\u27e9" in text
        assert p.page.locator("pre.result", has_text="the end of a very long line").count() == 4  # 2 epochs x 2
        assert "a result no call asked for" in text
        assert p.page.evaluate("window.__csp") is None
        p.only_from(url)
        assert not p.errors, p.errors


def test_the_compare_page_sorts_and_filters_by_turns_tool_calls_stop_and_errors(browser, tmp_path):
    base, tuned, parquet, dataset = agent_records(tmp_path)
    with served(ViewData([base, tuned], ViewOptions(dataset=dataset))) as url:
        p = Page(browser)
        p.goto(url + "compare")
        ids = lambda: p.page.locator("#items tbody tr").evaluate_all("rows => rows.map(r => r.dataset.id)")  # noqa: E731
        assert ids()[0] == "loop" and "Items, lowest delta first" in p.main()
        p.page.select_option("select[name=sort]", "-d_turns")
        p.page.wait_for_url(re.compile(r"sort=-d_turns"))
        p.page.wait_for_selector("#count")
        assert ids()[:3] == ["loop", "hostile", "quick"] and "Items, \u0394turns, largest first" in p.main()
        deltas = [float(d) for d in p.page.locator("#items td.d-turns").all_inner_texts()]
        assert deltas == sorted(deltas, reverse=True) and deltas[0] == 7.0
        p.page.check("input[value=fewer_calls]")
        p.page.wait_for_url(re.compile(r"filter=fewer_calls"))
        p.page.wait_for_selector("#count")
        assert set(ids()) == {"search", "errors"} and "2 of 5 items" in p.page.inner_text("#count")
        p.goto(url + "compare?stop=max_turns")
        assert ids() == ["loop"] and "max_turns 2" in p.page.inner_text("#items")
        p.goto(url + "compare?filter=tool_errors")
        assert ids() == ["errors"] and "4 (BadArguments 2, ValueError 2)" in p.page.inner_text("#items")
        p.goto(url + "compare?sort=-d_turns")
        p.page.locator("#items tbody tr a").nth(1).click()  # hostile, second by Δturns
        p.page.wait_for_selector(".pair")
        assert "item 2 of 5" in p.main()
        p.page.keyboard.press("n")
        p.page.wait_for_url(re.compile(r"id=quick"))  # the next by Δturns, not by delta
        p.only_from(url)
        assert not p.errors, p.errors


def test_an_agent_bundle_expands_results_and_sorts_offline(browser, tmp_path):
    base, tuned, parquet, dataset = agent_records(tmp_path)
    out = tmp_path / "bundle"
    write_bundle(ViewData([base, tuned], ViewOptions(dataset=dataset)), out)
    p = Page(browser)
    p.page.add_init_script("window.addEventListener('securitypolicyviolation', e => "
                           "(window.__csp = (window.__csp || []).concat(e.violatedDirective)))")
    index = out.joinpath("index.html").as_uri()
    p.goto(index + "#/compare?sort=-d_turns")
    assert p.page.locator("#items tbody tr").evaluate_all("rows => rows.map(r => r.dataset.id)")[:2] == \
        ["loop", "hostile"]
    p.goto(index + "#/item?id=search")
    _expand_every_result(p)
    assert p.page.locator("pre.result", has_text="END OF THE FETCHED PAGE").count() == 2  # base, both epochs
    p.goto(index + "#/item?id=hostile")
    _expand_every_result(p)
    _pwned(p)
    assert p.page.locator("pre.result", has_text="the end of a very long line").count() == 4
    assert p.page.evaluate("window.__csp") is None
    p.only_from("file://")
    assert not p.errors, p.errors
