"""What the model graders (score_model, label_model) share: input messages, sampling params, the judged grader."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, field_validator

from rfteval.graders.base import MODEL_SERVER, BuildContext, GradeResult, Pair
from rfteval.graders.template import check_template


# The content parts a model grader's input takes (openai-python: types/graders/score_model_grader_param.py).
CONTENT_PART_TYPES = ("input_text", "output_text", "input_image", "input_audio")
# OpenAI's ReasoningEffort (openai-python: types/shared/reasoning_effort.py).
REASONING_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh", "max")


class InputMessage(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    role: Literal["user", "assistant", "system", "developer"]
    content: str | dict[str, Any] | list[Any]
    type: Literal["message"] | None = None

    @field_validator("content")
    @classmethod
    def _templates_parse(cls, value: Any) -> Any:
        for part in value if isinstance(value, list) else [value]:
            if isinstance(part, dict) and part.get("type") not in CONTENT_PART_TYPES:
                raise ValueError(f"a content part's type must be one of {', '.join(CONTENT_PART_TYPES)}, got "
                                 f"{part.get('type')!r}")

        def walk(v: Any) -> None:
            if isinstance(v, str):
                check_template(v)
            elif isinstance(v, list):
                for x in v:
                    walk(x)
            elif isinstance(v, dict):
                for x in v.values():
                    walk(x)

        walk(value)
        return value


class SamplingParams(BaseModel):
    """The grader's sampling params; both spellings of the token limit exist in OpenAI's material."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
    max_completions_tokens: int | None = None
    max_completion_tokens: int | None = None
    reasoning_effort: Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"] | None = None
    seed: int | None = None
    temperature: float | None = None
    top_p: float | None = None

    @property
    def max_tokens(self) -> int | None:
        return self.max_completions_tokens or self.max_completion_tokens


class JudgedGrader:
    """A grader whose scores come from the judge client (`ctx.judge`); with none configured, every sample is a
    clear error rather than a silent 0."""

    grade_pairs: Callable[[Any, Sequence[Pair], Any], list[GradeResult]]

    def __init__(self, config: Any, ctx: BuildContext):
        self.config = config
        self.ctx = ctx

    def grade_batch(self, pairs: Sequence[Pair]) -> list[GradeResult]:
        if self.ctx.judge is None:
            msg = f"{self.config.type} needs a judge endpoint; none is configured for this command"
            return [GradeResult.failed(MODEL_SERVER, msg) for _ in pairs]
        return type(self).grade_pairs(self.config, pairs, self.ctx.judge)


def judge_request(config: Any, sample: dict[str, Any], item: dict[str, Any], sampling_params: Any,
                  response_format: dict[str, Any]) -> Any:
    """The judge request for one (sample, item): the config's input messages rendered, or the
    invalid_variable_error its templates raise (no call is made for it)."""
    from rfteval.graders.base import INVALID_VARIABLE
    from rfteval.graders.template import TemplateError, render_deep
    from rfteval.judge import judge_messages, judge_sampling
    from rfteval.providers.base import GenerationRequest

    raw = [m.model_dump(exclude_none=True) for m in config.input]
    try:
        rendered = render_deep(raw, item, sample)
    except TemplateError as exc:
        return GradeResult.failed(INVALID_VARIABLE, str(exc))
    return GenerationRequest(model=config.model, messages=judge_messages(rendered),
                             sampling=judge_sampling(sampling_params, response_format),
                             item_id=str(item.get("id", "")))
