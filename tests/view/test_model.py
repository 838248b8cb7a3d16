"""rfteval.view and rfteval.compare.samples: the viewer's pages equal compare's numbers and print them as compare and
agree print them, filters, search, paging, the bundle, hostile content in the JSON, the request's flags (the server:
tests/view/test_server.py; the command: tests/cli/test_view.py; the browser tests: tests/view/test_browser.py)."""

from __future__ import annotations

import json
import tomllib
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from rfteval.compare.samples import SampleSource
from rfteval.errors import InputError
from rfteval.view.model import ViewData, ViewOptions
from rfteval.view.sample_card import RESULT_CHARS
from tests.support.view_runs import (
    BAD_ARGUMENTS,
    BIG,
    ERROR_RESULT,
    GRADING_ERRORS,
    LONE_SURROGATE,
    LONG_LINE,
    LONG_RESULT,
    PWNED_IMG,
    PWNED_SCRIPT,
    RLO,
    ROOT,
    agent_records,
    agent_rows,
    chipstack_run,
    graders_with_errors,
    hostile_records,
    not_significant,
    run,
    served,
)


def _records(path: Path, rows: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _row(item: str, epoch: int, score: float, text: str, label: str = "m") -> dict[str, object]:
    return {"model_label": label, "item_id": item, "epoch": epoch, "score": score, "output_text": text,
            "error": None, "grade_details": {"steps": ["s"]} if item == "b" else None}


def test_sample_source_reads_one_items_records_jsonl_and_parquet(tmp_path):
    """An item's records in epoch order, a re-graded cell's later record kept (as compare keeps it); the same
    rows through the Parquet reader; search and the grader-details flag by item."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [_row("a", 2, 0.5, "second"), _row("a", 1, 0.0, "first, old"), _row("b", 1, 1.0, "needle here"),
            _row("a", 1, 1.0, "first, re-graded"), _row("c", 1, 0.0, "x", label="other")]
    jsonl = _records(tmp_path / "r.jsonl", rows)
    table = pa.Table.from_pylist([{**r, "grade_details": json.dumps(r["grade_details"]) if r["grade_details"] else None}
                                  for r in rows])
    parquet = tmp_path / "r.parquet"
    pq.write_table(table, parquet, row_group_size=2)
    written = [(p.stat().st_mtime_ns, p.read_bytes()) for p in (jsonl, parquet)]
    for path in (jsonl, parquet):
        source = SampleSource(path, "m")
        assert source.item_ids == ["a", "b"]
        assert [(r["epoch"], r["output_text"]) for r in source.records("a")] == [(1, "first, re-graded"),
                                                                               (2, "second")]
        assert source.records("nope") == []
        assert source.matching("NEEDLE") == {"b"}
        assert source.judged_items() == {"b"}
    assert [(p.stat().st_mtime_ns, p.read_bytes()) for p in (jsonl, parquet)] == written  # read, never written


@pytest.fixture(scope="module")
def chip(tmp_path_factory) -> Path:
    return chipstack_run(tmp_path_factory.mktemp("view") / "demo-chipstack")


def _compare_json(*args: str) -> dict[str, object]:
    done = run(["compare", *args, "--format", "json"])
    assert done.returncode in (0, 1), done.stderr
    return json.loads(done.stdout)


def _unpathed(result: dict[str, object]) -> dict[str, object]:
    """A comparison's JSON without the sides' file names: in a run directory compare reads DIR/<label>.jsonl, the
    viewer the same records from DIR/results.parquet (faster); every number must be the same."""
    out = json.loads(json.dumps(result))
    for role in ("baseline", "candidate"):
        assert out[role].pop("path").endswith((".jsonl", ".parquet"))
    return out


@pytest.mark.slow
def test_every_pages_numbers_equal_compare_format_json(chip):
    """The Compare page's summary and items, the Runs page's models and the Series page equal `rfteval compare
    --format json` on the same run directory (the numbers come from the same library call)."""
    expected = _compare_json(str(chip), "--label", "base", "--label", "tuned")
    data = ViewData([chip])
    page = data.compare_page(None, None, limit=1000)
    got = json.loads(json.dumps(page))
    items = expected.pop("items")
    assert _unpathed(got["result"]) == _unpathed(expected)
    assert [(r["item_id"], r["baseline"], r["candidate"], r["delta"], r["delta_ci95"], r["baseline_epochs"],
             r["candidate_epochs"]) for r in got["items"]] == \
        [(r["item_id"], r["baseline"], r["candidate"], r["delta"], r["delta_ci95"], r["baseline_epochs"],
          r["candidate_epochs"]) for r in items]
    overall = got["summary"][0]
    assert overall["name"] == "overall" and overall["delta"]["mean"] == expected["delta"]["mean"]
    assert overall["baseline"]["ci95"] == expected["baseline"]["ci95"]
    runs = json.loads(json.dumps(data.runs_page()))
    sides = {m["label"]: m["side"] for m in runs["models"]}
    assert _unpathed({"baseline": sides["base"], "candidate": sides["tuned"]}) == \
        _unpathed({"baseline": expected["baseline"], "candidate": expected["candidate"]})
    assert runs["models"][1]["delta"] == expected["delta"]
    for row in got["items"]:  # W/T/L over epoch pairs: 3 x 3 pairs of each item's used records
        assert sum(row["wtl"]) == row["baseline_epochs"] * row["candidate_epochs"]
    done = run(["readiness", str(chip), "--label", "base", "--format", "json"])
    readiness = json.loads(done.stdout)
    page = json.loads(json.dumps(data.readiness_page("base")))
    # the page reads no output text: every check but answer skew (which it says it leaves out), every number equal
    assert page["report"]["verdict"] == readiness["verdict"] and page["report"]["checks"] == \
        [c for c in readiness["checks"] if c["name"] != "answer_skew"] and "answer skew" in page["left_out"]
    for key in ("mean", "se", "zero_variance", "expected_zero_signal", "errors", "mean_histogram", "sd_histogram",
                "n_records", "n_items"):
        assert page["report"][key] == readiness[key], key
    assert page["total"] == len(readiness["items"])
    series = _compare_json(str(chip))
    assert json.loads(json.dumps(data.series_page()))["series"] == series
    item = json.loads(json.dumps(data.item_page(items[0]["item_id"], None, None)))
    assert item["row"]["delta"] == items[0]["delta"] and len(item["samples"]["base"]) == 3


@pytest.mark.slow
def test_filters_search_paging_and_neighbours(chip):
    data = ViewData([chip])
    rows = data.compare_page(None, None, limit=1000)["items"]
    assert isinstance(rows, list)
    regressed = data.compare_page(None, None, ["regressed"])
    assert [r["item_id"] for r in regressed["items"]] == [r["item_id"] for r in rows if r["delta"] < 0]  # type: ignore[index]
    assert regressed["total"] == 6
    improved = data.filtered("base", "tuned", ["improved"])
    assert len(improved) == 18 and not set(improved) & set(data.filtered("base", "tuned", ["regressed"]))
    hardest = data.filtered("base", "tuned", ["hardest"])
    assert len(hardest) == 6  # a quarter of 24
    page = data.compare_page(None, None, offset=20, limit=10)
    assert page["total"] == 24 and len(page["items"]) == 4  # type: ignore[arg-type]
    first = rows[0]["item_id"]  # type: ignore[index]
    record = data.sources["tuned"].samples.records(first)[0]
    word = json.loads(record["output_text"])["predicted"][0]["value"]  # type: ignore[arg-type]
    found = data.filtered("base", "tuned", [], word)
    assert first in found and len(found) <= 24
    assert data.filtered("base", "tuned", [], "no such text anywhere 12345") == []
    assert data.filtered("base", "tuned", [], "interface described in the spec")  # a prompt's words
    item = data.item_page(regressed["items"][1]["item_id"], None, None, ["regressed"])  # type: ignore[index]
    assert item["prev"] == regressed["items"][0]["item_id"] and item["next"] == regressed["items"][2]["item_id"]  # type: ignore[index]
    assert item["position"] == 1 and item["total"] == 6
    with pytest.raises(InputError, match="unknown filter"):
        data.filtered("base", "tuned", ["nonsense"])
    with pytest.raises(InputError, match="no model"):
        data.compare_page("base", "nobody")


@pytest.mark.slow
def test_hostile_content_travels_as_json_text(tmp_path):
    base, tuned, dataset = hostile_records(tmp_path)
    data = ViewData([base, tuned], ViewOptions(dataset=dataset))
    page = data.item_page("big", None, None)
    out = page["samples"]["base"][0]["output_text"]  # type: ignore[index]
    assert out["omitted"] == BIG + len(" the end") - 100_000 and len(out["text"]) == 100_000  # type: ignore[index]
    assert data.full_text("base", "big", 1, "output_text").endswith(" the end")
    item = data.item_page("surrogate", None, None)
    assert item["samples"]["tuned"][0]["output_text"] == LONE_SURROGATE  # type: ignore[index]
    from rfteval.view.server import dumps

    assert "\\udcff" in dumps(item)  # an escape, not an encoding error
    with served(data) as url:
        with urllib.request.urlopen(url + "api/item?id=surrogate") as r:
            assert json.loads(r.read())["samples"]["base"][0]["grader_stdout"] == LONE_SURROGATE
        with urllib.request.urlopen(url + "api/text?label=base&id=big&epoch=1&field=output_text") as r:
            assert r.headers["Content-Type"].startswith("text/plain") and len(r.read()) == BIG + len(" the end")


@pytest.mark.slow
def test_bytes_that_are_not_utf8_show_as_replacement_characters(tmp_path):
    """An output holding bytes that are not UTF-8 (compare reads the file: it never looks at output_text) is
    shown with U+FFFD in their place, never a crash."""
    lines = [b'{"model_label": "%s", "item_id": "a", "epoch": 1, "score": %s, "output_text": "x\xff\xfey"}\n'
             % (label, score) for label, score in ((b"base", b"0.0"), (b"tuned", b"1.0"))]
    paths = []
    for name, line in zip(("base", "tuned"), lines):
        paths.append(tmp_path / f"{name}.jsonl")
        paths[-1].write_bytes(line)
    assert _compare_json(*map(str, paths))["delta"]["mean"] == 1.0
    page = ViewData(paths).item_page("a", None, None)
    assert page["samples"]["base"][0]["output_text"] == "x\ufffd\ufffdy"  # type: ignore[index]


@pytest.mark.slow
def test_bundle_says_what_it_left_out(chip, tmp_path):
    done = run(["view", str(chip), "--bundle", str(tmp_path / "b"), "--bundle-items", "5"])
    assert done.returncode == 0, done.stderr
    assert "the 5 lowest-delta items of 24" in done.stderr
    text = (tmp_path / "b" / "data.js").read_text(encoding="ascii")
    payload = json.loads(text.removeprefix("window.RFTEVAL_BUNDLE = ").rstrip().removesuffix(";"))
    assert payload["left_out"].startswith("the 5 lowest-delta items of 24; the rest: rfteval view ")
    assert len(payload["items"]) == 5 and len(payload["compare"]["items"]) == 5
    expected = _compare_json(str(chip), "--label", "base", "--label", "tuned")
    expected.pop("items")
    assert _unpathed(payload["compare"]["result"]) == _unpathed(expected)  # the bundle's numbers are compare's too
    assert {r["item_id"] for r in payload["compare"]["items"]} == set(payload["items"])
    regressed = [r["item_id"] for r in payload["compare"]["items"] if "regressed" in r["flags"]]
    assert regressed == [r["item_id"] for r in payload["compare"]["items"] if r["delta"] < 0]
    html = (tmp_path / "b" / "index.html").read_text()
    assert 'http-equiv="Content-Security-Policy"' in html and 'src="data.js"' in html and "/static/" not in html
    for name in ("scatter", "deltas", "distributions"):
        assert (tmp_path / "b" / "plots" / f"{name}.svg").read_text().startswith("<svg")
    again = run(["view", str(chip), "--bundle", str(chip / "base.jsonl")])  # never over what it reads
    assert again.returncode == 2


def test_a_host_other_than_loopback_warns(monkeypatch, capsys, tmp_path):
    from rfteval.view import paths, server

    monkeypatch.setattr(server, "require_web_stack", lambda: None)
    monkeypatch.setattr(server, "bind", lambda host, port: __import__("socket").socket())
    monkeypatch.setattr(server, "url_of", lambda sock: "http://0.0.0.0:1/")
    monkeypatch.setattr(server, "serve", lambda *a, **k: None)

    class Data:
        default_pair = ("a", "b")

        def comparison(self, a: str, b: str) -> None:
            return None

    monkeypatch.setattr(paths.ViewRequest, "data", lambda self: Data())
    paths.view_request(paths.ViewRequest([tmp_path], host="0.0.0.0", open_browser=False))
    err = capsys.readouterr().err
    assert "no authentication" in err and "0.0.0.0" in err


def test_view_needs_paths_and_checks_flags(tmp_path):
    from rfteval.view.paths import ViewRequest

    with pytest.raises(InputError, match="give a run directory"):
        ViewRequest([])
    with pytest.raises(InputError, match="--by needs --dataset"):
        ViewRequest([tmp_path], by=["x"])
    with pytest.raises(InputError, match="0..65535"):
        ViewRequest([tmp_path], port=70000)


def test_demo_prints_the_view_command():
    assert "rfteval\" view runs/demo-chipstack" in (ROOT / "scripts/demo.sh").read_text() or \
        "rfteval view runs/demo-chipstack" in (ROOT / "scripts/demo.sh").read_text()


@pytest.mark.slow
def test_agree_page_equals_rfteval_agree_and_shows_both_graders(tmp_path):
    """Two graders' records of the same samples (as `rfteval agree A B` takes them): the page's numbers are
    agree's JSON, and each listed sample carries both graders' details."""
    rows_a, rows_b = [], []
    for i in range(12):
        for epoch in (1, 2):
            a = (i % 4) / 4
            b = min(1.0, a + (0.5 if i % 3 == 0 else 0.0))
            common = {"model_label": "base", "item_id": f"q{i}", "epoch": epoch, "output_text": f"answer {i}",
                      "error": None}
            rows_a.append({**common, "score": a, "grade_details": {"steps": [f"old judge on q{i}"], "result": a}})
            rows_b.append({**common, "score": b, "grade_details": {"steps": [f"new judge on q{i}"], "result": b}})
    path_a, path_b = _records(tmp_path / "a.jsonl", rows_a), _records(tmp_path / "b.jsonl", rows_b)
    done = run(["agree", str(path_a), str(path_b), "--format", "json", "--top", "200"])
    assert done.returncode == 0, done.stderr
    expected = json.loads(done.stdout)
    page = json.loads(json.dumps(ViewData([path_a], ViewOptions(agree=(path_a, path_b))).agree_page()))
    assert page["summary"]["pearson"] == expected["pearson"] and page["summary"]["bias"] == expected["bias"]
    assert [r["item_id"] for r in page["items"]] == [r["item_id"] for r in expected["items"]]
    first = page["items"][0]
    assert first["samples"]["a"]["grade_details"]["steps"] == [f"old judge on {first['item_id']}"]
    assert first["samples"]["b"]["grade_details"]["steps"] == [f"new judge on {first['item_id']}"]
    done = run(["view", "--agree", str(path_a), str(path_b), "--bundle", str(tmp_path / "b")])
    assert done.returncode == 0, done.stderr
    text = (tmp_path / "b" / "data.js").read_text(encoding="ascii")
    bundled = json.loads(text.removeprefix("window.RFTEVAL_BUNDLE = ").rstrip().removesuffix(";"))
    assert bundled["agree"]["summary"]["pearson"] == expected["pearson"]


@pytest.mark.slow
def test_by_field_slices_equal_compare_by_and_filter_the_list(chip):
    """--by difficulty: the page's slices are compare --by's, and the slice filter keeps that value's items."""
    dataset = ROOT / "datasets/chipstack/items.jsonl"
    expected = _compare_json(str(chip), "--label", "base", "--label", "tuned", "--dataset", str(dataset),
                             "--by", "difficulty")
    data = ViewData([chip], ViewOptions(dataset=dataset, by=("difficulty",)))
    page = json.loads(json.dumps(data.compare_page(None, None, limit=1000)))
    assert page["result"]["slices"] == expected["slices"]
    values = page["by"]["difficulty"]
    assert values and set(values) <= {"easy", "medium", "hard"}
    hard = data.compare_page(None, None, slice_="difficulty=hard", limit=1000)
    rows = hard["items"]
    assert isinstance(rows, list) and rows and all(r["slices"]["difficulty"] == "hard" for r in rows)
    assert hard["total"] == expected["slices"]["difficulty=hard"]["items"]


def test_the_page_never_parses_data_as_html():
    """The page's script builds the DOM from text nodes only; its HTML has no inline script or handler."""
    from rfteval.view.server import static_text

    script = static_text("app.js")
    for banned in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function"):
        assert banned not in script.replace("no innerHTML", ""), banned
    html = static_text("index.html")
    import re

    assert "<script>" not in html and re.search(r"\son[a-z]+\s*=", html, re.I) is None


@pytest.mark.slow
@pytest.mark.parametrize("suffix", ["jsonl", "parquet"])
def test_readiness_page_reads_no_output_and_leaves_out_only_answer_skew(tmp_path, suffix):
    """Every sample answers "A" (label-like answers): `rfteval readiness` flags answer skew from the output texts;
    the page, which reads only the signal columns, leaves that one check out and says so, and no other number
    moves. Records without their outputs must not read as every answer empty (that too is label-like)."""
    import pandas as pd

    from rfteval.readiness.paths import SIGNAL_COLUMNS, ReadinessRequest, assess_path

    rows = [_row(f"i{k}", e, float((k + e) % 3 == 0), "A") for k in range(12) for e in range(3)]
    path = _records(tmp_path / "m.jsonl", rows)
    if suffix == "parquet":
        pd.DataFrame(rows).to_parquet(tmp_path / "m.parquet")
        path.unlink()
        path = tmp_path / "m.parquet"
    full = assess_path(ReadinessRequest(path)).report.to_dict()
    narrow = assess_path(ReadinessRequest(path, columns=SIGNAL_COLUMNS)).report.to_dict()
    assert "answer_skew" in [c["name"] for c in full["checks"]]
    assert narrow["checks"] == [c for c in full["checks"] if c["name"] != "answer_skew"]
    assert narrow["labels"] is None
    for key in ("mean", "se", "zero_variance", "expected_zero_signal", "errors", "items", "n_records"):
        assert narrow[key] == full[key], key
    page = ViewData([path]).readiness_page(None)
    assert page["report"]["checks"] == narrow["checks"] and "answer skew" in str(page["left_out"])
    with pytest.raises(InputError, match="re-grade"):
        assess_path(ReadinessRequest(path, columns=SIGNAL_COLUMNS, regrade=2))


@pytest.mark.slow
def test_runs_page_links_two_graders_grades_of_the_same_samples_to_agree(tmp_path):
    """Paths holding the same samples (model_label/item_id/epoch, same outputs) graded differently, as a run's
    records and `rfteval agree A --regrade G --out B.jsonl` or `rfteval grade` write them: the Runs page links the
    pair to /agree?a=..&b=.., whose numbers are `agree_paths`'s (the --agree form's call). A copy of the same grades
    and another run of the model (other outputs) are no pair; the Agree page opens no pair it was not given."""
    from rfteval.compare.agree import AgreeOptions, agree_paths

    rows_a, rows_b, rows_other = [], [], []
    for i in range(10):
        for epoch in (1, 2):
            common = {"model_label": "base", "item_id": f"q{i}", "epoch": epoch, "output_text": f"answer {i}",
                      "error": None}
            rows_a.append({**common, "score": (i % 4) / 4, "grade_details": {"steps": ["old"]}})
            rows_b.append({**common, "score": 1.0 if i % 3 else 0.0, "grade_details": {"steps": ["new"]}})
            rows_other.append({**common, "output_text": f"another answer {i}", "score": 1.0})
    for name in ("b", "copy", "other"):  # one directory each: the viewer names a label by its directory
        (tmp_path / name).mkdir()
    a, b = _records(tmp_path / "a.jsonl", rows_a), _records(tmp_path / "b" / "b.jsonl", rows_b)
    copy = _records(tmp_path / "copy" / "a.jsonl", rows_a)
    other = _records(tmp_path / "other" / "a.jsonl", rows_other)
    data = ViewData([a, b, copy, other])
    links = json.loads(json.dumps(data.runs_page()))["agree_links"]
    assert links == [{"a": str(a), "b": str(b)}, {"a": str(b), "b": str(copy)}]
    page = json.loads(json.dumps(data.agree_page(str(a), str(b))))
    expected = agree_paths(a, b, AgreeOptions(top=200)).to_json()
    assert page["summary"]["pearson"] == json.loads(json.dumps(expected))["pearson"]
    assert [r["item_id"] for r in page["items"]] == [r["item_id"] for r in expected["items"]]
    assert page["items"][0]["samples"]["b"]["grade_details"]["steps"] == ["new"]
    with pytest.raises(InputError, match="no grader pair"):
        data.agree_page(str(a), str(other))
    assert ViewData([a, copy]).runs_page()["agree_links"] == []
    import urllib.parse

    with served(data) as url:  # the link as the Runs page writes it, over HTTP
        query = urllib.parse.urlencode(links[0])
        with urllib.request.urlopen(url + "api/agree?" + query) as r:
            assert json.loads(r.read())["summary"]["pearson"] == page["summary"]["pearson"]
        with pytest.raises(urllib.error.HTTPError) as bad:
            urllib.request.urlopen(url + "api/agree?" + urllib.parse.urlencode({"a": str(a), "b": "/etc/passwd"}))
        assert bad.value.code == 400 and "no grader pair" in json.loads(bad.value.read())["error"]


def _printed(stdout: str) -> list[str]:
    """A command's terminal output, each line with its runs of spaces (the table's padding) made one."""
    return [" ".join(line.split()) for line in stdout.splitlines()]


@pytest.mark.slow
def test_agree_page_prints_what_rfteval_agree_prints(tmp_path):
    """Issue 36: the Agree page showed the bias as raw JSON, no kappa, no error counts, no verdict. Its table, error
    lines, notes, verdict and items are now `rfteval agree`'s terminal output, cell for cell."""
    a, b = graders_with_errors(tmp_path)
    done = run(["agree", str(a), str(b)])
    assert done.returncode == 0, done.stderr
    printed = _printed(done.stdout)
    shown = ViewData([a], ViewOptions(agree=(a, b))).agree_page()["shown"]
    assert isinstance(shown, dict)
    rows = {row[0]: row for row in shown["summary"]}
    for what, value, note in shown["summary"]:
        assert " ".join(f"{what} {value} {note}".split()) in printed, what
    expected = json.loads(run(["agree", str(a), str(b), "--format", "json"]).stdout)
    bias, kappa = expected["bias"], expected["pass"]["kappa"]
    assert rows["bias (B − A)"][1:] == [f"{bias['mean']:+.4f}", f"95% CI [{bias['ci95'][0]:+.4f}, "
                                                                 f"{bias['ci95'][1]:+.4f}]"]
    assert rows["Cohen's kappa"][1] == f"{kappa['value']:.3f}"
    assert rows["error records A / B"][1] == f"0 / {GRADING_ERRORS}"
    assert shown["errors"][0].startswith(f"errors in B: {GRADING_ERRORS} of 96 records (20.8%): judge_error "
                                         f"{GRADING_ERRORS}")
    assert all(line in printed for line in shown["errors"])
    verdict = shown["verdict"]
    assert not verdict["gated"] and verdict["lines"] and all(line in printed for line in verdict["lines"])
    assert verdict["lines"][0].startswith("verdict: ")
    warned = [line.removeprefix("rfteval: ") for line in done.stderr.splitlines() if "gate warning" in line]
    assert verdict["warnings"] == warned and "error-rate" in warned[0]  # no gate given: the error rate is a warning
    assert [" ".join(c.split()) for c in shown["items"][0][:4]] == printed[printed.index(
        "item A B B−A sample: output") + 2].split()[:4]
    assert shown["verdict_rows"] and all(" ".join(r) in printed for r in shown["verdict_rows"])


@pytest.mark.slow
def test_agree_page_shows_the_gates_verdict_when_given_thresholds(tmp_path):
    from rfteval.compare.agree import AgreeOptions
    from rfteval.compare.gate_types import AgreeGate

    a, b = graders_with_errors(tmp_path)
    done = run(["agree", str(a), str(b), "--min-kappa", "0.6", "--max-bias", "0.05"])
    assert done.returncode == 1, done.stderr  # B's grading errors are past --max-error-rate: the gate fails
    options = ViewOptions(agree=(a, b), agree_options=AgreeOptions(gate=AgreeGate(min_kappa=0.6, max_bias=0.05)))
    verdict = ViewData([a], options).agree_page()["shown"]["verdict"]  # type: ignore[index]
    printed = _printed(done.stdout)
    gates = [line for line in printed if line.startswith("gate ")]
    # the verdict per candidate stays beside the gate, as the terminal prints both (the page once dropped it)
    verdicts = [line for line in printed if line.startswith("verdict: ")]
    assert len(verdicts) == 1 and len(gates) == 3
    assert verdict["gated"] and not verdict["passed"] and verdict["lines"] == verdicts + gates
    assert verdict["failures"] == [line.removeprefix("rfteval: ") for line in done.stderr.splitlines()
                                   if "gate failed" in line]


def _kappa_at(a: Path, b: Path, threshold: float) -> float:
    """Cohen's kappa of the two files' pass verdicts at score >= threshold, over the samples with no error record on
    either side (agree's default --errors exclude), computed here from the lines."""
    def verdicts(path: Path) -> dict[tuple[str, str, int], bool | None]:
        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
        return {(r["model_label"], r["item_id"], r["epoch"]): None if r["error"] else r["score"] >= threshold
                for r in rows}

    va, vb = verdicts(a), verdicts(b)
    pairs = [(va[k], vb[k]) for k in va if va[k] is not None and vb.get(k) is not None]
    n = len(pairs)
    observed = sum(x == y for x, y in pairs) / n
    pa, pb = sum(x for x, _ in pairs) / n, sum(y for _, y in pairs) / n
    chance = pa * pb + (1 - pa) * (1 - pb)
    return (observed - chance) / (1 - chance)


@pytest.mark.slow
def test_agree_page_takes_the_pass_threshold_the_request_carries(tmp_path):
    """Issue 36 leftover: records with no pass verdict made the Agree page say "give --pass-threshold X", which
    `rfteval view` did not take. The request carries agree's --pass-threshold and gate to the page: kappa, and the
    gate's verdict."""
    from rfteval.compare.agree import AgreeOptions
    from rfteval.compare.gate_types import AgreeGate
    from rfteval.view.paths import ViewRequest

    a, b = graders_with_errors(tmp_path, verdict=False)
    bare = ViewRequest([], agree=(a, b)).data().agree_page()
    assert bare["summary"]["pass"] is None  # type: ignore[index]
    assert any("give --pass-threshold X" in note for note in bare["shown"]["notes"])  # type: ignore[index]

    options = AgreeOptions(0.5, gate=AgreeGate(min_kappa=0.6))
    page = json.loads(json.dumps(ViewRequest([], agree=(a, b), agree_options=options).data().agree_page()))
    kappa = _kappa_at(a, b, 0.5)
    assert page["summary"]["pass"]["kappa"]["value"] == pytest.approx(kappa, abs=1e-12)
    rows = {row[0]: row for row in page["shown"]["summary"]}
    assert rows["Cohen's kappa"][1] == f"{kappa:.3f}"
    assert not any("--pass-threshold" in note for note in page["shown"]["notes"])
    verdict = page["shown"]["verdict"]
    assert verdict["gated"] and [c["name"] for c in page["summary"]["gate"]["checks"]] == ["min-kappa", "error-rate"]


@pytest.mark.slow
def test_runs_and_compare_rows_are_compares_figures_and_words(tmp_path):
    """A delta above 0 that the test does not show: printed as compare prints it, and its word (the one verdict rule,
    which colours it) is neutral on the Runs, Compare and Series pages."""
    base, tuned = not_significant(tmp_path)
    done = run(["compare", str(base), str(tuned)])
    overall = next(line for line in _printed(done.stdout) if line.startswith("overall "))
    expected = _compare_json(str(base), str(tuned))["delta"]
    data = ViewData([base, tuned])
    row = data.runs_page()["models"][1]["shown"]  # type: ignore[index]
    summary = data.compare_page(None, None)["summary"][0]  # type: ignore[index]
    s = summary["shown"]
    assert expected["mean"] > 0 and row["verdict"] == summary["verdict"] == "no clear difference"
    assert " ".join(["overall", s["items"], s["baseline"], s["candidate"], s["delta"], s["delta_ci95"], s["p"],
                     s["wtl"]]) == overall
    lo, hi = expected["ci95"]
    assert (row["delta"], row["delta_ci95"], row["p"]) == (f"{expected['mean']:+.3f}", f"[{lo:+.3f}, {hi:+.3f}]",
                                                           f"{expected['p_value']:.3f}")
    items = data.compare_page(None, None, limit=1000)["items"]
    assert isinstance(items, list)
    for r in items:  # compare's per-item table: a change beyond --tie is coloured, no test behind it
        assert r["shown"]["delta"] == f"{r['delta']:+.3f}"
        assert r["shown"]["tone"] == ("up" if r["delta"] > 1e-9 else "down" if r["delta"] < -1e-9 else "")


@pytest.mark.slow
def test_runs_page_shows_the_run_summary_as_tables(chip):
    """Issue 36: the Runs page showed summary.json's parts as JSON. Each run is now tables of text: the run, a row per
    model (its figures as `rfteval run` prints them), the spec's settings one per row; no cell holds JSON."""
    runs = json.loads(json.dumps(ViewData([chip]).runs_page()))["runs"]
    assert len(runs) == 1
    run_info = runs[0]
    summary = json.loads((chip / "summary.json").read_text())
    table = run_info["models"]
    assert [r[0] for r in table["rows"]] == list(summary["models"])
    for r in table["rows"]:
        m = summary["models"][r[0]]
        cells = dict(zip(table["columns"], r))
        assert cells["mean"] == f"{m['mean']:.3f}" and cells["95% CI"] == f"[{m['ci95'][0]:.3f}, {m['ci95'][1]:.3f}]"
        assert cells["pass@3"] == f"{m['pass_at_k']['3']:.3f}" and cells["records"] == str(m["records"])
        assert cells["errors"] == str(m["errors"]["total"])
    about = dict(run_info["about"])
    assert about["items × epochs"] == f"{summary['items']} × {summary['epochs']}"
    assert about["grader"].startswith(summary["grader"]["name"])
    spec = dict(run_info["spec"])
    toml = tomllib.loads((chip / "spec.resolved.toml").read_text())
    assert spec["epochs"] == str(toml["epochs"]) and spec["models.base.model"] == toml["models"]["base"]["model"]
    cells = [c for r in run_info["about"] + table["rows"] + run_info["spec"] for c in r]
    assert all(isinstance(c, str) and "{" not in c for c in cells)


@pytest.mark.slow
def test_series_rows_carry_the_series_verdict(chip):
    data = ViewData([chip])
    page = json.loads(json.dumps(data.series_page()))
    series = page["series"]
    assert [r["verdict"] for r in page["shown"][1:]] == [c["verdict"] for c in series["candidates"]]
    assert page["shown"][1]["delta"] == f"{series['candidates'][0]['delta']['mean']:+.3f}"


# ------------------------------------------------------------------ agent runs (issue 37): trajectories


@pytest.fixture(scope="module")
def agent_files(tmp_path_factory) -> tuple[Path, Path, Path, Path]:
    return agent_records(tmp_path_factory.mktemp("agent"))


def _agent_data(files: tuple[Path, Path, Path, Path], kind: str) -> ViewData:
    base, tuned, parquet, dataset = files
    return ViewData([base, tuned] if kind == "jsonl" else [parquet], ViewOptions(dataset=dataset))


def _turns(sample: dict[str, object]) -> list[dict[str, object]]:
    rollout = sample["rollout"]
    assert isinstance(rollout, dict)
    return rollout["trajectory"]  # type: ignore[no-any-return]


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["jsonl", "parquet"])
def test_an_agent_sample_carries_its_trajectory_in_order(agent_files, kind):
    """Each sample of an agent record: its turns in order (the assistant's text, each call's name and arguments,
    pretty when they are JSON, as sent when not), each result under its call, cut at RESULT_CHARS with its length
    said, error badges from the "error: <Type>:" content and the record's counts, the stop reason; the final
    answer shown once (in its turn). The same from JSONL lines and from Parquet's columns."""
    data = _agent_data(agent_files, kind)
    page = json.loads(json.dumps(data.item_page("search", None, None)))
    base = page["samples"]["base"][0]
    assert base["rollout"]["turns"] == 3 and base["rollout"]["tool_calls"] == 2
    assert base["rollout"]["stop_reason"] == "no_tool_calls" and base["rollout"]["tool_errors"] == {}
    turns = _turns(base)
    assert [t["turn"] for t in turns] == [1, 2, 3]
    assert turns[0]["text"] == "I'll look that up." and turns[1]["text"] is None
    assert [[c["name"] for c in t["calls"]] for t in turns] == [["search"], ["fetch"], []]
    first = turns[0]["calls"][0]
    assert first["arguments"] == json.dumps({"query": "capital of France", "top_k": 3}, indent=2)
    assert first["arguments_json"] and first["result"] == {"index": 0, "chars": 34, "error": None,
                                                           "text": "1. Paris is the capital of France."}
    cut = turns[1]["calls"][0]["result"]
    assert len(LONG_RESULT) > 20_000 and cut["index"] == 1 and cut["chars"] == len(LONG_RESULT)
    assert cut["text"] == {"text": LONG_RESULT[:RESULT_CHARS], "omitted": len(LONG_RESULT) - RESULT_CHARS}
    assert turns[2]["final"] and turns[2]["text"] is None and base["output_text"] == "Paris."  # shown once
    assert data.full_result("base", "search", 1, 1) == LONG_RESULT  # the rest, on demand
    assert data.full_result("tuned", "search", 2, 0) == "1. Paris is the capital of France."
    with pytest.raises(InputError, match="no tool result 2"):
        data.full_result("base", "search", 1, 2)
    with pytest.raises(InputError, match="no epoch 9"):
        data.full_result("base", "search", 9, 0)

    errors = json.loads(json.dumps(data.item_page("errors", None, None)))["samples"]["base"][1]
    assert errors["epoch"] == 2 and errors["rollout"]["tool_errors"] == {"BadArguments": 1, "ValueError": 1}
    bad, failed = (t["calls"][0] for t in _turns(errors)[:2])
    assert bad["arguments"] == BAD_ARGUMENTS and not bad["arguments_json"]  # broken JSON shown as it was sent
    assert bad["result"]["error"] == "BadArguments" and failed["result"]["error"] == "ValueError"
    assert failed["result"]["text"] == ERROR_RESULT

    loop = json.loads(json.dumps(data.item_page("loop", None, None)))["samples"]
    stopped = loop["tuned"][0]
    assert stopped["rollout"]["stop_reason"] == "max_turns" and [t["turn"] for t in _turns(stopped)] == \
        list(range(1, 9))
    last = _turns(stopped)[-1]
    assert last["final"] and last["calls"][0]["result"] is None  # the call the limit stopped: no result
    assert _turns(loop["base"][0]) == [{"turn": 1, "role": "assistant", "text": None, "calls": [], "unasked": [],
                                        "final": True}]

    hostile = json.loads(json.dumps(data.item_page("hostile", None, None)))["samples"]["base"][0]
    turns = _turns(hostile)
    assert turns[0]["text"] == PWNED_SCRIPT + " let me look " + RLO  # the text as it is: the page shows it as text
    assert turns[0]["calls"][0]["name"] == PWNED_IMG
    assert turns[0]["unasked"] == [{"index": 1, "chars": len(PWNED_IMG), "text": PWNED_IMG, "error": None,
                                    "tool_call_id": "call_nobody_made"}]  # a result no call asked for: listed
    long_line = turns[1]["calls"][0]["result"]
    assert long_line["index"] == 2 and long_line["chars"] == len(LONG_LINE)
    assert data.full_result("base", "hostile", 1, 2) == LONG_LINE


