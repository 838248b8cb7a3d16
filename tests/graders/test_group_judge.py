"""group_judge: one call per item, context once, ids checked, scores clipped, shuffling recorded and undone."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

import rfteval.graders.group_judge as gj
from rfteval.data.sample import make_sample
from rfteval.graders import GradingEngine, parse_config
from rfteval.graders.base import INVALID_VARIABLE, MODEL_PARSE, MODEL_SERVER, REGISTRY, needs_groups
from rfteval.providers.endpoint import JudgeEndpoint
from rfteval.providers.judge import Judge, judge_repeat, open_judge
from rfteval.providers.openai_provider import OpenAIProvider
from rfteval.providers.retry import RetryPolicy
from tests.support import REPO

CONFIG = {"type": "group_judge", "name": "rank", "model": "judge-m", "seed": 7}
SAMPLE_RE = re.compile(r'<sample id="([^"]+)">\n(.*?)\n</sample>', re.S)


def shown(request) -> list[tuple[str, str]]:
    """(id, text) of the samples in a group request, in the order shown."""
    return SAMPLE_RE.findall(request.body["messages"][1]["content"])


def value_judge(request):
    """Scores each sample by the number after 'v=' in its text: a judge with no position bias."""
    scores = [{"id": sid, "explanation": f"value in {text!r}", "score": float(text.split("v=")[1])}
              for sid, text in shown(request)]
    return json.dumps({"scores": scores})


def item(n: int = 1, **extra) -> dict:
    return {"id": f"item{n}", "messages": [
        {"role": "system", "content": "Always answer in French. Cite the article id."},
        {"role": "user", "content": f"Question {n}?"}], **extra}


def grade(server, pairs, config=CONFIG, responder=value_judge, **kw):
    server.responder = responder
    with Judge(OpenAIProvider(server.base_url), retry_policy=RetryPolicy(max_retries=1, base_s=0.001), **kw) as judge, \
            GradingEngine(parse_config(config), judge=judge) as engine:
        return engine.grade_batch(pairs)


def test_registered_as_an_extension_that_needs_groups():
    assert REGISTRY["group_judge"].extension is True
    assert gj.GroupJudgeGrader.needs_groups is True


def test_one_call_per_item_with_the_context_once_and_scores_back_in_input_order(fake_openai):
    a, b = item(1), item(2)
    values = [0.1, 0.9, 0.5, 0.3]
    pairs = [(make_sample(f"answer v={v}"), a) for v in values] + [(make_sample("other v=0.2"), b),
                                                                   (make_sample("other v=0.8"), b)]
    pairs.insert(2, pairs.pop())  # interleave the two items
    results = grade(fake_openai, pairs)
    assert len(fake_openai.requests) == 2
    assert [r.score for r in results] == [float(s["output_text"].split("v=")[1]) for s, _ in pairs]
    assert all(r.error is None for r in results)
    first = next(r for r in fake_openai.requests if "Question 1?" in r.body["messages"][1]["content"])
    user = first.body["messages"][1]["content"]
    assert user.count("Always answer in French") == 1 and user.count("Question 1?") == 1
    assert user.index("</context>") < user.index("<sample")
    assert sorted(t for _, t in shown(first)) == sorted(f"answer v={v}" for v in values)
    assert first.body["response_format"]["json_schema"]["name"] == "group_judge_scores"
    assert first.body["response_format"]["json_schema"]["strict"] is True
    assert {r.details["group_size"] for r in results} == {4, 2}


def test_shuffle_is_recorded_and_undone(fake_openai):
    texts = [f"s v=0.{i}" for i in range(6)]
    pairs = [(make_sample(t), item()) for t in texts]
    results = grade(fake_openai, pairs)
    (request,) = fake_openai.requests
    order_shown = [t for _, t in shown(request)]
    seed = results[0].details["shuffle_seed"]
    assert all(r.details["shuffle_seed"] == seed for r in results)
    # the recorded position and id of each sample are where the judge saw it
    for (sample, _), r in zip(pairs, results):
        assert order_shown[r.details["position"]] == sample["output_text"]
        assert shown(request)[r.details["position"]][0] == r.details["sample_id"]
    # the order is the documented function of the seed, and is not simply the input order
    expected = gj.presentation_order([s for s, _ in pairs], seed)
    assert order_shown == [texts[j] for j in expected]
    import hashlib

    canonical = sorted(range(6), key=lambda i: hashlib.sha256(texts[i].encode()).hexdigest())
    assert expected != canonical and expected != list(range(6))  # really shuffled
    assert seed == gj.shuffle_seed(7, "id:item1")


def test_a_position_biased_judge_is_exposed_by_the_recorded_position(fake_openai):
    def first_wins(request):
        ids = [sid for sid, _ in shown(request)]
        return json.dumps({"scores": [{"id": s, "explanation": "first", "score": 1.0 if n == 0 else 0.0}
                                      for n, s in enumerate(ids)]})

    results = grade(fake_openai, [(make_sample(f"t{i}"), item()) for i in range(5)], responder=first_wins)
    assert [r.details["position"] == 0 for r in results] == [r.score == 1.0 for r in results]
    assert sum(r.score for r in results) == 1.0


def test_incoming_order_does_not_change_the_request(fake_openai, tmp_path):
    samples = [make_sample(f"x v=0.{i}") for i in range(4)]
    cache = tmp_path / "judge.jsonl"
    grade(fake_openai, [(s, item()) for s in samples], cache_path=cache)
    again = grade(fake_openai, [(s, item()) for s in reversed(samples)], cache_path=cache)
    assert len(fake_openai.requests) == 1  # same set of samples: same request, a cache hit
    assert [r.score for r in again] == [0.3, 0.2, 0.1, 0.0]


def _fixed(scores):
    return lambda request: json.dumps({"scores": scores(request)})


@pytest.mark.parametrize("mutate,why", [
    (lambda e: e[:-1], "missing ids"),
    (lambda e: e + [dict(e[0])], "duplicate ids"),
    (lambda e: e + [{"id": "s99", "explanation": "", "score": 0.5}], "unknown ids"),
    (lambda e: [{**x, "id": x["id"].upper()} for x in e], "missing ids"),
    (lambda e: [{**e[0], "score": "high"}] + e[1:], "not a finite number"),
    (lambda e: [{"explanation": "no id", "score": 1}] + e[1:], "no string id"),
])
def test_bad_ids_fail_the_whole_group(fake_openai, mutate, why):
    def responder(request):
        entries = [{"id": sid, "explanation": "", "score": 0.5} for sid, _ in shown(request)]
        return json.dumps({"scores": mutate(entries)})

    pairs = [(make_sample(f"a{i}"), item(1)) for i in range(3)] + [(make_sample("b"), item(2))]
    results = grade(fake_openai, pairs, responder=responder)
    for r in results[:3]:
        assert r.error.type == MODEL_PARSE and why in r.error.message and r.score == 0.0
        assert "raw_answer" in r.details
    assert results[3].error.type == MODEL_PARSE  # the other item's group is broken the same way


def test_more_scores_than_samples_is_an_error(fake_openai):
    def responder(request):
        ids = [sid for sid, _ in shown(request)]
        extra = [{"id": ids[0], "explanation": "again", "score": 0.1}, {"id": "s3", "explanation": "?", "score": 0.2}]
        return json.dumps({"scores": [{"id": s, "explanation": "", "score": 0.5} for s in ids] + extra})

    results = grade(fake_openai, [(make_sample("p"), item()), (make_sample("q"), item())], responder=responder)
    assert all(r.error.type == MODEL_PARSE for r in results)
    assert "4 entries for 2 samples" in results[0].error.message
    assert "duplicate ids ['s" in results[0].error.message and "unknown ids ['s3']" in results[0].error.message


def test_scores_are_clipped_to_zero_one(fake_openai):
    pairs = [(make_sample("hi v=1.7"), item()), (make_sample("lo v=-0.4"), item()), (make_sample("mid v=0.5"), item())]
    hi, lo, mid = grade(fake_openai, pairs)
    assert (hi.score, hi.details["clipped"], hi.details["raw_score"]) == (1.0, True, 1.7)
    assert (lo.score, lo.details["raw_score"]) == (0.0, -0.4)
    assert mid.score == 0.5 and "clipped" not in mid.details
    assert "value in 'hi v=1.7'" == hi.details["explanation"]


def test_default_rubric_and_override(fake_openai):
    grade(fake_openai, [(make_sample("v=1"), item())])
    assert gj.DEFAULT_RUBRIC in fake_openai.requests[0].body["messages"][0]["content"]
    fake_openai.reset()
    grade(fake_openai, [(make_sample("v=1"), item())], config={**CONFIG, "rubric": "Prefer brevity."})
    system = fake_openai.requests[0].body["messages"][0]["content"]
    assert "Prefer brevity." in system and gj.DEFAULT_RUBRIC not in system


def test_extra_input_is_rendered_from_the_item(fake_openai):
    config = {**CONFIG, "input": "Knowledge base: {{ item.kb }}"}
    grade(fake_openai, [(make_sample("v=1"), item(kb="KB-7 says reboot"))], config=config)
    user = fake_openai.requests[0].body["messages"][1]["content"]
    assert "<extra>\nKnowledge base: KB-7 says reboot\n</extra>" in user


def test_extra_input_naming_a_sample_is_an_invalid_variable_for_the_group(fake_openai):
    config = {**CONFIG, "input": "{{ sample.output_text }}"}
    results = grade(fake_openai, [(make_sample("v=1"), item()), (make_sample("v=0"), item())], config=config)
    assert [r.error.type for r in results] == [INVALID_VARIABLE, INVALID_VARIABLE]
    assert fake_openai.requests == []


def test_base_and_tuned_samples_of_an_item_are_ranked_together(fake_openai):
    it = item()
    base = [(make_sample(f"base v=0.{i}"), it) for i in range(3)]
    tuned = [(make_sample(f"tuned v=0.{i + 5}"), it) for i in range(3)]
    results = grade(fake_openai, base + tuned)
    assert len(fake_openai.requests) == 1 and results[0].details["group_size"] == 6
    assert "base" not in fake_openai.requests[0].body["messages"][0]["content"]


def test_items_without_id_group_by_content(fake_openai):
    a = {"messages": [{"role": "user", "content": "A?"}]}
    a_copy = json.loads(json.dumps(a))
    b = {"messages": [{"role": "user", "content": "B?"}]}
    grade(fake_openai, [(make_sample("v=0.1"), a), (make_sample("v=0.2"), a_copy), (make_sample("v=0.3"), b)])
    assert sorted(len(shown(r)) for r in fake_openai.requests) == [1, 2]


def test_tool_calls_are_shown_to_the_judge(fake_openai):
    call = {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": '{"q": 1}'}}
    grade(fake_openai, [(make_sample("v=1", [call]), item())])
    assert '<tool_calls>[{"id": "c1"' in fake_openai.requests[0].body["messages"][1]["content"]


def test_server_failure_fails_the_group_as_a_server_error(fake_openai):
    from tests.support.fake_openai import Reply

    results = grade(fake_openai, [(make_sample("v=1"), item()), (make_sample("v=0"), item())],
                    responder=lambda r: Reply.error(503))
    assert [r.error.type for r in results] == [MODEL_SERVER, MODEL_SERVER]


def test_a_stability_repeat_reshuffles(fake_openai):
    pairs = [(make_sample(f"v=0.{i}"), item()) for i in range(8)]
    fake_openai.responder = value_judge
    with Judge(OpenAIProvider(fake_openai.base_url)) as judge, GradingEngine(parse_config(CONFIG), judge=judge) as eng:
        r0 = eng.grade_batch(pairs)
        with judge_repeat(1):
            r1 = eng.grade_batch(pairs)
    assert r0[0].details["shuffle_seed"] != r1[0].details["shuffle_seed"]
    assert [r.score for r in r0] == [r.score for r in r1]  # an unbiased judge gives the same scores
    assert [t for _, t in shown(fake_openai.requests[0])] != [t for _, t in shown(fake_openai.requests[1])]


# ---- the demo pieces: scripts/local_judge.py (a scripted stand-in, not a model) and datasets/support ------------

ROOT = REPO


def _support_pairs() -> tuple[list, list[str]]:
    items = {json.loads(line)["id"]: json.loads(line) for line in open(ROOT / "datasets/support/items.jsonl")}
    pairs, labels = [], []
    for label in ("base", "tuned"):
        for line in open(ROOT / f"datasets/support/recordings/{label}.jsonl"):
            rec = json.loads(line)
            pairs.append((make_sample(rec["output_text"]), items[rec["item_id"]]))
            labels.append(label)
    return pairs, labels


def test_support_dataset_shape():
    from rfteval.data.dataset import load_dataset

    ds = load_dataset(ROOT / "datasets/support/items.jsonl")
    assert len(ds) >= 10
    for it in ds:
        roles = [m["role"] for m in it.messages]
        assert roles[:2] == ["system", "developer"] and roles[-1] == "user"
        assert "<article id=" in it.messages[-1]["content"]
    for label in ("base", "tuned"):
        rows = [json.loads(line) for line in open(ROOT / f"datasets/support/recordings/{label}.jsonl")]
        assert sorted((r["item_id"], r["epoch"]) for r in rows) == sorted((it.id, e) for it in ds for e in (1, 2, 3))
    cfg = parse_config(json.loads((ROOT / "datasets/support/grader.json").read_text()))
    assert cfg.type == "group_judge"


@pytest.mark.slow
def test_local_judge_ranks_the_support_recordings_through_a_real_subprocess():
    proc = subprocess.Popen([sys.executable, str(ROOT / "scripts/local_judge.py"), "--port", "0"],
                            stdout=subprocess.PIPE, text=True)
    try:
        base_url = proc.stdout.readline().strip()
        assert base_url.startswith("http://127.0.0.1:") and base_url.endswith("/v1")
        pairs, labels = _support_pairs()
        cfg = parse_config(json.loads((ROOT / "datasets/support/grader.json").read_text()))
        with open_judge(JudgeEndpoint(base_url), cfg) as judge, GradingEngine(cfg, judge=judge) as engine:
            results = engine.grade_batch(pairs)  # both models' samples of an item in one group
            usage = judge.usage()
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    assert usage["gpt-4.1-2025-04-14"]["calls"] == 12  # one call per item
    assert all(r.error is None for r in results)
    assert all("scripted stand-in, not a model" in r.details["explanation"] for r in results)
    assert {r.details["group_size"] for r in results} == {6}
    mean = {lab: sum(r.score for r, x in zip(results, labels) if x == lab) / labels.count(lab)
            for lab in ("base", "tuned")}
    assert mean["tuned"] > mean["base"] + 0.2
    for n in range(12):  # every group has a best sample scored 1
        assert max(r.score for r, (_, it) in zip(results, pairs) if it["id"] == f"sup-{n + 1:02d}") == 1.0


def test_local_judge_heuristic_is_deterministic_and_says_what_it_is():
    sys.path.insert(0, str(ROOT / "scripts"))
    import local_judge

    assert "NOT A MODEL" in local_judge.__doc__
    body = {"messages": [
        {"role": "system",
         "content": "Rules:\n- Always say \"hello\".\n- Keep it under 5 words.\n- Never mention prices."},
        {"role": "user", "content": "<context>\n<message role=\"system\">\n- Always say \"hello\".\n"
                                    "- Keep it under 5 words.\n- Never mention prices.\n</message>\n</context>\n"
                                    '<sample id="s1">\nhello friend\n</sample>\n'
                                    '<sample id="s2">\nhi, our prices are low today for you\n</sample>'}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "group_judge_scores", "schema": {}}}}
    out = local_judge.answer(body)
    assert out == local_judge.answer(body)
    by_id = {s["id"]: s for s in out["scores"]}
    assert by_id["s1"]["score"] == 1.0 and by_id["s2"]["score"] < 0.5
    assert "met 3/3" in by_id["s1"]["explanation"] and "met 0/3" in by_id["s2"]["explanation"]


def test_needs_groups_sees_through_multi():
    plain = parse_config({"type": "string_check", "name": "s", "input": "a", "reference": "a", "operation": "eq"})
    multi = parse_config({"type": "multi", "name": "m", "calculate_output": "g",
                          "graders": {"g": {**CONFIG, "name": "g"}}})
    assert needs_groups(parse_config(CONFIG)) and needs_groups(multi)
    assert not needs_groups(plain)


def test_a_group_answer_cut_off_by_the_output_limit_is_a_truncated_error_for_the_group(fake_openai):
    """Issue 27: a group judge's answer ending with finish reason `length` fails the group as truncated, with the
    limit to raise, not as a parse error."""
    from rfteval.graders.base import MODEL_TRUNCATED
    from tests.support.fake_openai import Reply

    def cut(request):
        return Reply(text=value_judge(request)[:40], finish_reason="length")

    results = grade(fake_openai, [(make_sample("v=0.1"), item()), (make_sample("v=0.9"), item())], responder=cut)
    assert [r.error.type for r in results] == [MODEL_TRUNCATED] * 2
    assert "finish_reason length" in results[0].error.message and results[0].details["raw_answer"]


# ---- RULER over trajectories: samples that carry a rollout ------------------------------------------------------

FINAL_V = re.compile(r"<final_answer>\n.*?v=([0-9.]+)", re.S)


def trajectory_value_judge(request):
    """Scores each trajectory by the number after 'v=' in its final answer (none: 0)."""
    scores = []
    for sid, text in shown(request):
        m = FINAL_V.search(text)
        scores.append({"id": sid, "explanation": "final v", "score": float(m.group(1)) if m else 0.0})
    return json.dumps({"scores": scores})


def agent_sample(v: float, results: int = 2, size: int = 30, tag: str = ""):
    from rfteval.data.rollout import rollout_sample

    messages: list = []
    for k in range(results):
        cid = f"call_{k}"
        messages.append({"role": "assistant", "content": "", "tool_calls": [
            {"id": cid, "type": "function", "function": {"name": "lookup", "arguments": json.dumps({"k": k})}}]})
        messages.append({"role": "tool", "tool_call_id": cid, "content": f"{tag}result {k} " + "r" * size})
    messages.append({"role": "assistant", "content": f"final v={v}"})
    return rollout_sample(messages, stop_reason="no_tool_calls")


def test_rollouts_of_both_models_are_ranked_whole_in_one_call(fake_openai):
    """--group-models hands the grader both models' rollouts of an item: one request, each shown as a trajectory
    (calls and results in order, then the final answer), the item's prompt once in <context>."""
    it = item(tools=[{"type": "function", "function": {"name": "lookup", "parameters": {}}}])
    base = [agent_sample(v, tag="base ") for v in (0.2, 0.4)]
    tuned = [agent_sample(v, tag="tuned ") for v in (0.9, 0.7)]
    pairs = [(s, it) for s in base + tuned]
    results = grade(fake_openai, pairs, responder=trajectory_value_judge)
    (request,) = fake_openai.requests
    assert [r.score for r in results] == [0.2, 0.4, 0.9, 0.7]
    system, user = (m["content"] for m in request.body["messages"])
    assert gj.TRAJECTORY_NOTE in system and gj.TRAJECTORY_RUBRIC in system
    assert user.count("Always answer in French") == 1 and user.count("Question 1?") == 1
    texts = [t for _, t in shown(request)]
    assert len(texts) == 4 and all(t.startswith('<trajectory turns="3" tool_calls="2"') for t in texts)
    assert sum("tuned result" in t for t in texts) == 2 and sum("base result" in t for t in texts) == 2
    for t in texts:  # in order: call 0, its result, call 1, its result, the final answer
        marks = [t.index('{"k": 0}'), t.index("result 0"), t.index('{"k": 1}'), t.index("result 1"),
                 t.index("<final_answer>")]
        assert marks == sorted(marks)
    assert all("cut" not in r.details and "context_cut" not in r.details for r in results)


