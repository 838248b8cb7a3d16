"""`rfteval run` against the test server's Batch API, for the batch tests: the command line of a two-model run over
the run files of tests/run/batch/conftest.py, and the records it wrote."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.support.fake_openai import FakeOpenAI

N_ITEMS = 5
EPOCHS = 2


def cli_args(files: dict[str, Path], server: FakeOpenAI, *extra: str, out: Path | None = None) -> list[str]:
    return ["run", "--dataset", str(files["dataset"]), "--grader", str(files["grader"]), "--model", "base=fake-base",
            "--model", "tuned=fake-tuned", "--epochs", str(EPOCHS), "--base-url", server.base_url,
            "--out", str(out or files["out"]), "--quiet", "--no-readiness", "--batch-poll-interval", "0.02",
            "--retry-base-delay", "0.001", *extra]


def records(out: Path, label: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / f"{label}.jsonl").read_text().splitlines()]