@pytest.mark.slow
def test_records_without_rollouts_make_the_pages_they_made(tmp_path):
    """A run without tools: no sample carries a rollout, no Compare row or page an agent's part, and an agent
    filter selects nothing (the filters and order of a page before issue 37)."""
    base, tuned = not_significant(tmp_path)
    data = ViewData([base, tuned])
    page = data.compare_page(None, None)
    assert "agent" not in page and "sort" not in page and "stop" not in page
    assert all("rollout" not in r for r in page["items"])  # type: ignore[union-attr]
    item = data.item_page("i0", None, None)
    assert all("rollout" not in s for side in item["samples"].values() for s in side)  # type: ignore[union-attr]
    assert data.filtered("base", "tuned", ["more_turns"]) == [] and data.filtered("base", "tuned", stop="x") == []
    assert data.filtered("base", "tuned", sort="-d_turns") == data.filtered("base", "tuned")


def _expected_means() -> dict[tuple[str, str], dict[str, object]]:
    """Per (label, item): the mean turns and tool calls over its epochs, its tool errors and stop reasons, from the
    records as written."""
    out: dict[tuple[str, str], dict[str, object]] = {}
    for r in agent_rows():
        e = out.setdefault((str(r["model_label"]), str(r["item_id"])), {"turns": [], "calls": [], "errors": 0,
                                                                          "stops": {}})
        e["turns"].append(r["turns"])  # type: ignore[attr-defined]
        e["calls"].append(r["tool_calls"])  # type: ignore[attr-defined]
        e["errors"] += sum(r["tool_errors"].values())  # type: ignore[attr-defined, operator]
        e["stops"][r["stop_reason"]] = e["stops"].get(r["stop_reason"], 0) + 1  # type: ignore[attr-defined, index]
    for e in out.values():
        e["turns"] = sum(e["turns"]) / len(e["turns"])  # type: ignore[arg-type]
        e["calls"] = sum(e["calls"]) / len(e["calls"])  # type: ignore[arg-type]
    return out


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["jsonl", "parquet"])
def test_compare_rows_carry_each_sides_rollouts_and_sort_and_filter_by_them(agent_files, kind):
    """The Compare page of an agent pair: per item, each side's mean turns and tool calls over its epochs, the
    tuned − base differences, the stop reasons and tool errors of each side; sorted by Δturns or Δtool calls
    (either way, ties in the comparison's order) and filtered by them, by stop reason and by tool errors; an item
    page's neighbours follow the list's order."""
    data = _agent_data(agent_files, kind)
    expected = _expected_means()
    page = json.loads(json.dumps(data.compare_page(None, None)))
    assert page["agent"]["stop_reasons"] == ["max_turns", "no_tool_calls"]
    rows = {r["item_id"]: r["rollout"] for r in page["items"]}
    assert set(rows) == {"search", "errors", "hostile", "loop", "quick"}
    for item, row in rows.items():
        b, t = expected[("base", item)], expected[("tuned", item)]
        assert row["baseline"]["turns"] == b["turns"] and row["candidate"]["tool_calls"] == t["calls"]
        assert row["d_turns"] == pytest.approx(t["turns"] - b["turns"])  # type: ignore[operator]
        assert row["d_tool_calls"] == pytest.approx(t["calls"] - b["calls"])  # type: ignore[operator]
        assert (row["baseline"]["tool_errors"], row["candidate"]["tool_errors"]) == (b["errors"], t["errors"])
        assert (row["baseline"]["stop_reasons"], row["candidate"]["stop_reasons"]) == (b["stops"], t["stops"])
    assert rows["quick"]["d_turns"] == 0.5 and rows["loop"]["shown"]["d_turns"] == "+7.00"  # means over epochs
    assert rows["loop"]["shown"]["stop_reasons"] == ["no_tool_calls 2", "max_turns 2"]
    assert rows["errors"]["shown"]["tool_errors"] == ["4 (BadArguments 2, ValueError 2)", "0"]

    order = data.filtered("base", "tuned")  # the comparison's: lowest delta first
    d_turns = {i: expected[("tuned", i)]["turns"] - expected[("base", i)]["turns"] for i in order}  # type: ignore[operator]
    d_calls = {i: expected[("tuned", i)]["calls"] - expected[("base", i)]["calls"] for i in order}  # type: ignore[operator]
    assert data.filtered("base", "tuned", sort="-d_turns") == sorted(order, key=lambda i: -d_turns[i])
    assert data.filtered("base", "tuned", sort="d_turns") == sorted(order, key=lambda i: d_turns[i])
    assert data.filtered("base", "tuned", sort="-d_tool_calls") == sorted(order, key=lambda i: -d_calls[i])
    assert data.filtered("base", "tuned", sort="-d_turns")[:2] == ["loop", "hostile"]
    assert data.filtered("base", "tuned", ["more_turns"]) == [i for i in order if d_turns[i] > 0]
    assert data.filtered("base", "tuned", ["fewer_calls"]) == [i for i in order if d_calls[i] < 0]
    assert data.filtered("base", "tuned", ["tool_errors"]) == ["errors"]
    assert data.filtered("base", "tuned", stop="max_turns") == ["loop"]
    assert data.filtered("base", "tuned", ["improved"], stop="no_tool_calls", sort="-d_turns") == \
        sorted([i for i in order if i in data.filtered("base", "tuned", ["improved"])], key=lambda i: -d_turns[i])
    sorted_page = data.compare_page(None, None, sort="-d_turns", limit=2)
    assert [r["item_id"] for r in sorted_page["items"]] == ["loop", "hostile"]  # type: ignore[index, union-attr]
    assert sorted_page["sort"] == "-d_turns" and sorted_page["total"] == 5
    item = data.item_page("hostile", None, None, sort="-d_turns")
    assert (item["prev"], item["next"], item["position"]) == ("loop", "quick", 1)
    with pytest.raises(InputError, match="unknown order"):
        data.filtered("base", "tuned", sort="delta; drop")
    with pytest.raises(InputError, match="unknown filter"):
        data.filtered("base", "tuned", ["more_everything"])


