"""Nothing lost, nothing paid twice: SIGKILL and Ctrl-C mid-run, then the same command resumes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rfteval.cli.app import app
from tests.support.cli_run_files import RFTEVAL, write_run_files
from tests.support.fake_openai import FakeOpenAI, Reply

N_ITEMS = 12
EPOCHS = 2
CELLS = 2 * N_ITEMS * EPOCHS
CONCURRENCY = 4


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    return write_run_files(tmp_path, N_ITEMS)


def args(files: dict[str, Path], server: FakeOpenAI) -> list[str]:
    return ["run", "--dataset", str(files["dataset"]), "--grader", str(files["grader"]), "--model", "base=fake-base",
            "--model", "tuned=fake-tuned", "--epochs", str(EPOCHS), "--base-url", server.base_url,
            "--concurrency", str(CONCURRENCY), "--out", str(files["out"]), "--quiet"]


def stored_responses(out: Path) -> int:
    path = out / "store" / "responses.jsonl"
    return path.read_text().count("\n") if path.exists() else 0


def start_and_wait(files: dict[str, Path], server: FakeOpenAI, at_least: int) -> subprocess.Popen:
    proc = subprocess.Popen([*RFTEVAL, *args(files, server)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "NO_COLOR": "1"})
    deadline = time.monotonic() + 60
    while stored_responses(files["out"]) < at_least:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the run never got going"
        time.sleep(0.02)
    return proc


def check_cells(out: Path) -> None:
    for label in ("base", "tuned"):
        recs = [json.loads(x) for x in (out / f"{label}.jsonl").read_text().splitlines()]
        cells = Counter((r["item_id"], r["epoch"]) for r in recs)
        assert set(cells) == {(f"q{i}", e) for i in range(N_ITEMS) for e in range(1, EPOCHS + 1)}  # none missing
        assert max(cells.values()) == 1  # none twice
        assert all(r["error"] is None and r["score"] == float(label == "tuned") for r in recs)


@pytest.mark.slow
def test_sigkill_mid_run_then_resume(files: dict[str, Path]) -> None:
    with FakeOpenAI(delay_s=0.1) as server:
        proc = start_and_wait(files, server, at_least=CELLS // 3)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        time.sleep(0.3)  # requests that were in flight reach the server and are answered to no one
        before = len(server.requests)
        stored = stored_responses(files["out"])
        lost = before - stored
        assert 0 <= lost <= CONCURRENCY  # what SIGKILL loses: the requests in flight, no more
        res = CliRunner().invoke(app, args(files, server))
        assert res.exit_code == 0, res.output
        # the resumed run sent exactly the cells that had no stored response
        assert len(server.requests) - before == CELLS - stored
        assert len(server.requests) <= CELLS + CONCURRENCY
        sent = Counter((r.model, r.last_user_text()) for r in server.requests)
        assert max(sent.values()) <= EPOCHS + CONCURRENCY
    check_cells(files["out"])
    summary = json.loads((files["out"] / "summary.json").read_text())
    assert summary["complete"] and summary["cells"] == CELLS


@pytest.mark.slow
def test_ctrl_c_stops_cleanly_says_how_to_resume(files: dict[str, Path]) -> None:
    with FakeOpenAI(delay_s=0.1) as server:
        proc = start_and_wait(files, server, at_least=CELLS // 4)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
        assert proc.returncode == 130, err
        assert "interrupted" in err and "Resume with the same command" in err and "Traceback" not in err
        partial = json.loads((files["out"] / "summary.json").read_text())
        assert partial["complete"] is False and 0 < partial["cells"] - partial["missing"] < CELLS
        stored = stored_responses(files["out"])
        before = len(server.requests)
        res = CliRunner().invoke(app, args(files, server))
        assert res.exit_code == 0, res.output
        assert len(server.requests) - before == CELLS - stored
    check_cells(files["out"])


@pytest.mark.slow
def test_two_ctrl_c_in_quick_succession_still_write_everything(files: dict[str, Path]) -> None:
    """What `timeout -s INT` and many CI runners do: the second signal must not cut the shutdown short."""
    import time

    with FakeOpenAI(delay_s=0.1) as server:
        proc = start_and_wait(files, server, at_least=CELLS // 4)
        proc.send_signal(signal.SIGINT)
        time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
        assert proc.returncode == 130, err
        assert "Resume with the same command" in err and "Traceback" not in err
        partial = json.loads((files["out"] / "summary.json").read_text())
        assert partial["complete"] is False
        assert (files["out"] / "base.jsonl").exists() and (files["out"] / "tuned.jsonl").exists()


def test_changed_grader_regrades_without_requests(files: dict[str, Path], fake_openai: FakeOpenAI) -> None:
    res = CliRunner().invoke(app, args(files, fake_openai))
    assert res.exit_code == 0, res.output
    first = json.loads((files["out"] / "summary.json").read_text())
    assert first["models"]["tuned"]["mean"] == 1.0 and first["models"]["base"]["mean"] == 0.0
    files["grader"].write_text(json.dumps({"type": "string_check", "name": "g", "input": "{{ sample.output_text }}",
                                           "reference": "fake-base", "operation": "like"}))
    res = CliRunner().invoke(app, args(files, fake_openai))
    assert res.exit_code == 0, res.output
    assert len(fake_openai.requests) == CELLS  # no new request
    second = json.loads((files["out"] / "summary.json").read_text())
    assert second["models"]["tuned"]["mean"] == 0.0 and second["models"]["base"]["mean"] == 1.0
    assert second["grader"]["hash"] != first["grader"]["hash"]


@pytest.mark.slow
def test_failed_cells_are_resent_on_resume_and_fresh_starts_over(files: dict[str, Path],
                                                                   fake_openai: FakeOpenAI) -> None:
    fake_openai.queue(*[Reply.error(503, "down")] * 3)
    res = CliRunner().invoke(app, args(files, fake_openai) + ["--max-retries", "0", "--concurrency", "1"])
    assert res.exit_code == 3  # 3 of 48 cells > 5%
    assert len(fake_openai.requests) == CELLS
    res = CliRunner().invoke(app, args(files, fake_openai))
    assert res.exit_code == 0, res.output
    assert len(fake_openai.requests) == CELLS + 3  # only the three failed cells again
    check_cells(files["out"])
    res = CliRunner().invoke(app, args(files, fake_openai) + ["--fresh"])
    assert res.exit_code == 0, res.output
    assert len(fake_openai.requests) == 2 * CELLS + 3
    check_cells(files["out"])
