"""rfteval against `transformers serve` (transformers' OpenAI-compatible server) with SmolLM2-135M as a Hugging Face
checkpoint: a server that does not sample (issue 36, item 3).

The checkpoint's generation config as transformers saves it does not enable sampling, and the server follows it over
the request: every epoch of an item comes back the same text although rfteval sent temperature 1.0 and a seed per
epoch. The run, `readiness` and `compare` must each say so in one line, and readiness must give no zero-signal
verdict from such epochs; with `do_sample: true` in the generation config (the control) the server samples, and
none of them says it. Servers and checkpoint: tests/support/transformers_server.py, tests/support/hf_checkpoint.py.

Kept small (3 items, 8 output tokens, 2 labels x 3 epochs): the server runs on CPU, on two shared cores.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli_run_files import RFTEVAL
from tests.support.optional import missing
from tests.support.transformers_server import INSTALL_HINT, TransformersServer, unavailable

pytestmark = [pytest.mark.real_server, pytest.mark.slow]
if (REASON := unavailable()) is not None:  # the whole module, in one line saying why
    missing(REASON.removesuffix(f"; {INSTALL_HINT}"), "trainers")

ITEMS, EPOCHS = 3, 3
SECRET = "sk-transformers-test-0123456789abcdef"  # sent to 127.0.0.1 only; must reach no file or output


def serve(variant: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TransformersServer]:
    from tests.support.hf_checkpoint import hf_checkpoint

    server = TransformersServer(hf_checkpoint(variant), workdir=tmp_path_factory.mktemp(f"serve-{variant}")).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def greedy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TransformersServer]:
    yield from serve("greedy", tmp_path_factory)


@pytest.fixture(scope="module")
def sampling(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TransformersServer]:
    yield from serve("sampling", tmp_path_factory)


def rfteval(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OPENAI_API_KEY": SECRET, "COLUMNS": "160"}
    return subprocess.run([*RFTEVAL, *args], capture_output=True, text=True, env=env, timeout=900)


def run_on(server: TransformersServer, tmp_path: Path) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """Two labels (one checkpoint) x 3 epochs x 3 open-ended items at temperature 1.0 with a seed per epoch."""
    animals = ["cat", "owl", "fox"]
    ds = tmp_path / "items.jsonl"
    ds.write_text("".join(json.dumps({"id": f"say-{i}", "messages": [
        {"role": "user", "content": f"Write one sentence about a {a}."}], "reference_answer": a}) + "\n"
        for i, a in enumerate(animals[:ITEMS])))
    grader = tmp_path / "grader.json"
    grader.write_text(json.dumps({"type": "string_check", "name": "names-it", "input": "{{ sample.output_text }}",
                                  "reference": "{{ item.reference_answer }}", "operation": "ilike"}))
    out = tmp_path / "run"
    res = rfteval("run", "--dataset", str(ds), "--grader", str(grader), "--base-url", server.base_url,
                  "--model", f"base={server.model}", "--model", f"tuned={server.model}", "--epochs", str(EPOCHS),
                  "--temperature", "1.0", "--seed", "7", "--max-output-tokens", "8", "--concurrency", "2",
                  "--out", str(out), "--quiet")
    assert res.returncode == 0, res.stdout + res.stderr
    return out, res


def texts(out: Path, label: str) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for rec in (json.loads(x) for x in (out / f"{label}.jsonl").read_text().splitlines() if x.strip()):
        assert rec["error"] is None, rec["error"]
        found.setdefault(rec["item_id"], set()).add(rec["output_text"])
    return found


def warnings(output: str) -> list[str]:
    return [x for x in output.splitlines() if "the server is not sampling" in x and x.lstrip().startswith(
        ("warning:", "rfteval: warning:"))]


def test_a_greedy_generation_config_is_said_not_to_sample(greedy: TransformersServer, tmp_path: Path) -> None:
    """[36.3] every epoch the same text at temperature 1.0 with a seed per epoch: the run, readiness and compare
    each print one line saying the server is not sampling, summary.json and the JSON outputs hold it, and
    readiness's zero-signal check is inconclusive, not NOT READY."""
    out, res = run_on(greedy, tmp_path)
    for label in ("base", "tuned"):  # the ground truth: the server answered each item with one text
        by_item = texts(out, label)
        assert len(by_item) == ITEMS and all(len(t) == 1 for t in by_item.values()), by_item
    expected = [f"{label}: every item's {EPOCHS} epochs are identical ({ITEMS} items) at temperature 1.0: the server "
                "is not sampling (a greedy generation config?); zero-signal and pass@k figures from these epochs say "
                "nothing about the task" for label in ("base", "tuned")]
    assert [w.removeprefix("warning: ") for w in warnings(res.stdout)] == expected, res.stdout
    summary = json.loads((out / "summary.json").read_text())
    assert [c["message"] for c in summary["not_sampling"]] == expected
    assert "NOT READY" not in res.stdout and "Readiness (base):" in res.stdout, res.stdout

    ready = rfteval("readiness", str(out), "--label", "base")
    assert ready.returncode == 0, ready.stdout + ready.stderr
    assert [w.removeprefix("warning: ") for w in warnings(ready.stdout)] == expected[:1], ready.stdout
    assert "NOT READY" not in ready.stdout
    report: dict[str, Any] = json.loads(rfteval("readiness", str(out), "--label", "base", "--format", "json").stdout)
    status = {c["name"]: c["status"] for c in report["checks"]}
    assert status["zero_signal"] == "inconclusive" and report["verdict"] != "not_ready", status
    assert report["expected_zero_signal"]["share"] == 1.0  # what the old verdict read: every group zero-advantage

    cmp = rfteval("compare", str(out), "--label", "base", "--label", "tuned")
    assert cmp.returncode == 0, cmp.stdout + cmp.stderr
    assert [w.removeprefix("warning: ") for w in warnings(cmp.stdout)] == expected, cmp.stdout
    as_json = rfteval("compare", str(out), "-l", "base", "-l", "tuned", "--format", "json")
    assert {role: c["message"] for role, c in json.loads(as_json.stdout)["not_sampling"].items()} == \
        {"baseline": expected[0], "candidate": expected[1]}
    assert [w.removeprefix("rfteval: warning: ") for w in warnings(as_json.stderr)] == expected
    for text in (res.stdout + res.stderr, ready.stdout, cmp.stdout, as_json.stdout + as_json.stderr):
        assert SECRET not in text


def test_a_sampling_generation_config_is_not_flagged(sampling: TransformersServer, tmp_path: Path) -> None:
    """[36.3, the control] `do_sample: true` in the checkpoint's generation config: the server samples at the
    temperature sent (an item's epochs differ), and neither the run, readiness nor compare says it does not."""
    out, res = run_on(sampling, tmp_path)
    differ = sum(len(t) > 1 for label in ("base", "tuned") for t in texts(out, label).values())
    assert differ >= 2 * ITEMS - 1, [texts(out, label) for label in ("base", "tuned")]
    assert not warnings(res.stdout + res.stderr), res.stdout
    assert "not_sampling" not in json.loads((out / "summary.json").read_text())
    ready = rfteval("readiness", str(out), "--label", "base", "--format", "json")
    report = json.loads(ready.stdout)
    assert report["not_sampling"] is None and not warnings(ready.stderr)
    assert {c["name"]: c["status"] for c in report["checks"]}["zero_signal"] != "inconclusive"
    cmp = rfteval("compare", str(out), "-l", "base", "-l", "tuned")
    assert not warnings(cmp.stdout + cmp.stderr), cmp.stdout