def test_single_answers_get_no_trajectory_note(fake_openai):
    grade(fake_openai, [(make_sample("a v=0.1"), item()), (make_sample("b v=0.2"), item())])
    assert gj.TRAJECTORY_NOTE not in fake_openai.requests[0].body["messages"][0]["content"]


def test_a_group_over_the_budget_is_cut_from_each_trajectorys_middle_and_says_so(fake_openai, tmp_path):
    config = {**CONFIG, "max_prompt_chars": 3000}
    pairs = [(agent_sample(v, results=6, size=400), item()) for v in (0.1, 0.5, 0.9)]
    cache = tmp_path / "judge.jsonl"
    results = grade(fake_openai, pairs, config=config, responder=trajectory_value_judge, cache_path=cache)
    (request,) = fake_openai.requests
    user = request.body["messages"][1]["content"]
    assert len(user) <= 3000 + 100
    assert [r.score for r in results] == [0.1, 0.5, 0.9]  # every final answer still there
    assert "tool result cut to fit the judge's context …]" in user or "tool results cut to fit" in user
    for r in results:
        assert r.details["cut"]["tool_results"] >= 1 and r.details["cut"]["final_answer_chars"] == 0
        ctx = r.details["context_cut"]
        assert ctx["max_prompt_chars"] == 3000 and ctx["full_chars"] > 3000 >= ctx["shown_chars"] - 100
        assert ctx["samples_cut"] == 3
    # deterministic: the same group in another order is the same request (a cache hit, nothing sent)
    again = grade(fake_openai, list(reversed(pairs)), config=config, responder=trajectory_value_judge,
                  cache_path=cache)
    assert len(fake_openai.requests) == 1 and [r.score for r in again] == [0.9, 0.5, 0.1]
    plan = [gj.plan_group(parse_config(config), "k", [0, 1, 2], pairs, 0) for _ in range(2)]
    assert plan[0].request == plan[1].request


