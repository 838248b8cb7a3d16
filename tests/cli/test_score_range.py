"""A 0..10 judge, end to end (issue 27, item 9): the run table, `compare` (its series, Markdown, HTML, JUnit) and
`agree` cut intervals to the range the grader declares, found as readiness finds it (the run directory's grader),
else from the range the score_model wrote on each record (record files copied out of their run directory);
`--score-range` still wins, and a grader with no pass_threshold says in one line that only its maximum passes.

Three items whose means differ a lot: a t interval over three item means spans far past 0 and 10 (the issue
saw [-28.8, 43.2] on such a judge), so every check below would fail if the interval were left uncut.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from rfteval.cli.app import app
from rfteval.compare.measure import UNBOUNDED_NOTE
from rfteval.report.format import fmt_ci
from rfteval.stats.paired import side_summary
from tests.support.fake_openai import FakeOpenAI, Reply, Request

runner = CliRunner()
EPOCHS = 3
# the judge's score per model and item: item means far apart, so intervals over three items are wide
SCORES = {"fake-base": [0, 9, 2], "fake-tuned": [10, 1, 9], "fake-other": [5, 10, 0]}

# a score_model on a 0..10 scale with no pass_threshold, as Azure's RFT sample grades ("Rate from 0 to 10")
JUDGE10 = {
    "type": "score_model", "name": "judge10", "model": "judge-model", "range": [0, 10],
    "input": [{"role": "system", "content": "Rate the answer from 0 to 10."},
              {"role": "user", "content": "Question: {{ item.messages[0].content }}\nAnswer: {{ sample.output_text }}"}],
}


def responder(req: Request) -> Reply:
    rf = req.body.get("response_format") or {}
    if rf.get("type") != "json_schema":  # a model: '<model> on question <i>'
        return Reply(text=f"{req.model} on {req.last_user_text()}")
    answer = req.last_user_text().split("Answer: ", 1)[1]
    model, index = answer.split(" on question ")
    return Reply(text=json.dumps({"steps": [], "result": SCORES[model][int(index)]}))


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run of three models under the 0..10 judge, against FakeOpenAI; its output kept as run_dir/output.txt."""
    tmp = tmp_path_factory.mktemp("judge10")
    (tmp / "items.jsonl").write_text("".join(
        json.dumps({"id": f"q{i}", "messages": [{"role": "user", "content": f"question {i}"}]}) + "\n"
        for i in range(3)))
    (tmp / "grader.json").write_text(json.dumps(JUDGE10))
    server = FakeOpenAI(responder=responder).start()
    try:
        res = runner.invoke(app, [
            "run", "--dataset", str(tmp / "items.jsonl"), "--grader", str(tmp / "grader.json"),
            "--model", "base=fake-base", "--model", "tuned=fake-tuned", "--model", "other=fake-other",
            "--epochs", str(EPOCHS), "--base-url", server.base_url, "--out", str(tmp / "run"),
            "--retry-base-delay", "0.01"], env={"OPENAI_API_KEY": "sk-local"})
    finally:
        server.stop()
    assert res.exit_code == 0, res.output
    (tmp / "run" / "output.txt").write_text(res.output)
    return tmp / "run"


