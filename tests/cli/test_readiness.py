"""`rfteval readiness` and `rfteval probe-grader` end to end: CliRunner, and once through a real process."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from rfteval.cli.app import app
from rfteval.data.records import iter_jsonl_records, make_record, read_records, write_jsonl, write_parquet
from rfteval.graders.base import GradeResult
from rfteval.graders.grading import apply_grade

runner = CliRunner()
LABELS = ["yes", "no", "yes", "yes", "no", "yes"]
ITEMS = [{"id": f"q{i}", "messages": [{"role": "user", "content": f"Answer yes or no: question {i}"}],
          "reference_answer": ref} for i, ref in enumerate(LABELS)]
GRADER = {"type": "string_check", "name": "exact", "input": "{{sample.output_text}}",
          "reference": "{{item.reference_answer}}", "operation": "eq"}
WEAK = dict(GRADER, name="weak", operation="ilike")
# the base model's answers per item over 4 epochs: floor, ceiling and mixed items
ANSWERS = {
    "q0": ["no", "no", "no", "no"], "q1": ["no", "no", "no", "no"], "q2": ["yes", "no", "yes", "no"],
    "q3": ["yes", "yes", "no", "yes"], "q4": ["yes", "no", "no", "yes"], "q5": ["no", "no", "no", "yes"],
}


def build_records(label: str, answers: dict[str, list[str]]) -> list[dict]:
    refs = {it["id"]: it["reference_answer"] for it in ITEMS}
    out = []
    for iid, outs in answers.items():
        for epoch, text in enumerate(outs):
            rec = make_record(run_id="run1", model_label=label, model=f"m-{label}", item_id=iid, epoch=epoch,
                              output_text=text)
            out.append(apply_grade(rec, GradeResult(float(text == refs[iid]))))
    return out


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    d = tmp_path / "run"
    d.mkdir()
    base = build_records("base", ANSWERS)
    tuned = build_records("tuned", {k: ["yes"] * 4 for k in ANSWERS})
    write_jsonl(base, d / "base.jsonl")
    write_jsonl(tuned, d / "tuned.jsonl")
    write_parquet(base + tuned, d / "results.parquet")
    (tmp_path / "items.jsonl").write_text("\n".join(json.dumps(it) for it in ITEMS) + "\n", encoding="utf-8")
    (tmp_path / "grader.json").write_text(json.dumps(GRADER), encoding="utf-8")
    (tmp_path / "weak.json").write_text(json.dumps(WEAK), encoding="utf-8")
    return d


def invoke(*args: str):
    return runner.invoke(app, [str(a) for a in args])


def expected_advantages(scores: list[float]) -> list[float]:
    s = np.array(scores, dtype=float)
    sd = s.std(ddof=1)
    return [0.0] * len(s) if sd == 0 else list((s - s.mean()) / sd)


def test_readiness_text_defaults_to_base(run_dir: Path):
    res = invoke("readiness", run_dir, "--group-size", "4")
    assert res.exit_code == 0, res.output
    assert "Readiness (base):" in res.output
    assert "zero-signal items 33%" in res.output  # q0 (all-min), q1 (all-max: "no" is right); 2 of 6
    assert "Checks" in res.output and "Item means" in res.output


def _interrupted_run(tmp_path: Path) -> Path:
    """A run of 16 items × 3 epochs stopped early: 6 of the base model's 48 cells have no record, 2 ended in a
    generation error (a timeout), 40 are answered."""
    d = tmp_path / "stopped"
    d.mkdir()
    items = [{"id": f"q{i}", "messages": [{"role": "user", "content": f"question {i}"}], "reference_answer": "yes"}
             for i in range(16)]
    (tmp_path / "items16.jsonl").write_text("".join(json.dumps(it) + "\n" for it in items), encoding="utf-8")
    recs = []
    for i in range(16):
        for epoch in (1, 2, 3):
            if i >= 13 and epoch >= 2:
                continue  # q13, q14, q15: epochs 2 and 3 never sent (the run was stopped)
            text = "yes" if (i + epoch) % 3 else "no"
            error = {"stage": "generate", "type": "timeout", "message": "no answer"} if (i, epoch) in (
                (3, 2), (7, 3)) else None
            rec = make_record(run_id="r", model_label="base", model="m", item_id=f"q{i}", epoch=epoch,
                              output_text=None if error else text, error=error)
            recs.append(apply_grade(rec, GradeResult(float(text == "yes"))))
    write_jsonl(recs, d / "base.jsonl")
    (d / "summary.json").write_text(json.dumps({"complete": False, "items": 16, "epochs": 3, "cells": 96}))
    return d


@pytest.mark.slow
def test_readiness_on_an_interrupted_run_says_so_first_and_in_its_verdict(tmp_path: Path):
    """Issue 36: readiness on an interrupted run gave a verdict without saying the run was incomplete."""
    d = _interrupted_run(tmp_path)
    recs = [json.loads(x) for x in (d / "base.jsonl").read_text().splitlines()]
    failed = sum(1 for r in recs if r["error"])
    assert (len(recs), failed) == (42, 2)  # 48 − 6 missing; 2 of them generation errors: 40 answered
    res = invoke("readiness", d)
    assert res.exit_code == 0, res.output
    first = res.stdout.splitlines()[0]
    assert first.startswith("Readiness (base): ") and "(verdict on an incomplete run: 40 of 48 cells)" in first
    assert ("incomplete run: 40 of 48 cells (16 items × 3 epochs) answered; 6 have no record (the run stopped "
            "before them: re-running the same command finishes it) and 2 ended in a generation error"
            ) in " ".join(res.stdout.split())  # the terminal's lines wrap: compared as words
    out = json.loads(invoke("readiness", d, "--format", "json").stdout)
    assert out["incomplete"] is True and out["coverage"] == {
        "items": 16, "epochs": 3, "expected": 48, "answered": 40, "missing": 6, "generation_errors": 2}
    # without summary.json: the spec's epochs and its dataset's items tell the same
    (d / "summary.json").unlink()
    (d / "spec.resolved.toml").write_text(f'dataset = "{tmp_path / "items16.jsonl"}"\nepochs = 3\n')
    first = invoke("readiness", d).stdout.splitlines()[0]
    assert "(verdict on an incomplete run: 40 of 48 cells)" in first


@pytest.mark.slow
def test_readiness_on_a_complete_run_says_nothing_of_it(run_dir: Path):
    (run_dir / "summary.json").write_text(json.dumps({"complete": True, "items": 6, "epochs": 4}))
    out = json.loads(invoke("readiness", run_dir, "--format", "json").stdout)
    assert out["incomplete"] is False and out["coverage"]["answered"] == out["coverage"]["expected"] == 24
    assert "incomplete" not in invoke("readiness", run_dir).stdout


def test_readiness_json_values(run_dir: Path):
    res = invoke("readiness", run_dir, "--format", "json", "--group-size", "4")
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    means = [sum(a == ref for a in ANSWERS[f"q{i}"]) / 4 for i, ref in enumerate(LABELS)]
    assert out["label"] == "base" and out["n_items"] == 6 and out["n_records"] == 24
    assert out["mean"] == pytest.approx(sum(means) / 6)
    assert out["zero_variance"]["floor"] == pytest.approx(1 / 6)
    assert out["zero_variance"]["ceiling"] == pytest.approx(1 / 6)
    assert out["expected_zero_signal"]["method"] == "unbiased"
    assert out["verdict"] in ("ready", "risky", "not_ready") and out["reasons"]


def test_readiness_label_and_thresholds(run_dir: Path):
    res = invoke("readiness", run_dir, "--label", "tuned", "--format", "json")
    out = json.loads(res.output)
    # the tuned model always answers "yes": every item is all-right or all-wrong, and one answer dominates
    assert out["label"] == "tuned" and out["verdict"] == "not_ready"
    status = {c["name"]: c["status"] for c in out["checks"]}
    assert status["answer_skew"] == "risky" and status["zero_signal"] == "not_ready"
    assert out["labels"]["answer_counts"] == {"yes": 24}
    strict = json.loads(invoke("readiness", run_dir, "--format", "json", "--group-size", "4",
                               "--zero-signal-not-ready", "0.01").output)
    assert strict["verdict"] == "not_ready" and "zero_signal" in strict["reasons"]


def test_readiness_of_record_files_jsonl_and_parquet(run_dir: Path):
    a = json.loads(invoke("readiness", run_dir / "base.jsonl", "--format", "json").output)
    b = json.loads(invoke("readiness", run_dir / "results.parquet", "--format", "json").output)
    assert a["label"] == b["label"] == "base"
    assert a["mean"] == pytest.approx(b["mean"]) and a["zero_variance"] == b["zero_variance"]


def test_readiness_with_dataset_and_grader_labels_and_regrade(run_dir: Path):
    tmp = run_dir.parent
    res = invoke("readiness", run_dir, "--format", "json", "--grader", tmp / "grader.json", "--dataset",
                 tmp / "items.jsonl", "--regrade", "10")
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["labels"]["reference_counts"] == {"yes": 4, "no": 2}
    assert out["labels"]["constant_answer_method"] == "graded"
    assert out["labels"]["constant_answer_score"] == pytest.approx(4 / 6)
    assert out["determinism"]["n_regraded"] == 10 and out["determinism"]["n_changed"] == 0


def test_readiness_finds_grader_and_dataset_in_the_resolved_spec(run_dir: Path):
    tmp = run_dir.parent
    (run_dir / "spec.resolved.toml").write_text(
        f'dataset = "{(tmp / "items.jsonl").as_posix()}"\ngrader = "{(tmp / "grader.json").as_posix()}"\n'
        'epochs = 4\n', encoding="utf-8")
    out = json.loads(invoke("readiness", run_dir, "--format", "json", "--regrade", "5").output)
    assert out["determinism"]["n_regraded"] == 5 and out["labels"]["majority_label"] == "yes"


def test_write_advantages_jsonl_and_parquet(run_dir: Path):
    before_tuned = (run_dir / "tuned.jsonl").read_bytes()
    res = invoke("readiness", run_dir, "--write-advantages", "--format", "json")
    assert res.exit_code == 0, res.output
    recs = list(iter_jsonl_records(run_dir / "base.jsonl"))
    for iid in ANSWERS:
        rows = [r for r in recs if r["item_id"] == iid]
        assert [r["advantage"] for r in rows] == pytest.approx(expected_advantages([r["score"] for r in rows]))
    assert (run_dir / "tuned.jsonl").read_bytes() == before_tuned
    df = read_records(run_dir / "results.parquet")
    base = df[df["model_label"] == "base"]
    for _, rows in base.groupby("item_id"):
        assert rows["advantage"].tolist() == pytest.approx(expected_advantages(rows["score"].tolist()))
    assert df[df["model_label"] == "tuned"]["advantage"].isna().all()
    assert not list(run_dir.glob("*.tmp"))


def test_readiness_errors_flag(tmp_path: Path):
    recs = build_records("base", ANSWERS)
    for rec in recs[:2]:  # q0's first two epochs: an endpoint failure and a model refusal
        rec.error = {"stage": "generate", "type": "timeout" if rec.epoch == 0 else "refusal", "message": "x"}
        rec.score, rec.output_text = 0.0, None
    write_jsonl(recs, tmp_path / "base.jsonl")
    default = json.loads(invoke("readiness", tmp_path / "base.jsonl", "--format", "json", "--group-size", "2").output)
    assert default["errors"]["policy"] == "exclude" and default["errors"]["excluded"] == 1
    assert default["errors"]["refusal"] == 1 and default["items"][0]["k"] == 3
    zero = json.loads(invoke("readiness", tmp_path / "base.jsonl", "--format", "json", "--errors", "zero").output)
    assert zero["errors"]["policy"] == "zero" and zero["errors"]["excluded"] == 0 and zero["items"][0]["k"] == 4
    text = invoke("readiness", tmp_path / "base.jsonl", "--group-size", "8").output
    assert "1 generation (left out), 1 model refusal (reward 0)" in text
    assert "empirical Bayes (beta-binomial)" in text and "plug-in" not in text
    bad = invoke("readiness", tmp_path / "base.jsonl", "--errors", "drop")
    assert bad.exit_code == 2 and "--errors" in bad.output and len(bad.output.strip().splitlines()) == 1


def test_bad_input_is_one_line_exit_2(run_dir: Path, tmp_path: Path):
    cases = [
        ("readiness", tmp_path / "nope"),
        ("readiness", run_dir, "--format", "yaml"),
        ("readiness", run_dir, "--label", "other"),
        ("readiness", run_dir, "--regrade", "3"),
    ]
    for args in cases:
        res = invoke(*args)
        assert res.exit_code == 2, (args, res.output)
        assert "Traceback" not in res.output
        assert len(res.output.strip().splitlines()) == 1, res.output
    (run_dir / "base.jsonl").unlink()
    (run_dir / "results.parquet").unlink()
    (run_dir / "other.jsonl").write_text((run_dir / "tuned.jsonl").read_text().replace('"tuned"', '"other"'))
    res = invoke("readiness", run_dir)
    assert res.exit_code == 2 and "--label" in res.output
    failed = [make_record(run_id="r", model_label="base", model="m", item_id="a", epoch=e, output_text=None,
                          error={"stage": "generate", "type": "timeout", "message": "t"}) for e in range(2)]
    write_jsonl([apply_grade(r, GradeResult(0.0)) for r in failed], tmp_path / "failed.jsonl")
    res = invoke("readiness", tmp_path / "failed.jsonl")
    assert res.exit_code == 2 and "no graded records" in res.output
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"item_id": "a", "score": 1}\n{"item_id": \n', encoding="utf-8")
    res = invoke("readiness", bad)
    assert res.exit_code == 2 and "bad.jsonl:2" in res.output


def test_probe_grader_strict_gate(run_dir: Path):
    tmp = run_dir.parent
    weak = invoke("probe-grader", tmp / "weak.json", "--dataset", tmp / "items.jsonl")
    assert weak.exit_code == 0, weak.output
    assert "fill_all" in weak.output and "flag" in weak.output
    gate = invoke("probe-grader", tmp / "weak.json", "--dataset", tmp / "items.jsonl", "--strict")
    assert gate.exit_code == 1
    strong = invoke("probe-grader", tmp / "grader.json", "--dataset", tmp / "items.jsonl", "--strict")
    assert strong.exit_code == 0, strong.output  # a whitespace-padded reference is a warning, not a flag
    assert "no flags" in strong.output


def test_probe_grader_json_and_reference_template(run_dir: Path):
    tmp = run_dir.parent
    res = invoke("probe-grader", tmp / "grader.json", "--dataset", tmp / "items.jsonl", "--format", "json",
                 "--reference-template", '"{{item.reference_answer}}"')
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["template_source"] == "given" and out["flags"] == []
    ref = next(p for p in out["probes"] if p["name"] == "reference")
    assert ref["scores"] == {it["id"]: 1.0 for it in ITEMS}
    tpl = tmp / "tpl.json"
    tpl.write_text('"The answer: {{item.reference_answer}}"', encoding="utf-8")
    out = json.loads(invoke("probe-grader", tmp / "weak.json", "--dataset", tmp / "items.jsonl", "--format", "json",
                            "--reference-template", tpl, "--limit", "2").output)
    assert out["n_items"] == 2 and next(p for p in out["probes"] if p["name"] == "reference")["min"] == 1.0
    for bad in ("{{sample.output_text}}", "{not json", "{{item.}}"):
        res = invoke("probe-grader", tmp / "grader.json", "--dataset", tmp / "items.jsonl",
                     "--reference-template", bad)
        assert res.exit_code == 2 and "--reference-template" in res.output, (bad, res.output)


@pytest.mark.slow
def test_real_process(run_dir: Path):
    exe = Path(sys.executable).with_name("rfteval")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "rfteval"]
    tmp = run_dir.parent
    proc = subprocess.run(cmd + ["readiness", str(run_dir), "--format", "json"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["label"] == "base"
    proc = subprocess.run(cmd + ["probe-grader", str(tmp / "weak.json"), "--dataset", str(tmp / "items.jsonl"),
                                 "--strict"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    proc = subprocess.run(cmd + ["readiness", str(tmp / "missing")], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "missing" in proc.stderr


def test_html_fragments_are_self_contained(run_dir: Path):
    from rfteval.graders.loader import parse_config
    from rfteval.readiness.assessment import assess
    from rfteval.readiness.probes import run_probes
    from rfteval.report.readiness_render import probes_html, readiness_html

    rep = assess(read_records(run_dir / "base.jsonl"), group_size=4)
    html = readiness_html(rep)
    assert html.count("<svg") == 2 and "<script" not in html and "http://" not in html.replace(
        'xmlns="http://www.w3.org/2000/svg"', "")
    bars = [int(x) for x in re.findall(r"<title>[^<]*: (\d+)</title>", html)]
    assert bars[:10] == rep.mean_histogram
    probes = run_probes(parse_config(WEAK), {it["id"]: it for it in ITEMS})
    frag = probes_html(probes)
    assert "fill_all" in frag and 'class="flag"' in frag
    evil = assess(read_records(run_dir / "base.jsonl").assign(model_label="<b>x</b>"), group_size=4)
    assert "<b>x</b>" not in readiness_html(evil) and "&lt;b&gt;" in readiness_html(evil)


def test_html_path_problems_are_one_line_before_any_work(run_dir: Path, tmp_path: Path):
    from typer.testing import CliRunner

    from rfteval.cli.app import app

    res = CliRunner().invoke(app, ["readiness", str(run_dir), "--html", str(tmp_path)])
    assert res.exit_code == 2 and "is a directory" in res.stderr and "Traceback" not in res.output
    target = run_dir / "base.jsonl"
    before = target.read_text()
    res = CliRunner().invoke(app, ["readiness", str(run_dir), "--html", str(target)])
    assert res.exit_code == 2 and "is also an input" in res.stderr and target.read_text() == before
    # the run's results.parquet is its records too (the viewer reads it first): a new user's --html over it was
    # written, leaving the run directory with an HTML page for its records
    parquet = run_dir / "results.parquet"
    before_bytes = parquet.read_bytes()
    res = CliRunner().invoke(app, ["readiness", str(run_dir), "--html", str(parquet)])
    assert res.exit_code == 2 and "is also an input" in res.stderr and parquet.read_bytes() == before_bytes


def test_one_format_vocabulary(run_dir: Path):
    from typer.testing import CliRunner

    from rfteval.cli.app import app

    for fmt in ("table", "text"):
        assert CliRunner().invoke(app, ["readiness", str(run_dir), "--format", fmt]).exit_code == 0
    res = CliRunner().invoke(app, ["readiness", str(run_dir), "--format", "yaml"])
    assert res.exit_code == 2 and "--format: must be table or json" in res.stderr


# ---- grading errors are no verdict: a probe whose every grade is an error is inconclusive, never "ok"

WIDE = {"COLUMNS": "240"}  # the table's cells on one line each


def _probe_json(*args: object) -> tuple[int, dict]:
    res = runner.invoke(app, ["probe-grader", *map(str, args), "--format", "json"], env=WIDE)
    return res.exit_code, json.loads(res.stdout)


@pytest.mark.slow
def test_probe_grader_on_a_grader_that_raises_everywhere_is_inconclusive_and_no_pass(run_dir: Path):
    """It read "ok" on every cheat (each error scored 0) and exited 0, even with --strict."""
    tmp = run_dir.parent
    raises = tmp / "raises.json"
    raises.write_text(json.dumps({"type": "python", "name": "raises",
                                  "source": "def grade(sample, item):\n    raise ValueError('no')\n"}))
    n = len(ITEMS)
    for strict in ([], ["--strict"]):
        res = runner.invoke(app, ["probe-grader", str(raises), "--dataset", str(tmp / "items.jsonl"), *strict],
                            env=WIDE)
        assert res.exit_code == 3, res.output  # INCOMPLETE: never 0, and not the gate's 1 either
        assert f"inconclusive: {n} grading errors (python_grader_runtime_error ×{n})" in res.stdout
        assert " ok " not in res.stdout and "no flags" not in res.stdout
        assert "probe(s) inconclusive" in res.stderr
    code, out = _probe_json(raises, "--dataset", tmp / "items.jsonl")
    ran = [p for p in out["probes"] if p["status"] != "skipped"]
    assert code == 3 and out["outcome"] == "inconclusive" and ran
    assert all(p["status"] == "inconclusive" and p["error_types"] == {"python_grader_runtime_error": n} for p in ran)


KEY_ERROR = "def grade(sample, item):\n    return float(sample['output_text'] == item['answer_num'])\n"


def _probe_at_80_columns(grader: Path, dataset: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """probe-grader as a user pipes it (`| less`, a CI log): a real process, no terminal, COLUMNS=80."""
    from tests.support.cli_run_files import RFTEVAL

    return subprocess.run([*RFTEVAL, "probe-grader", str(grader), "--dataset", str(dataset), *args],
                          capture_output=True, text=True, timeout=300, env={**__import__("os").environ, "COLUMNS": "80"})


@pytest.mark.slow
def test_probe_grader_shows_what_a_raising_grader_raised_in_the_table_and_the_json(run_dir: Path):
    """It said `python_grader_runtime_error ×8` and never `KeyError: 'answer_num'`: the user had to read the source."""
    tmp = run_dir.parent
    grader = tmp / "key_error.py"
    grader.write_text(KEY_ERROR)
    ds = tmp / "items.jsonl"
    res = _probe_at_80_columns(grader, ds)
    assert res.returncode == 3, res.stderr
    said = [line for line in res.stdout.splitlines() if "KeyError" in line]
    assert said == [f"  python_grader_runtime_error ×{10 * len(ITEMS)}: grade() raised KeyError: 'answer_num'"]
    res = _probe_at_80_columns(grader, ds, "--format", "json")
    out = json.loads(res.stdout)
    assert out["error_types"] == {"python_grader_runtime_error": 10 * len(ITEMS)}
    first = out["error_messages"]["python_grader_runtime_error"]
    assert first.startswith("grade() raised KeyError: 'answer_num'") and "item['answer_num']" in first  # whole
    ran = [p for p in out["probes"] if p["status"] != "skipped"]
    assert ran and all(p["error_messages"] == {"python_grader_runtime_error": first} for p in ran)


@pytest.mark.slow
def test_probe_grader_at_80_columns_splits_no_word(run_dir: Path):
    """Piped at 80 columns the status column read "inconclusiv|e" and "python_gra|der_runtime": each cell is a
    word or a number now, and the long status text has a line of its own below the table."""
    tmp = run_dir.parent
    grader = tmp / "key_error.py"
    grader.write_text(KEY_ERROR)
    res = _probe_at_80_columns(grader, tmp / "items.jsonl")
    lines = res.stdout.splitlines()
    assert res.returncode == 3 and all(len(line) <= 80 for line in lines), res.stdout
    words = set(re.findall(r"[A-Za-z_]+", res.stdout))
    assert {w for w in words if w.startswith("inconclu")} == {"inconclusive"}, res.stdout
    assert {w for w in words if w.startswith("python_")} == {"python_grader_runtime_error"}, res.stdout
    from rfteval.readiness.probes import PROBES

    rows = lines[next(i for i, line in enumerate(lines) if line.startswith("─")) + 1:]
    for probe in PROBES:  # one row per probe, its whole status word on it
        row = next(line for line in rows if line.split()[:1] == [probe.name])
        assert {"inconclusive", "skipped"} & set(row.split()), row
    ran = [p.name for p in PROBES if p.expect == "floor"][:10]
    n = len(ITEMS)
    assert f"inconclusive: {n} grading errors (python_grader_runtime_error ×{n})" in " ".join(res.stdout.split())
    assert ", ".join(ran) in " ".join(res.stdout.split())


@pytest.mark.slow
def test_probe_grader_with_a_judge_cut_off_on_every_answer_is_inconclusive(run_dir: Path, tmp_path: Path):
    """Every judge answer stops at max_tokens (finish_reason length) before its score: truncation errors, no
    grade, so no probe is "ok"."""
    from tests.support.fake_openai import FakeOpenAI, Reply

    judge = tmp_path / "judge.json"
    judge.write_text(json.dumps({"type": "score_model", "name": "j", "model": "judge-m", "input": [
        {"role": "user", "content": "Reference: {{ item.reference_answer }}\nAnswer: {{ sample.output_text }}"}]}))
    n = len(ITEMS)
    with FakeOpenAI(lambda req: Reply(text='{"steps": [{"description": "The answer', finish_reason="length")) as fake:
        code, out = _probe_json(judge, "--dataset", run_dir.parent / "items.jsonl", "--judge-base-url",
                                fake.base_url, "--strict")
        assert fake.requests  # the judge was asked, and answered every time
    ran = [p for p in out["probes"] if p["status"] != "skipped"]
    assert code == 3 and out["outcome"] == "inconclusive" and out["flags"] == [] and ran
    for p in ran:
        assert p["status"] == "inconclusive" and p["n_errors"] == p["n_graded"] == n
        assert p["status_text"] == f"inconclusive: {n} grading errors (model_grader_truncated_error ×{n})"


@pytest.mark.slow
def test_probe_grader_advice_follows_what_the_grader_reads(run_dir: Path, tmp_path: Path):
    """A judge whose message renders the answer, answering one score whatever it sees, is not told to put
    {{ sample.output_text }} in a message (it has it): it does not tell answers apart. A grader that refers to no
    sample field is still told that it never reads the answer."""
    from tests.support.fake_openai import FakeOpenAI

    judge = tmp_path / "judge.json"
    judge.write_text(json.dumps({"type": "score_model", "name": "j", "model": "judge-m", "input": [
        {"role": "user", "content": "Reference: {{ item.reference_answer }}\nAnswer: {{ sample.output_text }}"}]}))
    dataset = run_dir.parent / "items.jsonl"
    with FakeOpenAI(lambda req: json.dumps({"steps": [], "result": 0.5})) as fake:
        res = runner.invoke(app, ["probe-grader", str(judge), "--dataset", str(dataset), "--judge-base-url",
                                  fake.base_url], env=WIDE)
    said = " ".join(res.stdout.split())
    assert res.exit_code == 0, res.output
    assert "every probe scored the same: this grader reads the answer but does not tell answers apart" in said
    assert "never reads the answer" not in said and "put {{ sample.output_text }}" not in said
    blind = tmp_path / "blind.json"
    blind.write_text(json.dumps({"type": "string_check", "name": "blind", "input": "{{ item.reference_answer }}",
                                 "reference": "{{ item.reference_answer }}", "operation": "eq"}))
    res = runner.invoke(app, ["probe-grader", str(blind), "--dataset", str(dataset), "--strict"], env=WIDE)
    said = " ".join(res.stdout.split())
    assert res.exit_code == 1, res.output
    assert "every probe scored the same: this grader never reads the answer; make it read it (a judge: put " \
           "{{ sample.output_text }} in a message" in said
