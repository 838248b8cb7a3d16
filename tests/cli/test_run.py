"""`rfteval run` end to end: the real openai client against a local OpenAI-compatible server."""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from rfteval.cli.app import app
from tests.support.cli_run_files import write_run_files
from tests.support.fake_openai import FakeOpenAI, Reply, Request
from tests.support.optional import require

runner = CliRunner()
N_ITEMS = 5
EPOCHS = 3
RFTEVAL = [sys.executable, "-m", "rfteval.cli.app"] if not (Path(sys.executable).parent / "rfteval").exists() \
    else [str(Path(sys.executable).parent / "rfteval")]


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    return {**write_run_files(tmp_path, N_ITEMS, reference="tuned", name="says-tuned"), "dir": tmp_path}


def counting_responder() -> Any:
    """A different answer on each call of one (model, prompt): epochs are independent samples."""
    seen: collections.Counter = collections.Counter()
    lock = threading.Lock()

    def respond(req: Request) -> Reply:
        with lock:
            seen[(req.model, req.last_user_text())] += 1
            n = seen[(req.model, req.last_user_text())]
        return Reply(text=f"{req.model}|{req.last_user_text()}|call{n}")

    return respond


def flags(files: dict[str, Path], server: FakeOpenAI, *extra: str) -> list[str]:
    return ["run", "--dataset", str(files["dataset"]), "--grader", str(files["grader"]), "--model", "base=fake-base",
            "--model", "tuned=fake-tuned", "--epochs", str(EPOCHS), "--base-url", server.base_url,
            "--concurrency", "8", "--out", str(files["out"]), "--retry-base-delay", "0.01", *extra]


def load(out: Path, label: str) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (out / f"{label}.jsonl").read_text().splitlines()]


def test_flag_form_runs_every_cell_once(files: dict[str, Path], fake_openai: FakeOpenAI) -> None:
    fake_openai.responder = counting_responder()
    res = runner.invoke(app, flags(files, fake_openai, "--per-item"))
    assert res.exit_code == 0, res.output
    assert len(fake_openai.requests) == 2 * N_ITEMS * EPOCHS
    out = files["out"]
    for label, model, score in (("base", "fake-base", 0.0), ("tuned", "fake-tuned", 1.0)):
        recs = load(out, label)
        assert len(recs) == N_ITEMS * EPOCHS
        assert {(r["item_id"], r["epoch"]) for r in recs} == {(f"q{i}", e) for i in range(N_ITEMS)
                                                               for e in range(1, EPOCHS + 1)}
        assert all(r["model"] == model and r["score"] == score and r["error"] is None for r in recs)
        for i in range(N_ITEMS):  # the epochs of one item are three different answers
            texts = {r["output_text"] for r in recs if r["item_id"] == f"q{i}"}
            assert texts == {f"{model}|question {i}|call{n}" for n in (1, 2, 3)}
        assert all(r["usage"]["input_tokens"] > 0 and r["usage"]["output_tokens"] > 0 for r in recs)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["models"]["base"]["mean"] == 0.0 and summary["models"]["tuned"]["mean"] == 1.0
    assert summary["deltas"]["tuned"]["mean"] == 1.0 and summary["deltas"]["tuned"]["wins"] == N_ITEMS
    assert summary["complete"] is True and summary["errors"] == 0
    import pandas as pd

    df = pd.read_parquet(out / "results.parquet")
    assert len(df) == 2 * N_ITEMS * EPOCHS and set(df["model_label"]) == {"base", "tuned"}
    assert "base (fake-base)" in res.stdout and "per item" in res.stdout and "q4" in res.stdout
    # the same command again: a resume with nothing left to do
    res = runner.invoke(app, flags(files, fake_openai))
    assert res.exit_code == 0, res.output
    assert len(fake_openai.requests) == 2 * N_ITEMS * EPOCHS
    assert len(load(out, "base")) == N_ITEMS * EPOCHS and all(r["cached"] for r in load(out, "base"))


# per model, per item: how many of its 4 epochs contain the reference (every other answer does not)
PASSES = {"fake-base": [0, 1, 2, 3, 4, 1, 2, 0, 3, 2, 1, 2], "fake-tuned": [2, 3, 2, 4, 4, 3, 3, 1, 4, 2, 3, 4]}


