"""rfteval against a real server and a real model: llama.cpp's OpenAI-compatible server with SmolLM2-135M.

Every test drives the `rfteval` command as a user would (a subprocess), on small datasets written here, against
the server of tests/support/real_server.py on 127.0.0.1. Each docstring names the behaviour it checks (issue 23's item in
brackets). Some of them are built on other branches (provider, runner); until those are merged the tests that check
them fail here, on purpose: they state the target, not today's behaviour.

Kept small (tens of items, outputs of 8-32 tokens): the server runs one request at a time on two shared cores.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import REPO
from tests.support.cli_run_files import RFTEVAL
from tests.support.optional import missing
from tests.support.real_server import INSTALL_HINT, TOOLS_ALIAS, RealServer, unavailable
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
    missing(REASON.removesuffix(f"; {INSTALL_HINT}"), "realserver")

SECRET = "sk-realserver-test-0123456789abcdef"  # never sent anywhere but 127.0.0.1; must reach no file or output


@pytest.fixture(scope="session")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealServer]:
    """One server for the session (two aliases of one model); tests that kill a server start their own."""
    with RealServer(workdir=tmp_path_factory.mktemp("llama")) as server:  # started, and stopped after
        yield server


# ---------------------------------------------------------------- helpers


def rfteval(*args: str, timeout: float = 300.0) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OPENAI_API_KEY": SECRET}
    return subprocess.run([*RFTEVAL, *args], capture_output=True, text=True, env=env, timeout=timeout)


def run_args(server: RealServer, dataset: Path, grader: Path, out: Path, *extra: str,
             models: tuple[str, ...] = ("base=smol-base",), epochs: int = 1, max_tokens: int = 16) -> list[str]:
    args = ["run", "--dataset", str(dataset), "--grader", str(grader), "--base-url", server.base_url,
            "--epochs", str(epochs), "--max-output-tokens", str(max_tokens), "--out", str(out), "--quiet",
            "--no-readiness"]
    for m in models:
        args += ["--model", m]
    return args + list(extra)


# ---------------------------------------------------------------- the core path


def test_two_aliases_three_epochs_compare_readiness_and_a_python_grader(llama: RealServer, tmp_path: Path) -> None:
    """[1] run with two aliases of a real model, 3 epochs, at a concurrency that keeps the server's one slot busy;
    every cell answered and graded, the records name the served model; `compare` (Markdown and JUnit too) and
    `readiness` work on the result; then the python grader (in its sandbox) re-grades the same run without a
    single new request; no key reaches a file or the terminal."""
    ds = write_items(tmp_path / "items.jsonl", arithmetic_items(6))
    out = tmp_path / "run"
    args = run_args(llama, ds, string_check(tmp_path / "g.json"), out, "--concurrency", "4", "--temperature", "0.8",
                    models=("base=smol-base", "tuned=smol-tuned"), epochs=3)
    res = rfteval(*args)
    assert res.returncode in (0, 3), output_of(res)  # 3 only if over --max-error-rate: checked just below
    for label, model in (("base", "smol-base"), ("tuned", "smol-tuned")):
        recs = records(out, label)
        assert len(recs) == 6 * 3
        assert {(r["item_id"], r["epoch"]) for r in recs} == {(f"add-{i}", e) for i in range(6) for e in (1, 2, 3)}
        assert all(r["error"] is None for r in recs), [r["error"] for r in recs if r["error"]]
        assert all(r["model"] == model and r["output_text"] and r["score"] in (0.0, 1.0) for r in recs)
    assert res.returncode == 0, output_of(res)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["complete"] is True and summary["errors"] == 0

    cmp_md = tmp_path / "cmp.md"
    junit = tmp_path / "cmp.xml"
    cmp = rfteval("compare", str(out), "--label", "base", str(out), "--label", "tuned", "--markdown", str(cmp_md),
                  "--junit", str(junit))
    assert cmp.returncode == 0, output_of(cmp)
    assert "base" in cmp.stdout and "tuned" in cmp.stdout and cmp_md.read_text().strip() and junit.read_text()
    ready = rfteval("readiness", str(out), "--label", "base")
    assert ready.returncode == 0, output_of(ready)
    assert "zero-signal" in ready.stdout

    grader = digits_grader(tmp_path / "py.json")
    posts = chat_posts(llama)
    regrade = rfteval(*[grader.as_posix() if a.endswith("g.json") else a for a in args])
    assert regrade.returncode == 0, output_of(regrade)
    assert chat_posts(llama) == posts  # stored responses re-graded, nothing re-sent
    for label in ("base", "tuned"):
        recs = records(out, label)
        assert all(r["error"] is None and r["score"] in (0.0, 1.0) for r in recs)
        refs = {x["id"]: x["reference_answer"] for x in arithmetic_items(6)}
        for r in recs:  # the grader's own rule, applied here to the stored answer
            assert r["score"] == digits_score(r["output_text"], refs[r["item_id"]]), r
    assert_secret_absent(SECRET, out, output_of(res), output_of(cmp), output_of(ready), output_of(regrade))


# ---------------------------------------------------------------- what the request carries


def test_max_output_tokens_is_honoured(llama: RealServer, tmp_path: Path) -> None:
    """[4, provider] `--max-output-tokens 8` holds on a server that reads `max_tokens` (not only
    `max_completion_tokens`): every record's usage.output_tokens <= 8, for prompts that ask for long answers."""
    items = [{"id": f"story-{i}", "messages": [{"role": "user", "content": f"Tell me a long story about {w}."}],
              "reference_answer": w} for i, w in enumerate(["a dragon", "the sea", "a robot", "winter"])]
    out = tmp_path / "run"
    res = rfteval(*run_args(llama, write_items(tmp_path / "items.jsonl", items), string_check(tmp_path / "g.json"),
                            out, "--concurrency", "2", max_tokens=8), "--max-error-rate", "1")
    assert res.returncode == 0, output_of(res)
    recs = records(out, "base")
    assert len(recs) == 4 and all(r["error"] is None for r in recs)
    assert all(0 < r["usage"]["output_tokens"] <= 8 for r in recs), [r["usage"] for r in recs]


