"""`score_model`: a judge model returns {"result": number, "steps": [...]}, clipped to `range`.

OpenAI's semantics (graders guide): the input messages are templated with item and sample, the judge answers
through structured outputs, the result is clipped to `range`, and a non-numeric answer scores 0 — here as a
counted `model_grader_parse_error`, with the raw answer kept so a person can see what the judge said.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

from pydantic import Field, field_validator

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
    SamplingParams,
    answer_details,
    clean_steps,
    finite_number,
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

# `result` comes first, as OpenAI's graders guide writes the format ({"result": float, "steps": [...]}): a judge
# whose answer runs into its output limit has committed to its number before the steps are cut off, so the answer
# is still read (measured on llama.cpp with SmolLM2 in docs/judges.md); steps first lost the score instead.
SCHEMA: JSONObject = {
    "type": "object",
    "properties": {"result": {"type": "number"}, "steps": STEPS_SCHEMA},
    "required": ["result", "steps"],
    "additionalProperties": False,
}
RESPONSE_FORMAT: JSONObject = {"name": "score_model_result", "schema": SCHEMA, "strict": True}


class ScoreModelConfig(JudgePromptConfig):
    type: Literal["score_model"]
    range: list[float] = Field(default_factory=lambda: [0.0, 1.0])
    sampling_params: SamplingParams | None = None
    pass_threshold: float | None = None

    def score_range(self) -> tuple[float, float, str]:
        low, high = self.range
        return float(low), float(high), "score_model range"

    @field_validator("range")
    @classmethod
    def _range_ok(cls, value: list[float]) -> list[float]:
        if len(value) != 2 or not value[0] < value[1]:
            raise ValueError("range must be [low, high] with low < high")
        return value


def build_request(
    config: ScoreModelConfig, sample: Sample, item: JSONObject
) -> GenerationRequest | GradeResult:
    """The judge request for one pair, or the invalid_variable_error its templates raise."""
    return judge_request(config, sample, item, config.sampling_params, RESPONSE_FORMAT)


def parse_answer(config: ScoreModelConfig, request: GenerationRequest, answer: Generation) -> GradeResult:
    """The judge's answer → a grade: result clipped to range; anything not a finite number is a parse error."""
    details = answer_details(request, answer)
    low, high = config.range
    # the grader's range on the record, so record files read without their run directory keep it (compare)
    details["score_range"] = [float(low), float(high)]
    obj = parse_json_answer(answer.output_text)
    if not isinstance(obj, dict) and answer.finish_reason == "length":
        lead = finite_number(leading_value(answer.output_text, "result"))
        if lead is None:
            return truncated(request, answer, details)
        obj = {"result": lead}  # the number was whole before the steps were cut off: scored, marked truncated
        details["truncated"] = True
    if not isinstance(obj, dict):
        details["raw_answer"] = answer.output_text[:2000]
        return GradeResult.failed(MODEL_PARSE, f"judge answer is not a JSON object: {answer.output_text[:200]!r}",
                                  details=details)
    result = finite_number(obj.get("result"))
    details["steps"] = clean_steps(obj.get("steps"))
    if result is None:
        details["raw_answer"] = answer.output_text[:2000]
        return GradeResult.failed(MODEL_PARSE, f"judge result is not a finite number: {obj.get('result')!r:.100}",
                                  details=details)
    score = min(max(result, low), high)
    details["result"] = result
    if score != result:
        details["clipped"] = True
    passed = None if config.pass_threshold is None else score >= config.pass_threshold
    return GradeResult(score, passed=passed, details=details)


def grade_pairs(config: ScoreModelConfig, pairs: Sequence[Pair], judge: JudgeClient) -> list[GradeResult]:
    requests = [build_request(config, sample, item) for sample, item in pairs]
    return grade_with_judge(judge, requests, lambda req, ans: parse_answer(config, req, ans))


class ScoreModelGrader(JudgedGrader[ScoreModelConfig]):
    """Needs a judge endpoint (set by `rfteval run` from [judge] or the run's endpoint)."""

    grade_pairs = staticmethod(grade_pairs)


@register("score_model", ScoreModelConfig, "a judge model scores the output within `range`")
def build(config: ScoreModelConfig, ctx: BuildContext) -> ScoreModelGrader:
    return ScoreModelGrader(config, ctx)
