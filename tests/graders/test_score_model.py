"""score_model through a scripted judge on the local server: schema, sampling, clipping, parse errors, refusals."""

from __future__ import annotations

import json
import re

import pytest

from rfteval.data.records import make_record
from rfteval.data.sample import make_sample
from rfteval.graders import GradingEngine, parse_config
from rfteval.graders.base import INVALID_VARIABLE, MODEL_PARSE, MODEL_REFUSAL, MODEL_SERVER
from rfteval.graders.grading import apply_grade
from rfteval.providers.judge import Judge
from rfteval.providers.openai_provider import OpenAIProvider
from rfteval.providers.retry import RetryPolicy
from tests.support import REPO
from tests.support.fake_openai import Reply

FAST = RetryPolicy(max_retries=2, base_s=0.001, max_backoff_s=0.01)

CONFIG = {
    "type": "score_model", "name": "judge", "model": "o4-mini-2025-04-16",
    "input": [
        {"role": "system", "content": "Score 1 if exact, 0.5 if similar in meaning, else 0."},
        {"role": "user", "content": "Reference: {{ item.reference_answer }}. Model answer: {{ sample.output_text }}"},
    ],
    "range": [0, 1],
    "sampling_params": {"max_completions_tokens": 2048, "top_p": 1, "reasoning_effort": "medium", "seed": 42,
                        "temperature": 1},
    "pass_threshold": 0.5,
}


def answer_responder(request):
    """Scripted judge: the model answer is the number to return (or a literal payload after 'RAW:')."""
    text = request.last_user_text()
    answer = text.split("Model answer: ", 1)[1]
    if answer.startswith("RAW:"):
        return answer[4:]
    if answer == "REFUSE":
        return Reply(refusal="I will not grade this.")
    if answer == "FAIL":
        return Reply.error(500)
    return json.dumps({"steps": [{"description": "compared", "conclusion": f"value {answer}"}],
                       "result": float(answer)})


def grade(server, config, outputs, item=None, **judge_kw):
    item = item or {"id": "i1", "reference_answer": "42"}
    judge_kw.setdefault("retry_policy", FAST)
    with Judge(OpenAIProvider(server.base_url, api=judge_kw.pop("api", "chat")), **judge_kw) as judge, \
            GradingEngine(parse_config(config), judge=judge) as engine:
        return engine.grade_batch([(make_sample(o), item) for o in outputs])


def test_request_carries_the_schema_the_sampling_params_and_the_rendered_messages(fake_openai):
    fake_openai.responder = answer_responder
    (result,) = grade(fake_openai, CONFIG, ["0.75"])
    body = fake_openai.requests[0].body
    assert body["model"] == "o4-mini-2025-04-16"
    assert body["messages"] == [
        {"role": "system", "content": "Score 1 if exact, 0.5 if similar in meaning, else 0."},
        {"role": "user", "content": "Reference: 42. Model answer: 0.75"},
    ]
    rf = body["response_format"]
    assert rf["type"] == "json_schema" and rf["json_schema"]["strict"] is True
    schema = rf["json_schema"]["schema"]
    assert schema["properties"]["result"] == {"type": "number"}
    assert schema["properties"]["steps"]["items"]["required"] == ["description", "conclusion"]
    assert sorted(schema["required"]) == ["result", "steps"] and schema["additionalProperties"] is False
    assert body["max_completion_tokens"] == 2048 and body["reasoning_effort"] == "medium"
    assert body["seed"] == 42 and body["temperature"] == 1 and body["top_p"] == 1
    assert result.score == 0.75 and result.error is None and result.passed is True
    assert result.details["steps"] == [{"description": "compared", "conclusion": "value 0.75"}]
    assert result.details["judge_model"] == "o4-mini-2025-04-16"


def test_responses_api_carries_the_schema_in_text_format(fake_openai):
    fake_openai.responder = answer_responder
    (result,) = grade(fake_openai, CONFIG, ["0.25"], api="responses")
    body = fake_openai.requests[0].body
    fmt = body["text"]["format"]
    assert fmt["type"] == "json_schema" and fmt["name"] == "score_model_result" and fmt["strict"] is True
    assert body["reasoning"] == {"effort": "medium"} and body["max_output_tokens"] == 2048
    assert result.score == 0.25 and result.passed is False


