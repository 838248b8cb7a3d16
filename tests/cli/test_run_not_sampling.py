"""A server that does not sample (issue 36, item 3): every epoch of every item the same text although rfteval sent a
temperature above 0. The run, `readiness` and `compare` each say so in one line, summary.json and the JSON outputs
hold it, and readiness gives no zero-signal verdict from such epochs.

The stand-in here is the local OpenAI-compatible server with its deterministic echo (one answer per prompt, whatever
the temperature or seed): what `transformers serve` did with a greedy generation config. The real one is in
tests/cli/test_real_server_transformers.py.
"""

from __future__ import annotations

import collections
import json
import threading
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rfteval.cli.app import app
from tests.support.cli_run_files import write_run_files
from tests.support.fake_openai import FakeOpenAI, Reply, Request

pytestmark = pytest.mark.slow  # each test runs a whole run and the commands on it

runner = CliRunner()
N_ITEMS, EPOCHS = 4, 3


def line(label: str, temperature: str = "at temperature 1.0") -> str:
    return (f"{label}: every item's {EPOCHS} epochs are identical ({N_ITEMS} items) {temperature}: the server is not "
            "sampling (a greedy generation config?); zero-signal and pass@k figures from these epochs say nothing "
            "about the task")


def run(tmp_path: Path, server: FakeOpenAI, *extra: str) -> tuple[Path, str]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    files = write_run_files(tmp_path, N_ITEMS, reference="tuned")  # base scores 0 everywhere, tuned 1
    res = runner.invoke(app, ["run", "--dataset", str(files["dataset"]), "--grader", str(files["grader"]),
                              "--model", "base=fake-base", "--model", "tuned=fake-tuned", "--epochs", str(EPOCHS),
                              "--base-url", server.base_url, "--concurrency", "4", "--out", str(files["out"]),
                              "-q", *extra])
    assert res.exit_code == 0, res.output
    return files["out"], res.output


def sampling_responder() -> object:
    """A different answer on each call of one (model, prompt): a server that samples."""
    seen: collections.Counter[tuple[str, str]] = collections.Counter()
    lock = threading.Lock()

    def respond(req: Request) -> Reply:
        with lock:
            seen[(req.model, req.last_user_text())] += 1
            n = seen[(req.model, req.last_user_text())]
        return Reply(text=f"{req.model}|{req.last_user_text()}|sample {n}")

    return respond


def test_identical_epochs_at_temperature_1_are_said_by_run_readiness_and_compare(
        tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    out, printed = run(tmp_path, fake_openai, "--temperature", "1.0")
    assert fake_openai.requests and all(r.body.get("temperature") == 1.0 for r in fake_openai.requests)
    # the run: one line per model, whole, and summary.json's field
    lines = printed.splitlines()
    for label in ("base", "tuned"):
        assert f"warning: {line(label)}" in lines, printed
    summary = json.loads((out / "summary.json").read_text())
    assert [(c["label"], c["items"], c["epochs_min"], c["epochs_max"], c["temperature"], c["message"])
            for c in summary["not_sampling"]] == [(lb, N_ITEMS, EPOCHS, EPOCHS, 1.0, line(lb)) for lb in ("base", "tuned")]
    # the run's readiness of the base (every answer scores 0): no verdict from epochs that are one answer repeated
    assert "Readiness (base): INCONCLUSIVE" in printed and "NOT READY" not in printed, printed
    assert printed.count(line("base")) == 1  # said once, by the run's table

    ready = runner.invoke(app, ["readiness", str(out), "--label", "base"])
    assert ready.exit_code == 0, ready.output
    assert f"warning: {line('base')}" in ready.stdout.splitlines(), ready.stdout
    assert "NOT READY" not in ready.stdout
    report = json.loads(runner.invoke(app, ["readiness", str(out), "--label", "base", "--format", "json"]).stdout)
    status = {c["name"]: c["status"] for c in report["checks"]}
    assert status["zero_signal"] == "inconclusive" and status["base_mean"] == "inconclusive", status
    assert status["floor_items"] == "inconclusive" and report["verdict"] == "inconclusive"
    assert report["not_sampling"]["message"] == line("base")
    assert report["expected_zero_signal"]["share"] == 1.0  # the figure is still there, only not a verdict

    cmp = runner.invoke(app, ["compare", str(out), "--label", "base", "--label", "tuned"])
    assert cmp.exit_code == 0, cmp.output
    for label in ("base", "tuned"):
        assert f"warning: {line(label)}" in cmp.stdout.splitlines(), cmp.stdout
    as_json = runner.invoke(app, ["compare", str(out), "-l", "base", "-l", "tuned", "--format", "json"])
    found = json.loads(as_json.stdout)["not_sampling"]
    assert {role: c["message"] for role, c in found.items()} == {"baseline": line("base"), "candidate": line("tuned")}
    assert f"rfteval: warning: {line('tuned')}" in as_json.stderr.splitlines()
    series = runner.invoke(app, ["compare", str(out)])
    assert f"warning: {line('tuned')}" in series.stdout.splitlines(), series.stdout
    series_json = json.loads(runner.invoke(app, ["compare", str(out), "--format", "json"]).stdout)
    assert set(series_json["not_sampling"]) == {"base", "tuned"}


def test_no_temperature_sent_is_the_servers_default(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    out, printed = run(tmp_path, fake_openai, "--no-readiness")
    assert all("temperature" not in r.body for r in fake_openai.requests)
    assert f"warning: {line('base', 'at the server' + chr(39) + 's default temperature (rfteval sent none)')}" \
        in printed.splitlines(), printed
    assert [c["temperature"] for c in json.loads((out / "summary.json").read_text())["not_sampling"]] == [None, None]


def test_greedy_asked_for_or_a_sampling_server_no_warning(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    """Temperature 0 asks for identical epochs; a server whose epochs differ samples: neither is warned of, and
    readiness gives its zero-signal verdict as before."""
    out, printed = run(tmp_path / "greedy", fake_openai, "--temperature", "0")
    assert "not sampling" not in printed and "not_sampling" not in json.loads((out / "summary.json").read_text())
    assert "NOT READY" in printed  # base scores 0 on every sample: the verdict stands where greedy was asked for
    fake_openai.responder = sampling_responder()
    out, printed = run(tmp_path / "sampled", fake_openai, "--temperature", "1.0")
    assert "not sampling" not in printed
    report = json.loads(runner.invoke(app, ["readiness", str(out), "--format", "json"]).stdout)
    assert report["not_sampling"] is None and {c["name"]: c["status"] for c in report["checks"]}["zero_signal"] \
        == "not_ready"
    cmp = json.loads(runner.invoke(app, ["compare", str(out), "-l", "base", "-l", "tuned", "--format", "json"]).stdout)
    assert cmp["not_sampling"] == {}
