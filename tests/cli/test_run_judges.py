"""Model judges inside `rfteval run`, end to end: the real openai client against FakeOpenAI (tests/support/fake_openai.py).

score_model, label_model (in a multi) and group_judge graders, the judge endpoint from [judge] or --judge-* flags
(or the run's own endpoint), the judge cache across re-runs, resume after a kill, and a refused judge key.
"""

from __future__ import annotations

import collections
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from rfteval.cli.app import app
from tests.support import REPO
from tests.support.fake_openai import FakeOpenAI, Reply, Request

runner = CliRunner()
RFTEVAL = [sys.executable, "-m", "rfteval"]
N_ITEMS = 3


# ---- helpers -----------------------------------------------------------------------------------------------------


def judge_format(req: Request) -> dict[str, Any] | None:
    """The structured-output format a judge request carries ({name, schema, strict}), chat or responses."""
    if req.api == "chat":
        rf = req.body.get("response_format") or {}
        return rf.get("json_schema") if rf.get("type") == "json_schema" else None
    fmt = (req.body.get("text") or {}).get("format") or {}
    return {k: v for k, v in fmt.items() if k != "type"} if fmt.get("type") == "json_schema" else None


def judge_requests(server: FakeOpenAI) -> list[Request]:
    return [r for r in server.requests_for() if judge_format(r) is not None]


def model_requests(server: FakeOpenAI) -> list[Request]:
    return [r for r in server.requests_for() if judge_format(r) is None]


def load(out: Path, label: str) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (out / f"{label}.jsonl").read_text().splitlines()]


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def write_dataset(tmp_path: Path, n: int = N_ITEMS) -> Path:
    return write_jsonl(tmp_path / "items.jsonl", [
        {"id": f"q{i}", "messages": [{"role": "system", "content": "Be brief."},
                                     {"role": "user", "content": f"question {i}"}],
         "reference_answer": f"answer {i}"} for i in range(n)])


def invoke(args: list[str], env: dict[str, str] | None = None) -> Any:
    return runner.invoke(app, ["run", *args, "-q", "--retry-base-delay", "0.01"], env=env)


SCORE_GRADER = {
    "type": "score_model", "name": "judge", "model": "judge-model",
    "input": [{"role": "system", "content": "Score the answer from 0 to 1."},
              {"role": "user",
               "content": "Question: {{ item.messages[1].content }}\nAnswer: {{ sample.output_text }}"}],
    "range": [0, 1], "sampling_params": {"seed": 7, "temperature": 0},
}


def model_or_score_responder() -> Any:
    """Models answer '<model> on <question>, draft N' (a new draft per call: epochs differ); the judge scores
    0.2 (base) or 0.8 (tuned) plus 0.05 per draft, with one reasoning step, and fixed usage."""
    drafts: collections.Counter = collections.Counter()
    lock = threading.Lock()

    def respond(req: Request) -> Reply:
        if judge_format(req) is None:
            with lock:
                drafts[(req.model, req.last_user_text())] += 1
                n = drafts[(req.model, req.last_user_text())]
            return Reply(text=f"{req.model} on {req.last_user_text()}, draft {n}")
        answer = req.last_user_text().split("Answer: ", 1)[1]
        score = expected_score(answer)
        steps = [{"description": f"read: {answer}", "conclusion": f"worth {score}"}]
        return Reply(text=json.dumps({"steps": steps, "result": score}),
                     usage={"input_tokens": 11, "output_tokens": 7, "reasoning_tokens": 0})

    return respond


def expected_score(answer: str) -> float:
    draft = int(re.search(r"draft (\d+)", answer).group(1))
    return round((0.8 if answer.startswith("fake-tuned") else 0.2) + 0.05 * (draft - 1), 4)