@pytest.mark.slow
def test_an_unreadable_or_missing_transcript_is_said_not_a_crash(tmp_path):
    """A transcript that is not JSON, one whose messages are not objects, and a failed rollout's record (no
    transcript): each sample page opens and says what it has."""
    rows = []
    for label in ("base", "tuned"):
        common = {"model_label": label, "item_id": "a", "score": 1.0, "error": None, "output_text": "x"}
        rows += [{**common, "epoch": 1, "turns": 2, "stop_reason": "no_tool_calls", "tool_calls": 1,
                  "tool_errors": None, "transcript": "[{not json"},
                 {**common, "epoch": 2, "turns": 1, "stop_reason": "length", "tool_calls": 0, "tool_errors": None,
                  "transcript": json.dumps([7, {"role": "tool", "content": {"a": 1}}])},
                 {**common, "epoch": 3, "score": None, "output_text": None, "turns": None, "stop_reason": None,
                  "tool_calls": None, "tool_errors": None, "transcript": None,
                  "error": {"stage": "generate", "type": "server_error", "message": "gone"}}]
    path = _records(tmp_path / "r.jsonl", rows)
    data = ViewData([path])
    samples = json.loads(json.dumps(data.item_page("a", "base", "tuned")))["samples"]["base"]
    assert samples[0]["rollout"]["trajectory"] is None and samples[0]["rollout"]["unreadable"]
    assert samples[0]["rollout"]["tool_errors"] == {}
    assert _turns(samples[1]) == [{"turn": 1, "role": "assistant", "text": None, "calls": [], "unasked": [
        {"index": 0, "chars": 8, "text": '{"a": 1}', "error": None, "tool_call_id": None}]}]
    assert samples[2]["rollout"] == {"turns": None, "tool_calls": None, "stop_reason": None, "tool_errors": {},
                                     "trajectory": None, "unreadable": False}
    assert data.full_result("base", "a", 2, 0) == '{"a": 1}'


