"""What `rfteval run` says while and after it runs: the progress lines (the judge's retries counted, a multi-line
server message kept to one line), the exit-3 hint (re-send or re-grade), and --help."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from rfteval.cli.app import app
from tests.support.cli_run_files import write_run_files
from tests.support.fake_openai import FakeOpenAI, Reply, Request

runner = CliRunner()
N_ITEMS = 4
MULTILINE_500 = "Internal error: the worker crashed\nTraceback (most recent call last):\n  File \"x.py\", line 1"


def flags(files: dict[str, Path], server: FakeOpenAI, *extra: str) -> list[str]:
    return ["run", "--dataset", str(files["dataset"]), "--grader", str(files["grader"]), "--model", "base=fake-base",
            "--epochs", "2", "--base-url", server.base_url, "--concurrency", "4", "--out", str(files["out"]),
            "--retry-base-delay", "0.01", "--no-readiness", *extra]


def test_a_multi_line_reason_stays_on_one_line_and_the_judge_gets_its_own_line() -> None:
    from rich.console import Console

    from rfteval.report.run_table import RichMonitor

    buf = io.StringIO()
    monitor = RichMonitor(Console(file=buf, width=160, force_terminal=False))
    monitor.start({"base": 10})
    monitor.retry("base", "server", "HTTP 500: " + MULTILINE_500)
    monitor.retry("judge", "server", "HTTP 500: " + MULTILINE_500)
    monitor.retry("judge", "server", "HTTP 500: " + MULTILINE_500)
    monitor.stop()
    out = buf.getvalue()
    said = [ln for ln in out.splitlines() if "retrying after" in ln]
    assert said == ["rfteval: base: retrying after server: HTTP 500: Internal error: the worker crashed",
                    "rfteval: judge: retrying after server: HTTP 500: Internal error: the worker crashed"]
    assert "Traceback" not in out
    assert monitor._counts["judge"]["retries"] == 2 and monitor._counts["base"]["retries"] == 1
    judge_line = [ln for ln in out.splitlines() if ln.strip().startswith("judge")]
    assert judge_line and "retries 2" in judge_line[-1]


SCORE_GRADER = {"type": "score_model", "name": "judge", "model": "judge-model",
                "input": [{"role": "user", "content": "Score: {{ sample.output_text }}"}], "range": [0, 1]}


@pytest.mark.slow
def test_the_judges_retries_are_counted_while_the_run_goes(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    files = write_run_files(tmp_path, N_ITEMS)
    files["grader"].write_text(json.dumps(SCORE_GRADER))
    judged = {"n": 0}

    def respond(req: Request) -> Reply:
        if req.model != "judge-model":
            return Reply(text="fake-tuned")
        judged["n"] += 1
        if judged["n"] <= 2:
            return Reply.error(500, MULTILINE_500)
        return Reply(text=json.dumps({"steps": [], "result": 1.0}))

    fake_openai.responder = respond
    res = runner.invoke(app, flags(files, fake_openai), env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    said = [ln for ln in res.stderr.splitlines() if "retrying after" in ln]
    assert said == ["rfteval: judge: retrying after server: HTTP 500: Internal error: the worker crashed"]
    judge_lines = [ln for ln in res.stderr.splitlines() if ln.strip().startswith("judge")]
    assert judge_lines and "retries 2" in judge_lines[-1]


# ---------------------------------------------------------------- the exit-3 hint


@pytest.mark.slow
def test_the_exit_3_hint_re_sends_failed_requests(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    files = write_run_files(tmp_path, N_ITEMS)
    fake_openai.queue(*[Reply.error(503, "down")] * 2)
    res = runner.invoke(app, flags(files, fake_openai, "--max-retries", "0", "--concurrency", "1"))
    assert res.exit_code == 3, res.output
    assert "re-running the same command re-sends the 2 failed requests" in res.stderr


@pytest.mark.slow
def test_the_exit_3_hint_after_grading_errors_only_sends_nothing(tmp_path: Path, fake_openai: FakeOpenAI,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from rfteval.graders.engine import GradingEngine

    def boom(self: Any, pairs: Any, units: Any = None) -> Any:
        raise RuntimeError("grader exploded")

    monkeypatch.setattr(GradingEngine, "grade_batch", boom)
    files = write_run_files(tmp_path, N_ITEMS)
    res = runner.invoke(app, flags(files, fake_openai))
    assert res.exit_code == 3, res.output
    assert "every error is a grading error: re-running the same command sends no request" in res.stderr
    assert "re-sends" not in res.stderr


def test_the_rerun_hint_counts_generation_errors_only() -> None:
    from rfteval.cli.commands.run_cmd import rerun_hint
    from rfteval.run.summary import RunSummary, as_run_summary

    def summary(**by_type: int) -> RunSummary:
        by_type_ = {k.replace("__", ":"): v for k, v in by_type.items()}
        return as_run_summary({"models": {"base": {"errors": {"by_type": by_type_}}}})

    assert "re-sends the 3 failed requests" in rerun_hint(summary(generate__server=2, generate__timeout=1,
                                                                  grade__other=4))
    assert "re-sends the 1 failed request" in rerun_hint(summary(generate__server=1))
    assert rerun_hint(summary(grade__python_grader_runtime_error=5)).startswith("every error is a grading error")


# ---------------------------------------------------------------- --help


def test_run_help_says_each_default_once() -> None:
    res = runner.invoke(app, ["run", "--help"], env={"COLUMNS": "200"})
    assert res.exit_code == 0
    assert res.output.count("[default: batch]") == 1
    assert "--models-in-turn" in res.output


# ---------------------------------------------------------------- reasoning tokens: reported or not


def test_reasoning_tokens_a_server_never_reports_show_as_nothing_not_zero() -> None:
    from rich.console import Console

    from rfteval.report.run_table import _reasoning, models_table
    from rfteval.run.results import LabelTotals, _add_usage
    from rfteval.run.summary import as_run_summary, judge_totals

    never, reported = LabelTotals(), LabelTotals()
    for _ in range(3):
        _add_usage(never, {"input_tokens": 10, "output_tokens": 5, "reasoning_tokens": None})
        _add_usage(reported, {"input_tokens": 10, "output_tokens": 5, "reasoning_tokens": 0})
    assert never.reasoning_reported == 0 and reported.reasoning_reported == 3  # a reported 0 is a 0
    assert reported.reasoning_tokens == 0
    _add_usage(reported, {"input_tokens": 1, "output_tokens": 9, "reasoning_tokens": 7})
    assert reported.reasoning_tokens == 7

    def summary(reasoning: int | None) -> dict[str, Any]:
        model = {"model": "m", "mean": 0.5, "ci95": [0.4, 0.6], "items": 3, "records": 3, "cells": 3,
                 "errors": {"total": 0, "by_type": {}}, "tokens": {"input": 30, "output": 15, "reasoning": reasoning}}
        return {"name": "n", "items": 3, "epochs": 1, "grader": {"name": "g"}, "models": {"base": model}}

    def shown(reasoning: int | None) -> str:
        console = Console(width=160, record=True, force_terminal=False)
        console.print(models_table(as_run_summary(summary(reasoning))))
        return console.export_text()

    assert "(0)" not in shown(None) and "(reasoning)" not in shown(None) and "30/15" in shown(None)
    assert "30/15 (7)" in shown(7) and "(reasoning)" in shown(7)
    assert _reasoning({"reasoning_tokens": None}) == "" and _reasoning({"reasoning_tokens": 3}) == " (reasoning 3)"
    calls = {"c1": ("judge", {"input_tokens": 4, "output_tokens": 2, "reasoning_tokens": None})}
    assert judge_totals(calls, {})["judge"]["reasoning_tokens"] is None
