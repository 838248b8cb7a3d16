"""The stability report: a judge answering at random is flagged; one answering consistently is not."""

from __future__ import annotations

import hashlib
import json
import random
import threading

import pytest

import rfteval.graders.group_judge  # noqa: F401  (registers the type)
from rfteval.data.sample import make_sample
from rfteval.errors import InputError
from rfteval.graders import GradingEngine, parse_config
from rfteval.providers.judge import Judge
from rfteval.providers.openai_provider import OpenAIProvider
from rfteval.readiness.judge_stability import load_pairs, spread, stability_report
from rfteval.report.judge_stability_render import render_report

SCORE = {"type": "score_model", "name": "judge", "model": "j", "range": [0, 10], "pass_threshold": 5,
         "input": [{"role": "user", "content": "Q {{ item.id }} A {{ sample.output_text }}"}]}


def consistent(request):
    """The same answer for the same prompt: a digest of it, mapped to 0..10."""
    h = int(hashlib.sha256(request.last_user_text().encode()).hexdigest()[:8], 16)
    return json.dumps({"steps": [], "result": h % 11})


def make_random():
    rng = random.Random(1234)
    lock = threading.Lock()

    def answer(request):
        with lock:
            return json.dumps({"steps": [], "result": rng.uniform(0, 10)})

    return answer


PAIRS = [(make_sample(f"answer {n}-{e}"), {"id": f"it{n}"}) for n in range(10) for e in range(2)]
KEYS = [(f"it{n}", e + 1) for n in range(10) for e in range(2)]


def report(server, responder, config=SCORE, repeat=4, pairs=PAIRS, keys=KEYS, **kw):
    server.responder = responder
    with Judge(OpenAIProvider(server.base_url), cache_path=kw.pop("cache_path", None)) as judge, \
            GradingEngine(parse_config(config), judge=judge) as engine:
        return stability_report(engine, pairs, repeat=repeat, keys=keys, **kw)


@pytest.mark.slow
def test_consistent_judge_is_stable(fake_openai, tmp_path):
    rep = report(fake_openai, consistent, cache_path=tmp_path / "c.jsonl")
    o = rep["overall"]
    assert (o["items"], o["outputs"], o["repeats"]) == (10, 20, 4)
    assert o["mean_sd"] == 0.0 and o["max_range"] == 0.0 and o["flip_share"] == 0.0
    assert o["flagged"] is False and o["flagged_items"] == 0 and o["errors"] == 0
    assert len(fake_openai.requests) == 20 * 4  # every repeat is a real call even with a cache
    first = rep["outputs"][0]
    assert len(first["scores"]) == 4 and len(set(first["scores"])) == 1


def test_random_judge_is_flagged_with_flips(fake_openai):
    rep = report(fake_openai, make_random())
    o = rep["overall"]
    assert o["flagged"] is True
    assert o["mean_sd"] > 0.15  # uniform on the whole range: sd ≈ 0.29 of the range
    assert o["flip_share"] >= 0.5
    assert o["flagged_items"] >= 5
    # the per-output figures are what the scores say, on the 0..1 scale of the range
    for row in rep["outputs"]:
        sd, width = spread(row["scores"])
        assert row["sd"] == pytest.approx(sd / 10) and row["range"] == pytest.approx(width / 10)
        assert row["flipped"] == (len({s >= 5 for s in row["scores"]}) > 1)
    # the item sd is the mean of its outputs' sd
    by_item = {it["item_id"]: it for it in rep["items"]}
    rows = [r for r in rep["outputs"] if r["item_id"] == "it3"]
    assert by_item["it3"]["sd"] == pytest.approx(sum(r["sd"] for r in rows) / 2)
    text = render_report(rep)
    assert "FLAGGED" in text and "it3" in text


@pytest.mark.slow
def test_threshold_decides_the_flag(fake_openai):
    rep = report(fake_openai, make_random(), threshold=0.9)
    assert rep["overall"]["flagged"] is False and "stable" in render_report(rep)


@pytest.mark.slow
def test_errors_are_counted_not_scored(fake_openai):
    def half_broken(request):
        if "answer 0-" in request.last_user_text():
            return "not json"
        return consistent(request)

    rep = report(fake_openai, half_broken, repeat=3)
    it0 = next(it for it in rep["items"] if it["item_id"] == "it0")
    assert it0["errors"] == 6 and rep["overall"]["errors"] == 6
    assert rep["overall"]["error_share"] == pytest.approx(6 / 60)
    assert rep["outputs"][0]["error_types"] == ["model_grader_parse_error"]
    assert rep["overall"]["error_types"] == {"model_grader_parse_error": 6} and rep["overall"]["inconclusive"] is False
    assert "6 grading errors (model_grader_parse_error ×6), left out -> stable" in render_report(rep)


@pytest.mark.slow
def test_a_judge_that_never_answers_whole_is_inconclusive_not_stable(fake_openai):
    """Every grade an error: no output was scored twice, so no spread was measured; "stable" would be a verdict
    on errors."""
    rep = report(fake_openai, lambda request: "not json", repeat=2)
    o = rep["overall"]
    assert o["inconclusive"] is True and o["flagged"] is False and o["errors"] == 40
    assert render_report(rep).endswith("-> INCONCLUSIVE: no output was scored twice, every other grade an error")


