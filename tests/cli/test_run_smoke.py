"""`rfteval run --limit N`, `--dry-run` and the judge caps (`--max-judge-calls`, `--max-judge-cost`), end to end
against FakeOpenAI: what each sends, counted per model and judge, and what the same command then resumes."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from rfteval.cli.app import app
from tests.cli.test_run_judges import SCORE_GRADER, judge_requests, model_or_score_responder, model_requests
from tests.support.cli_run_files import write_run_files
from tests.support.fake_openai import FakeOpenAI

N_ITEMS = 6
EPOCHS = 2
SAMPLES = 2 * N_ITEMS * EPOCHS  # two models


def invoke(*args: str) -> Any:
    return CliRunner().invoke(app, ["run", *args, "-q", "--retry-base-delay", "0.01"],
                              env={"OPENAI_API_KEY": "sk-smoke-0001", "NO_COLOR": "1"})


def run_args(files: dict[str, Path], server: FakeOpenAI, grader: Path | None = None) -> list[str]:
    return ["--dataset", str(files["dataset"]), "--grader", str(grader or files["grader"]),
            "--model", "base=fake-base", "--model", "tuned=fake-tuned", "--epochs", str(EPOCHS),
            "--base-url", server.base_url, "--out", str(files["out"])]


def summary(out: Path) -> dict[str, Any]:
    return json.loads((out / "summary.json").read_text())


def per_model(server: FakeOpenAI) -> Counter:
    return Counter(r.model for r in model_requests(server))


# ---- --limit ------------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_limit_runs_the_first_items_then_the_full_run_sends_only_the_rest(tmp_path: Path,
                                                                         fake_openai: FakeOpenAI) -> None:
    files = write_run_files(tmp_path, N_ITEMS)
    res = invoke(*run_args(files, fake_openai), "--limit", "2")
    assert res.exit_code == 0, res.output
    assert per_model(fake_openai) == {"fake-base": 2 * EPOCHS, "fake-tuned": 2 * EPOCHS}
    assert {r.last_user_text() for r in fake_openai.requests} == {"question 0", "question 1"}  # file order
    assert f"first 2 of {N_ITEMS} items x {EPOCHS} epochs" in res.output
    s = summary(files["out"])
    assert (s["items"], s["limit"], s["dataset_items"], s["cells"]) == (2, 2, N_ITEMS, 2 * 2 * EPOCHS)
    res = invoke(*run_args(files, fake_openai))
    assert res.exit_code == 0, res.output
    assert per_model(fake_openai) == {"fake-base": N_ITEMS * EPOCHS, "fake-tuned": N_ITEMS * EPOCHS}  # none twice
    assert f": {N_ITEMS} items x {EPOCHS} epochs" in res.output and " of {N_ITEMS} items" not in res.output
    s = summary(files["out"])
    assert s["items"] == N_ITEMS and "limit" not in s and s["complete"]
    assert s["models"]["base"]["cached"] == 2 * EPOCHS


def test_a_limit_below_one_is_one_line_and_writes_nothing(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    files = write_run_files(tmp_path, N_ITEMS)
    res = invoke(*run_args(files, fake_openai), "--limit", "0")
    assert res.exit_code == 2
    assert res.output.strip().splitlines() == ["rfteval: --limit: Input should be greater than or equal to 1"]
    assert fake_openai.requests == [] and not files["out"].exists()


# ---- --dry-run ----------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_dry_run_prints_the_plan_sends_nothing_and_makes_no_directory(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    files = write_run_files(tmp_path, N_ITEMS)
    args = run_args(files, fake_openai)
    args[args.index("base=fake-base")] = "base=gpt-4o-mini"  # in the default price table: $0.15 / $0.60 per 1M
    res = invoke(*args, "--dry-run", "--max-output-tokens", "100")
    assert res.exit_code == 0, res.output
    assert fake_openai.requests == [] and not files["out"].exists()
    cells = N_ITEMS * EPOCHS
    assert f"2 models x {N_ITEMS} items x {EPOCHS} epochs = {2 * cells} cells" in res.output
    row = next(line for line in res.output.splitlines() if line.startswith("base (gpt-4o-mini)"))
    # a request's messages, '[{"role": "user", "content": "question 0"}]', are 43 characters: 11 tokens at 4 each
    tokens_in, tokens_out = 11 * cells, 100 * cells
    assert row.split() == ["base", "(gpt-4o-mini)", str(cells), "0", str(cells), f"{tokens_in:,}", f"{tokens_out:,}",
                           f"${(tokens_in * 0.15 + tokens_out * 0.60) / 1e6:.4f}"]
    assert f"requests to send: {2 * cells}" in res.output
    assert "no price for fake-tuned" in res.output and "characters / 4" in res.output


@pytest.mark.slow
def test_dry_run_names_no_directory_it_would_write_to(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    """Its first line was "rfteval: NAME -> DIR", the header of a run writing into DIR, although it writes nothing."""
    files = write_run_files(tmp_path, N_ITEMS)
    res = CliRunner().invoke(app, ["run", *run_args(files, fake_openai), "--dry-run", "--name", "smoke"],
                             env={"OPENAI_API_KEY": "sk-smoke-0001", "NO_COLOR": "1"})
    assert res.exit_code == 0, res.output
    assert res.stderr.splitlines()[0] == "dry run: smoke (nothing is sent or written)"
    assert " -> " not in res.output and str(files["out"]) not in res.stderr
    assert fake_openai.requests == [] and not files["out"].exists()
    res = CliRunner().invoke(app, ["run", *run_args(files, fake_openai), "--name", "smoke", "--limit", "1"],
                             env={"OPENAI_API_KEY": "sk-smoke-0001", "NO_COLOR": "1"})
    assert res.exit_code == 0 and " ".join(res.stderr.split()).startswith(f"rfteval: smoke -> {files['out']}"), \
        res.output


@pytest.mark.slow
def test_dry_run_after_a_limited_run_counts_the_resume_and_makes_the_runs_checks(tmp_path: Path) -> None:
    files = write_run_files(tmp_path, N_ITEMS)
    with FakeOpenAI(models=["fake-base", "fake-tuned"]).start() as server:
        assert invoke(*run_args(files, server), "--limit", "2").exit_code == 0
        sent = len(server.requests)
        before = {p: p.stat().st_mtime_ns for p in files["out"].rglob("*")}
        res = invoke(*run_args(files, server), "--dry-run")
        assert res.exit_code == 0, res.output
        assert len(server.requests) == sent  # the dry run sent nothing
        assert {p: p.stat().st_mtime_ns for p in files["out"].rglob("*")} == before  # and wrote nothing
        stored = 2 * 2 * EPOCHS
        assert f"holds {stored} of the {SAMPLES} cells" in res.output
        assert f"requests to send: {SAMPLES - stored}" in res.output
        assert "no ceiling: set max_output_tokens" in res.output
        # the checks a run makes before it sends are made: an unknown model is one line, exit 2
        args = run_args(files, server)
        args[args.index("tuned=fake-tuned")] = "tuned=fake-tunde"
        res = invoke(*args, "--dry-run")
        assert res.exit_code == 2 and "unknown model 'fake-tunde'" in res.output
        assert len(server.requests) == sent


# ---- the judge caps -----------------------------------------------------------------------------------------------


def judge_grader(tmp_path: Path) -> Path:
    path = tmp_path / "judge.json"
    user = "Question: {{ item.messages[0].content }}\nAnswer: {{ sample.output_text }}"  # these items have no system
    path.write_text(json.dumps({**SCORE_GRADER, "input": [SCORE_GRADER["input"][0], {"role": "user", "content": user}]}))
    return path


def check_judged_once_each(server: FakeOpenAI) -> None:
    bodies = Counter(json.dumps(r.body, sort_keys=True) for r in judge_requests(server))
    assert sum(bodies.values()) == SAMPLES and max(bodies.values()) == 1  # every sample judged once, none twice


@pytest.mark.slow
def test_a_judge_call_cap_stops_grading_and_the_same_command_resumes_paying_nothing_twice(
        tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    fake_openai.responder = model_or_score_responder()
    files = write_run_files(tmp_path, N_ITEMS)
    args = run_args(files, fake_openai, judge_grader(tmp_path))
    res = invoke(*args, "--max-judge-calls", "7")
    assert res.exit_code == 3, res.output
    # it said "run stopped after 7 of 24 cells", as if generation had stopped: it had not, only grading had
    said = [line for line in res.output.splitlines() if "--max-judge-calls" in line]
    graded = len(judge_requests(fake_openai))  # a judged sample is a graded cell here, and nothing else was graded
    assert said == [f"rfteval: {graded} of {SAMPLES} cells graded, then grading stopped: --max-judge-calls 7 reached "
                    f"(7 judge calls sent); {SAMPLES} responses stored (generation goes on past the judge's cap); the "
                    f"same command resumes grading, re-sending no model request (same --out {files['out']})"], said
    assert "run stopped after" not in res.output
    assert len(judge_requests(fake_openai)) == 7
    assert per_model(fake_openai) == {"fake-base": N_ITEMS * EPOCHS, "fake-tuned": N_ITEMS * EPOCHS}  # generation went on
    assert (files["out"] / "store" / "responses.jsonl").read_text().count("\n") == SAMPLES  # every response stored
    s = summary(files["out"])
    assert s["errors"] == 0 and s["missing"] == SAMPLES - 7 and not s["complete"]  # ungraded, never an error
    assert s["judge"]["judge-model"]["calls"] == 7
    res = invoke(*args)  # the same command, no cap
    assert res.exit_code == 0, res.output
    assert per_model(fake_openai) == {"fake-base": N_ITEMS * EPOCHS, "fake-tuned": N_ITEMS * EPOCHS}  # no model request
    check_judged_once_each(fake_openai)
    s = summary(files["out"])
    assert s["complete"] and s["errors"] == 0 and s["judge"]["judge-model"]["calls"] == SAMPLES - 7


@pytest.mark.slow
def test_a_judge_cost_cap_stops_at_its_price_and_resumes(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    fake_openai.responder = model_or_score_responder()  # every judge answer: 11 tokens in, 7 out
    files = write_run_files(tmp_path, N_ITEMS)
    spec = tmp_path / "eval.toml"
    spec.write_text('[pricing.judge-model]\ninput = 1000000.0\noutput = 1000000.0\n')  # $1 a token: $18 a call
    args = [str(spec), *run_args(files, fake_openai, judge_grader(tmp_path)), "--judge-concurrency", "1"]
    res = invoke(*args, "--max-judge-cost", "50")
    assert res.exit_code == 3, res.output
    assert len(judge_requests(fake_openai)) == 3  # $18, $36, $54: no fourth call
    assert "--max-judge-cost 50 reached (judge calls so far cost $54.0000, 3 calls)" in res.output
    res = invoke(*args, "--max-judge-cost", "1000000")  # a higher cap
    assert res.exit_code == 0, res.output
    assert per_model(fake_openai) == {"fake-base": N_ITEMS * EPOCHS, "fake-tuned": N_ITEMS * EPOCHS}
    check_judged_once_each(fake_openai)


def test_a_judge_cost_cap_without_a_price_is_refused_before_anything(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    files = write_run_files(tmp_path, N_ITEMS)
    res = invoke(*run_args(files, fake_openai, judge_grader(tmp_path)), "--max-judge-cost", "5")
    assert res.exit_code == 2
    assert res.output.strip().splitlines() == [
        "rfteval: --max-judge-cost: no price for the judge model 'judge-model': give one in the spec "
        '([pricing."judge-model"] input = ..., output = ..., USD per million tokens)']
    assert fake_openai.requests == [] and not files["out"].exists()


@pytest.mark.slow
def test_a_judge_cap_with_batch_judge_is_refused(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    files = write_run_files(tmp_path, N_ITEMS)
    res = invoke(*run_args(files, fake_openai, judge_grader(tmp_path)), "--batch", "--batch-judge",
                 "--max-judge-calls", "5")
    assert res.exit_code == 2 and "--max-judge-calls: cannot be combined with --batch-judge" in res.output
    assert fake_openai.requests == [] and not files["out"].exists()