@pytest.mark.parametrize("raw,expected,clipped", [("15", 10.0, True), ("-3", 0.0, True), ("7.5", 7.5, False),
                                                  ("10", 10.0, False)])
def test_result_is_clipped_to_range(fake_openai, raw, expected, clipped):
    fake_openai.responder = answer_responder
    config = {**CONFIG, "range": [0, 10], "pass_threshold": 7}
    (result,) = grade(fake_openai, config, [raw])
    assert result.error is None and result.score == expected
    assert result.details["result"] == float(raw)
    assert result.details.get("clipped", False) is clipped
    assert result.passed is (expected >= 7)


@pytest.mark.parametrize("payload,why", [
    ("RAW:I would say seven", "not a JSON object"),
    ('RAW:{"result": "seven", "steps": []}', "not a finite number"),
    ('RAW:{"result": null, "steps": []}', "not a finite number"),
    ('RAW:{"result": true, "steps": []}', "not a finite number"),
    ('RAW:{"result": NaN, "steps": []}', "not a finite number"),
    ('RAW:{"steps": []}', "not a finite number"),
    ("RAW:[0.5]", "not a JSON object"),
])
def test_unparsable_or_non_numeric_answers_are_parse_errors_scoring_zero(fake_openai, payload, why):
    fake_openai.responder = answer_responder
    (result,) = grade(fake_openai, CONFIG, [payload])
    assert result.score == 0.0 and result.error is not None
    assert result.error.type == MODEL_PARSE and why in result.error.message
    assert result.details["raw_answer"] == payload[4:]


def test_lenient_json_in_a_code_fence_is_accepted(fake_openai):
    fake_openai.responder = answer_responder
    (result,) = grade(fake_openai, CONFIG, ['RAW:```json\n{"result": 0.6, "steps": []}\n```'])
    assert result.error is None and result.score == 0.6


def test_refusal_and_server_failure(fake_openai):
    fake_openai.responder = answer_responder
    refused, failed, fine = grade(fake_openai, CONFIG, ["REFUSE", "FAIL", "1"])
    assert refused.error.type == MODEL_REFUSAL and refused.score == 0 and "will not grade" in refused.error.message
    assert failed.error.type == MODEL_SERVER and failed.score == 0 and "500" in failed.error.message
    assert fine.score == 1.0 and fine.error is None
    fails = [r for r in fake_openai.requests if r.last_user_text().endswith("FAIL")]
    assert len(fails) == 3  # one try + 2 retries


def test_template_error_is_an_invalid_variable_and_sends_nothing(fake_openai):
    config = {**CONFIG, "input": [{"role": "user", "content": "{{ item.missing }} {{ sample.output_text }}"}]}
    (result,) = grade(fake_openai, config, ["1"])
    assert result.error.type == INVALID_VARIABLE and "missing" in result.error.message
    assert fake_openai.requests == []


def test_without_a_judge_every_pair_is_a_counted_error():
    with GradingEngine(parse_config(CONFIG)) as engine:
        results = engine.grade_batch([(make_sample("1"), {"reference_answer": "1"})] * 2)
    assert [r.error.type for r in results] == [MODEL_SERVER, MODEL_SERVER]


def test_content_parts_and_developer_role_are_sent_in_chat_form(fake_openai):
    fake_openai.responder = lambda r: json.dumps({"result": 1, "steps": []})
    config = {**CONFIG, "input": [
        {"role": "developer", "content": {"type": "input_text", "text": "Rubric for {{ item.id }}"}, "type": "message"},
        {"role": "user", "content": [{"type": "input_text", "text": "Answer: "},
                                     {"type": "input_text", "text": "{{ sample.output_text }}"}]},
    ]}
    grade(fake_openai, config, ["hello"])
    assert fake_openai.requests[0].body["messages"] == [
        {"role": "developer", "content": "Rubric for i1"}, {"role": "user", "content": "Answer: hello"}]