# ---- score_model ---------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_score_model_in_run_schema_records_usage_and_a_free_rerun(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    fake_openai.responder = model_or_score_responder()
    grader = tmp_path / "grader.json"
    grader.write_text(json.dumps(SCORE_GRADER))
    out = tmp_path / "run"
    args = ["--dataset", str(write_dataset(tmp_path)), "--grader", str(grader), "--model", "base=fake-base",
            "--model", "tuned=fake-tuned", "--epochs", "2", "--base-url", fake_openai.base_url, "--out", str(out)]
    env = {"OPENAI_API_KEY": "sk-run-key-0001"}
    res = invoke(args, env)
    assert res.exit_code == 0, res.output

    judged = judge_requests(fake_openai)
    assert len(model_requests(fake_openai)) == 2 * N_ITEMS * 2
    assert len(judged) == 2 * N_ITEMS * 2  # every output differs: one judge call each
    for req in judged:  # the default judge endpoint is the run's: same server, same key, chat
        assert req.api == "chat" and req.model == "judge-model"
        assert req.headers["authorization"] == "Bearer sk-run-key-0001"
        assert req.body["seed"] == 7 and req.body["temperature"] == 0
        assert judge_format(req) == {"name": "score_model_result", "strict": True, "schema": {
            "type": "object",
            "properties": {"result": {"type": "number"}, "steps": {"type": "array", "items": {
                "type": "object",
                "properties": {"description": {"type": "string"}, "conclusion": {"type": "string"}},
                "required": ["description", "conclusion"], "additionalProperties": False}}},
            "required": ["result", "steps"], "additionalProperties": False}}
        assert list(judge_format(req)["schema"]["properties"]) == ["result", "steps"]  # result first (issue 27)

    for label in ("base", "tuned"):
        records = load(out, label)
        assert len(records) == N_ITEMS * 2
        for rec in records:
            assert rec["error"] is None
            assert rec["score"] == expected_score(rec["output_text"])
            d = rec["grade_details"]
            assert d["steps"] == [{"description": f"read: {rec['output_text']}",
                                   "conclusion": f"worth {expected_score(rec['output_text'])}"}]
            assert d["judge_model"] == "judge-model" and d["judge_cached"] is False
            assert d["judge_usage"]["input_tokens"] == 11
    summary = json.loads((out / "summary.json").read_text())
    usage = summary["judge"]["judge-model"]
    assert (usage["calls"], usage["cache_hits"], usage["shared"], usage["errors"]) == (12, 0, 0, 0)
    assert "judge judge-model: 12 calls, 0 cached, 0 shared, 0 errors" in res.output
    assert (usage["input_tokens"], usage["output_tokens"]) == (12 * 11, 12 * 7)
    behind = {"calls": 12, "input_tokens": 12 * 11, "output_tokens": 12 * 7, "reasoning_tokens": 0}
    assert {k: summary["judge_results"]["judge-model"][k] for k in behind} == behind
    assert "behind these results" not in res.output  # every call was made now: one line says it
    # tuned: 0.8 + 0.05 * mean draft (0.5); base: 0.2 + 0.025
    assert summary["models"]["tuned"]["mean"] == pytest.approx(0.825)
    assert summary["deltas"]["tuned"]["mean"] == pytest.approx(0.6)
    assert len((out / "judge_cache.jsonl").read_text().splitlines()) == 12

    # The same command again: nothing is generated and nothing judged.
    before = len(fake_openai.requests)
    res = invoke(args, env)
    assert res.exit_code == 0, res.output
    assert len(fake_openai.requests) == before
    assert [r["score"] for r in load(out, "tuned")] == [expected_score(r["output_text"]) for r in load(out, "tuned")]
    summary = json.loads((out / "summary.json").read_text())
    assert not (summary.get("judge") or {}).get("judge-model")  # this invocation asked nothing...
    assert {k: summary["judge_results"]["judge-model"][k] for k in behind} == behind  # ...the grades cost this
    assert "judge judge-model behind these results: 12 calls, tokens in/out 132/84" in res.output

    # A grader change that leaves the judge request alone (pass_threshold): every cell is re-graded, from the
    # judge cache: the server sees no request, and the records say the answer was cached.
    grader.write_text(json.dumps({**SCORE_GRADER, "pass_threshold": 0.5}))
    res = invoke(args, env)
    assert res.exit_code == 0, res.output
    assert len(fake_openai.requests) == before
    tuned = load(out, "tuned")
    assert all(r["grade_details"]["judge_cached"] is True and r["passed"] is True for r in tuned)
    assert not any(r["passed"] for r in load(out, "base"))
    summary = json.loads((out / "summary.json").read_text())
    usage = summary["judge"]["judge-model"]
    assert (usage["calls"], usage["cache_hits"], usage["input_tokens"]) == (0, 12, 0)
    assert {k: summary["judge_results"]["judge-model"][k] for k in behind} == behind  # the cached answers' calls

    # Another judge is another grader: --judge-model re-judges every output (and re-generates nothing).
    res = invoke([*args, "--judge-model", "other-judge"], env)
    assert res.exit_code == 0, res.output
    new = fake_openai.requests[before:]
    assert len(new) == 12 and {r.model for r in new} == {"other-judge"} and all(judge_format(r) for r in new)
    assert {r["grade_details"]["judge_model"] for r in load(out, "base")} == {"other-judge"}
    assert set(json.loads((out / "summary.json").read_text())["judge_results"]) == {"other-judge"}


@pytest.mark.slow
def test_refused_and_failed_judge_calls_are_on_their_records_and_counted(tmp_path: Path,
                                                                          fake_openai: FakeOpenAI) -> None:
    """Issue 12: a refused group counted nothing and its tokens were dropped (88 of 90 calls with 2 refusals)."""
    base = model_or_score_responder()

    def respond(req: Request) -> Reply:
        if judge_format(req) is not None and "question 1," in req.last_user_text():
            return Reply(refusal="I can't judge that.", usage={"input_tokens": 11, "output_tokens": 3,
                                                               "reasoning_tokens": 0})
        return base(req)

    fake_openai.responder = respond
    grader = tmp_path / "grader.json"
    grader.write_text(json.dumps(SCORE_GRADER))
    out = tmp_path / "run"
    args = ["--dataset", str(write_dataset(tmp_path)), "--grader", str(grader), "--model", "base=fake-base",
            "--model", "tuned=fake-tuned", "--epochs", "2", "--base-url", fake_openai.base_url, "--out", str(out),
            "--max-error-rate", "1"]
    res = invoke(args, {"OPENAI_API_KEY": "sk-run-key-0001"})
    assert res.exit_code == 0, res.output
    refused = [r for label in ("base", "tuned") for r in load(out, label) if r["item_id"] == "q1"]
    assert len(refused) == 4
    for rec in refused:
        assert rec["error"]["type"] == "model_grader_refusal_error" and rec["score"] == 0
        d = rec["grade_details"]
        assert d["judge_model"] == "judge-model" and d["judge_usage"]["output_tokens"] == 3 and d["judge_call"]
    summary = json.loads((out / "summary.json").read_text())
    answered, refusals = 12 - 4, 4
    usage = summary["judge"]["judge-model"]
    assert (usage["calls"], usage["errors"]) == (12, refusals)
    assert (usage["input_tokens"], usage["output_tokens"]) == (12 * 11, answered * 7 + refusals * 3)
    results = summary["judge_results"]["judge-model"]
    assert (results["calls"], results["input_tokens"], results["output_tokens"]) == (
        12, 12 * 11, answered * 7 + refusals * 3)