def compare_json(*args: str) -> dict[str, Any]:
    res = runner.invoke(app, ["compare", *args, "--format", "json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def within(ci: list[float], low: float, high: float) -> bool:
    return low <= ci[0] <= ci[1] <= high


def uncut(records: Path) -> list[float]:
    """The side's t interval before any cut: per-item means, then side_summary, as compare computes it."""
    rows = [json.loads(line) for line in records.read_text().splitlines()]
    means: dict[str, list[float]] = {}
    for r in rows:
        means.setdefault(r["item_id"], []).append(r["score"])
    return side_summary(np.array([sum(v) / len(v) for v in means.values()]))["ci95"]


@pytest.mark.slow
def test_the_run_table_and_summary_json_cut_intervals_to_the_judges_range(run_dir: Path) -> None:
    assert uncut(run_dir / "base.jsonl")[0] < 0 and uncut(run_dir / "tuned.jsonl")[1] > 10  # wide, uncut
    summary = json.loads((run_dir / "summary.json").read_text())
    for label in ("base", "tuned", "other"):
        assert within(summary["models"][label]["ci95"], 0, 10), summary["models"][label]
    for label in ("tuned", "other"):
        assert within(summary["deltas"][label]["ci95"], -10, 10)
    output = (run_dir / "output.txt").read_text()
    assert fmt_ci(summary["models"]["base"]["ci95"], sign=False) in output  # the run table shows the cut one
    # the grader has no pass_threshold: said once when it loads, naming what passes
    assert "range [0, 10] and no pass_threshold: a sample passes (pass@k, --metric pass@K) only at 10, so 9 fails" \
        in re.sub(r"\s+", " ", output)
    assert summary["pass_rule"]["threshold"] == 10.0


@pytest.mark.slow
def test_compare_a_run_directory_and_its_reports_use_the_graders_range(run_dir: Path, tmp_path: Path) -> None:
    out = compare_json(str(run_dir / "base.jsonl"), str(run_dir / "tuned.jsonl"), "--markdown",
                       str(tmp_path / "c.md"), "--junit", str(tmp_path / "c.xml"), "--html", str(tmp_path / "c.html"))
    assert out["options"]["score_range"] == [0.0, 10.0]
    assert within(out["baseline"]["ci95"], 0, 10) and within(out["candidate"]["ci95"], 0, 10)
    assert within(out["delta"]["ci95"], -10, 10)
    base_ci = fmt_ci(out["baseline"]["ci95"], sign=False)
    assert base_ci in (tmp_path / "c.md").read_text() and base_ci in (tmp_path / "c.html").read_text()
    assert f'value="{fmt_ci(out["delta"]["ci95"], 4)}"' in (tmp_path / "c.xml").read_text()
    # three epochs: the pass@1 / pass@3 check uses the pass rule, and the note says what it is
    (note,) = [n for n in out["notes"] if "pass_threshold" in n]
    assert note.startswith("base, tuned: the grader's range is [0, 10] and it has no pass_threshold")
    # --score-range still wins
    assert compare_json(str(run_dir / "base.jsonl"), str(run_dir / "tuned.jsonl"),
                        "--score-range", "0,20")["options"]["score_range"] == [0.0, 20.0]


@pytest.mark.slow
def test_a_series_over_the_run_directory_cuts_every_candidate(run_dir: Path) -> None:
    out = compare_json(str(run_dir))
    assert within(out["baseline"]["ci95"], 0, 10)
    for cand in out["candidates"]:
        assert within(cand["ci95"], 0, 10) and within(cand["delta"]["ci95"], -10, 10)


@pytest.mark.slow
def test_record_files_alone_carry_the_range(run_dir: Path, tmp_path: Path) -> None:
    alone = tmp_path / "alone"
    alone.mkdir()
    for label in ("base", "tuned"):
        shutil.copy(run_dir / f"{label}.jsonl", alone / f"{label}.jsonl")
    records = [json.loads(line) for line in (alone / "base.jsonl").read_text().splitlines()]
    assert all(r["grade_details"]["score_range"] == [0.0, 10.0] for r in records)
    out = compare_json(str(alone / "base.jsonl"), str(alone / "tuned.jsonl"))
    in_run = compare_json(str(run_dir / "base.jsonl"), str(run_dir / "tuned.jsonl"))
    assert out["options"]["score_range"] == [0.0, 10.0]
    assert out["baseline"]["ci95"] == in_run["baseline"]["ci95"] and out["delta"]["ci95"] == in_run["delta"]["ci95"]
    assert any(n.startswith("base, tuned: the grader's range is [0, 10]") for n in out["notes"])

    # records that say nothing of their grader (written elsewhere, or before the range was recorded): one line
    for label in ("base", "tuned"):
        rows = [json.loads(line) for line in (alone / f"{label}.jsonl").read_text().splitlines()]
        (alone / f"{label}.jsonl").write_text("".join(json.dumps({**r, "grade_details": None}) + "\n" for r in rows))
    out = compare_json(str(alone / "base.jsonl"), str(alone / "tuned.jsonl"))
    assert out["options"]["score_range"] is None and UNBOUNDED_NOTE in out["notes"]
    assert out["baseline"]["ci95"][0] < 0  # uncut, and said so
    assert compare_json(str(alone / "base.jsonl"), str(alone / "tuned.jsonl"),
                        "--score-range", "0,10")["baseline"]["ci95"] == in_run["baseline"]["ci95"]


@pytest.mark.slow
def test_agree_reads_the_range_of_each_side(run_dir: Path, tmp_path: Path) -> None:
    res = runner.invoke(app, ["agree", str(run_dir), str(run_dir), "--format", "json", "--html",
                              str(tmp_path / "a.html")])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["a"]["score_range"] == out["b"]["score_range"] == [0.0, 10.0]
    for row in out["verdict"]:
        assert within(row["under_a"]["ci95"], -10, 10) and within(row["under_b"]["ci95"], -10, 10)
    assert within(out["bias"]["ci95"], -10, 10)


@pytest.mark.slow
def test_grade_cuts_its_summary_to_the_judges_range(run_dir: Path, tmp_path: Path) -> None:
    outputs = tmp_path / "outputs.jsonl"
    rows = [json.loads(line) for line in (run_dir / "base.jsonl").read_text().splitlines()]
    outputs.write_text("".join(json.dumps({"item_id": r["item_id"], "epoch": r["epoch"], "model": "fake-base",
                                           "output_text": r["output_text"]}) + "\n" for r in rows))
    ds, grader = run_dir.parent / "items.jsonl", run_dir.parent / "grader.json"
    server = FakeOpenAI(responder=responder).start()
    try:
        res = runner.invoke(app, ["grade", "--dataset", str(ds), "--grader", str(grader), "--outputs", str(outputs),
                                  "--judge-base-url", server.base_url, "--format", "json"],
                            env={"OPENAI_API_KEY": "sk-local"})
    finally:
        server.stop()
    assert res.exit_code == 0, res.output
    (model,) = json.loads(res.stdout)["models"]
    assert model["mean"] == pytest.approx(11 / 3) and within(model["ci95"], 0, 10)
    assert uncut(run_dir / "base.jsonl")[0] < 0


@pytest.mark.slow
def test_readiness_on_a_record_file_alone_reads_the_range_on_the_records(run_dir: Path, tmp_path: Path) -> None:
    shutil.copy(run_dir / "base.jsonl", tmp_path / "base.jsonl")
    res = runner.invoke(app, ["readiness", str(tmp_path / "base.jsonl"), "--format", "json"])
    assert res.exit_code in (0, 1), res.output
    out = json.loads(res.stdout)
    # not "assumed [0, 1], widened to the observed scores" ([0, 9] here: a 9 would have been the ceiling)
    assert (out["score_min"], out["score_max"]) == (0.0, 10.0), out["range_source"]
    assert out["range_source"] == "the range the grader wrote on the records"


@pytest.mark.parametrize("formula, expected", [
    ("judge10", (0.0, 10.0)),  # one key: that grader's range
    ("0.5 * judge10 + 0.5 * exact", (0.0, 5.5)),  # the corners of a weighted sum
    ("max(judge10, exact)", (0.0, 10.0)),
    ("exact", (0.0, 1.0)),
])
def test_a_multi_reads_its_range_from_its_graders(formula: str, expected: tuple[float, float]) -> None:
    """A multi around a 0..10 judge scored 0..10 while its range read "assumed [0, 1]": its pass rule (reach the
    maximum) then passed every sample scoring 1 or more."""
    from rfteval.graders.loader import parse_config

    multi = parse_config({"type": "multi", "name": "m", "calculate_output": formula, "graders": {
        "judge10": JUDGE10, "exact": {"type": "string_check", "name": "exact", "input": "{{ sample.output_text }}",
                                      "reference": "x", "operation": "eq"}}})
    assert multi.score_range()[:2] == expected


@pytest.mark.slow
def test_a_multi_around_the_0_to_10_judge_passes_only_at_10(tmp_path: Path) -> None:
    (tmp_path / "items.jsonl").write_text("".join(
        json.dumps({"id": f"q{i}", "messages": [{"role": "user", "content": f"question {i}"}]}) + "\n"
        for i in range(3)))
    multi = {"type": "multi", "name": "m", "calculate_output": "judge10", "graders": {"judge10": JUDGE10}}
    (tmp_path / "grader.json").write_text(json.dumps(multi))
    with FakeOpenAI(responder=responder) as server:
        res = runner.invoke(app, [
            "run", "--dataset", str(tmp_path / "items.jsonl"), "--grader", str(tmp_path / "grader.json"),
            "--model", "base=fake-base", "--epochs", "1", "--base-url", server.base_url, "--out",
            str(tmp_path / "run")], env={"OPENAI_API_KEY": "sk-local"})
    assert res.exit_code == 0, res.output
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["pass_rule"]["threshold"] == 10.0
    assert summary["models"]["base"]["pass_at_k"]["1"] == 0.0  # base scores 0, 9, 2: none reaches 10
    assert within(summary["models"]["base"]["ci95"], 0, 10)
    # a multi has no pass_threshold field at all: the note is said for it too
    assert "range [0, 10] and no pass_threshold" in re.sub(r"\s+", " ", res.output)


@pytest.mark.slow
def test_a_python_grader_scoring_past_its_assumed_range_gets_no_pass_rate(tmp_path: Path) -> None:
    """A python grader's range is assumed [0, 1]; one that returns 0, 9 or 2 (a 0..10 rubric in code) used to
    "pass" every sample scoring 1 or more: pass@1 0.667 in the run table for a model that never reached 10."""
    (tmp_path / "items.jsonl").write_text("".join(
        json.dumps({"id": f"q{i}", "messages": [{"role": "user", "content": f"question {i}"}]}) + "\n"
        for i in range(3)))
    source = ("def grade(sample, item):\n    return {'0': 0.0, '1': 9.0, '2': 2.0}"
              "[sample['output_text'].rsplit(' ', 1)[-1]]\n")
    (tmp_path / "grader.json").write_text(json.dumps({"type": "python", "name": "rubric", "source": source}))
    with FakeOpenAI(responder=responder) as server:
        res = runner.invoke(app, [
            "run", "--dataset", str(tmp_path / "items.jsonl"), "--grader", str(tmp_path / "grader.json"),
            "--model", "base=fake-base", "--model", "tuned=fake-tuned", "--epochs", "1", "--base-url",
            server.base_url, "--out", str(tmp_path / "run")], env={"OPENAI_API_KEY": "sk-local"})
    assert res.exit_code == 0, res.output
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["models"]["base"]["mean"] == pytest.approx(11 / 3)
    assert summary["models"]["base"].get("pass_at_k") is None
    assert "not applied to base, tuned" in summary["pass_rule"]["source"]
    res = runner.invoke(app, ["compare", str(tmp_path / "run"), "--metric", "pass@1"])
    assert res.exit_code == 2 and "give --pass-threshold X" in res.output
    assert runner.invoke(app, ["compare", str(tmp_path / "run"), "--metric", "pass@1",
                               "--pass-threshold", "9"]).exit_code == 0


@pytest.mark.slow
@pytest.mark.parametrize(("threshold", "what"), [("11", "no sample can pass"), ("-1", "every sample passes")])
def test_a_pass_threshold_outside_the_graders_range_is_refused(run_dir: Path, threshold: str, what: str) -> None:
    """On the 0..10 judge, --pass-threshold 11 would make every pass rate 0 whatever the models did."""
    res = runner.invoke(app, ["compare", str(run_dir / "base.jsonl"), str(run_dir / "tuned.jsonl"),
                              "--pass-threshold", threshold])
    assert res.exit_code == 2
    assert res.stderr.splitlines() == [f"rfteval: --pass-threshold: {float(threshold):g} is outside the scores' "
                                       f"range [0, 10] (score_model range; grader.json): {what}"]
    ok = compare_json(str(run_dir / "base.jsonl"), str(run_dir / "tuned.jsonl"), "--pass-threshold", "10")
    assert ok["options"]["pass_threshold"] == 10.0