def test_cache_hit_on_rerun_and_steps_on_the_record(fake_openai, tmp_path):
    fake_openai.responder = answer_responder
    cache = tmp_path / "judge.jsonl"
    first = grade(fake_openai, CONFIG, ["0.5", "1"], cache_path=cache)
    again = grade(fake_openai, CONFIG, ["0.5", "1"], cache_path=cache)
    assert len(fake_openai.requests) == 2
    assert [r.score for r in again] == [r.score for r in first] == [0.5, 1.0]
    assert again[0].details["judge_cached"] is True and first[0].details["judge_cached"] is False
    rec = apply_grade(make_record(run_id="r", model_label="base", model="m", item_id="i1", epoch=1,
                                  output_text="0.5"), again[0])
    assert rec.grade_details["steps"][0]["conclusion"] == "value 0.5"


def test_changed_output_is_a_new_call(fake_openai, tmp_path):
    fake_openai.responder = answer_responder
    cache = tmp_path / "judge.jsonl"
    grade(fake_openai, CONFIG, ["0.5"], cache_path=cache)
    grade(fake_openai, CONFIG, ["0.6"], cache_path=cache)
    assert len(fake_openai.requests) == 2


def test_works_as_a_multi_sub_grader_next_to_label_model(fake_openai):
    def responder(request):
        schema_name = request.body["response_format"]["json_schema"]["name"]
        if schema_name == "label_model_result":
            return json.dumps({"steps": [], "label": "good"})
        return json.dumps({"steps": [], "result": 0.4})

    fake_openai.responder = responder
    config = {
        "type": "multi", "name": "both", "calculate_output": "0.5 * s + 0.5 * l",
        "graders": {
            "s": CONFIG,
            "l": {"type": "label_model", "name": "l", "model": "gpt-4o-2024-08-06",
                  "input": [{"role": "user", "content": "{{ sample.output_text }}"}],
                  "labels": ["good", "bad"], "passing_labels": ["good"]},
        },
    }
    (result,) = grade(fake_openai, config, ["anything"])
    assert result.error is None
    assert result.sub_scores == {"s": 0.4, "l": 1.0}
    assert result.score == pytest.approx(0.7)
    assert len(fake_openai.requests) == 2


def test_grade_pairs_with_a_judge_client(fake_openai):
    from rfteval.graders.score_model import grade_pairs

    fake_openai.responder = answer_responder
    with Judge(OpenAIProvider(fake_openai.base_url), retry_policy=FAST) as judge:
        (result,) = grade_pairs(parse_config(CONFIG), [(make_sample("0.3"), {"reference_answer": "x"})], judge)
    assert result.score == 0.3 and re.search("Reference: x", fake_openai.requests[0].last_user_text())


@pytest.mark.slow
def test_accordance_rubric_through_the_scripted_local_judge():
    """The demo's stand-in judge (scripts/local_judge.py, not a model) on the Accordance score_model grader."""
    import sys

    root = REPO
    sys.path.insert(0, str(root / "scripts"))
    import local_judge

    server = local_judge.serve(0)
    try:
        config = json.loads((root / "graders/accordance.json").read_text())
        item = {"id": "acc-1", "question": "Jane, a W-2 employee, works from home. Can she deduct her home office?",
                "rubric": "- (4 pts) Employee home office deductions are suspended for 2018-2025 (TCJA).\n"
                          "- (3 pts) The simplified method is $5 per square foot, up to 300 square feet.\n"
                          "- (3 pts) Concludes her deduction is $0.",
                "reference_answer": "No: suspended for 2018-2025; $0."}
        good = "Suspended for employees for 2018-2025 under the TCJA, so $0. (Simplified: $5 per sq ft, max 300.)"
        partial = "Under the TCJA employee deductions are suspended for 2018-2025."
        bad = "She can deduct a share of her rent."
        url = server.base_url
        with Judge(OpenAIProvider(url), retry_policy=FAST) as judge, \
                GradingEngine(parse_config(config), judge=judge) as engine:
            results = engine.grade_batch([(make_sample(t), item) for t in (good, partial, bad)])
    finally:
        server.stop()
    assert [r.error for r in results] == [None, None, None]
    assert [r.score for r in results] == [1.0, 0.4, 0.0]
    assert "scripted stand-in, not a model" in results[0].details["steps"][-1]["description"]
    assert results[1].details["steps"][0]["conclusion"].startswith("4/4 pts")