def test_epochs_with_a_seed_are_different_samples_and_reproducible(llama: RealServer, tmp_path: Path) -> None:
    """[4, provider] `--seed` gives each epoch its own seed derived from it: on a server that honours seeds the
    three epochs of an item differ (not one sample repeated), and the same command with `--fresh` reproduces
    them exactly (the seeds are a function of --seed and the epoch)."""
    ds = write_items(tmp_path / "items.jsonl", sentence_items(6))
    out = tmp_path / "run"
    args = run_args(llama, ds, string_check(tmp_path / "g.json"), out, "--seed", "1234", "--temperature", "1.0",
                    "--concurrency", "3", epochs=3)
    first = rfteval(*args)
    assert first.returncode == 0, output_of(first)
    texts = {(r["item_id"], r["epoch"]): r["output_text"] for r in records(out, "base")}
    assert len(texts) == 18
    distinct = [len({texts[(f"say-{i}", e)] for e in (1, 2, 3)}) for i in range(6)]
    assert sum(d > 1 for d in distinct) >= 5, distinct  # identical epochs would all be 1
    again = rfteval(*args, "--fresh")
    assert again.returncode == 0, output_of(again)
    assert {(r["item_id"], r["epoch"]): r["output_text"] for r in records(out, "base")} == texts


def test_json_object_mode_is_sent_as_given(llama: RealServer, tmp_path: Path) -> None:
    """[3, provider] `--response-format` holding `{"type": "json_object", "schema": ...}` (JSON mode with
    llama.cpp's schema key) is sent as given, so the server constrains the output: every record's output_json is
    the object the schema describes."""
    rf = tmp_path / "rf.json"
    rf.write_text(json.dumps({"type": "json_object", "schema": {
        "type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"]}}))
    out = tmp_path / "run"
    res = rfteval(*run_args(llama, write_items(tmp_path / "items.jsonl", arithmetic_items(4)),
                            string_check(tmp_path / "g.json"), out, "--response-format", str(rf), "--concurrency", "2",
                            max_tokens=32), "--max-error-rate", "1")
    assert res.returncode == 0, output_of(res)
    recs = records(out, "base")
    assert len(recs) == 4 and all(r["error"] is None for r in recs), [r["error"] for r in recs]
    assert all(isinstance(r["output_json"], dict) and isinstance(r["output_json"].get("answer"), int) for r in recs), \
        [r["output_text"] for r in recs]


