"""rfteval against `transformers serve` (transformers' OpenAI-compatible server) with SmolLM2-135M as a Hugging Face
checkpoint: the real-server tests' core beside llama.cpp's (tests/cli/test_real_server.py; issue 38, item 3), and a
server that does not sample (issue 36, item 3).

The core: a run of two labels x 3 epochs graded by a python grader, compare and readiness on it, and the run graded
again without a request; JSON mode, which this server does not support (it ignores `response_format`, saying so in its
log: the run goes on, unconstrained); a request it refuses (a prompt past the model's context) stopping the run in one
line that carries the server's own message; a mistyped model name; a server killed mid-run and the same command
resuming.

The checkpoint's generation config as transformers saves it does not enable sampling, and the server follows it over
the request: every epoch of an item comes back the same text although rfteval sent temperature 1.0 and a seed per
epoch. The run, `readiness` and `compare` must each say so in one line, and readiness must give no zero-signal
verdict from such epochs; with `do_sample: true` in the generation config (the control) the server samples, and
none of them says it. Server and checkpoint: examples/rft_on_cpu/serve.py, examples/rft_on_cpu/checkpoint.py (the RFT
example serves its checkpoints with the same code).

Kept small (3 to 8 items, 8 to 16 output tokens): the server runs on CPU, on two shared cores.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from examples.rft_on_cpu.serve import INSTALL_HINT, TransformersServer, unavailable
from tests.support.cli_run_files import RFTEVAL
from tests.support.optional import missing
from tests.support.real_server_cli import (
    arithmetic_items,
    assert_one_line_error,
    assert_secret_absent,
    chat_posts,
    digits_grader,
    digits_score,
    kill_mid_run_then_resume,
    output_of,
    records,
    sentence_items,
    string_check,
    write_items,
)

pytestmark = [pytest.mark.real_server, pytest.mark.slow]
if (REASON := unavailable()) is not None:  # the whole module, in one line saying why
    missing(REASON.removesuffix(f"; {INSTALL_HINT}"), "trainers")

ITEMS, EPOCHS = 3, 3
SECRET = "sk-transformers-test-0123456789abcdef"  # sent to 127.0.0.1 only; must reach no file or output


def serve(variant: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TransformersServer]:
    from examples.rft_on_cpu.checkpoint import hf_checkpoint

    with TransformersServer(hf_checkpoint(variant), workdir=tmp_path_factory.mktemp(f"serve-{variant}")) as server:
        yield server  # started, and stopped after


@pytest.fixture(scope="module")
def greedy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TransformersServer]:
    yield from serve("greedy", tmp_path_factory)


@pytest.fixture(scope="module")
def sampling(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TransformersServer]:
    yield from serve("sampling", tmp_path_factory)


def rfteval(*args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OPENAI_API_KEY": SECRET, "COLUMNS": "160"}
    return subprocess.run([*RFTEVAL, *args], capture_output=True, text=True, env=env, timeout=timeout)


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


# ---------------------------------------------------------------- the core, as against llama.cpp's server (issue 38.3)


def test_two_labels_three_epochs_compare_readiness_and_a_python_grader(sampling: TransformersServer,
                                                                      tmp_path: Path) -> None:
    """[38.3] two labels of a real model x 3 epochs: every cell answered and graded, the records name the served
    model; `compare` and `readiness` work on the result; the python grader (in its sandbox) then grades the same
    run again without a single new request; no key reaches a file or the terminal."""
    ds = write_items(tmp_path / "items.jsonl", arithmetic_items(4))
    out = tmp_path / "run"
    args = ["run", "--dataset", str(ds), "--grader", str(string_check(tmp_path / "g.json")), "--base-url",
            sampling.base_url, "--model", f"base={sampling.model}", "--model", f"tuned={sampling.model}",
            "--epochs", "3", "--temperature", "0.8", "--max-output-tokens", "8", "--concurrency", "4",
            "--out", str(out), "--quiet", "--no-readiness"]
    res = rfteval(*args)
    assert res.returncode == 0, output_of(res)
    for label in ("base", "tuned"):
        recs = records(out, label)
        assert {(r["item_id"], r["epoch"]) for r in recs} == {(f"add-{i}", e) for i in range(4) for e in (1, 2, 3)}
        assert all(r["error"] is None and r["model"] == sampling.model and r["output_text"] for r in recs)
    cmp = rfteval("compare", str(out), "--label", "base", "--label", "tuned")
    ready = rfteval("readiness", str(out), "--label", "base")
    assert cmp.returncode == 0 and ready.returncode == 0, output_of(cmp) + output_of(ready)
    assert "zero-signal" in ready.stdout

    grader = digits_grader(tmp_path / "py.json")
    posts = chat_posts(sampling)
    regrade = rfteval(*[str(grader) if a.endswith("g.json") else a for a in args])
    assert regrade.returncode == 0, output_of(regrade)
    assert chat_posts(sampling) == posts  # stored responses graded again, nothing sent again
    refs = {x["id"]: x["reference_answer"] for x in arithmetic_items(4)}
    for label in ("base", "tuned"):
        for r in records(out, label):  # the grader's own rule, applied here to the stored answer
            assert r["score"] == digits_score(r["output_text"], refs[r["item_id"]]), r
    assert_secret_absent(SECRET, out, output_of(res), output_of(cmp), output_of(ready), output_of(regrade))


def test_json_mode_is_not_supported_and_said_so_by_the_server(sampling: TransformersServer, tmp_path: Path) -> None:
    """[38.3] `--response-format` with JSON mode: this server has none (transformers 5.25 ignores `response_format`,
    as it ignores `tool_choice`), so nothing is refused and nothing constrained: the run completes, and the server's
    log says which field it ignored (the README's table says so too)."""
    rf = tmp_path / "rf.json"
    rf.write_text(json.dumps({"type": "json_object"}))
    out = tmp_path / "run"
    res = rfteval("run", "--dataset", str(write_items(tmp_path / "items.jsonl", arithmetic_items(3))), "--grader",
                  str(string_check(tmp_path / "g.json")), "--base-url", sampling.base_url, "--model",
                  f"base={sampling.model}", "--epochs", "1", "--max-output-tokens", "8", "--response-format", str(rf),
                  "--out", str(out), "--quiet", "--no-readiness", "--max-error-rate", "1")
    assert res.returncode == 0, output_of(res)
    recs = records(out, "base")
    assert len(recs) == 3 and all(r["error"] is None and r["output_text"] for r in recs)
    assert "Ignoring unsupported fields in the request: {'response_format'}" in sampling.log.read_text(errors="replace")


def test_a_prompt_past_the_context_is_refused_in_one_line_with_the_server_message(sampling: TransformersServer,
                                                                                  tmp_path: Path) -> None:
    """[38.3] a request shape this server refuses every time (a prompt longer than the model's context: HTTP 400
    with FastAPI's `{"detail": ...}`): the run stops after a handful of requests, exit 2, one line carrying the
    server's own message (it read "HTTP 400: Error code: 400" before the provider read `detail`)."""
    items = [{"id": f"long-{i}", "messages": [{"role": "user", "content": "cat " * 9000 + f"How many cats? ({i})"}],
              "reference_answer": "9000"} for i in range(6)]
    before = chat_posts(sampling)
    res = rfteval("run", "--dataset", str(write_items(tmp_path / "items.jsonl", items)), "--grader",
                  str(string_check(tmp_path / "g.json")), "--base-url", sampling.base_url, "--model",
                  f"base={sampling.model}", "--epochs", "3", "--max-output-tokens", "8", "--concurrency", "2",
                  "--out", str(tmp_path / "run"), "--quiet", "--no-readiness", timeout=300)
    line = assert_one_line_error(res, "the server refused", "requests alike", "HTTP 400: The prompt has",
                                 "but the model takes at most")
    assert SECRET not in line
    assert chat_posts(sampling) - before <= 8  # a handful, not 18 cells' retries


def test_a_mistyped_model_name_names_what_the_server_serves(sampling: TransformersServer, tmp_path: Path) -> None:
    """[38.3] a model name the pinned server does not serve: checked against GET /v1/models first, one line listing
    the checkpoint the server serves, exit 2, nothing sent."""
    before = chat_posts(sampling)
    res = rfteval("run", "--dataset", str(write_items(tmp_path / "items.jsonl", arithmetic_items(2))), "--grader",
                  str(string_check(tmp_path / "g.json")), "--base-url", sampling.base_url, "--model",
                  f"base={sampling.model}-typo", "--out", str(tmp_path / "run"), "--quiet", timeout=120)
    assert_one_line_error(res, f"unknown model '{sampling.model}-typo'", f"serves {sampling.model}")
    assert chat_posts(sampling) == before


def test_a_killed_server_stops_the_run_and_the_same_command_resumes(tmp_path: Path) -> None:
    """[38.3] SIGKILL `transformers serve` (its process group: the server and its model's process) mid-run: the run
    stops within seconds naming the refused connection, exit 3; restarted on the same port, the same command
    resumes without sending a stored answer again (tests/support/real_server_cli.py, as for llama.cpp's)."""
    from examples.rft_on_cpu.checkpoint import hf_checkpoint

    with TransformersServer(hf_checkpoint("sampling"), workdir=tmp_path / "serve") as server:
        ds = write_items(tmp_path / "items.jsonl", sentence_items(8))
        out = tmp_path / "run"
        args = ["run", "--dataset", str(ds), "--grader", str(string_check(tmp_path / "g.json")), "--base-url",
                server.base_url, "--model", f"base={server.model}", "--epochs", "3", "--max-output-tokens", "16",
                "--concurrency", "2", "--out", str(out), "--quiet", "--no-readiness"]
        kill_mid_run_then_resume(server, args, out, "base", 24, SECRET)
