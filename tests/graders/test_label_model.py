"""label_model through a scripted judge: the enum schema, passing labels, labels outside `labels`."""

from __future__ import annotations

import json

import pytest

from rfteval.data.sample import make_sample
from rfteval.errors import InputError
from rfteval.graders import GradingEngine, parse_config
from rfteval.graders.base import MODEL_PARSE, MODEL_REFUSAL
from rfteval.providers.judge import Judge
from rfteval.providers.openai_provider import OpenAIProvider
from rfteval.providers.retry import RetryPolicy
from tests.support import REPO
from tests.support.fake_openai import Reply

CONFIG = {
    "type": "label_model", "name": "sentiment", "model": "gpt-4o-2024-08-06",
    "input": [{"role": "developer", "content": "Classify as positive, neutral or negative"},
              {"role": "user", "content": "Statement: {{ sample.output_text }}"}],
    "labels": ["positive", "neutral", "negative"], "passing_labels": ["positive", "neutral"],
}


def responder(request):
    """The statement is the label to pick, or a raw payload after 'RAW:'."""
    statement = request.last_user_text().removeprefix("Statement: ")
    if statement.startswith("RAW:"):
        return statement[4:]
    if statement == "REFUSE":
        return Reply(refusal="no")
    return json.dumps({"steps": [{"description": "read it", "conclusion": statement}], "label": statement})


def grade(server, outputs, config=CONFIG):
    server.responder = responder
    with Judge(OpenAIProvider(server.base_url), retry_policy=RetryPolicy(max_retries=1, base_s=0.001)) as judge, \
            GradingEngine(parse_config(config), judge=judge) as engine:
        return engine.grade_batch([(make_sample(o), {"id": "x"}) for o in outputs])


def test_request_forces_one_of_the_labels(fake_openai):
    grade(fake_openai, ["positive"])
    rf = fake_openai.requests[0].body["response_format"]
    assert rf["type"] == "json_schema" and rf["json_schema"]["strict"] is True
    schema = rf["json_schema"]["schema"]
    assert schema["properties"]["label"] == {"type": "string", "enum": ["positive", "neutral", "negative"]}
    assert sorted(schema["required"]) == ["label", "steps"] and schema["additionalProperties"] is False
    assert fake_openai.requests[0].body["messages"][0] == {
        "role": "developer", "content": "Classify as positive, neutral or negative"}


def test_score_is_one_for_passing_labels_and_the_label_is_recorded(fake_openai):
    pos, neu, neg = grade(fake_openai, ["positive", "neutral", "negative"])
    assert (pos.score, pos.passed, pos.details["label"]) == (1.0, True, "positive")
    assert (neu.score, neu.passed, neu.details["label"]) == (1.0, True, "neutral")
    assert (neg.score, neg.passed, neg.details["label"]) == (0.0, False, "negative")
    assert neg.error is None and neg.details["steps"] == [{"description": "read it", "conclusion": "negative"}]


@pytest.mark.parametrize("payload,why", [
    ('{"steps": [], "label": "ecstatic"}', "not one of"),
    ('{"steps": [], "label": "Positive"}', "not one of"),  # labels are exact
    ('{"steps": []}', "not one of"),
    ('{"steps": [], "label": 1}', "not one of"),
    ("positive", "not a JSON object"),
])
def test_label_outside_labels_is_a_parse_error(fake_openai, payload, why):
    (result,) = grade(fake_openai, ["RAW:" + payload])
    assert result.score == 0.0 and result.error.type == MODEL_PARSE and why in result.error.message
    assert result.details["raw_answer"] == payload
    assert "label" not in result.details


def test_refusal(fake_openai):
    (result,) = grade(fake_openai, ["REFUSE"])
    assert result.error.type == MODEL_REFUSAL and result.score == 0


def test_passing_labels_must_be_labels():
    with pytest.raises(InputError, match="passing_labels"):
        parse_config({**CONFIG, "passing_labels": ["great"]})


def test_scripted_local_judge_picks_labels_best_first():
    """scripts/local_judge.py (a stand-in, not a model): coverage 1 → the first label, 0 → the last."""
    import sys

    sys.path.insert(0, str(REPO / "scripts"))
    import local_judge

    def body(answer: str) -> dict:
        return {"messages": [{"role": "developer", "content": "Check:\n- Mentions \"refund\".\n- Cites [KB-1]."},
                             {"role": "user", "content": f"Response:\n{answer}"}],
                "response_format": {"type": "json_schema", "json_schema": {
                    "name": "label_model_result",
                    "schema": {"properties": {"label": {"type": "string", "enum": ["good", "ok", "bad"]}}}}}}

    assert local_judge.answer(body("A refund is due [KB-1]."))["label"] == "good"
    assert local_judge.answer(body("A refund is due."))["label"] == "ok"
    assert local_judge.answer(body("No idea."))["label"] == "bad"
    assert "not a model" in local_judge.answer(body("x"))["steps"][-1]["description"]


def test_a_cut_off_answer_keeps_its_label_when_it_came_first_else_is_a_truncated_error(fake_openai):
    """Issue 27: the label comes first in the schema, so an answer cut off by the output limit has it whole."""
    from rfteval.graders.base import MODEL_TRUNCATED

    grade(fake_openai, ["positive"])
    assert list(fake_openai.requests[0].body["response_format"]["json_schema"]["schema"]["properties"]) == [
        "label", "steps"]
    cut_answers = {"a": '{"label": "negative", "steps": [{"descr', "b": '{"label": "neg',
                   "c": '{"label": "angry", "steps": ['}
    with Judge(OpenAIProvider(fake_openai.base_url), retry_policy=RetryPolicy(max_retries=1, base_s=0.001)) as judge, \
            GradingEngine(parse_config(CONFIG), judge=judge) as engine:
        fake_openai.responder = lambda req: Reply(text=cut_answers[req.last_user_text().removeprefix("Statement: ")],
                                                  finish_reason="length")
        kept, cut, unknown = engine.grade_batch([(make_sample(o), {"id": "x"}) for o in "abc"])
    assert kept.error is None and kept.score == 0.0 and kept.details["label"] == "negative"
    assert kept.details["truncated"] is True
    assert cut.error.type == MODEL_TRUNCATED and "finish_reason length" in cut.error.message
    assert unknown.error.type == MODEL_TRUNCATED  # a label outside `labels` is not read from a cut answer