@pytest.mark.slow
def test_the_api_serves_a_whole_tool_result(agent_files):
    data = _agent_data(agent_files, "parquet")
    with served(data) as url:
        with urllib.request.urlopen(url + "api/result?label=base&id=search&epoch=1&call=1") as r:
            assert r.headers["Content-Type"].startswith("text/plain")
            assert r.read().decode() == LONG_RESULT
        with pytest.raises(urllib.error.HTTPError) as bad:
            urllib.request.urlopen(url + "api/result?label=base&id=search&epoch=1&call=7")
        assert bad.value.code == 400 and "no tool result 7" in json.loads(bad.value.read())["error"]
        with urllib.request.urlopen(url + "api/compare?sort=-d_turns&filter=more_turns") as r:
            assert [row["item_id"] for row in json.loads(r.read())["items"]] == ["loop", "hostile", "quick"]
        with urllib.request.urlopen(url + "api/item?id=hostile&sort=d_turns&filter=more_turns&stop=no_tool_calls") as r:
            page = json.loads(r.read())
            assert (page["prev"], page["next"]) == ("quick", "loop")


@pytest.mark.slow
def test_an_agent_bundle_holds_every_whole_result_offline(agent_files, tmp_path):
    """The bundle's item pages carry each result's first characters; the rest of every cut result is in
    results/<n>.js (one per item), marked on its result; the orders and stop-reason flags travel too."""
    from rfteval.view.bundle import write_bundle

    out = tmp_path / "bundle"
    write_bundle(_agent_data(agent_files, "jsonl"), out)
    text = (out / "data.js").read_text(encoding="ascii")
    payload = json.loads(text.removeprefix("window.RFTEVAL_BUNDLE = ").rstrip().removesuffix(";"))
    assert LONG_RESULT not in text and "END OF THE FETCHED PAGE" not in text
    rows = payload["compare"]["items"]
    assert payload["compare"]["orders"]["-d_turns"][:2] == ["loop", "hostile"]
    flags = {r["item_id"]: r["flags"] for r in rows}
    assert "stop=max_turns" in flags["loop"] and "tool_errors" in flags["errors"] and "more_turns" in flags["loop"]
    n = [r["item_id"] for r in rows].index("search")
    cut = _turns(payload["items"]["search"]["samples"]["base"][0])[1]["calls"][0]["result"]
    file, at = cut["part"]
    assert file == n
    parts = (out / "results" / f"{n}.js").read_text(encoding="ascii")
    prefix = f"(window.RFTEVAL_RESULTS = window.RFTEVAL_RESULTS || {{}})[{n}] = "
    assert parts.startswith(prefix)
    assert json.loads(parts.removeprefix(prefix).rstrip().removesuffix(";"))[at] == LONG_RESULT
    m = [r["item_id"] for r in rows].index("quick")
    assert not (out / "results" / f"{m}.js").exists()  # nothing cut, no file


