"""`label_model`: a judge model picks one of `labels`; score 1 when it is in `passing_labels`, else 0.

The label is forced through structured outputs (an enum of `labels`), with reasoning steps after it; a label
outside `labels` (a server without strict mode) is a counted `model_grader_parse_error`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

from pydantic import Field, model_validator

from rfteval.graders.base import (
    MODEL_PARSE,
    BuildContext,
    GradeResult,
    Pair,
    register,
)
from rfteval.graders.judged import (
    STEPS_SCHEMA,
    JudgedGrader,
    JudgePromptConfig,
    answer_details,
    clean_steps,
    grade_with_judge,
    judge_request,
    leading_value,
    parse_json_answer,
    truncated,
)
from rfteval.providers.base import Generation, GenerationRequest

if TYPE_CHECKING:
    from rfteval.data.json_types import JSONObject
    from rfteval.data.sample import Sample
    from rfteval.providers.judge import JudgeClient


class LabelModelConfig(JudgePromptConfig):
    type: Literal["label_model"]
    always_gives_verdict = True  # passed: the label is one of passing_labels
    labels: list[str] = Field(min_length=1)
    passing_labels: list[str] = Field(min_length=1)

    @model_validator(mode="after")
    def _passing_subset(self) -> LabelModelConfig:
        extra = [x for x in self.passing_labels if x not in self.labels]
        if extra:
            raise ValueError(f"passing_labels {extra} are not in labels")
        return self

    def score_range(self) -> tuple[float, float, str]:
        return 0.0, 1.0, "label_model scores 0 or 1"


def response_format(labels: Sequence[str]) -> JSONObject:
    schema: JSONObject = {
        "type": "object",
        # the label first, as score_model's result: a cut-off answer has its label whole
        "properties": {"label": {"type": "string", "enum": list(labels)}, "steps": STEPS_SCHEMA},
        "required": ["label", "steps"],
        "additionalProperties": False,
    }
    return {"name": "label_model_result", "schema": schema, "strict": True}


def build_request(
    config: LabelModelConfig, sample: Sample, item: JSONObject
) -> GenerationRequest | GradeResult:
    """The judge request for one pair, or the invalid_variable_error its templates raise."""
    return judge_request(config, sample, item, None, response_format(config.labels))


def parse_answer(config: LabelModelConfig, request: GenerationRequest, answer: Generation) -> GradeResult:
    details = answer_details(request, answer)
    obj = parse_json_answer(answer.output_text)
    if not isinstance(obj, dict) and answer.finish_reason == "length":
        lead = leading_value(answer.output_text, "label")
        if not isinstance(lead, str) or lead not in config.labels:
            return truncated(request, answer, details)
        obj = {"label": lead}  # the label was whole before the steps were cut off: scored, marked truncated
        details["truncated"] = True
    label = obj.get("label") if isinstance(obj, dict) else None
    if isinstance(obj, dict):
        details["steps"] = clean_steps(obj.get("steps"))
    if not isinstance(label, str) or label not in config.labels:
        details["raw_answer"] = answer.output_text[:2000]
        what = f"label {label!r:.100} is not one of {config.labels}" if isinstance(obj, dict) else (
            f"judge answer is not a JSON object: {answer.output_text[:200]!r}")
        return GradeResult.failed(MODEL_PARSE, what, details=details)
    details["label"] = label
    passed = label in config.passing_labels
    return GradeResult(1.0 if passed else 0.0, passed=passed, details=details)


def grade_pairs(config: LabelModelConfig, pairs: Sequence[Pair], judge: JudgeClient) -> list[GradeResult]:
    requests = [build_request(config, sample, item) for sample, item in pairs]
    return grade_with_judge(judge, requests, lambda req, ans: parse_answer(config, req, ans))


class LabelModelGrader(JudgedGrader[LabelModelConfig]):
    grade_pairs = staticmethod(grade_pairs)


@register("label_model", LabelModelConfig, "a judge model picks a label; 1 when it passes, else 0")
def build(config: LabelModelConfig, ctx: BuildContext) -> LabelModelGrader:
    return LabelModelGrader(config, ctx)
