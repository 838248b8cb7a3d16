"""`rfteval run --batch` against the test server's Files and Batches endpoints: chunks, results matched on
custom_id, re-queued expired lines, failed batches, crashes between journal steps, Ctrl-C, cancel (the journal, the
result lines and export/import are in test_journal.py, test_lines.py, test_offline.py). Every server is on 127.0.0.1;
every killed process is one this test started."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from rfteval.cli.app import app
from rfteval.run.batch.journal import read_journal
from rfteval.run.batch.lines import parse_result_lines
from rfteval.run.runner import RunOptions, run_eval
from rfteval.run.spec import build_spec, flag_overrides
from tests.support.batch_cli import EPOCHS, N_ITEMS, cli_args, records
from tests.support.cli_run_files import RFTEVAL
from tests.support.fake_openai import FakeOpenAI, Reply, Request

CELLS = 2 * N_ITEMS * EPOCHS


def run_lib(files: dict[str, Path], server: FakeOpenAI, out: Path | None = None, **opts: Any) -> Any:
    spec = build_spec(None, flag_overrides(
        models=["base=fake-base", "tuned=fake-tuned"], dataset=str(files["dataset"]), grader=str(files["grader"]),
        epochs=EPOCHS, base_url=server.base_url, out=str(out or files["out"]),
        pricing={"fake-base": {"input": 10.0, "output": 20.0}}))
    options = dict(handle_signals=False, backoff_base_s=0.001, checkpoint_s=0, batch=True, batch_poll_s=0.02,
                   batch_max_lines=4)
    options.update(opts)
    messages: list[str] = []

    from rfteval.run.monitor import RunMonitor

    class Collect(RunMonitor):
        def message(self, text: str) -> None:
            messages.append(text)

    result = run_eval(spec, Collect(), RunOptions(**options))
    result.messages = messages  # type: ignore[attr-defined]
    return result


def events(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "store" / "batches.jsonl").read_text().splitlines()]


def input_files(server: FakeOpenAI) -> list[list[dict[str, Any]]]:
    return [[json.loads(x) for x in f["data"].splitlines()] for f in server.files.values()
            if f["meta"]["purpose"] == "batch"]


# ---------------------------------------------------------------- the happy path


@pytest.mark.slow
def test_batch_results_equal_a_synchronous_run(files: dict[str, Path], fake_openai: FakeOpenAI, tmp_path: Path) -> None:
    result = run_lib(files, fake_openai)
    assert result.summary.cells == CELLS and result.summary.missing == 0 and result.summary.errors == 0
    assert fake_openai.requests_for("chat") == []  # nothing went synchronously
    # chunks under the line limit (4 here), one model per input file, custom_id = the cell key
    inputs = input_files(fake_openai)
    assert len(inputs) == 6 and all(len(lines) <= 4 for lines in inputs)
    assert all(len({line["body"]["model"] for line in lines}) == 1 for lines in inputs)
    stored = {json.loads(x)["key"] for x in (files["out"] / "store" / "responses.jsonl").read_text().splitlines()}
    assert {line["custom_id"] for lines in inputs for line in lines} == stored
    # the same records as a synchronous run of the same spec
    sync = run_lib(files, fake_openai, out=tmp_path / "sync", batch=False)
    for label in ("base", "tuned"):
        a = [(r["item_id"], r["epoch"], r["output_text"], r["score"]) for r in records(files["out"], label)]
        b = [(r["item_id"], r["epoch"], r["output_text"], r["score"]) for r in records(tmp_path / "sync", label)]
        assert a == b
    # batch prices: half the standard ones (the pricing table's batch column)
    assert result.summary.models["base"].cost_usd == pytest.approx(sync.summary.models["base"].cost_usd / 2)
    assert result.summary.batches["open"] == 0
    # every step journalled, in order, per chunk
    kinds: dict[str, list[str]] = {}
    for e in events(files["out"]):
        kinds.setdefault(e["chunk"], []).append(e["event"])
    for chunk, seq in kinds.items():
        assert seq[:3] == ["planned", "uploaded", "created"] and seq[-1] == "collected", (chunk, seq)
    # a re-run sends nothing
    creates = fake_openai.batch_creates
    again = run_lib(files, fake_openai)
    assert fake_openai.batch_creates == creates and again.summary.missing == 0


def test_responses_endpoint(files: dict[str, Path], fake_openai: FakeOpenAI) -> None:
    spec = build_spec(None, flag_overrides(models=["base=fake-base"], dataset=str(files["dataset"]),
                                           grader=str(files["grader"]), epochs=1, base_url=fake_openai.base_url,
                                           api="responses", out=str(files["out"])))
    result = run_eval(spec, options=RunOptions(handle_signals=False, checkpoint_s=0, batch=True, batch_poll_s=0.01))
    assert result.summary.missing == 0
    assert {line["url"] for lines in input_files(fake_openai) for line in lines} == {"/v1/responses"}
    assert records(files["out"], "base")[0]["output_text"] == "echo:fake-base:question 0"


# ---------------------------------------------------------------- lines that fail, batches that fail


@pytest.mark.slow
def test_expired_lines_are_requeued_into_a_new_batch(files: dict[str, Path], fake_openai: FakeOpenAI) -> None:
    fake_openai.batch_plans.append({"outcome": "expired", "complete": 1})
    result = run_lib(files, fake_openai, batch_max_lines=100)
    assert result.summary.missing == 0 and result.summary.errors == 0
    assert fake_openai.batch_creates == 3  # base (expired after 1 line), tuned, then base's other 9 lines
    assert len(input_files(fake_openai)[-1]) == N_ITEMS * EPOCHS - 1
    assert any("expired" in m for m in result.messages)


@pytest.mark.slow
def test_batch_tail_sync_sends_the_remainder_synchronously(files: dict[str, Path], fake_openai: FakeOpenAI) -> None:
    fake_openai.batch_plans.append({"outcome": "expired", "complete": 7})
    result = run_lib(files, fake_openai, batch_max_lines=100, batch_tail="sync")
    assert result.summary.missing == 0
    assert fake_openai.batch_creates == 2
    assert len(fake_openai.requests_for("chat")) == N_ITEMS * EPOCHS - 7


@pytest.mark.slow
def test_failed_lines_429_and_5xx_are_requeued_400_is_the_cells_error(files: dict[str, Path],
                                                                     fake_openai: FakeOpenAI) -> None:
    seen: dict[str, int] = {}

    def responder(req: Request) -> Reply:
        text = req.last_user_text()
        seen[text + req.model] = seen.get(text + req.model, 0) + 1
        if text == "question 1" and req.model == "fake-base":
            return Reply.error(400, "bad request")
        if text == "question 2" and seen[text + req.model] <= EPOCHS:  # its first window only
            return Reply.error(503)
        return Reply(text=f"echo:{req.model}:{text}")

    fake_openai.batch_responder = responder
    result = run_lib(files, fake_openai, batch_max_lines=100)
    base = {(r["item_id"], r["epoch"]): r for r in records(files["out"], "base")}
    assert base[("q1", 1)]["error"]["type"] == "bad_request"
    assert base[("q2", 1)]["error"] is None and base[("q2", 1)]["output_text"] == "echo:fake-base:question 2"
    assert result.summary.errors == EPOCHS


@pytest.mark.slow
def test_a_failed_batch_is_one_clear_line(files: dict[str, Path], fake_openai: FakeOpenAI) -> None:
    fake_openai.batch_plans.append({"outcome": "failed", "message": "Enqueued token limit reached."})
    proc = CliRunner().invoke(app, cli_args(files, fake_openai, "--batch"))
    assert proc.exit_code == 3
    lines = [x for x in proc.stderr.splitlines() if "failed" in x]
    assert len(lines) == 1, proc.stderr
    assert "base-0001" in lines[0] and "Enqueued token limit reached" in lines[0] and "not sent" in lines[0]
    s = json.loads((files["out"] / "summary.json").read_text())
    assert s["models"]["base"]["records"] == 0 and s["models"]["tuned"]["records"] == N_ITEMS * EPOCHS
    assert s["complete"] is False
    # the next run submits them again
    proc = CliRunner().invoke(app, cli_args(files, fake_openai, "--batch"))
    assert proc.exit_code == 0, proc.output
    assert json.loads((files["out"] / "summary.json").read_text())["missing"] == 0


@pytest.mark.slow
def test_completed_with_no_output_file(files: dict[str, Path], fake_openai: FakeOpenAI) -> None:
    fake_openai.batch_responder = lambda req: Reply.error(400, "model refuses this shape")
    result = run_lib(files, fake_openai, batch_max_lines=100)
    msgs = [m for m in result.messages if "no output file" in m]
    assert len(msgs) == 2 and "all 10 lines failed" in msgs[0]
    assert result.summary.errors == CELLS


@pytest.mark.slow
def test_completed_with_neither_file_is_requeued(files: dict[str, Path], fake_openai: FakeOpenAI) -> None:
    fake_openai.batch_plans.append({"drop_files": True})
    result = run_lib(files, fake_openai, batch_max_lines=100)
    assert any("neither an output nor an error file" in m for m in result.messages)
    assert result.summary.missing == 0 and fake_openai.batch_creates == 3


def test_a_mixed_model_file_would_be_refused(fake_openai: FakeOpenAI) -> None:
    """The test server refuses what OpenAI refuses, so the one-model-per-file rule above is really checked."""
    import openai

    client = openai.OpenAI(base_url=fake_openai.base_url, api_key="unused")
    lines = [{"custom_id": str(i), "method": "POST", "url": "/v1/chat/completions",
              "body": {"model": m, "messages": [{"role": "user", "content": "x"}]}} for i, m in enumerate("ab")]
    f = client.files.create(file=("in.jsonl", "\n".join(map(json.dumps, lines)).encode()), purpose="batch")
    b = client.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h")
    b = client.batches.retrieve(b.id)
    assert b.status == "failed" and b.errors.data[0].code == "model_mismatch"


# ---------------------------------------------------------------- crashes between journal steps


def _kill_at(server: FakeOpenAI, hook: str, out: Path, files: dict[str, Path], *extra: str) -> subprocess.CompletedProcess:
    """Start `rfteval run --batch` and SIGKILL it from inside the server, just before the server answers the
    first upload or batch create (so the client can never record the id)."""
    holder: dict[str, subprocess.Popen] = {}
    fired: list[bool] = []

    def kill(_: dict[str, Any]) -> None:
        if not fired:
            fired.append(True)
            os.kill(holder["proc"].pid, signal.SIGKILL)  # our own child, by its pid
            holder["proc"].wait(timeout=30)

    setattr(server, hook, kill)
    proc = subprocess.Popen([*RFTEVAL, *cli_args(files, server, "--batch", *extra, out=out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "NO_COLOR": "1"})
    holder["proc"] = proc
    stdout, stderr = proc.communicate(timeout=120)
    setattr(server, hook, None)
    assert fired and proc.returncode == -signal.SIGKILL, (proc.returncode, stderr)
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


@pytest.mark.slow
def test_sigkill_after_a_batch_is_created_before_it_is_recorded(files: dict[str, Path],
                                                                fake_openai: FakeOpenAI) -> None:
    out = files["out"]
    _kill_at(fake_openai, "on_batch_created", out, files)
    assert fake_openai.batch_creates == 1
    kinds = [e["event"] for e in events(out)]
    assert kinds == ["planned", "uploaded"]  # the create was answered to nobody: not in the journal
    proc = CliRunner().invoke(app, cli_args(files, fake_openai, "--batch"))
    assert proc.exit_code == 0, proc.output
    assert "adopted" in proc.stderr
    # the orphan was found by its metadata and adopted: base's batch was never submitted twice
    assert fake_openai.batch_creates == 2  # base's (adopted) + tuned's
    adopted = [e for e in events(out) if e["event"] == "created" and e.get("adopted")]
    assert len(adopted) == 1 and adopted[0]["chunk"] == "base-0001"
    assert json.loads((out / "summary.json").read_text())["missing"] == 0
    metas = [e["obj"]["metadata"] for e in fake_openai.batches.values()]
    assert all(m["rfteval_run"] == metas[0]["rfteval_run"] for m in metas)


@pytest.mark.slow
def test_sigkill_after_upload_before_it_is_recorded(files: dict[str, Path], fake_openai: FakeOpenAI) -> None:
    out = files["out"]
    _kill_at(fake_openai, "on_file_uploaded", out, files)
    assert [e["event"] for e in events(out)] == ["planned"]
    proc = CliRunner().invoke(app, cli_args(files, fake_openai, "--batch"))
    assert proc.exit_code == 0, proc.output
    assert fake_openai.file_uploads == 3  # base's file again (no batch could exist without its id), tuned's
    assert fake_openai.batch_creates == 2
    assert json.loads((out / "summary.json").read_text())["missing"] == 0


# ---------------------------------------------------------------- Ctrl-C, listing, cancelling


@pytest.mark.slow
def test_ctrl_c_leaves_batches_running_then_the_same_command_collects(files: dict[str, Path],
                                                                      fake_openai: FakeOpenAI) -> None:
    out = files["out"]
    fake_openai.batch_plans.extend([{"polls_per_step": 10**6}, {"polls_per_step": 10**6}])  # stuck in validating
    proc = subprocess.Popen([*RFTEVAL, *cli_args(files, fake_openai, "--batch")], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "NO_COLOR": "1"})
    deadline = time.monotonic() + 60
    journal = out / "store" / "batches.jsonl"
    while not (journal.exists() and journal.read_text().count('"created"') == 2):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "2 batch(es) keep running" in stderr and "rfteval batches" in stderr
    assert all(e["obj"]["status"] == "validating" for e in fake_openai.batches.values())  # not cancelled
    sync = CliRunner().invoke(app, [a for a in cli_args(files, fake_openai) if a != "--batch"])
    assert sync.exit_code == 2 and "still open" in sync.stderr and "--batch" in sync.stderr  # no paying twice
    assert fake_openai.requests_for("chat") == []

    listing = CliRunner().invoke(app, ["batches", str(out)])
    assert listing.exit_code == 0 and "base-0001" in listing.stdout and "2 open" in listing.stdout

    for entry in fake_openai.batches.values():  # the provider gets going again
        entry["plan"]["polls_per_step"] = 1
    again = CliRunner().invoke(app, cli_args(files, fake_openai, "--batch"))
    assert again.exit_code == 0, again.output
    assert fake_openai.batch_creates == 2  # collected, never resubmitted
    assert json.loads((out / "summary.json").read_text())["missing"] == 0


@pytest.mark.slow
def test_batches_cancel(files: dict[str, Path], fake_openai: FakeOpenAI) -> None:
    out = files["out"]
    fake_openai.batch_plans.extend([{"polls_per_step": 10**6}, {"polls_per_step": 10**6}])
    proc = subprocess.Popen([*RFTEVAL, *cli_args(files, fake_openai, "--batch")], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    journal = out / "store" / "batches.jsonl"
    deadline = time.monotonic() + 60
    while not (journal.exists() and journal.read_text().count('"created"') == 2):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=60)
    refused = CliRunner().invoke(app, cli_args(files, fake_openai, "--batch", "--fresh"))
    assert refused.exit_code == 2 and "still open" in refused.stderr
    cancelled = CliRunner().invoke(app, ["batches", str(out), "--cancel"])
    assert cancelled.exit_code == 0, cancelled.output
    assert cancelled.stdout.count("cancelling") >= 2
    assert all(e["obj"]["status"] == "cancelling" for e in fake_openai.batches.values())
    for entry in fake_openai.batches.values():
        entry["plan"]["polls_per_step"] = 1
    again = CliRunner().invoke(app, cli_args(files, fake_openai, "--batch"))  # collects the cancelled ones
    assert again.exit_code == 3 and "20 of 20 cells have no response yet" in again.stderr, again.output
    assert fake_openai.batch_creates == 2
    assert all(c.status == "cancelled" and c.done for c in read_journal(out))


@pytest.mark.slow
def test_chunks_stay_under_the_byte_limit(files: dict[str, Path], fake_openai: FakeOpenAI) -> None:
    result = run_lib(files, fake_openai, batch_max_lines=1000, batch_max_bytes=600)
    assert result.summary.missing == 0
    sizes = [f["meta"]["bytes"] for f in fake_openai.files.values() if f["meta"]["purpose"] == "batch"]
    assert len(sizes) > 2 and max(sizes) <= 600


def test_batches_on_a_directory_without_batches(tmp_path: Path) -> None:
    not_run = CliRunner().invoke(app, ["batches", str(tmp_path)])
    assert not_run.exit_code == 2 and "not a run directory" in not_run.stderr
    (tmp_path / "store").mkdir()
    empty = CliRunner().invoke(app, ["batches", str(tmp_path)])
    assert empty.exit_code == 0 and "no batches" in empty.stdout


@pytest.mark.slow
def test_batch_judge_sends_the_judge_calls_as_a_second_batch_phase(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    from tests.cli.test_run_judges import SCORE_GRADER, expected_score, model_or_score_responder, write_dataset

    fake_openai.responder = model_or_score_responder()
    grader = tmp_path / "grader.json"
    grader.write_text(json.dumps(SCORE_GRADER))
    out = tmp_path / "run"
    args = ["run", "--dataset", str(write_dataset(tmp_path)), "--grader", str(grader), "--model", "base=fake-base",
            "--model", "tuned=fake-tuned", "--epochs", "2", "--base-url", fake_openai.base_url, "--out", str(out),
            "-q", "--no-readiness", "--batch", "--batch-judge", "--batch-poll-interval", "0.02"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert fake_openai.requests_for() == []  # neither the models nor the judge were called synchronously
    inputs = input_files(fake_openai)
    judge_files = [lines for lines in inputs if lines[0]["body"]["model"] == "judge-model"]
    assert len(judge_files) == 1 and len(judge_files[0]) == 12
    for label in ("base", "tuned"):
        for rec in records(out, label):
            assert rec["error"] is None and rec["score"] == expected_score(rec["output_text"])
    s = json.loads((out / "summary.json").read_text())
    assert s["judge"]["judge-model"]["calls"] == 0 and s["judge"]["judge-model"]["cache_hits"] == 12
    assert s["judge_results"]["judge-model"]["calls"] == 12
    assert any(e.get("phase") == "judge" for e in events(out) if e["event"] == "planned")
    creates = fake_openai.batch_creates
    assert CliRunner().invoke(app, args).exit_code == 0 and fake_openai.batch_creates == creates  # nothing twice


def test_a_dry_pass_that_fails_says_so_and_its_judge_calls_go_synchronously(
        tmp_path: Path, fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch) -> None:
    from rfteval.graders.engine import GradingEngine
    from rfteval.run.batch.judge_phase import _Recorder
    from tests.cli.test_run_judges import SCORE_GRADER, expected_score, model_or_score_responder, write_dataset

    real = GradingEngine.grade_batch

    def broken_when_dry(self: GradingEngine, pairs: Any, units: Any = None) -> Any:
        if isinstance(self.ctx.judge, _Recorder):
            raise RuntimeError("the grader broke in the dry pass")
        return real(self, pairs, units)

    monkeypatch.setattr(GradingEngine, "grade_batch", broken_when_dry)
    fake_openai.responder = model_or_score_responder()
    grader = tmp_path / "grader.json"
    grader.write_text(json.dumps(SCORE_GRADER))
    out = tmp_path / "run"
    args = ["run", "--dataset", str(write_dataset(tmp_path)), "--grader", str(grader), "--model", "base=fake-base",
            "--epochs", "2", "--base-url", fake_openai.base_url, "--out", str(out), "--no-readiness", "--batch",
            "--batch-judge", "--batch-poll-interval", "0.02"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert ("--batch-judge: the dry pass could not grade 6 cell(s) (RuntimeError: the grader broke in the dry "
            "pass); their judge calls go synchronously") in " ".join(res.output.split())
    assert len([r for r in fake_openai.requests_for() if r.model == "judge-model"]) == 6  # synchronous, graded right
    assert all(rec["score"] == expected_score(rec["output_text"]) for rec in records(out, "base"))


def test_batch_judge_needs_batch(files: dict[str, Path], fake_openai: FakeOpenAI) -> None:
    proc = CliRunner().invoke(app, cli_args(files, fake_openai, "--batch-judge"))
    assert proc.exit_code == 2 and "--batch-judge: needs --batch" in proc.stderr


# ---------------------------------------------------------------- an endpoint without the Batch API


def test_no_batch_api_is_found_before_anything_is_written(files: dict[str, Path], fake_openai: FakeOpenAI) -> None:
    from rfteval.errors import InputError

    fake_openai.no_batches = True
    with pytest.raises(InputError) as info:
        run_lib(files, fake_openai)
    assert info.value.field == "--batch" and "GET /v1/batches: HTTP 404" in info.value.message
    assert not files["out"].exists() and fake_openai.file_uploads == 0


@pytest.mark.slow
def test_behind_a_preflight_that_saw_nothing_a_404_upload_abandons_its_chunk(
        files: dict[str, Path], fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch) -> None:
    from rfteval.errors import InputError
    from rfteval.providers.openai_provider import OpenAIProvider

    monkeypatch.setattr(OpenAIProvider, "missing_api", lambda self, which, timeout_s=3.0: None)  # /batches was slow
    fake_openai.no_batches = True
    with pytest.raises(InputError) as info:
        run_lib(files, fake_openai)
    assert info.value.field == "--batch" and "POST /files: HTTP 404" in info.value.message
    assert read_journal(files["out"]) and not any(c.live for c in read_journal(files["out"]))  # nothing planned
    res = CliRunner().invoke(app, ["batches", str(files["out"])])
    assert "planned" not in res.output


def test_result_key_and_the_judge_phase_provider_map() -> None:
    from rfteval.run.batch.judge_phase import _SameProvider
    from rfteval.run.batch.lines import result_key

    [(_, line)] = list(parse_result_lines(b'{"custom_id": "k7", "response": null, "error": {"code": "x"}}\n'))
    assert result_key(line) == "k7"
    with pytest.raises(TypeError):
        result_key({"custom_id": 7})
    judge_provider: Any = object()  # the phase only hands it on
    same = _SameProvider(judge_provider)
    assert same["m1"] is same.get("m2") is judge_provider
    assert list(same.values()) == [judge_provider] and len(same) == 1  # listed once: its batches are listed once