@pytest.mark.slow
def test_a_bundle_without_rollouts_writes_what_it_wrote(tmp_path):
    from rfteval.view.bundle import write_bundle

    base, tuned = not_significant(tmp_path)
    write_bundle(ViewData([base, tuned]), tmp_path / "b")
    text = (tmp_path / "b" / "data.js").read_text(encoding="ascii")
    payload = json.loads(text.removeprefix("window.RFTEVAL_BUNDLE = ").rstrip().removesuffix(";"))
    assert "orders" not in payload["compare"] and "agent" not in payload["compare"]
    assert not (tmp_path / "b" / "results").exists() and '"rollout"' not in text


@pytest.mark.slow
def test_an_agent_run_is_told_from_its_files_without_reading_them(tmp_path, agent_files):
    """carries_rollouts: a Parquet file by its columns, a JSONL file by its first records (a failed rollout's
    record, which may lack the fields, first); a run without tools, or an unreadable file, is not an agent's."""
    from rfteval.compare.samples import carries_rollouts

    base, tuned, parquet, _ = agent_files
    assert carries_rollouts(base) and carries_rollouts(parquet)
    failed = {"model_label": "m", "item_id": "a", "epoch": 1, "score": None,
              "error": {"stage": "generate", "type": "server_error", "message": "gone"}}
    mixed = _records(tmp_path / "mixed.jsonl", [failed, failed, *agent_rows()[:1]])
    assert carries_rollouts(mixed)
    plain = _records(tmp_path / "plain.jsonl", [_row("a", 1, 1.0, "x")])
    assert not carries_rollouts(plain) and not carries_rollouts(tmp_path / "missing.jsonl")
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist([_row("a", 1, 1.0, "x")]), tmp_path / "plain.parquet")
    assert not carries_rollouts(tmp_path / "plain.parquet")


