"""Readiness and probes in the HTML reports: compare's page embeds the baseline's readiness; readiness and
probe-grader write their own pages."""

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rfteval.cli.app import app
from rfteval.data.records import make_record, write_jsonl
from tests.support import REPO

ROOT = REPO
runner = CliRunner()


def records(path: Path, label: str, scores: dict[str, list[float]]) -> Path:
    rows = []
    for item_id, per_epoch in scores.items():
        for epoch, score in enumerate(per_epoch, 1):
            rec = make_record(run_id="r", model_label=label, model=label, item_id=item_id, epoch=epoch,
                              output_text="x")
            rec.score = score
            rows.append(rec)
    write_jsonl(rows, path)
    return path


def test_compare_html_embeds_baseline_readiness(tmp_path):
    base = records(tmp_path / "base.jsonl", "base", {"a": [0, 1, 1], "b": [0, 0, 0], "c": [1, 1, 1], "d": [0.5, 0, 1]})
    cand = records(tmp_path / "tuned.jsonl", "tuned", {"a": [1, 1, 1], "b": [0, 1, 0], "c": [1, 1, 1], "d": [1, 1, 1]})
    out = tmp_path / "report.html"
    res = runner.invoke(app, ["compare", str(base), str(cand), "--html", str(out)])
    assert res.exit_code == 0, res.output
    page = out.read_text()
    assert "RFT readiness of the baseline (base)" in page
    # 2 of the 4 items have all-equal samples: the zero-signal share shown is 50%
    assert re.search(r"zero-signal items</t[hd]><td>50%", page), page[page.find("zero-signal"):][:200]


def test_compare_html_without_epochs_has_no_readiness(tmp_path):
    base = records(tmp_path / "base.jsonl", "base", {"a": [0], "b": [1]})
    cand = records(tmp_path / "tuned.jsonl", "tuned", {"a": [1], "b": [1]})
    out = tmp_path / "report.html"
    assert runner.invoke(app, ["compare", str(base), str(cand), "--html", str(out)]).exit_code == 0
    assert "RFT readiness" not in out.read_text()


@pytest.mark.slow
def test_readiness_and_probe_pages(tmp_path):
    base = records(tmp_path / "base.jsonl", "base", {"a": [0, 1, 1], "b": [0, 0, 0]})
    page = tmp_path / "readiness.html"
    res = runner.invoke(app, ["readiness", str(base), "--html", str(page), "--format", "json"])
    assert res.exit_code == 0, res.output
    text = page.read_text()
    assert text.startswith("<!DOCTYPE html>") and "<svg" in text and json.loads(res.stdout)["verdict"] in text
    probes = tmp_path / "probes.html"
    res = runner.invoke(app, ["probe-grader", str(ROOT / "graders" / "safetykit.json"), "--dataset",
                              str(ROOT / "datasets" / "safetykit" / "items.jsonl"), "--limit", "2",
                              "--html", str(probes)])
    assert res.exit_code == 0, res.output
    assert "Grader probes" in probes.read_text() and "fill_all" in probes.read_text()


@pytest.mark.slow
def test_a_run_of_grading_errors_only_prints_no_python_none(tmp_path):
    """Tried as a new user: readiness on a run whose every grade was an error printed "expected at G=8: n/a (None)":
    no estimate has no method to name."""
    from rfteval.data.records import error_dict, read_records
    from rfteval.readiness.assessment import assess
    from rfteval.report.readiness_render import summary_lines

    rows = []
    for i in range(6):
        for epoch in (1, 2, 3):
            rec = make_record(run_id="r", model_label="base", model="base", item_id=f"i{i}", epoch=epoch,
                              output_text="x", error=error_dict("grade", "python_grader_runtime_error", "boom"))
            rec.score = 0.0
            rows.append(rec)
    path = tmp_path / "base.jsonl"
    write_jsonl(rows, path)
    report = assess(read_records(path))
    assert report.verdict == "inconclusive" and report.expected_zero_signal.get("method") is None
    lines = summary_lines(report)
    assert "expected at G=8: n/a;" in lines[1] and "None" not in "\n".join(lines)