def test_label_model_flips_use_the_passing_labels(fake_openai):
    config = {"type": "label_model", "name": "l", "model": "j", "labels": ["ok", "bad"], "passing_labels": ["ok"],
              "input": [{"role": "user", "content": "{{ sample.output_text }}"}]}
    counter = iter(range(10**6))
    lock = threading.Lock()

    def alternating(request):
        with lock:
            n = next(counter)
        return json.dumps({"steps": [], "label": "ok" if n % 2 else "bad"})

    pairs = [(make_sample("x"), {"id": "a"})]
    rep = report(fake_openai, alternating, config=config, repeat=4, pairs=pairs, keys=[("a", 1)])
    assert rep["outputs"][0]["scores"] == [0.0, 1.0, 0.0, 1.0]
    assert rep["overall"]["flip_share"] == 1.0 and rep["overall"]["flagged"] is True


def test_group_judge_stability_reshuffles_each_repeat(fake_openai):
    def first_wins(request):
        import re

        ids = re.findall(r'<sample id="([^"]+)">', request.body["messages"][1]["content"])
        return json.dumps({"scores": [{"id": s, "explanation": "", "score": 1.0 if k == 0 else 0.0}
                                      for k, s in enumerate(ids)]})

    config = {"type": "group_judge", "name": "g", "model": "j", "seed": 3}
    pairs = [(make_sample(f"s{e}"), {"id": f"it{n}", "messages": [{"role": "user", "content": "q"}]})
             for n in range(4) for e in range(4)]
    keys = [(f"it{n}", e + 1) for n in range(4) for e in range(4)]
    rep = report(fake_openai, first_wins, config=config, repeat=4, pairs=pairs, keys=keys)
    assert len(fake_openai.requests) == 4 * 4
    assert rep["overall"]["flagged"] is True  # a position-biased judge moves with the shuffle


def test_repeat_must_be_at_least_two(fake_openai):
    with pytest.raises(ValueError):
        report(fake_openai, consistent, repeat=1)


def test_load_pairs_from_dataset_and_outputs(tmp_path):
    ds = tmp_path / "d.jsonl"
    ds.write_text("\n".join(json.dumps({"id": f"q{i}", "messages": [{"role": "user", "content": f"Q{i}"}]})
                            for i in range(3)) + "\n")
    outs = tmp_path / "o.jsonl"
    outs.write_text(json.dumps({"item_id": "q1", "epoch": 2, "output_text": "A"}) + "\n"
                    + json.dumps({"item_id": "q0", "output_text": "B"}) + "\n")
    pairs, keys = load_pairs(ds, outs)
    assert keys == [("q1", 2), ("q0", 1)]
    assert pairs[0][0]["output_text"] == "A" and pairs[0][1]["id"] == "q1"
    outs.write_text(json.dumps({"item_id": "nope", "output_text": "B"}) + "\n")
    with pytest.raises(InputError) as info:
        load_pairs(ds, outs)
    assert info.value.line == 1 and info.value.field == "item_id"


@pytest.mark.slow
def test_load_pairs_leaves_out_a_rollout_that_failed_where_it_was_played(tmp_path):
    """A verifiers trace that failed generated nothing: judging its empty answer K times would measure nothing."""
    from tests.support.verifiers_traces import tool_graph, vf_trace, vf_traces

    ds = tmp_path / "d.jsonl"
    ds.write_text(json.dumps({"id": "q0", "messages": [{"role": "user", "content": "add 1 and 2"}]}) + "\n")
    played = vf_trace(tool_graph(), info={"id": "q0"})
    failed = vf_trace(tool_graph()[:3], info={"id": "q0"})
    failed.record_error(TimeoutError("the sandbox went away"))
    outs = tmp_path / "traces.jsonl"
    vf_traces(tmp_path, [played, failed])
    pairs, keys = load_pairs(ds, outs)
    assert keys == [("q0", 1)] and pairs[0][0]["output_text"] == "3 and 7"


def test_run_stability_from_files_and_its_input_errors(fake_openai, tmp_path):
    from rfteval.readiness.judge_stability import run_stability

    ds = tmp_path / "d.jsonl"
    ds.write_text(json.dumps({"id": "q", "messages": [{"role": "user", "content": "Q"}]}) + "\n")
    outs = tmp_path / "o.jsonl"
    outs.write_text(json.dumps({"item_id": "q", "output_text": "A"}) + "\n")
    grader = tmp_path / "g.json"
    grader.write_text(json.dumps({"type": "multi", "name": "m", "calculate_output": "s",
                                  "graders": {"s": {**SCORE, "name": "s"}}}))
    fake_openai.responder = consistent
    with Judge(OpenAIProvider(fake_openai.base_url)) as judge:
        rep = run_stability(grader, ds, outs, judge, repeat=3)
        assert rep["overall"]["outputs"] == 1 and rep["overall"]["flagged"] is False
        assert len(fake_openai.requests) == 3
        code = tmp_path / "c.json"
        code.write_text(json.dumps({"type": "string_check", "name": "s", "input": "{{ sample.output_text }}",
                                    "reference": "A", "operation": "eq"}))
        with pytest.raises(InputError, match="no judge model"):
            run_stability(code, ds, outs, judge)
        with pytest.raises(InputError, match="at least 2"):
            run_stability(grader, ds, outs, judge, repeat=1)