@pytest.mark.slow
def test_compare_rows_count_rollouts_as_compare_counts_records(tmp_path):
    """A cell held twice counts its later record; a generation failure (no rollout was played) counts nothing, not
    zero turns; a record's tool errors count in its item's total."""
    rows = []
    for label, turns in (("base", 2), ("tuned", 5)):
        common = {"model_label": label, "item_id": "a", "error": None, "output_text": "x", "stop_reason": "length",
                  "transcript": "[]"}
        rows += [{**common, "epoch": 1, "score": 0.0, "turns": 9, "tool_calls": 9, "tool_errors": {"KeyError": 3}},
                 {**common, "epoch": 1, "score": 1.0, "turns": turns, "tool_calls": turns - 1,
                  "tool_errors": {"KeyError": 1}},  # the cell again, later: this one counts
                 {**common, "epoch": 2, "score": None, "turns": 0, "tool_calls": 0, "tool_errors": {"ToolCrash": 5},
                  "error": {"stage": "generate", "type": "server_error", "message": "gone"}}]
    data = ViewData([_records(tmp_path / "r.jsonl", rows)])
    row = data.compare_page("base", "tuned")["items"][0]["rollout"]  # type: ignore[index]
    assert (row["baseline"]["turns"], row["candidate"]["turns"], row["d_turns"], row["d_tool_calls"]) == \
        (2.0, 5.0, 3.0, 3.0)
    assert row["baseline"]["tool_errors"] == 1 and row["candidate"]["tool_error_types"] == {"KeyError": 1}
    assert row["baseline"]["stop_reasons"] == {"length": 1}