def test_max_prompt_chars_has_a_default_and_a_floor():
    assert parse_config(CONFIG).max_prompt_chars == gj.DEFAULT_MAX_PROMPT_CHARS
    from rfteval.errors import InputError

    with pytest.raises(InputError, match="max_prompt_chars"):
        parse_config({**CONFIG, "max_prompt_chars": 10})


def test_local_judge_reads_trajectories_grounded_and_cited_beats_guessed():
    """scripts/local_judge.py (a stand-in, not a model) on rendered trajectories: the final answer's instruction
    points, its grounding in its own tool results, its citations shown by them; no final answer scores 0."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import local_judge

    rules = '- Always say "hello".\n- Cite each article by its id in square brackets.'
    good = ('<trajectory turns="2" tool_calls="1" stop="no_tool_calls">\n<tool_call name="get">{"id": "KB-1"}'
            '</tool_call>\n<tool_result name="get">{"id": "KB-1", "text": "Unplug the router for thirty seconds."}'
            "</tool_result>\n<final_answer>\nhello: unplug the router for thirty seconds [KB-1]\n</final_answer>\n"
            "</trajectory>")
    guessed = ('<trajectory turns="1" tool_calls="0" stop="no_tool_calls">\n<final_answer>\nhello: buy a new modem '
               "[KB-9]\n</final_answer>\n</trajectory>")
    unfinished = ('<trajectory turns="6" tool_calls="6" stop="max_turns">\n<no_final_answer stop="max_turns"/>\n'
                  "</trajectory>")
    user = (f'<context>\n<message role="developer">\n{rules}\n</message>\n</context>\n'
            f'<sample id="s1">\n{guessed}\n</sample>\n<sample id="s2">\n{good}\n</sample>\n'
            f'<sample id="s3">\n{unfinished}\n</sample>')
    body = {"messages": [{"role": "system", "content": "judge"}, {"role": "user", "content": user}],
            "response_format": {"type": "json_schema", "json_schema": {"name": "group_judge_scores", "schema": {}}}}
    out = local_judge.answer(body)
    assert out == local_judge.answer(body)
    by_id = {s["id"]: s for s in out["scores"]}
    assert by_id["s2"]["score"] == 1.0 > by_id["s1"]["score"] > by_id["s3"]["score"] == 0.0
    assert "1/1 citations shown" in by_id["s2"]["explanation"]
    assert "0/1 citations shown" in by_id["s1"]["explanation"]
    assert all("not a model" in s["explanation"] for s in out["scores"])
