"""run/batch/offline.py: `rfteval run --export-requests` writes the requests an offline engine (vllm run-batch,
Ray Data) reads; `--import-responses` stores what it wrote back, and a bad line is one line and exit 2."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rfteval.cli.app import app
from tests.support.batch_cli import cli_args, records
from tests.support.fake_openai import FakeOpenAI, Reply, Request, chat_body


def fake_engine(requests: Path, out: Path, drop: Callable[[int], bool] = lambda i: False) -> None:
    """What `vllm run-batch -i requests -o out` does, as far as the line formats go."""
    lines = []
    for i, raw in enumerate(requests.read_text().splitlines()):
        line = json.loads(raw)
        if drop(i):
            continue
        req = Request(path=line["url"], body=line["body"], headers={}, model=line["body"]["model"], api="chat")
        body = chat_body(req, Reply(text=f"engine:{req.model}:{req.last_user_text()}"), i)
        lines.append({"id": f"vllm-{i}", "custom_id": line["custom_id"],
                      "response": {"status_code": 200, "request_id": f"vllm-batch-{i}", "body": body}, "error": None})
    out.write_text("".join(json.dumps(x) + "\n" for x in reversed(lines)))


@pytest.mark.slow
def test_export_then_import(files: dict[str, Path], fake_openai: FakeOpenAI, tmp_path: Path) -> None:
    req = tmp_path / "requests.jsonl"
    proc = CliRunner().invoke(app, cli_args(files, fake_openai, "--export-requests", str(req)))
    assert proc.exit_code == 0, proc.output
    per_model = {label: tmp_path / f"requests.{label}.jsonl" for label in ("base", "tuned")}
    assert all(p.exists() for p in per_model.values()) and "--import-responses" in proc.stdout
    assert fake_openai.requests == [] and fake_openai.batch_creates == 0  # nothing sent
    first = json.loads(per_model["base"].read_text().splitlines()[0])
    assert set(first) == {"custom_id", "method", "url", "body"} and first["url"] == "/v1/chat/completions"
    results = tmp_path / "results.jsonl"
    fake_engine(per_model["base"], results, drop=lambda i: i == 0)
    proc = CliRunner().invoke(app, cli_args(files, fake_openai, "--import-responses", str(results)))
    assert proc.exit_code == 3, proc.output  # graded what came back; the rest is missing, and it says so
    assert "9 responses stored" in proc.stderr and "11 of 20 cells have no response yet" in proc.stderr
    s = json.loads((files["out"] / "summary.json").read_text())
    assert s["models"]["base"]["records"] == 9 and s["models"]["tuned"]["records"] == 0
    assert fake_openai.requests == []
    recs = records(files["out"], "base")
    assert recs[0]["output_text"].startswith("engine:fake-base:")
    # export again: only what is still missing
    CliRunner().invoke(app, cli_args(files, fake_openai, "--export-requests", str(req)))
    assert len(per_model["base"].read_text().splitlines()) == 1


@pytest.mark.parametrize("line,field", [
    ("not json", None),
    ('{"response": {"status_code": 200, "body": {}}}', "custom_id"),
    ('{"custom_id": "k", "response": {"status_code": "200"}}', "response"),
    ('{"custom_id": "k", "response": {"status_code": 200, "body": "text"}}', "response.body"),
    ('{"custom_id": "k"}', "response"),
])
@pytest.mark.slow
def test_a_bad_import_line_is_one_line_and_exit_2(files: dict[str, Path], fake_openai: FakeOpenAI, tmp_path: Path,
                                                  line: str, field: str | None) -> None:
    results = tmp_path / "results.jsonl"
    results.write_text('{"custom_id": "x", "response": null, "error": {"code": "batch_expired", "message": "m"}}\n'
                       + line + "\n")
    proc = CliRunner().invoke(app, cli_args(files, fake_openai, "--import-responses", str(results)))
    assert proc.exit_code == 2
    msg = proc.stderr.strip()
    assert len(msg.splitlines()) == 1 and f"{results}:2: " in msg and "Traceback" not in proc.output
    if field:
        assert f":2: {field}: " in msg
    # refused before the run wrote anything: no run directory, no spec.resolved.toml (issue 36 leftover)
    assert not files["out"].exists() and fake_openai.requests == []


@pytest.mark.slow
def test_a_missing_import_file_leaves_no_run_directory(files: dict[str, Path], fake_openai: FakeOpenAI,
                                                      tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.jsonl"
    proc = CliRunner().invoke(app, cli_args(files, fake_openai, "--import-responses", str(missing)))
    assert proc.exit_code == 2 and proc.stderr.strip() == f"rfteval: {missing}: --import-responses: no such file"
    assert not files["out"].exists() and fake_openai.requests == []


def test_modes_cannot_be_combined(files: dict[str, Path], fake_openai: FakeOpenAI, tmp_path: Path) -> None:
    proc = CliRunner().invoke(app, cli_args(files, fake_openai, "--batch", "--export-requests", str(tmp_path / "x")))
    assert proc.exit_code == 2 and "cannot be combined" in proc.stderr