@pytest.mark.slow
def test_compare_rows_show_compares_own_per_item_agent_figures(agent_files, monkeypatch):
    """The Compare page's turns, tool calls, tool errors and deltas are compare's (rfteval.compare.agent's per-item
    columns of CompareResult.items), not computed again here: a change to compare's figures is what the page shows."""
    import rfteval.compare.agent as agent

    computed = agent._item_columns

    def shifted(sides, values):  # compare's figures, marked: 100 more turns on every side
        out = computed(sides, values)
        for key in ("baseline_turns", "candidate_turns"):
            out[key] = out[key] + 100
        return out

    monkeypatch.setattr(agent, "_item_columns", shifted)
    expected = _expected_means()
    rows = {r["item_id"]: r["rollout"] for r in _agent_data(agent_files, "jsonl").compare_page(None, None)["items"]}
    for item, row in rows.items():
        assert row["baseline"]["turns"] == expected[("base", item)]["turns"] + 100  # type: ignore[operator]
        assert row["candidate"]["tool_calls"] == expected[("tuned", item)]["calls"]


@pytest.mark.slow
def test_an_agent_run_against_one_without_tools_compares_as_compare_does(agent_files, tmp_path):
    """compare adds its agent figures only when both sides are agent runs; neither does the Compare page, while the
    agent side's samples still carry their trajectories."""
    base, _, _, dataset = agent_files
    plain = _records(tmp_path / "tuned.jsonl", [
        {**_row(str(r["item_id"]), int(r["epoch"]), float(r["score"]), "plain answer", "tuned")}  # type: ignore[arg-type]
        for r in agent_rows() if r["model_label"] == "base"])
    data = ViewData([base, plain], ViewOptions(dataset=dataset))
    assert "agent" not in data.comparison("base", "tuned").to_json(items=False)
    page = data.compare_page(None, None)
    assert "agent" not in page and all("rollout" not in r for r in page["items"])  # type: ignore[union-attr]
    assert data.filtered("base", "tuned", ["more_turns"]) == []
    samples = json.loads(json.dumps(data.item_page("search", None, None)))["samples"]
    assert samples["base"][0]["rollout"]["turns"] == 3 and "rollout" not in samples["tuned"][0]


