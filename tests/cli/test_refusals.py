"""Refuse before paying (issue 36, item 5): every command that makes model or judge calls checks its arguments, flags,
files and their combinations first. A bad combination exits 2 with one line, the server (tests/support/fake_openai.py
records every request) received no request, no output file was written and no input was touched.

One table for every command that calls a model or a judge: run, grade, agree --regrade, probe-grader and validate
grader (--dataset, --repeat). readiness (it has no judge: its --regrade re-grades python graders only), compare,
view, the exports and the validators make no model call; batches --cancel calls the Batch API, not a model, after its
one check (a run directory).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rfteval.cli.app import app
from tests.support.fake_openai import FakeOpenAI, Reply, Request

runner = CliRunner()

JUDGE = {"type": "score_model", "name": "j", "model": "judge-model", "range": [0, 1],
         "input": [{"role": "user", "content": "Question {{ item.id }}. Answer: {{ sample.output_text }}"}]}


class Files:
    """A judge grader without a pass_threshold, a dataset, outputs, graded records of two models (A) and of one."""

    def __init__(self, tmp: Path, base_url: str) -> None:
        self.tmp, self.base_url = tmp, base_url
        self.grader = tmp / "judge.json"
        self.grader.write_text(json.dumps(JUDGE))
        self.dataset = tmp / "items.jsonl"
        self.dataset.write_text("".join(json.dumps({"id": f"q{i}", "messages": [{"role": "user", "content": f"q{i}?"}],
                                                    "reference_answer": f"a{i}"}) + "\n" for i in range(4)))
        self.outputs = tmp / "outputs.jsonl"
        self.outputs.write_text("".join(json.dumps({"item_id": f"q{i}", "output_text": f"a{i}"}) + "\n"
                                        for i in range(4)))
        rows = [{"model_label": label, "item_id": f"q{i}", "epoch": e, "output_text": f"{label} says {i}",
                 "score": 0.5, "passed": None} for label in ("base", "tuned") for i in range(4) for e in (1, 2)]
        self.a = tmp / "a.jsonl"
        self.a.write_text("".join(json.dumps(r) + "\n" for r in rows))
        self.a_one = tmp / "a_one.jsonl"
        self.a_one.write_text("".join(json.dumps(dict(r, passed=True)) + "\n" for r in rows
                                      if r["model_label"] == "base"))
        self.outs = [tmp / "run", tmp / "graded.jsonl", tmp / "b.jsonl", tmp / "page.html"]

    def judge(self) -> list[str]:
        return ["--judge-base-url", self.base_url]

    def run(self, *extra: str) -> list[str]:
        return ["run", "--dataset", str(self.dataset), "--grader", str(self.grader), "--model", "base=fake-base",
                "--base-url", self.base_url, "--epochs", "2", "--out", str(self.tmp / "run"), "-q", *extra]

    def grade(self, *extra: str) -> list[str]:
        return ["grade", "-d", str(self.dataset), "-g", str(self.grader), "--outputs", str(self.outputs), "--out",
                str(self.tmp / "graded.jsonl"), *self.judge(), *extra]

    def agree(self, *extra: str, a: Path | None = None) -> list[str]:
        return ["agree", str(a or self.a), "--regrade", str(self.grader), "--dataset", str(self.dataset), "--out",
                str(self.tmp / "b.jsonl"), "--judge-cache", str(self.tmp / "cache.jsonl"), *self.judge(), *extra]

    def probe(self, *extra: str) -> list[str]:
        return ["probe-grader", str(self.grader), "--dataset", str(self.dataset), "--html",
                str(self.tmp / "page.html"), *self.judge(), *extra]

    def validate(self, *extra: str) -> list[str]:
        return ["validate", "grader", str(self.grader), "--dataset", str(self.dataset), "--reference-template",
                "a{{ item.id }}", *self.judge(), *extra]


# (case, the command line, the flag the one line names). Each was accepted, or refused only after paying, somewhere.
CASES: list[tuple[str, Callable[[Files], list[str]], str]] = [
    ("run: --batch-judge without --batch", lambda f: f.run("--batch-judge"), "--batch-judge"),
    ("run: --export-requests over the grader", lambda f: f.run("--export-requests", str(f.grader)),
     "--export-requests"),
    ("run: a negative retry delay", lambda f: f.run("--retry-base-delay", "-1"), "--retry-base-delay"),
    ("run: a judge URL that is not one", lambda f: f.run("--judge-base-url", "judge.local"), "--judge-base-url"),
    ("grade: --max-error-rate -1 (exit 3 after grading)", lambda f: f.grade("--max-error-rate", "-1"),
     "--max-error-rate"),
    ("grade: --max-error-rate nan", lambda f: f.grade("--max-error-rate", "nan"), "--max-error-rate"),
    ("grade: --top -1", lambda f: f.grade("--top", "-1"), "--top"),
    ("grade: --grader-timeout 0", lambda f: f.grade("--grader-timeout", "0"), "--grader-timeout"),
    ("grade: --judge-concurrency 0 (a traceback)", lambda f: f.grade("--judge-concurrency", "0"),
     "--judge-concurrency"),
    ("grade: a judge URL that is not one (tried 3 times)", lambda f: f.grade("--judge-base-url", "judge.local"),
     "--judge-base-url"),
    ("agree: --min-kappa with no pass verdict and no --pass-threshold", lambda f: f.agree("--min-kappa", "0.6"),
     "--min-kappa"),
    ("agree: --require-same-verdict on one model label",
     lambda f: f.agree("--require-same-verdict", a=f.a_one), "--require-same-verdict"),
    ("agree: --pass-threshold nan", lambda f: f.agree("--pass-threshold", "nan"), "--pass-threshold"),
    ("agree: --max-bias -0.1", lambda f: f.agree("--max-bias", "-0.1"), "--max-bias"),
    ("agree: --judge-api other", lambda f: f.agree("--judge-api", "other"), "--judge-api"),
    ("probe-grader: --judge-concurrency 0", lambda f: f.probe("--judge-concurrency", "0"), "--judge-concurrency"),
    ("probe-grader: a reference template reading the sample",
     lambda f: f.probe("--reference-template", '{"a": "{{ sample.output_text }}"}'), "--reference-template"),
    ("validate grader --dataset: --grader-timeout 0", lambda f: f.validate("--grader-timeout", "0"),
     "--grader-timeout"),
    ("validate grader --repeat: --threshold -1 (exit 1 after 12 calls)",
     lambda f: f.validate("--outputs", str(f.outputs), "--repeat", "3", "--threshold", "-1"), "--threshold"),
    ("validate grader --repeat 1", lambda f: f.validate("--outputs", str(f.outputs), "--repeat", "1"), "--repeat"),
]


def _respond(request: Request) -> Reply:
    judged = bool(request.body.get("response_format"))
    return Reply(text=json.dumps({"steps": [], "result": 0.5}) if judged else "an answer")


def _digest(paths: list[Path]) -> dict[Path, str]:
    return {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in paths}


@pytest.mark.slow
@pytest.mark.parametrize("case, args, flag", CASES, ids=[c[0] for c in CASES])
def test_a_bad_combination_is_refused_before_any_model_call(case: str, args: Callable[[Files], list[str]], flag: str,
                                                            tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    fake_openai.responder = _respond
    files = Files(tmp_path, fake_openai.base_url)
    inputs = _digest([files.grader, files.dataset, files.outputs, files.a])
    res = runner.invoke(app, args(files))
    said = [line for line in res.stderr.splitlines() if line.strip()]
    assert res.exit_code == 2, (case, res.output)
    assert len(said) == 1 and said[0].startswith("rfteval: ") and flag in said[0], (case, res.output)
    assert "Traceback" not in res.output
    assert fake_openai.requests == [], case  # not one model or judge call was paid for
    assert [p for p in files.outs if p.exists()] == [], case  # nothing written, not even in part
    assert _digest(list(inputs)) == inputs, case  # no input overwritten


@pytest.mark.slow
def test_the_same_command_lines_without_the_bad_flag_do_call(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    """The table's command lines are good but for the flag under test: each, as it is, sends its calls."""
    fake_openai.responder = _respond
    files = Files(tmp_path, fake_openai.base_url)
    for command in (files.run(), files.grade(), files.agree(), files.probe("--limit", "1"), files.validate()):
        fake_openai.reset()
        res = runner.invoke(app, command)
        assert res.exit_code == 0, res.output
        assert fake_openai.requests, command[0]