@pytest.mark.parametrize("patch, field", [
    ({"sampling_params": {"reasoning_effort": "extreme"}}, "reasoning_effort"),
    ({"sampling_params": {"temperature": "0.2"}}, "temperature"),
    ({"input": [{"role": "user", "content": [{"type": "input_video", "url": "x"}]}]}, "content"),
])
def test_fields_outside_openais_schema_are_refused(patch, field):
    from rfteval.errors import InputError
    from rfteval.graders.loader import parse_config

    grader = {"type": "score_model", "name": "j", "model": "gpt-4.1-mini-2025-04-14",
              "input": [{"role": "user", "content": "Score {{ sample.output_text }}"}], **patch}
    with pytest.raises(InputError, match=field):
        parse_config(grader)


def test_openais_content_parts_and_efforts_are_accepted():
    from rfteval.graders.loader import parse_config

    parts = [{"type": "input_text", "text": "Score {{ sample.output_text }}"},
             {"type": "input_image", "image_url": "{{ item.img }}"}]
    config = parse_config({"type": "score_model", "name": "j", "model": "m", "input": [{"role": "user",
                                                                                       "content": parts}],
                           "sampling_params": {"reasoning_effort": "minimal"}})
    assert config.sampling_params.reasoning_effort == "minimal"


# ---- truncated answers (issue 27) --------------------------------------------------------------------------------

STEPS = [{"description": "Check the stated value against the reference answer", "conclusion": "They agree"},
         {"description": "Consider whether the answer is complete and unambiguous", "conclusion": "It is"}]


def schema_order_responder(request):
    """A judge writing its JSON in the order the request's schema lists the keys (as llama.cpp's grammar and
    OpenAI's structured outputs do); the fake cuts it at the request's max_tokens (honour_max_tokens)."""
    rf = request.body.get("response_format") or {}
    keys = list(((rf.get("json_schema") or {}).get("schema") or rf.get("schema") or {}).get("properties") or {})
    answer = {"result": 0.75, "steps": STEPS}
    return json.dumps({k: answer[k] for k in keys})


@pytest.mark.parametrize("limit, outcome", [(16, "truncated, scored"), (6, "cut before the result"), (200, "whole")])
def test_an_answer_cut_off_at_the_output_limit_is_scored_when_its_result_came_first(fake_openai, limit, outcome):
    """The schema puts `result` first (OpenAI's own order): an answer that runs into max_completions_tokens has
    committed to its number before the steps are cut, and is scored, marked truncated. Cut before the number, it
    is a model_grader_truncated_error naming max_completions_tokens, not "not a JSON object"."""
    from rfteval.graders.base import MODEL_TRUNCATED

    fake_openai.responder = schema_order_responder
    fake_openai.honour_max_tokens = True
    config = {**CONFIG, "sampling_params": {"max_completions_tokens": limit}}
    (result,) = grade(fake_openai, config, ["x"])
    if outcome == "cut before the result":
        assert result.error is not None and result.error.type == MODEL_TRUNCATED and result.score == 0
        assert f"raise max_completions_tokens in the grader's sampling_params (now {limit})" in result.error.message
        assert "finish_reason length" in result.error.message and result.details["raw_answer"]
    else:
        assert result.error is None and result.score == 0.75
        assert bool(result.details.get("truncated")) is (outcome == "truncated, scored")


def test_a_steps_first_answer_cut_off_is_a_truncated_error_and_a_context_refusal_too(fake_openai):
    from rfteval.graders.base import MODEL_TRUNCATED

    cut = json.dumps({"steps": STEPS, "result": 0.75})[:60]
    fake_openai.queue(Reply(text=cut, finish_reason="length"))
    (result,) = grade(fake_openai, {**CONFIG, "sampling_params": {}}, ["a"])
    assert result.error.type == MODEL_TRUNCATED and "raise the server's context size" in result.error.message
    # llama-cpp-python's 400 for a prompt past its context (llama_cpp/server/errors.py's context_length_exceeded)
    fake_openai.context_tokens = 10
    (result,) = grade(fake_openai, CONFIG, ["b" * 5])
    assert result.error.type == MODEL_TRUNCATED and "exceed the server's context" in result.error.message
    assert "maximum context length is 10 tokens" in result.error.message