@pytest.mark.slow
def test_readiness_verdict_and_statuses_are_the_terminals_words_not_their_keys(tmp_path):
    """Tried as a new user: a run whose base scored the maximum everywhere showed "verdict: not_ready" on the Runs
    and Readiness pages (and "not_ready" as a check's status) where `rfteval readiness` prints NOT READY and
    "not ready". The pages carry the terminal's words beside the keys."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    for label in ("base", "tuned"):
        _records(run_dir / f"{label}.jsonl", [{"run_id": "r", "model_label": label, "model": label, "item_id": f"i{i}",
                                               "epoch": e, "score": 1.0, "output_text": f"answer {i}.{e}",
                                               "error": None} for i in range(8) for e in (1, 2, 3)])
    done = run(["readiness", str(run_dir), "--label", "base"])
    assert done.returncode == 0 and "Readiness (base): NOT READY" in done.stdout, done.stdout
    printed = [line for line in done.stdout.splitlines() if line.startswith("base_mean")]
    data = ViewData([run_dir])
    brief = json.loads(json.dumps(data.runs_page()))["readiness"]
    assert brief["verdict"] == "not_ready" and brief["shown"] == "NOT READY"
    page = json.loads(json.dumps(data.readiness_page("base")))
    assert page["report"]["verdict"] == "not_ready" and page["shown"]["verdict"] == "NOT READY"
    statuses = dict(zip([c["name"] for c in page["report"]["checks"]], page["shown"]["statuses"], strict=True))
    assert statuses["base_mean"] == "not ready" and len(printed) == 1 and " not ready " in printed[0]
    assert "not_ready" not in page["shown"]["statuses"]