@pytest.mark.slow
def test_intervals_and_the_p_value_match_an_independent_computation(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    """What `rfteval run` prints and writes to summary.json, computed here from the answers the server was told to
    give (PASSES), not from the records: per-item means over the epochs first; each model's mean ± t(0.975, n−1)·SE
    (scipy's quantile, statistics' stdev), cut to the grader's [0, 1]; the paired delta's the same over the per-item
    differences, its p-value the exact share of the 2**12 sign patterns as extreme; pass@k by its unbiased
    estimator. The epochs of an item reach the server in any order: the count of its passing answers is what is fixed."""
    import itertools
    import statistics
    from math import comb

    st = require("scipy.stats", "setup")
    files = write_run_files(tmp_path, 12, reference="tuned")
    seen: collections.Counter = collections.Counter()
    lock = threading.Lock()

    def respond(req: Request) -> Reply:
        with lock:
            seen[(req.model, req.last_user_text())] += 1
            n = seen[(req.model, req.last_user_text())]
        return Reply(text="tuned" if n <= PASSES[req.model][int(req.last_user_text().split()[-1])] else "nope")

    fake_openai.responder = respond
    res = runner.invoke(app, ["run", "--dataset", str(files["dataset"]), "--grader", str(files["grader"]), "--model",
                              "base=fake-base", "--model", "tuned=fake-tuned", "--epochs", "4", "--base-url",
                              fake_openai.base_url, "--concurrency", "8", "--out", str(files["out"]), "--no-readiness"])
    assert res.exit_code == 0, res.output
    summary = json.loads((files["out"] / "summary.json").read_text())
    n, q = 12, st.t.ppf(0.975, 11)

    def t_interval(values: list[float], bounds: tuple[float, float]) -> tuple[float, float, list[float]]:
        mean, se = statistics.fmean(values), statistics.stdev(values) / n ** 0.5
        return mean, se, [max(bounds[0], mean - q * se), min(bounds[1], mean + q * se)]

    means = {}
    for label, model in (("base", "fake-base"), ("tuned", "fake-tuned")):
        means[label] = [c / 4 for c in PASSES[model]]
        mean, se, ci = t_interval(means[label], (0.0, 1.0))
        got = summary["models"][label]
        assert (got["mean"], got["se"]) == (pytest.approx(mean, rel=1e-12), pytest.approx(se, rel=1e-9))
        assert got["ci95"] == pytest.approx(ci, rel=1e-9)
        assert f"{mean:.3f}  [{ci[0]:.3f}, {ci[1]:.3f}]" in res.stdout  # the printed table, as rounded
        for k in (1, 2, 3, 4):  # 1 − C(n − c, k) / C(n, k) per item, averaged
            expected = statistics.fmean(1 - comb(4 - c, k) / comb(4, k) for c in PASSES[model])
            assert got["pass_at_k"][str(k)] == pytest.approx(expected, rel=1e-12)

    d = [t - b for b, t in zip(means["base"], means["tuned"])]
    mean, se, ci = t_interval(d, (-1.0, 1.0))
    delta = summary["deltas"]["tuned"]
    assert (delta["mean"], delta["se"]) == (pytest.approx(mean, rel=1e-12), pytest.approx(se, rel=1e-9))
    assert delta["ci95"] == pytest.approx(ci, rel=1e-9) and delta["sd"] == pytest.approx(statistics.stdev(d))
    hits = sum(abs(sum(s * x for s, x in zip(signs, d))) >= abs(sum(d)) - 1e-9
               for signs in itertools.product((1, -1), repeat=n))
    assert (delta["p_value"], delta["p_method"]) == (pytest.approx(hits / 2 ** n, rel=1e-12), "exact")
    assert (delta["wins"], delta["ties"], delta["losses"]) == (sum(x > 0 for x in d), sum(x == 0 for x in d),
                                                              sum(x < 0 for x in d))
    assert delta["correlation"] == pytest.approx(statistics.correlation(means["base"], means["tuned"]), rel=1e-9)
    se_b, se_t = (statistics.stdev(means[label]) / n ** 0.5 for label in ("base", "tuned"))
    assert delta["se_unpaired"] == pytest.approx((se_b ** 2 + se_t ** 2) ** 0.5, rel=1e-9)
    assert f"{mean:+.3f}  [{ci[0]:+.3f}, {ci[1]:+.3f}]" in res.stdout


@pytest.mark.slow
def test_spec_file_sampling_and_both_apis(files: dict[str, Path], fake_openai: FakeOpenAI) -> None:
    d = files["dir"]
    (d / "schema.json").write_text(json.dumps({"type": "object", "properties": {"a": {"type": "string"}},
                                               "required": ["a"], "additionalProperties": False}))
    (d / "eval.toml").write_text(f"""
name = "demo"
dataset = "items.jsonl"
grader = "grader.json"
epochs = 2
out = "run"
[endpoint]
base_url = "{fake_openai.base_url}"
api_key_env = "RFTEVAL_TEST_NO_SUCH_KEY"
[sampling]
temperature = 0.7
reasoning_effort = "low"
max_output_tokens = 256
response_format = "schema.json"
[models.base]
model = "fake-base"
[models.tuned]
model = "fake-tuned"
api = "responses"
temperature = 0.2
""")
    fake_openai.responder = lambda req: Reply(text=json.dumps({"a": req.model}))
    res = runner.invoke(app, ["run", str(d / "eval.toml"), "--quiet"])
    assert res.exit_code == 0, res.output
    chat = fake_openai.requests_for("chat")
    responses = fake_openai.requests_for("responses")
    assert len(chat) == len(responses) == N_ITEMS * 2
    body = chat[0].body
    assert body["model"] == "fake-base" and body["temperature"] == 0.7 and body["reasoning_effort"] == "low"
    assert body["max_completion_tokens"] == 256
    assert body["response_format"]["type"] == "json_schema"
    assert body["response_format"]["json_schema"]["schema"]["required"] == ["a"]
    rbody = responses[0].body
    assert rbody["model"] == "fake-tuned" and rbody["temperature"] == 0.2 and rbody["max_output_tokens"] == 256
    assert rbody["reasoning"] == {"effort": "low"} and rbody["text"]["format"]["type"] == "json_schema"
    recs = load(d / "run", "tuned")
    assert recs[0]["output_json"] == {"a": "fake-tuned"} and recs[0]["score"] == 1.0
    resolved = (d / "run" / "spec.resolved.toml").read_text()
    assert 'api_key_env = "RFTEVAL_TEST_NO_SUCH_KEY"' in resolved and 'api = "responses"' in resolved


@pytest.mark.slow
def test_retries_on_429_500_and_malformed_bodies(files: dict[str, Path], fake_openai: FakeOpenAI) -> None:
    fake_openai.queue(Reply.error(429, "slow down", headers={"Retry-After": "0"}), Reply.error(500, "oops"),
                      Reply(raw_body=b'{"id": "x", "choices": [{"message": '))
    res = runner.invoke(app, flags(files, fake_openai, "--max-retries", "3"))
    assert res.exit_code == 0, res.output
    assert len(fake_openai.requests) == 2 * N_ITEMS * EPOCHS + 3  # each injected failure cost one retry
    recs = load(files["out"], "base") + load(files["out"], "tuned")
    assert len(recs) == 2 * N_ITEMS * EPOCHS and not any(r["error"] for r in recs)
    assert "retries" in res.stderr


@pytest.mark.slow
def test_a_hang_past_the_timeout_is_an_error_and_exit_3(files: dict[str, Path], fake_openai: FakeOpenAI) -> None:
    def respond(req: Request) -> Reply:
        if req.model == "fake-tuned" and req.last_user_text() == "question 2":
            return Reply(text="late", delay_s=3)
        return Reply(text="tuned")

    fake_openai.responder = respond
    res = runner.invoke(app, flags(files, fake_openai, "--timeout", "0.3", "--max-retries", "1", "-q"))
    assert res.exit_code == 3, res.output
    recs = [r for r in load(files["out"], "tuned") if r["item_id"] == "q2"]
    assert len(recs) == EPOCHS and all(r["error"]["type"] == "timeout" for r in recs)
    assert all(r["error"]["stage"] == "generate" and r["score"] == 0.0 for r in recs)
    assert "above --max-error-rate" in res.stderr
    summary = json.loads((files["out"] / "summary.json").read_text())
    assert summary["models"]["tuned"]["errors"]["by_type"] == {"generate:timeout": EPOCHS}
    # with a higher allowance the same result is a pass
    fake_openai.responder = lambda req: Reply(text="late", delay_s=3) if req.last_user_text() == "question 2" \
        and req.model == "fake-tuned" else Reply(text="tuned")
    res = runner.invoke(app, flags(files, fake_openai, "--timeout", "0.3", "--max-retries", "0", "-q",
                                   "--max-error-rate", "0.5"))
    assert res.exit_code == 0, res.output


@pytest.mark.slow
def test_401_stops_the_run_with_one_line(files: dict[str, Path], tmp_path: Path) -> None:
    with FakeOpenAI(api_key="sk-the-right-key-000") as server:
        res = runner.invoke(app, flags(files, server, "--api-key-env", "RFTEVAL_TEST_KEY"),
                            env={"RFTEVAL_TEST_KEY": "sk-a-wrong-key-123456"})
        assert res.exit_code == 2
        lines = [ln for ln in res.stderr.splitlines() if ln.startswith("rfteval: model")]
        assert len(lines) == 1 and "auth" in lines[0] and "Traceback" not in res.output
        assert "sk-a-wrong-key-123456" not in res.output
        assert len(server.requests) <= 8  # what was in flight at most (--concurrency 8)


@pytest.mark.slow
def test_unknown_model_stops_the_run(files: dict[str, Path]) -> None:
    with FakeOpenAI(models=["fake-base"]) as server:
        # past the model check (it is tested below): the server's own 404 mid-run stops the run too
        res = runner.invoke(app, flags(files, server, "--skip-model-check"))
        assert res.exit_code == 2
        assert "model tuned (fake-tuned): not_found" in res.stderr


@pytest.mark.slow
def test_the_api_key_is_in_no_file(files: dict[str, Path]) -> None:
    secret = "sk-test-SECRET-abcdef123456"
    with FakeOpenAI(api_key=secret) as server:
        server.queue(Reply.error(500, "server echoes nothing"))
        res = runner.invoke(app, flags(files, server, "--api-key-env", "RFTEVAL_TEST_KEY"),
                            env={"RFTEVAL_TEST_KEY": secret})
        assert res.exit_code == 0, res.output
        assert server.requests[0].headers["authorization"] == f"Bearer {secret}"
    files_written = [p for p in files["out"].rglob("*") if p.is_file()]
    assert len(files_written) >= 6
    for path in files_written:
        assert secret.encode() not in path.read_bytes(), path
    assert secret not in res.output


@pytest.mark.slow
def test_replay_models_need_no_endpoint(files: dict[str, Path], tmp_path: Path) -> None:
    rec = tmp_path / "rec"
    rec.mkdir()
    for label, text in (("base", "base says no"), ("tuned", "tuned says tuned")):
        (rec / f"{label}.jsonl").write_text("".join(
            json.dumps({"item_id": f"q{i}", "epoch": e, "output_text": text if i else "tuned"}) + "\n"
            for i in range(N_ITEMS) for e in range(1, EPOCHS + 1)))
    res = runner.invoke(app, ["run", "--dataset", str(files["dataset"]), "--grader", str(files["grader"]),
                              "--model", f"base=replay:{rec / 'base.jsonl'}",
                              "--model", f"tuned=replay:{rec / 'tuned.jsonl'}", "--out", str(files["out"])])
    assert res.exit_code == 0, res.output
    base = load(files["out"], "base")
    assert base[0]["model"] == "replay:base.jsonl" and [r["score"] for r in base] == [1.0] * 3 + [0.0] * 12
    summary = json.loads((files["out"] / "summary.json").read_text())
    assert summary["models"]["base"]["mean"] == pytest.approx(0.2)
    assert summary["deltas"]["tuned"]["mean"] == pytest.approx(0.8)


def test_bad_input_is_one_line_and_no_result_file(files: dict[str, Path], fake_openai: FakeOpenAI) -> None:
    with open(files["dataset"], "a") as fh:
        fh.write('{"id": "q9", "messages": "not a list"}\n')
    res = runner.invoke(app, flags(files, fake_openai))
    assert res.exit_code == 2
    assert res.stderr.strip().splitlines()[-1] == f"rfteval: {files['dataset']}:6: messages: must be a non-empty " \
                                                  "list of messages"
    assert not files["out"].exists() and fake_openai.requests == []
    res = runner.invoke(app, ["run", "--dataset", str(files["dataset"]), "--model", "base=x"])
    assert res.exit_code == 2 and "--grader" in res.stderr
    res = runner.invoke(app, ["run", "--dataset", "d", "--grader", "g", "--model", "base"])
    assert res.exit_code == 2 and "LABEL=MODEL" in res.stderr


@pytest.mark.slow
def test_real_process(files: dict[str, Path], fake_openai: FakeOpenAI) -> None:
    env = {**os.environ, "NO_COLOR": "1"}
    proc = subprocess.run([*RFTEVAL, *flags(files, fake_openai)], capture_output=True, text=True, env=env,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "base -> tuned" in proc.stdout and "+1.000" in proc.stdout
    assert len(load(files["out"], "tuned")) == N_ITEMS * EPOCHS
    assert len(fake_openai.requests) == 2 * N_ITEMS * EPOCHS


def test_an_endpoint_that_is_not_there_stops_the_run_in_one_line(files: dict[str, Path]) -> None:
    import socket

    with socket.socket() as s:  # a port on 127.0.0.1 that nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1"
    res = runner.invoke(app, ["run", "--dataset", str(files["dataset"]), "--grader", str(files["grader"]),
                              "--model", "base=m", "--epochs", "1", "--base-url", url, "--out", str(files["out"]),
                              "--retry-base-delay", "0.01", "-q", "--no-readiness"],
                        env={"OPENAI_API_KEY": "sk-test-0000"})
    assert res.exit_code == 2, res.output
    (line,) = [ln for ln in res.stderr.splitlines() if ln.startswith("rfteval: model base")]
    assert f"cannot reach {url}" in line and "run stopped" in line


def test_replaying_more_epochs_than_recorded_is_refused_up_front(files: dict[str, Path]) -> None:
    rec = files["dir"] / "rec.jsonl"
    rec.write_text("".join(json.dumps({"item_id": f"q{i}", "epoch": e, "output_text": "tuned"}) + "\n"
                           for i in range(N_ITEMS) for e in (1, 2, 3)))
    args = ["run", "--dataset", str(files["dataset"]), "--grader", str(files["grader"]), "--model",
            f"base=replay:{rec}", "--out", str(files["out"]), "-q", "--no-readiness"]
    res = runner.invoke(app, [*args, "--epochs", "5"])
    assert res.exit_code == 2 and "replays 3 recorded epoch(s); --epochs is 5" in res.stderr
    assert not (files["out"] / "base.jsonl").exists()
    assert runner.invoke(app, [*args, "--epochs", "3"]).exit_code == 0


def test_a_template_no_item_can_fill_stops_the_run_before_any_request(files: dict[str, Path]) -> None:
    files["grader"].write_text(json.dumps({"type": "string_check", "name": "g", "input": "{{ sample.output_text }}",
                                           "reference": "{{ item.answer }}", "operation": "eq"}))
    res = runner.invoke(app, ["run", "--dataset", str(files["dataset"]), "--grader", str(files["grader"]),
                              "--model", "base=m", "--base-url", "http://127.0.0.1:9/v1", "--out", str(files["out"]),
                              "-q"])
    assert res.exit_code == 2
    assert (f"rfteval: {files['grader']}: reference: {{{{ item.answer }}}}: no item has field `answer` (0 of "
            f"{N_ITEMS} items in items.jsonl; did you mean `reference_answer`?)") in res.stderr.splitlines()
    assert not files["out"].exists()


@pytest.mark.slow
def test_piped_retries_say_why_once_per_kind(files: dict[str, Path], fake_openai: FakeOpenAI) -> None:
    calls = collections.Counter()
    lock = threading.Lock()

    def flaky(req: Request) -> Reply:
        with lock:
            calls[(req.model, req.last_user_text())] += 1
            first = calls[(req.model, req.last_user_text())] == 1
        return Reply.error(503) if first else Reply(text="tuned")

    fake_openai.responder = flaky
    res = runner.invoke(app, flags(files, fake_openai, "--no-readiness"))
    assert res.exit_code == 0, res.output
    said = [ln for ln in res.stderr.splitlines() if "retrying after" in ln]
    assert len(said) == 2 and {ln.split(":")[1].strip() for ln in said} == {"base", "tuned"}  # once per model
    assert all("server" in ln for ln in said)


# ---- knowing the server before spending (rfteval/run/preflight.py) ---------------------------------------


def _run_cli(args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*RFTEVAL, *args], capture_output=True, text=True, timeout=120)


def _one_line_exit_2(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr + proc.stdout, proc.stderr
    return lines[0]


@pytest.mark.slow
def test_a_mistyped_model_is_one_line_listing_what_the_server_serves(files: dict[str, Path]) -> None:
    with FakeOpenAI(models=["smol-base", "smol-tuned"]) as fake:
        args = flags(files, fake)
        args[args.index("base=fake-base")] = "base=smol-bsae"
        args[args.index("tuned=fake-tuned")] = "tuned=smol-tuned"
        line = _one_line_exit_2(_run_cli([*args, "-q"]))
        assert fake.requests == []  # nothing generated
    assert "--model base" in line and "'smol-bsae'" in line and "smol-base, smol-tuned" in line
    assert "--skip-model-check" in line
    assert not files["out"].exists()  # nothing half-written


@pytest.mark.slow
def test_skip_model_check_runs_names_the_server_does_not_list(files: dict[str, Path]) -> None:
    with FakeOpenAI() as fake:
        fake.models = ["fake-base", "fake-tuned"]
        listed = runner.invoke(app, flags(files, fake, "-q"))
        assert listed.exit_code == 0, listed.output  # listed names pass the check
        fake.models = None  # serves any model, lists none: nothing to check against
        unlisted = runner.invoke(app, flags(files, fake, "-q", "--fresh"))
        assert unlisted.exit_code == 0, unlisted.output
        fake.listed = ["other"]  # lists one name and, as a gateway does, routes the others
        refused = runner.invoke(app, flags(files, fake, "-q", "--fresh"))
        assert refused.exit_code == 2 and "unknown model 'fake-base'" in refused.output
        fake.requests.clear()
        skipped = runner.invoke(app, flags(files, fake, "-q", "--fresh", "--skip-model-check"))
        assert skipped.exit_code == 0, skipped.output
        assert len(fake.requests) == 2 * N_ITEMS * EPOCHS


@pytest.mark.slow
def test_an_unknown_judge_model_stops_the_run_before_it_starts(files: dict[str, Path]) -> None:
    judge_grader = files["dir"] / "judge.json"
    judge_grader.write_text(json.dumps({"type": "score_model", "name": "j", "model": "judge-mdl", "input": [
        {"role": "user", "content": "Score {{ sample.output_text }}"}]}))
    with FakeOpenAI(models=["fake-base", "fake-tuned", "judge-model"]) as fake:
        args = flags(files, fake, "-q")
        args[args.index(str(files["grader"]))] = str(judge_grader)
        res = runner.invoke(app, args)
        assert res.exit_code == 2 and "grader model: unknown model 'judge-mdl'" in res.output, res.output
        assert "--judge-model NAME judges with one it serves" in res.output  # issue 27: the flag that fixes it
        res = runner.invoke(app, [*args, "--judge-model", "judge-modle"])
        assert res.exit_code == 2 and "--judge-model: unknown model 'judge-modle'" in res.output, res.output
        assert "--judge-model NAME" not in res.output  # the flag was given: its own name is what is wrong
        assert fake.requests == []


@pytest.mark.slow
def test_batch_without_a_batch_api_is_one_line_and_leaves_no_chunk(files: dict[str, Path]) -> None:
    with FakeOpenAI() as fake:
        fake.no_batches = True
        line = _one_line_exit_2(_run_cli([*flags(files, fake), "-q", "--batch"]))
        assert fake.requests == [] and fake.file_uploads == 0
    assert "--batch" in line and "no Files and Batches API (GET /v1/batches: HTTP 404)" in line
    assert "--export-requests" in line and "vllm run-batch" in line
    assert not (files["out"] / "store" / "batches.jsonl").exists()
    listing = _run_cli(["batches", str(files["out"])])
    assert "planned" not in listing.stdout and "Traceback" not in listing.stdout + listing.stderr


@pytest.mark.slow
def test_api_responses_without_a_responses_api_says_use_chat(files: dict[str, Path]) -> None:
    with FakeOpenAI() as fake:
        fake.no_responses = True
        line = _one_line_exit_2(_run_cli([*flags(files, fake), "-q", "--api", "responses"]))
        assert fake.requests == []
    assert line.endswith("--api: the endpoint has no Responses API (POST /v1/responses: HTTP 404); use --api chat")
    assert not files["out"].exists()


@pytest.mark.slow
def test_a_judge_on_responses_without_the_api_says_use_chat(files: dict[str, Path]) -> None:
    judge_grader = files["dir"] / "judge.json"
    judge_grader.write_text(json.dumps({"type": "score_model", "name": "j", "model": "judge", "input": [
        {"role": "user", "content": "Score {{ sample.output_text }}"}]}))
    with FakeOpenAI() as fake:
        fake.no_responses = True
        args = flags(files, fake, "-q", "--judge-api", "responses")
        args[args.index(str(files["grader"]))] = str(judge_grader)
        res = runner.invoke(app, args)
    assert res.exit_code == 2 and "--judge-api: the endpoint has no Responses API" in res.output, res.output
    assert "use --judge-api chat" in res.output


@pytest.mark.slow
def test_each_epoch_is_sent_its_own_seed(files: dict[str, Path], fake_openai: FakeOpenAI) -> None:
    res = runner.invoke(app, flags(files, fake_openai, "-q", "--seed", "7"))
    assert res.exit_code == 0, res.output
    seeds = collections.defaultdict(list)
    for r in fake_openai.requests:
        seeds[(r.model, r.last_user_text())].append(r.body["seed"])
    assert len(seeds) == 2 * N_ITEMS and all(sorted(s) == [7, 8, 9] for s in seeds.values())
    fake_openai.requests.clear()
    res = runner.invoke(app, flags(files, fake_openai, "-q", "--fresh"))
    assert res.exit_code == 0 and all("seed" not in r.body for r in fake_openai.requests)


@pytest.mark.slow
def test_a_json_object_response_format_fills_output_json(files: dict[str, Path], fake_openai: FakeOpenAI) -> None:
    fmt = files["dir"] / "json_mode.json"
    fmt.write_text(json.dumps({"type": "json_object", "schema": {"type": "object"}}))
    fake_openai.responder = lambda r: Reply(text='{"answer": "fake-tuned\nsays so"}')  # a raw newline, as llama.cpp
    res = runner.invoke(app, flags(files, fake_openai, "-q", "--response-format", str(fmt)))
    assert res.exit_code == 0, res.output
    assert all(r.body["response_format"] == {"type": "json_object", "schema": {"type": "object"}}
               for r in fake_openai.requests)
    assert all(r["output_json"] == {"answer": "fake-tuned\nsays so"} for r in load(files["out"], "base"))


@pytest.mark.slow
def test_run_refuses_lines_ending_with_the_assistant_turn_before_any_request(tmp_path: Path) -> None:
    """Azure's RFT sample lines (azure-sdk-for-net, Azure.AI.Projects Sample18_FineTuning_Reinforcement.md) end with
    the assistant's answer: sent as they are, the model continues the answer. `run` names each line and sends
    nothing; --allow-trailing-assistant sends them anyway, with the format warnings."""
    ds = tmp_path / "azure.jsonl"
    ds.write_text("".join(json.dumps({"messages": [
        {"role": "system", "content": "You are a helpful math tutor."}, {"role": "user", "content": f"What is {i}+{i}?"},
        {"role": "assistant", "content": str(2 * i)}]}) + "\n" for i in range(3)))
    grader = tmp_path / "g.json"
    grader.write_text(json.dumps({"type": "string_check", "name": "s", "input": "{{ sample.output_text }}",
                                  "reference": "echo", "operation": "like"}))
    with FakeOpenAI() as server:
        args = ["run", "--dataset", str(ds), "--grader", str(grader), "--model", "base=m", "--base-url",
                server.base_url, "--epochs", "1", "--out", str(tmp_path / "run"), "-q", "--no-readiness"]
        res = runner.invoke(app, args, env={"OPENAI_API_KEY": "sk-test"})
        assert res.exit_code == 2, res.output
        errors = [ln for ln in res.stderr.splitlines() if ln.startswith("rfteval: ")]
        assert len(errors) == 1 and errors[0].startswith(f"rfteval: {ds}:1: messages[2].role: the last message is "
                                                         "the assistant's")
        assert errors[0].endswith("(and 2 more problems)")
        assert server.requests == [] and not (tmp_path / "run").exists()
        res = runner.invoke(app, [*args, "--allow-trailing-assistant"], env={"OPENAI_API_KEY": "sk-test"})
        assert res.exit_code == 0, res.output
        assert f"warning: {ds}: 3 of 3 lines hold a system message (lines 1, 2, 3)" in res.stderr
        assert len([r for r in server.requests if r.api == "chat"]) == 3


# ---- the developer role (issue 27): llama-cpp-python refuses it; --developer-as system sends it as system -------

def _developer_dataset(files: dict[str, Path]) -> None:
    """ChipStack's shape (datasets/chipstack/items.jsonl, OpenAI's RFT format): instructions as a developer message."""
    files["dataset"].write_text("".join(json.dumps({"id": f"q{i}", "messages": [
        {"role": "developer", "content": "Bind the VIP parameters."}, {"role": "user", "content": f"question {i}"}],
        "reference_answer": "tuned"}) + "\n" for i in range(N_ITEMS)))


@pytest.mark.slow
def test_a_refused_developer_role_stops_the_run_naming_the_field_and_the_fix(files: dict[str, Path]) -> None:
    _developer_dataset(files)
    with FakeOpenAI() as fake:
        fake.refused_roles = {"developer"}
        res = runner.invoke(app, flags(files, fake, "-q"))
        said = [ln for ln in res.output.splitlines() if "run stopped" in ln]  # the retry notes come first
        assert res.exit_code == 2 and len(said) == 1, res.output
        assert "caused by the developer role (send it as system: --developer-as system)" in said[0]
        assert "messages[0].role: Input should be 'system', 'user', 'assistant', 'tool' or 'function' (input: " \
               "'developer')" in said[0]
        assert fake.stats["invalid"] < 2 * N_ITEMS * EPOCHS  # stopped after a handful, not every cell's retries

        res = runner.invoke(app, flags(files, fake, "-q", "--developer-as", "system"))
        assert res.exit_code == 0, res.output
        sent = [r for r in fake.requests if r.api == "chat"]
        assert sent and all([m["role"] for m in r.body["messages"]] == ["system", "user"] for r in sent)
    assert 'developer_as = "system"' in (files["out"] / "spec.resolved.toml").read_text()
    assert load(files["out"], "tuned")[0]["score"] == 1.0


def test_the_developer_as_spec_key_reaches_the_models_and_the_judge(files: dict[str, Path]) -> None:
    from rfteval.errors import InputError
    from rfteval.run.runner import build_judge, grades_key
    from rfteval.run.spec import build_spec, resolve_models, to_toml

    base = {"dataset": str(files["dataset"]), "grader": str(files["grader"]), "models": {"base": {"model": "m"}},
            "endpoint": {"base_url": "http://127.0.0.1:9/v1"}}
    spec = build_spec(None, {**base, "developer_as": "system"})
    (run,) = resolve_models(spec)
    assert run.settings["developer_as"] == "system" and 'developer_as = "system"' in to_toml(spec)
    plain = build_spec(None, base)
    assert "developer_as" not in resolve_models(plain)[0].settings and "developer_as =" not in to_toml(plain)
    judge_grader = files["dir"] / "judge.json"
    judge_grader.write_text(json.dumps({"type": "score_model", "name": "j", "model": "m", "input": [
        {"role": "developer", "content": "Score {{ sample.output_text }}"}]}))
    from rfteval.graders import load_grader

    config = load_grader(judge_grader)
    judge = build_judge(spec, config, files["dir"])
    assert judge is not None and judge.provider.developer_as == "system"  # type: ignore[attr-defined]
    judge.close()
    # stored grades of a judge that read developer as system are another grader's
    assert grades_key(config, "h", spec, ["base"]) != grades_key(config, "h", plain, ["base"])
    with pytest.raises(InputError, match="--developer-as: Input should be .developer. or .system."):
        build_spec(None, {**base, "developer_as": "user"})