# ---- where the judge is: [judge] in a spec, --judge-* flags, the run's endpoint ------------------------------------


def label_responder(req: Request) -> Reply:
    if judge_format(req) is None:
        return Reply(text=f"{req.model} says {req.last_user_text()}")
    return Reply(text=json.dumps({"steps": [], "label": "good"}))


@pytest.mark.slow
def test_judge_section_flags_win_and_the_run_endpoint_is_the_default(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    fake_openai.responder = label_responder
    grader = tmp_path / "grader.json"
    grader.write_text(json.dumps({"type": "label_model", "name": "ok", "model": "grader-model",
                                  "input": [{"role": "user", "content": "{{ sample.output_text }}"}],
                                  "labels": ["good", "bad"], "passing_labels": ["good"]}))
    write_dataset(tmp_path)
    env = {"OPENAI_API_KEY": "sk-models-key-1", "RFTEVAL_JUDGE_KEY": "sk-judge-key-22"}
    with FakeOpenAI(label_responder, api_key="sk-judge-key-22") as judge_a, \
            FakeOpenAI(label_responder, api_key="sk-judge-key-22") as judge_b:
        spec = tmp_path / "eval.toml"
        spec.write_text(f"""
dataset = "items.jsonl"
grader = "grader.json"
epochs = 1
[endpoint]
base_url = "{fake_openai.base_url}"
[models.base]
model = "fake-base"
[judge]
base_url = "{judge_a.base_url}"
api_key_env = "RFTEVAL_JUDGE_KEY"
api = "responses"
model = "spec-judge"
concurrency = 2
""")
        res = invoke([str(spec), "--out", str(tmp_path / "a")], env)
        assert res.exit_code == 0, res.output
        assert judge_requests(fake_openai) == [] and len(model_requests(fake_openai)) == N_ITEMS
        a = judge_requests(judge_a)
        assert len(a) == N_ITEMS and model_requests(judge_a) == []
        assert {(r.api, r.model, r.headers["authorization"]) for r in a} == {
            ("responses", "spec-judge", "Bearer sk-judge-key-22")}
        assert judge_format(a[0])["schema"]["properties"]["label"]["enum"] == ["good", "bad"]
        assert all(r["score"] == 1.0 and r["grade_details"]["judge_model"] == "spec-judge"
                   for r in load(tmp_path / "a", "base"))

        # Flags win key by key: base_url, api and model from flags; the key's variable still from [judge].
        res = invoke([str(spec), "--out", str(tmp_path / "b"), "--judge-base-url", judge_b.base_url,
                      "--judge-api", "chat", "--judge-model", "flag-judge", "--judge-concurrency", "1"], env)
        assert res.exit_code == 0, res.output
        assert len(judge_requests(judge_a)) == N_ITEMS  # unchanged
        b = judge_requests(judge_b)
        assert {(r.api, r.model, r.headers["authorization"]) for r in b} == {
            ("chat", "flag-judge", "Bearer sk-judge-key-22")}
        assert len(b) == N_ITEMS
        resolved = (tmp_path / "b" / "spec.resolved.toml").read_text()
        assert f'base_url = "{judge_b.base_url}"' in resolved and "sk-judge-key-22" not in resolved

    # Without [judge], every judge key falls back to the run's endpoint (here: the responses API, the run's key).
    spec.write_text(f"""
dataset = "items.jsonl"
grader = "grader.json"
epochs = 1
[endpoint]
base_url = "{fake_openai.base_url}"
api = "responses"
[models.base]
model = "fake-base"
""")
    res = invoke([str(spec), "--out", str(tmp_path / "c")], env)
    assert res.exit_code == 0, res.output
    c = judge_requests(fake_openai)
    assert len(c) == N_ITEMS
    assert {(r.api, r.model, r.headers["authorization"]) for r in c} == {
        ("responses", "grader-model", "Bearer sk-models-key-1")}


# ---- multi: label_model + string_check ------------------------------------------------------------------------


def test_multi_with_a_label_model_and_a_string_check(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    texts = {  # (item, epoch) -> output; "please" is polite, "weird" makes the judge answer an unknown label
        ("q0", 1): "answer 0", ("q0", 2): "answer 0, please",
        ("q1", 1): "please see answer 1", ("q1", 2): "answer 1",
        ("q2", 1): "no idea", ("q2", 2): "weird answer 2",
    }
    rec = write_jsonl(tmp_path / "tuned.jsonl",
                      [{"item_id": i, "epoch": e, "output_text": t} for (i, e), t in texts.items()])

    def respond(req: Request) -> Reply:
        text = req.last_user_text().split("Reply: ", 1)[1]
        label = "neutral" if "weird" in text else "polite" if "please" in text else "rude"
        return Reply(text=json.dumps({"steps": [{"description": "tone", "conclusion": label}], "label": label}))

    fake_openai.responder = respond
    grader = tmp_path / "multi.json"
    grader.write_text(json.dumps({
        "type": "multi", "name": "combo", "calculate_output": "0.25 * tone + 0.75 * exact",
        "graders": {
            "tone": {"type": "label_model", "name": "tone", "model": "tone-judge",
                     "input": [{"role": "developer", "content": "Is the reply polite or rude?"},
                               {"role": "user", "content": "Reply: {{ sample.output_text }}"}],
                     "labels": ["polite", "rude"], "passing_labels": ["polite"]},
            "exact": {"type": "string_check", "name": "exact", "input": "{{ sample.output_text }}",
                      "reference": "{{ item.reference_answer }}", "operation": "eq"}}}))
    out = tmp_path / "run"
    res = invoke(["--dataset", str(write_dataset(tmp_path)), "--grader", str(grader), "--model",
                  f"tuned=replay:{rec}", "--epochs", "2", "--judge-base-url", fake_openai.base_url, "--out", str(out),
                  "--max-error-rate", "0.5"])
    assert res.exit_code == 0, res.output
    judged = judge_requests(fake_openai)
    assert len(judged) == 6 and len(fake_openai.requests) == 6
    assert {judge_format(r)["name"] for r in judged} == {"label_model_result"}
    assert judge_format(judged[0])["schema"]["properties"]["label"] == {"type": "string", "enum": ["polite", "rude"]}

    records = {(r["item_id"], r["epoch"]): r for r in load(out, "tuned")}
    assert len(records) == 6
    for (item, epoch), text in texts.items():
        r = records[(item, epoch)]
        polite = 1.0 if "please" in text else 0.0
        exact = 1.0 if text == f"answer {item[1]}" else 0.0
        if "weird" in text:
            assert r["error"]["type"] == "model_grader_parse_error" and r["score"] == 0.0
            assert "graders.tone" in r["error"]["message"] and "neutral" in r["error"]["message"]
            continue
        assert r["error"] is None
        assert r["sub_scores"] == {"tone": polite, "exact": exact}
        assert r["score"] == pytest.approx(0.25 * polite + 0.75 * exact)
        tone = r["grade_details"]["graders"]["tone"]["details"]
        assert tone["label"] == ("polite" if polite else "rude") and tone["steps"][0]["description"] == "tone"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["models"]["tuned"]["errors"] == {"total": 1, "by_type": {"grade:model_grader_parse_error": 1}}
    assert summary["judge"]["tone-judge"]["calls"] == 6


# ---- group_judge -------------------------------------------------------------------------------------------------

GROUP_GRADER = {"type": "group_judge", "name": "rank", "model": "group-judge-model", "seed": 5}
SAMPLE_RE = re.compile(r'<sample id="(s\d+)">\n(.*?)\n</sample>', re.S)


def shown_samples(req: Request) -> list[tuple[str, str]]:
    return SAMPLE_RE.findall(req.last_user_text())


def quality(text: str) -> float:
    return float(text.rsplit("quality ", 1)[1])


def group_responder(req: Request) -> Reply:
    """Scores every sample with the quality written in its own text: a mix-up in un-shuffling shows."""
    scores = [{"id": sid, "explanation": f"says {quality(t)}", "score": quality(t)} for sid, t in shown_samples(req)]
    return Reply(text=json.dumps({"scores": scores}))


def group_files(tmp_path: Path, n_items: int = 4) -> dict[str, Path]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    files = {"dataset": write_dataset(tmp_path, n_items), "grader": tmp_path / "group.json"}
    files["grader"].write_text(json.dumps(GROUP_GRADER))
    for label, base_q in (("base", 0.1), ("tuned", 0.5)):
        files[label] = write_jsonl(tmp_path / f"{label}.jsonl", [
            {"item_id": f"q{i}", "epoch": e,
             "output_text": f"{label} on q{i} epoch {e}: quality {round(base_q + 0.1 * e + 0.01 * i, 2)}"}
            for i in range(n_items) for e in (1, 2, 3)])
    return files


def group_args(files: dict[str, Path], server: FakeOpenAI, out: Path, *extra: str) -> list[str]:
    return ["--dataset", str(files["dataset"]), "--grader", str(files["grader"]),
            "--model", f"base=replay:{files['base']}", "--model", f"tuned=replay:{files['tuned']}", "--epochs", "3",
            "--judge-base-url", server.base_url, "--out", str(out), *extra]


def check_group_records(out: Path, requests: list[Request], group_size: int) -> None:
    """Every record scored with its own quality; its sample id and position are where the judge saw it."""
    by_text = {}
    for req in requests:
        for position, (sid, text) in enumerate(shown_samples(req)):
            by_text[text] = (sid, position, len(shown_samples(req)))
    for label in ("base", "tuned"):
        records = load(out, label)
        assert len(records) == 12 and len({(r["item_id"], r["epoch"]) for r in records}) == 12
        for r in records:
            d = r["grade_details"]
            assert r["error"] is None and r["score"] == quality(r["output_text"])
            assert (d["sample_id"], d["position"], d["group_size"]) == by_text[r["output_text"]]
            assert d["group_size"] == group_size and d["explanation"] == f"says {r['score']}"
            key = f"5:id:{r['item_id']}"  # the documented derivation: config seed and the item's group key
            assert d["shuffle_seed"] == int(hashlib.sha256(key.encode()).hexdigest()[:12], 16)


@pytest.mark.slow
def test_group_judge_one_call_per_item_and_model(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    fake_openai.responder = group_responder
    files = group_files(tmp_path)
    out = tmp_path / "run"
    res = invoke(group_args(files, fake_openai, out))
    assert res.exit_code == 0, res.output
    reqs = judge_requests(fake_openai)
    assert len(reqs) == len(fake_openai.requests) == 4 * 2
    assert {judge_format(r)["name"] for r in reqs} == {"group_judge_scores"}
    groups = collections.Counter()
    for req in reqs:
        texts = [t for _, t in shown_samples(req)]
        labels = {t.split(" ")[0] for t in texts}
        items = {t.split(" ")[2].rstrip(":") for t in texts}
        assert len(texts) == 3 and len(labels) == 1 and len(items) == 1  # epochs grouped, one model, one item
        groups[(labels.pop(), items.pop())] += 1
    assert set(groups.values()) == {1} and len(groups) == 8
    check_group_records(out, reqs, 3)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["judge"]["group-judge-model"]["calls"] == 8
    assert summary["judge_results"]["group-judge-model"]["calls"] == 8  # one call grades a group: counted once
    assert "  8 calls for 24 samples: the 24 graded now went to the judge as 8 group request(s), one per item\n" in (
        res.output)  # issue 36: why fewer calls than samples

    # The same out dir with --group-models: the groups change, so every item is judged again, both models at once.
    res = invoke(group_args(files, fake_openai, out, "--group-models"))
    assert res.exit_code == 0, res.output
    new = judge_requests(fake_openai)[8:]
    assert len(new) == 4
    for req in new:
        texts = [t for _, t in shown_samples(req)]
        assert len(texts) == 6 and {t.split(" ")[0] for t in texts} == {"base", "tuned"}
    check_group_records(out, new, 6)


@pytest.mark.slow
def test_group_models_rerun_and_fresh(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    fake_openai.responder = group_responder
    files = group_files(tmp_path)
    out = tmp_path / "run"
    args = group_args(files, fake_openai, out, "--group-models")
    res = invoke(args)
    assert res.exit_code == 0, res.output
    reqs = judge_requests(fake_openai)
    assert len(reqs) == 4  # one call per item, both models' 3 epochs together
    check_group_records(out, reqs, 6)
    first = {label: load(out, label) for label in ("base", "tuned")}

    res = invoke(args)  # nothing changed: the group grades are reused, the judge is not asked
    assert res.exit_code == 0, res.output
    assert len(fake_openai.requests) == 4
    assert [r["score"] for r in load(out, "base")] == [r["score"] for r in first["base"]]

    res = invoke([*args, "--fresh"])  # starts over: the judge cache too
    assert res.exit_code == 0, res.output
    assert len(judge_requests(fake_openai)) == 8
    def bodies(rs: list[Request]) -> list[str]:
        return sorted(json.dumps(r.body, sort_keys=True) for r in rs)

    assert bodies(judge_requests(fake_openai)[4:]) == bodies(reqs)  # same seeds, same orders: the same requests
    check_group_records(out, judge_requests(fake_openai)[4:], 6)
    assert not any(r["grade_details"]["judge_cached"] for r in load(out, "tuned"))

    # Without --group-models on the same directory: groups of 3 are new groups, judged again (8 calls).
    res = invoke(group_args(files, fake_openai, out))
    assert res.exit_code == 0, res.output
    assert len(judge_requests(fake_openai)) == 16
    check_group_records(out, judge_requests(fake_openai)[8:], 3)


@pytest.mark.slow
def test_group_judge_resumes_after_a_kill(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    """A real process killed while the judge holds its second group; the resume judges only what is left."""
    gate = threading.Event()
    answered = threading.Event()

    def respond(req: Request) -> Reply:
        if answered.is_set():  # the first group is answered; every later one waits until the process is dead
            gate.wait(30)
        answered.set()
        return group_responder(req)

    fake_openai.responder = respond
    files = group_files(tmp_path)
    out = tmp_path / "run"
    args = group_args(files, fake_openai, out, "--group-models", "--judge-concurrency", "1", "-q")
    proc = subprocess.Popen([*RFTEVAL, "run", *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env={**os.environ, "NO_COLOR": "1"})
    try:
        deadline = time.monotonic() + 60
        while len(fake_openai.requests) < 2 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(fake_openai.requests) == 2, proc.stderr.read().decode() if proc.poll() is not None else "stuck"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
        gate.set()
    fake_openai.responder = group_responder
    cache = (out / "judge_cache.jsonl").read_text().splitlines()
    assert len(cache) == 1  # the answered group; the held one never came back

    res = invoke(args)
    assert res.exit_code == 0, res.output
    reqs = judge_requests(fake_openai)
    assert len(reqs) == 2 + 3  # the held group again, and the two never sent; the answered one is not re-sent
    latest = {}
    for req in reqs:
        latest[shown_samples(req)[0][1].split(" ")[2]] = req
    check_group_records(out, list(latest.values()), 6)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["complete"] is True and summary["cells"] == 24 and summary["missing"] == 0


# ---- a refused judge ---------------------------------------------------------------------------------------------


def test_judge_401_is_exit_2_one_line_and_the_key_nowhere(tmp_path: Path) -> None:
    files = group_files(tmp_path)
    grader = tmp_path / "score.json"
    grader.write_text(json.dumps({**SCORE_GRADER, "input": [{"role": "user", "content": "{{ sample.output_text }}"}]}))
    secret = "sk-wrong-judge-SECRET-98765"
    out = tmp_path / "run"
    with FakeOpenAI(api_key="sk-the-right-key-000") as server:
        res = invoke(["--dataset", str(files["dataset"]), "--grader", str(grader), "--model",
                      f"base=replay:{files['base']}", "--epochs", "3", "--judge-base-url", server.base_url,
                      "--judge-api-key-env", "RFTEVAL_JUDGE_KEY", "--judge-concurrency", "1", "--out", str(out)],
                     env={"RFTEVAL_JUDGE_KEY": secret})
        sent = len(server.requests)
    assert res.exit_code == 2
    # the dataset's system messages are one warning line (the RFT format check); the error is the one other line
    lines = [ln for ln in res.stderr.splitlines() if ln.strip() and not ln.startswith("warning: ")]
    assert len(lines) == 1 and lines[0].startswith("rfteval: ") and "Traceback" not in res.output
    assert "judge" in lines[0] and "judge-model" in lines[0] and "auth" in lines[0]
    assert sent == 1  # fatal: no judge call after the first refusal
    assert secret not in res.output
    written = [p for p in out.rglob("*") if p.is_file()]
    assert written
    for path in written:
        assert secret.encode() not in path.read_bytes(), path


def test_unknown_judge_model_is_exit_2(tmp_path: Path) -> None:
    files = group_files(tmp_path)
    with FakeOpenAI(group_responder, models=["some-other-model"]) as server:
        res = invoke(group_args(files, server, tmp_path / "run", "--judge-model", "no-such-judge"))
        assert res.exit_code == 2  # the model check, before anything is sent
        assert "--judge-model: unknown model 'no-such-judge'" in res.stderr and "some-other-model" in res.stderr
        # past the check: the judge's own 404 mid-run is as fatal
        res = invoke(group_args(files, server, tmp_path / "run", "--judge-model", "no-such-judge",
                                "--skip-model-check"))
    assert res.exit_code == 2
    assert "no-such-judge" in res.stderr and "not_found" in res.stderr


# ---- the demo's pieces: the Accordance recordings and the scripted local judge (a stand-in, not a model) ---------

ROOT = REPO


def local_judge_module() -> Any:
    sys.path.insert(0, str(ROOT / "scripts"))
    import local_judge

    return local_judge


def test_accordance_recordings_are_current_and_illustrative() -> None:
    done = subprocess.run([sys.executable, str(ROOT / "scripts/make_accordance_recordings.py"), "--check"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    items = [json.loads(x)["id"] for x in (ROOT / "datasets/accordance/items.jsonl").read_text().splitlines()]
    texts = {}
    for label in ("base", "tuned"):
        path = ROOT / f"datasets/accordance/recordings/{label}.jsonl"
        rows = [json.loads(x) for x in path.read_text().splitlines()]
        assert sorted((r["item_id"], r["epoch"]) for r in rows) == sorted((i, e) for i in items for e in (1, 2, 3))
        assert all(set(r) == {"item_id", "epoch", "output_text"} for r in rows)  # no `model`: any replay label
        texts[label] = {(r["item_id"], r["epoch"]): r["output_text"] for r in rows}
    assert len(set(texts["base"].values())) > 25  # analyses vary across items and epochs
    assert "illustrative" in (ROOT / "datasets/accordance/README.md").read_text().lower()


@pytest.mark.slow
def test_accordance_example_through_run_with_the_scripted_judge(tmp_path: Path) -> None:
    server = local_judge_module().serve(0)
    url = server.base_url
    data = ROOT / "datasets/accordance"
    try:
        res = invoke(["--dataset", str(data / "items.jsonl"), "--grader", str(ROOT / "graders/accordance.json"),
                      "--model", f"base=replay:{data / 'recordings/base.jsonl'}",
                      "--model", f"tuned=replay:{data / 'recordings/tuned.jsonl'}", "--epochs", "3",
                      "--judge-base-url", url, "--judge-model", "local-scripted-judge", "--out", str(tmp_path / "r")])
    finally:
        server.stop()
    assert res.exit_code == 0, res.output
    summary = json.loads((tmp_path / "r/summary.json").read_text())
    assert summary["judge"]["local-scripted-judge"]["calls"] == len({json.loads(x)["output_text"] for label in (
        "base", "tuned") for x in (data / f"recordings/{label}.jsonl").read_text().splitlines()})
    assert summary["errors"] == 0
    assert summary["models"]["tuned"]["mean"] > summary["models"]["base"]["mean"] + 0.1
    for rec in load(tmp_path / "r", "base"):
        steps = rec["grade_details"]["steps"]
        assert len(steps) == 6 and "scripted stand-in, not a model" in steps[-1]["description"]
        awarded = sum(float(s["conclusion"].split("/")[0]) for s in steps[:-1])
        assert rec["score"] == pytest.approx(awarded / 10)  # the 10 rubric points, as the grader asks


def test_local_judge_reads_amounts_whole() -> None:
    lj = local_judge_module()
    assert lj.score_point("(2 pts) The annual exclusion is $19,000.", "It is $18,000.")[0] == 0.0
    assert lj.score_point("(2 pts) The annual exclusion is $19,000.", "It is 19,000 dollars.")[0] == 1.0
    assert lj.score_point("(2 pts) Taxable gain is $90,000.", "Taxable gain is $190,000.")[0] == 0.0
    assert lj.score_point("(1 pt) Used for 2 of the 5 years.", "used for two of the five years")[0] == 1.0
    assert lj.score_point("(1 pt) Used for 2 of the 5 years.", "in 2025")[0] == 0.0
    assert lj.score_point("(1 pt) Meets the 45-day and 180-day deadlines.", "within 45 days and 180 days")[0] == 1.0
    assert lj.score_point("(1 pt) Reported on Form 8949/Schedule D.", "on Form 8949 and Schedule D")[0] == 1.0


def test_probe_grader_takes_the_judge_flags_and_a_refused_judge_is_one_line(tmp_path: Path) -> None:
    secret = "sk-wrong-judge-SECRET-4321"
    with FakeOpenAI(api_key="sk-the-right-key-000") as server:
        res = runner.invoke(app, ["probe-grader", str(ROOT / "graders" / "accordance.json"), "--dataset",
                                  str(ROOT / "datasets" / "accordance" / "items.jsonl"), "--limit", "1",
                                  "--judge-base-url", server.base_url, "--judge-api-key-env", "RFTEVAL_JUDGE_KEY",
                                  "--judge-concurrency", "1"], env={"RFTEVAL_JUDGE_KEY": secret})
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "the judge" in lines[0] and "refused" in lines[0] and "no probe was judged" in lines[0]
    assert secret not in res.output


# ---- the judge's warnings ----------------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_judge_past_its_output_limit_is_told_to_the_runs_monitor(tmp_path: Path, fake_openai: FakeOpenAI,
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    from rfteval.run.monitor import RunMonitor
    from rfteval.run.runner import RunOptions, run_eval
    from rfteval.run.spec import build_spec, flag_overrides

    score = model_or_score_responder()

    def respond(req: Request) -> Reply:  # the judge runs to 87 tokens under its limit of 16, as llama.cpp's did
        reply = score(req)
        return Reply(text=reply.text, usage={"output_tokens": 87}) if judge_format(req) is not None else reply

    fake_openai.responder = respond
    grader = tmp_path / "grader.json"
    grader.write_text(json.dumps({**SCORE_GRADER, "sampling_params": {"max_completions_tokens": 16}}))
    spec = build_spec(None, flag_overrides(models=["base=fake-base"], dataset=str(write_dataset(tmp_path)),
                                           grader=str(grader), epochs=1, base_url=fake_openai.base_url,
                                           out=str(tmp_path / "run")))
    said: list[str] = []

    class Collect(RunMonitor):
        def message(self, text: str) -> None:
            said.append(text)

    with caplog.at_level("WARNING", logger="rfteval"):
        result = run_eval(spec, Collect(), RunOptions(handle_signals=False, checkpoint_s=0))
    assert result.summary.errors == 0
    limits = [s for s in said if "ignored the output limit" in s]
    assert len(limits) == 1, said  # once per judge model, though every call ran past it
    assert "model judge-model" in limits[0] and "87 output tokens under a limit of 16" in limits[0]
    assert not [r for r in caplog.records if "ignored the output limit" in r.getMessage()]  # not the logger's


@pytest.mark.slow
def test_judge_accounting_adds_up_to_the_cells_judged(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    """Issue 27: 12 cells whose judge requests are all equal showed "1 calls, 10 cached": the requests answered
    by a call in flight were counted nowhere. They are "shared" now: calls + cached + shared = cells judged."""
    score = model_or_score_responder()
    fake_openai.responder = lambda req: Reply(text="same answer") if judge_format(req) is None else Reply(
        text=json.dumps({"result": 0.5, "steps": []}), delay_s=0.2)
    del score
    grader = tmp_path / "grader.json"
    grader.write_text(json.dumps({**SCORE_GRADER, "input": [
        {"role": "user", "content": "Score this answer: {{ sample.output_text }}"}]}))
    out = tmp_path / "run"
    res = invoke(["--dataset", str(write_dataset(tmp_path, 2)), "--grader", str(grader), "--model",
                  "base=fake-base", "--model", "tuned=fake-tuned", "--epochs", "3", "--base-url",
                  fake_openai.base_url, "--out", str(out)])
    assert res.exit_code == 0, res.output
    u = json.loads((out / "summary.json").read_text())["judge"]["judge-model"]
    assert u["calls"] == 1 and u["shared"] >= 1 and u["calls"] + u["cache_hits"] + u["shared"] == 12
    assert f"1 calls, {u['cache_hits']} cached, {u['shared']} shared" in res.output
    why = "; ".join([f"{u['cache_hits']} answered from the judge cache"] * bool(u["cache_hits"])
                    + [f"{u['shared']} shared an identical request's call"])
    assert f"  1 calls for 12 samples: {why}\n" in res.output  # issue 36: the line says why it is not 12


@pytest.mark.slow
def test_the_judge_line_says_why_it_made_fewer_calls_than_samples(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    """Issue 36: after a resumed run the judge line said "26 calls, 0 cached, 0 shared" for 48 samples and not why.
    It counts the samples by what grading did with them: here the first epoch's grades are kept from the first
    invocation, a generation that failed is not graded, and only the rest asked the judge."""
    fake_openai.responder = model_or_score_responder()
    grader = tmp_path / "grader.json"
    grader.write_text(json.dumps(SCORE_GRADER))
    args = ["--dataset", str(write_dataset(tmp_path, 3)), "--grader", str(grader), "--model", "base=fake-base",
            "--model", "tuned=fake-tuned", "--base-url", fake_openai.base_url, "--out", str(tmp_path / "run"),
            "--no-readiness", "--max-error-rate", "0.5"]
    res = invoke([*args, "--epochs", "1"])
    assert res.exit_code == 0, res.output
    assert "judge judge-model: 6 calls" in res.output and "calls for" not in res.output  # one per sample: said once
    score = fake_openai.responder
    fake_openai.responder = lambda req: (Reply.error(400, "bad request") if judge_format(req) is None
                                         and req.last_user_text() == "question 0" and req.model == "fake-base"
                                         else score(req))
    res = invoke([*args, "--epochs", "2"])
    assert res.exit_code == 0, res.output
    u = json.loads((tmp_path / "run" / "summary.json").read_text())["judge"]["judge-model"]
    assert (u["requests"], u["calls"], u["cache_hits"], u["shared"]) == (5, 5, 0, 0)
    assert len(judge_requests(fake_openai)) == 6 + 5
    assert ("  5 calls for 12 samples: 6 graded by an earlier invocation (their grades kept); 1 not graded: their "
            "generation failed\n") in res.output


@pytest.mark.slow
def test_a_judge_endpoint_that_dies_stops_the_run_resumably(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    """Issue 27: a dead judge endpoint is noticed across cells, as a dead model endpoint is (run/runner.py's
    ServerGone): the run stops with one line, exit 3, instead of every cell spending its retries; once the judge is
    back, the same command resumes and grades what was left."""
    fake_openai.responder = model_or_score_responder()
    judge = FakeOpenAI(model_or_score_responder(), delay_s=0.1).start()  # slow enough to die mid-run
    answered = 0
    lock = threading.Lock()
    score = judge.responder

    def die_after_three(req: Request) -> Reply:
        nonlocal answered
        with lock:
            answered += 1
            if answered == 3:
                threading.Timer(0.05, judge.stop).start()  # a killed judge server: connections refused
        return score(req)

    judge.responder = die_after_three
    grader = tmp_path / "grader.json"
    grader.write_text(json.dumps(SCORE_GRADER))
    out = tmp_path / "run"
    args = ["--dataset", str(write_dataset(tmp_path, 6)), "--grader", str(grader), "--model", "base=fake-base",
            "--epochs", "2", "--base-url", fake_openai.base_url, "--judge-base-url", judge.base_url, "--out", str(out),
            "--concurrency", "2", "--judge-concurrency", "1"]
    try:
        res = invoke(args)
        assert res.exit_code == 3, res.output
        said = [ln for ln in res.output.splitlines() if "run stopped after" in ln]
        assert len(said) == 1 and "judge (judge-model)" in said[0] and "stopped answering" in said[0], res.output
        judge.restart()
        res = invoke(args)
        assert res.exit_code == 0, res.output
        recs = load(out, "base")
        assert len(recs) == 12 and all(r["error"] is None for r in recs), [r["error"] for r in recs]
    finally:
        judge.stop()


@pytest.mark.slow
def test_a_judge_request_the_server_refuses_stops_the_run_in_one_line(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    """Issue 27: a label_model with a developer message (docs/judges.md's example) on a server that refuses the
    role (llama-cpp-python's 500) was retried 138-173 s per 4 cells; the run now stops after a handful of alike
    refusals, one line naming --developer-as system, which then runs it."""
    fake_openai.responder = lambda req: Reply(text="an answer") if judge_format(req) is None else Reply(
        text=json.dumps({"label": "good", "steps": []}))
    fake_openai.refused_roles = {"developer"}
    grader = tmp_path / "grader.json"
    grader.write_text(json.dumps({"type": "label_model", "name": "ok", "model": "judge-model", "labels": ["good", "bad"],
                                  "passing_labels": ["good"], "input": [
                                      {"role": "developer", "content": "Is the answer good?"},
                                      {"role": "user", "content": "Answer: {{ sample.output_text }}"}]}))
    out = tmp_path / "run"
    args = ["--dataset", str(write_dataset(tmp_path, 6)), "--grader", str(grader), "--model", "base=fake-base",
            "--epochs", "2", "--base-url", fake_openai.base_url, "--out", str(out), "--judge-concurrency", "2"]
    res = invoke(args)
    said = [ln for ln in res.output.splitlines() if "run stopped" in ln]
    assert res.exit_code == 2 and len(said) == 1, res.output
    assert "judge requests alike, caused by the developer role" in said[0] and "--developer-as system" in said[0]
    assert fake_openai.stats["invalid"] <= 6  # a handful, not 12 cells x 11 attempts
    res = invoke([*args, "--developer-as", "system"])
    assert res.exit_code == 0, res.output
    assert all(r["score"] == 1.0 for r in load(out, "base"))
