"""When `rfteval run` stops early, end to end through the real openai client: a request shape the server refuses
(exit 2 after a handful of requests, naming the option), a server that dies mid-run (exit 3 within seconds, the
same command resumes), and the order of requests with --models-in-turn."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from rfteval.cli.app import app
from tests.support.cli_run_files import write_run_files
from tests.support.fake_openai import VALIDATION_500, FakeOpenAI, Reply, Request
from tests.support.guard import hang_guard

runner = CliRunner()
N_ITEMS = 8
EPOCHS = 3
CELLS = 2 * N_ITEMS * EPOCHS


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    return write_run_files(tmp_path, N_ITEMS)


def flags(files: dict[str, Path], server: FakeOpenAI, *extra: str, retry_base: str = "0.01") -> list[str]:
    return ["run", "--dataset", str(files["dataset"]), "--grader", str(files["grader"]), "--model", "base=fake-base",
            "--model", "tuned=fake-tuned", "--epochs", str(EPOCHS), "--base-url", server.base_url,
            "--concurrency", "8", "--out", str(files["out"]), "--retry-base-delay", retry_base, "--no-readiness",
            "--checkpoint-interval", "0", *extra]


def records(out: Path, label: str) -> list[dict[str, Any]]:
    path = out / f"{label}.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def count_retries(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """(model, kind) of every retry the run reports to its progress display (RunMonitor.retry), in order."""
    from rfteval.report.run_table import RichMonitor

    seen: list[tuple[str, str]] = []
    report = RichMonitor.retry

    def counted(self: RichMonitor, label: str, kind: str, reason: str = "") -> None:
        seen.append((label, kind))
        report(self, label, kind, reason)

    monkeypatch.setattr(RichMonitor, "retry", counted)
    return seen


def schema_file(tmp: Path) -> Path:
    path = tmp / "answer.schema.json"
    path.write_text(json.dumps({"name": "answer", "schema": {"type": "object", "properties": {
        "city": {"type": "string"}}, "required": ["city"], "additionalProperties": False}}))
    return path


# ---------------------------------------------------------------- what retrying cannot fix


@pytest.mark.slow
def test_a_500_with_the_same_validation_body_stops_the_run_in_a_handful(files: dict[str, Path],
                                                                        fake_openai: FakeOpenAI) -> None:
    fake_openai.responder = lambda req: Reply.error(500, VALIDATION_500)  # llama.cpp and a json_schema format
    with hang_guard(120, "a run whose every request is refused"):  # each cell's 10 retries would take minutes
        res = runner.invoke(app, flags(files, fake_openai, "--response-format",
                                       str(schema_file(files["out"].parent)), retry_base="0.5"))
    assert res.exit_code == 2, res.output
    assert len(fake_openai.requests) < 20  # a handful (and what was in flight), not 48 cells x 11 tries
    lines = [ln for ln in res.stderr.splitlines() if "refused" in ln]
    assert len(lines) == 1, res.stderr
    assert "caused by --response-format" in lines[0]
    assert "Input should be 'text' or 'json_object'" in lines[0] and "response_format.type" in lines[0]
    assert "Traceback" not in res.output


@pytest.mark.slow
def test_a_400_alike_for_every_request_stops_the_run(files: dict[str, Path], fake_openai: FakeOpenAI) -> None:
    fake_openai.responder = lambda req: Reply.error(400, "Unrecognized request argument supplied: seed")
    res = runner.invoke(app, flags(files, fake_openai, "--seed", "7"))
    assert res.exit_code == 2, res.output
    assert len(fake_openai.requests) < 20  # of 48 cells: each model's first answers, and what was in flight
    assert "caused by --seed" in res.stderr and "Unrecognized request argument supplied: seed" in res.stderr


@pytest.mark.slow
def test_a_server_that_500s_once_then_answers_completes(files: dict[str, Path], fake_openai: FakeOpenAI) -> None:
    fake_openai.queue(Reply.error(500, VALIDATION_500))
    res = runner.invoke(app, flags(files, fake_openai))
    assert res.exit_code == 0, res.output
    assert len(fake_openai.requests) == CELLS + 1


@pytest.mark.slow
def test_a_400_after_answers_is_one_failed_cell(files: dict[str, Path], fake_openai: FakeOpenAI) -> None:
    """A prompt too long for the context is the cell's problem, not the request shape's: the run goes on."""
    answered = threading.Event()

    def respond(req: Request) -> Reply:
        if req.last_user_text() == "question 5":
            answered.wait(5)
            return Reply.error(400, "This model's maximum context length is 8 tokens")
        answered.set()
        return Reply(text="fake-tuned")

    fake_openai.responder = respond
    res = runner.invoke(app, flags(files, fake_openai, "--max-error-rate", "0.5"))
    assert res.exit_code == 0, res.output
    errors = [r for label in ("base", "tuned") for r in records(files["out"], label) if r["error"]]
    assert len(errors) == 2 * EPOCHS and len(fake_openai.requests) == CELLS


# ---------------------------------------------------------------- a server that dies mid-run


@pytest.mark.slow
def test_a_server_killed_mid_run_stops_it_in_seconds_and_the_same_command_resumes(
        files: dict[str, Path], fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_openai.delay_s = 0.02
    lock = threading.Lock()
    seen = [0]

    def respond(req: Request) -> Reply:
        with lock:
            seen[0] += 1
            if seen[0] == 12:  # killed while requests are in flight
                threading.Thread(target=fake_openai.stop).start()
        return Reply(text="fake-tuned")

    fake_openai.responder = respond
    retries = count_retries(monkeypatch)
    args = flags(files, fake_openai, retry_base="0.5")  # the default backoff: every cell's retries take minutes
    with hang_guard(120, "a run against a killed server"):
        res = runner.invoke(app, args)
    assert res.exit_code == 3, res.output
    assert "stopped answering" in res.stderr and "re-run the same command" in res.stderr.lower()
    # given up across cells: a few retries of the cells in flight (8 at a time, about 30 retries in all), not
    # each of the ~40 missing cells' 10 retries
    assert 0 < len(retries) <= 80 and any(kind == "connection" for _, kind in retries), retries
    answered = [r for label in ("base", "tuned") for r in records(files["out"], label) if r["output_text"]]
    assert 0 < len(answered) < CELLS
    assert all(r["score"] == 1.0 and r["error"] is None for r in answered)  # intact, graded
    assert not any((r["error"] or {}).get("type") == "connection"
                   for label in ("base", "tuned") for r in records(files["out"], label))  # missing, not failed
    sent_before = len(fake_openai.requests)
    fake_openai.responder = lambda req: Reply(text="fake-tuned")
    fake_openai.start(fake_openai.port)  # restarted on the same port
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    recs = [r for label in ("base", "tuned") for r in records(files["out"], label)]
    assert len(recs) == CELLS and all(r["score"] == 1.0 for r in recs)
    assert len(fake_openai.requests) - sent_before == CELLS - len(answered)  # only what was missing


@pytest.mark.slow
@pytest.mark.parametrize("transport", ["aiohttp", "httpx"])
def test_a_server_restarted_mid_request_is_a_lost_connection_not_a_timeout(
        files: dict[str, Path], fake_openai: FakeOpenAI, transport: str) -> None:
    """Issue 36: after the server was killed mid-run, the retry line said "timeout: no answer within 600s" for
    requests the server had dropped (aiohttp reports a dropped connection as a connect timeout). It names the
    connection lost and the likely cause, and the run, retried on the restarted server, completes."""
    lock = threading.Lock()
    dropped: list[bool] = []

    def respond(req: Request) -> Reply:
        with lock:
            first = not dropped
            dropped.append(first)
        if first:  # restarted while this request is being worked on: its connection is dropped unanswered
            threading.Timer(0.2, fake_openai.restart).start()
            return Reply(text="fake-tuned", delay_s=30)
        return Reply(text="fake-tuned")

    fake_openai.responder = respond
    res = runner.invoke(app, flags(files, fake_openai, "-q", "--concurrency", "1", "--http-transport", transport))
    assert res.exit_code == 0, res.output
    retried = [line for line in res.stderr.splitlines() if "retrying after" in line]
    assert retried, res.stderr
    assert all("timeout" not in line and "no answer within" not in line for line in retried), retried
    assert f"retrying after connection: lost the connection to {fake_openai.base_url}" in retried[0]
    assert retried[0].endswith("(server gone?)")
    assert len(records(files["out"], "base")) == N_ITEMS * EPOCHS


@pytest.mark.slow
def test_restart_serves_again_on_the_same_port(fake_openai: FakeOpenAI) -> None:
    import urllib.request

    url = fake_openai.base_url
    fake_openai.restart()
    assert fake_openai.base_url == url
    with urllib.request.urlopen(url + "/_stats", timeout=5) as resp:
        assert resp.status == 200


# ---------------------------------------------------------------- --models-in-turn


@pytest.mark.slow
def test_models_in_turn_sends_every_cell_of_one_model_before_the_next(files: dict[str, Path],
                                                                      fake_openai: FakeOpenAI) -> None:
    res = runner.invoke(app, flags(files, fake_openai, "--models-in-turn"))
    assert res.exit_code == 0, res.output
    order = [r.model for r in fake_openai.requests]
    assert order == ["fake-base"] * (N_ITEMS * EPOCHS) + ["fake-tuned"] * (N_ITEMS * EPOCHS)
    summary = json.loads((files["out"] / "summary.json").read_text())
    assert summary["deltas"]["tuned"]["mean"] == 1.0 and summary["deltas"]["tuned"]["wins"] == N_ITEMS


@pytest.mark.slow
def test_interleaved_is_the_default(files: dict[str, Path], fake_openai: FakeOpenAI) -> None:
    """The contrast (the test above can fail): without the flag the two models' requests mix."""
    res = runner.invoke(app, flags(files, fake_openai))
    assert res.exit_code == 0, res.output
    order = [r.model for r in fake_openai.requests]
    switches = sum(1 for a, b in zip(order, order[1:]) if a != b)
    assert switches > 2


# ---------------------------------------------------------------- a server with few slots


@pytest.mark.slow
def test_a_server_with_two_slots_gets_about_two_requests(tmp_path: Path) -> None:
    files = write_run_files(tmp_path, 250)  # the probe from 32 down takes ~300 answers: then ~200 settled
    with FakeOpenAI(delay_s=0.02, slots=2) as server:
        res = runner.invoke(app, ["run", "--dataset", str(files["dataset"]), "--grader", str(files["grader"]),
                                  "--model", "base=fake-base", "--epochs", "2", "--base-url", server.base_url,
                                  "--concurrency", "32", "--out", str(files["out"]), "--no-readiness",
                                  "--checkpoint-interval", "0"])
    assert res.exit_code == 0, res.output
    conc = json.loads((files["out"] / "summary.json").read_text())["concurrency"]["base"]
    # the slots and one waiting, give or take the noise of a shared machine; without the rule it ends at 32
    assert conc["latency_cap"] is not None and 2 < conc["final"] <= 8, conc["history"]