def test_a_refused_json_schema_stops_the_run_within_seconds(llama: RealServer, tmp_path: Path) -> None:
    """[2, runner] a response format this server refuses for every request (`json_schema`: llama.cpp's server
    takes only text/json_object and answers 500 with a validation message) stops the run after a handful of
    requests, not hundreds of retries: exit 2, one line naming the server's message and `--response-format`."""
    rf = tmp_path / "schema.json"
    rf.write_text(json.dumps({"type": "object", "properties": {"answer": {"type": "integer"}},
                              "required": ["answer"]}))
    before = chat_posts(llama)
    res = rfteval(*run_args(llama, write_items(tmp_path / "items.jsonl", arithmetic_items(20)),
                            string_check(tmp_path / "g.json"), tmp_path / "run", "--response-format", str(rf),
                            "--concurrency", "4", epochs=3), timeout=180)  # a guard: the retries took 8+ minutes
    assert_one_line_error(res, "--response-format")
    sent = chat_posts(llama) - before
    assert sent <= 20, sent  # a handful, where today's retries sent about 600


def test_tools_come_back_as_tool_calls(llama: RealServer, tmp_path: Path) -> None:
    """[4, provider] an item's `tools` go with `tool_choice` ("auto" when the item sets none): llama-cpp-python's
    function-calling format (the server's `smol-tools` name) ignores tools without it. The answers come back as
    tool calls (output_tools)."""
    tool = {"type": "function", "name": "get_weather", "description": "Current weather for a city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
    cities = ["Paris", "Tokyo", "Lima", "Oslo", "Cairo", "Quito"]
    items = [{"id": f"w-{i}", "tools": [tool], "reference_answer": c, "messages": [
        {"role": "system", "content": "You can call get_weather. Call it to answer."},
        {"role": "user", "content": f"What is the weather in {c} right now?"}]} for i, c in enumerate(cities)]
    out = tmp_path / "run"
    res = rfteval(*run_args(llama, write_items(tmp_path / "items.jsonl", items), string_check(tmp_path / "g.json"),
                            out, "--concurrency", "2", models=(f"base={TOOLS_ALIAS}",), max_tokens=32),
                  "--max-error-rate", "1")
    assert res.returncode == 0, output_of(res)
    recs = records(out, "base")
    assert len(recs) == len(cities) and all(r["error"] is None for r in recs)
    with_calls = [r for r in recs if r["output_tools"]]
    assert len(with_calls) >= len(cities) - 1, [r["output_text"] for r in recs]  # today: 0
    assert all("get_weather" in json.dumps(r["output_tools"]) for r in with_calls)


def test_a_judge_served_by_the_same_server(llama: RealServer, tmp_path: Path) -> None:
    """[1] a score_model grader whose judge is the other alias on the same server grades every sample (no grade
    errors, scores in its range), its calls are counted in summary.json, and its answers keep to the grader's
    max_completions_tokens (a server reading `max_tokens` otherwise let them run to thousands). Needs the judge's
    forced structured output to reach a server that refuses `json_schema` in a form it takes (JSON mode with
    llama.cpp's `schema` key): the judge steps its format down once (rfteval.providers.judge.FORMAT_LEVELS)."""
    grader = tmp_path / "judge.json"
    grader.write_text(json.dumps({
        "type": "score_model", "name": "judge", "model": "smol-tuned", "range": [0, 1],
        "sampling_params": {"temperature": 0, "max_completions_tokens": 400},
        "input": [{"role": "system", "content": "Score the answer from 0 to 1. Reply in JSON."},
                  {"role": "user", "content": "Answer: {{ sample.output_text }}\nExpected: {{ item.reference_answer }}"}]}))
    out = tmp_path / "run"
    res = rfteval(*run_args(llama, write_items(tmp_path / "items.jsonl", arithmetic_items(4)), grader, out,
                            "--judge-base-url", llama.base_url, "--concurrency", "2", "--judge-concurrency", "2",
                            max_tokens=8), "--max-error-rate", "1")
    assert res.returncode == 0, output_of(res)
    recs = records(out, "base")
    assert len(recs) == 4
    # every call is answered in the stepped-down format; a 135M judge may still ramble past its limit on a sample,
    # which is a counted parse error (the answer is kept), never a refused request or a retry storm
    graded = [r for r in recs if r["error"] is None]
    assert all(0.0 <= r["score"] <= 1.0 for r in graded) and len(graded) >= 3, [r["error"] for r in recs]
    assert all(r["error"]["type"] == "model_grader_parse_error" for r in recs if r["error"]), [r["error"] for r in recs]
    summary = json.loads((out / "summary.json").read_text())
    judge = summary["judge_results"]["smol-tuned"]
    assert judge["calls"] == 4 and 0 < judge["output_tokens"] <= 4 * 400, judge
    assert_secret_absent(SECRET, out, output_of(res))


# ---------------------------------------------------------------- what the server does not have


def test_a_mistyped_model_name_names_what_the_server_serves(llama: RealServer, tmp_path: Path) -> None:
    """[5, provider] `--model base=smol-bsae`: llama.cpp would answer with its default model; rfteval checks the
    name against GET /v1/models first and stops, exit 2, one line listing the served names, nothing sent."""
    before = chat_posts(llama)
    res = rfteval(*run_args(llama, write_items(tmp_path / "items.jsonl", arithmetic_items(3)),
                            string_check(tmp_path / "g.json"), tmp_path / "run", models=("base=smol-bsae",)))
    assert_one_line_error(res, "smol-bsae", "smol-base", "smol-tuned")
    assert chat_posts(llama) == before


def test_batch_without_a_batch_api_says_so(llama: RealServer, tmp_path: Path) -> None:
    """[5, provider] `--batch` against an endpoint with no Files/Batches API: exit 2, one line pointing to
    `--export-requests`, no traceback, and no planned chunk left in the batch journal."""
    out = tmp_path / "run"
    res = rfteval(*run_args(llama, write_items(tmp_path / "items.jsonl", arithmetic_items(3)),
                            string_check(tmp_path / "g.json"), out, "--batch"), timeout=120)
    assert_one_line_error(res, "--export-requests")
    journal = out / "store" / "batches.jsonl"
    assert not journal.exists() or not journal.read_text().strip()


def test_responses_api_missing_points_to_api_chat(llama: RealServer, tmp_path: Path) -> None:
    """[5, provider] `--api responses` against a server without /v1/responses: exit 2, one line saying the
    endpoint has no Responses API and to use `--api chat`, no traceback."""
    res = rfteval(*run_args(llama, write_items(tmp_path / "items.jsonl", arithmetic_items(3)),
                            string_check(tmp_path / "g.json"), tmp_path / "run", "--api", "responses"), timeout=120)
    assert_one_line_error(res, "--api chat")


# ---------------------------------------------------------------- a server that dies


def test_a_killed_server_stops_the_run_within_seconds_and_the_same_command_resumes(tmp_path: Path) -> None:
    """[4, runner] SIGKILL the server mid-run: the run notices across cells (not after every cell's retries),
    stops within seconds naming the refused connection, no traceback; the server restarted on the same port, the
    same command resumes (stored answers not re-sent) and completes (tests/support/real_server_cli.py, which
    `transformers serve` goes through too)."""
    with RealServer(workdir=tmp_path / "llama") as server:
        ds = write_items(tmp_path / "items.jsonl", sentence_items(12))
        out = tmp_path / "run"
        args = run_args(server, ds, string_check(tmp_path / "g.json"), out, "--concurrency", "2", epochs=3,
                        max_tokens=24)
        kill_mid_run_then_resume(server, args, out, "base", 36, SECRET)


# ---------------------------------------------------------------- issue 27: developer, judges failing fast, truncation

ROOT = REPO


def chat_requests(server: RealServer) -> int:
    """The server's access-log lines for POST /v1/chat/completions: one per request, refused or not (chat_posts
    also counts the path that each refusal's printed traceback repeats)."""
    return server.log.read_text(errors="replace").count('"POST /v1/chat/completions HTTP')


def test_chipstack_developer_messages_are_refused_in_one_line_and_run_with_developer_as_system(
        llama: RealServer, tmp_path: Path) -> None:
    """[27.3] the bundled ChipStack example (developer messages, OpenAI's RFT format) on this server: llama-cpp-
    python refuses the developer role with a 500 listing 7 pydantic errors; the run stops after a handful of
    requests with one line naming the field, the value and the fix; with --developer-as system every item runs.
    Its first 8 lines, as they are, to keep the test small (all 24 ran the same way when this was written)."""
    lines = (ROOT / "datasets" / "chipstack" / "items.jsonl").read_text().splitlines(keepends=True)[:8]
    ds, grader = tmp_path / "items.jsonl", ROOT / "graders" / "chipstack.json"
    ds.write_text("".join(lines))
    out = tmp_path / "run"
    before = chat_requests(llama)
    res = rfteval(*run_args(llama, ds, grader, out, "--concurrency", "2", max_tokens=8), timeout=180)
    line = assert_one_line_error(res, "--developer-as system", "messages[0].role", "(input: 'developer')")
    assert "7 validation errors" in line and "Input should be 'system', 'user', 'assistant', 'tool'" in line
    assert chat_requests(llama) - before <= 6  # a handful, not 8 cells x 11 attempts
    res = rfteval(*run_args(llama, ds, grader, out, "--concurrency", "2", "--developer-as", "system", max_tokens=8),
                  "--max-error-rate", "1", timeout=600)
    assert res.returncode == 0, output_of(res)
    recs = records(out, "base")
    assert len(recs) == 8 and not [r for r in recs if r["error"] and r["error"]["stage"] == "generate"]


def _outputs(path: Path, n: int) -> Path:
    return write_items(path, [{"item_id": f"say-{i}", "output_text": f"The {a} is an animal."}
                              for i, a in enumerate(["cat", "dog", "owl", "fox", "whale", "horse", "crow", "bee"][:n])])


def test_a_judge_the_server_refuses_stops_grade_within_seconds(llama: RealServer, tmp_path: Path) -> None:
    """[27.4] a label_model whose instructions are a developer message (docs/judges.md's example) judged on this
    server: `grade` stops after a handful of refused judge requests (they were retried 138-173 s per 4 cells),
    one line naming the fix, no records written; with --developer-as system it grades."""
    grader = tmp_path / "label.json"
    grader.write_text(json.dumps({
        "type": "label_model", "name": "animal", "model": "smol-base",
        "input": [{"role": "developer", "content": "Is the statement about a mammal? Answer yes or no."},
                  {"role": "user", "content": "Statement: {{ sample.output_text }}"}],
        "labels": ["yes", "no"], "passing_labels": ["yes"]}))
    ds = write_items(tmp_path / "items.jsonl", sentence_items(8))
    args = ["grade", "-d", str(ds), "-g", str(grader), "--outputs", str(_outputs(tmp_path / "outs.jsonl", 8)),
            "--out", str(tmp_path / "graded.jsonl"), "--judge-base-url", llama.base_url, "--judge-concurrency", "2"]
    before = chat_requests(llama)
    res = rfteval(*args, timeout=180)  # a guard: the retries took minutes
    assert_one_line_error(res, "judge requests alike", "--developer-as system", "(input: 'developer')")
    # a handful (each call's first attempt also steps json_schema down), not 8 cells x 11 attempts
    assert chat_requests(llama) - before <= 8 and not (tmp_path / "graded.jsonl").exists()
    res = rfteval(*args, "--developer-as", "system", "--max-error-rate", "1", timeout=300)
    assert res.returncode == 0, output_of(res)
    assert len(records(tmp_path, "graded")) == 8


def test_a_judge_answer_cut_off_by_its_output_limit_is_named_as_such(llama: RealServer, tmp_path: Path) -> None:
    """[27.5] a score_model with max_completions_tokens 2: every answer is cut before its result. Each is a
    model_grader_truncated_error saying to raise max_completions_tokens (it was "judge answer is not a JSON
    object"), and with a limit the answer fits in, the result (first in the schema) is read."""
    grader = tmp_path / "judge.json"
    body = {"type": "score_model", "name": "judge", "model": "smol-base", "range": [0, 1],
            "input": [{"role": "system", "content": "Score the statement from 0 to 1. Reply in JSON."},
                      {"role": "user", "content": "Statement: {{ sample.output_text }}"}]}
    grader.write_text(json.dumps({**body, "sampling_params": {"temperature": 0, "max_completions_tokens": 2}}))
    ds = write_items(tmp_path / "items.jsonl", sentence_items(4))
    args = ["grade", "-d", str(ds), "-g", str(grader), "--outputs", str(_outputs(tmp_path / "outs.jsonl", 4)),
            "--judge-base-url", llama.base_url, "--judge-concurrency", "2", "--max-error-rate", "1"]
    res = rfteval(*args, "--out", str(tmp_path / "cut.jsonl"), timeout=300)
    assert res.returncode == 0, output_of(res)
    recs = records(tmp_path, "cut")
    assert [r["error"]["type"] for r in recs] == ["model_grader_truncated_error"] * 4, [r["error"] for r in recs]
    assert all("raise max_completions_tokens in the grader's sampling_params (now 2)" in r["error"]["message"]
               for r in recs)
    grader.write_text(json.dumps({**body, "sampling_params": {"temperature": 0, "max_completions_tokens": 24}}))
    res = rfteval(*args, "--out", str(tmp_path / "read.jsonl"), timeout=300)
    assert res.returncode == 0, output_of(res)
    read = [r for r in records(tmp_path, "read") if r["error"] is None]
    assert len(read) >= 3 and all(0.0 <= r["score"] <= 1.0 for r in read), records(tmp_path, "read")
