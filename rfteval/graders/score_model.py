"""`score_model`: a judge model returns {"result": number, "steps": [...]}, clipped to `range`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import Field, field_validator

from rfteval.graders.base import MODEL_SERVER, BuildContext, GradeResult, GraderConfig, Pair, register
from rfteval.graders.judge_config import InputMessage, SamplingParams


class ScoreModelConfig(GraderConfig):
    type: Literal["score_model"]
    model: str
    input: list[InputMessage] = Field(min_length=1)
    range: list[float] = Field(default_factory=lambda: [0.0, 1.0])
    sampling_params: SamplingParams | None = None
    pass_threshold: float | None = None

    @field_validator("range")
    @classmethod
    def _range_ok(cls, value: list[float]) -> list[float]:
        if len(value) != 2 or not value[0] < value[1]:
            raise ValueError("range must be [low, high] with low < high")
        return value


class ScoreModelGrader:
    """Needs a judge endpoint (set by `rfteval run` from [judge] or the run's endpoint)."""

    def __init__(self, config: ScoreModelConfig, ctx: BuildContext):
        self.config = config
        self.ctx = ctx

    def grade_batch(self, pairs: Sequence[Pair]) -> list[GradeResult]:
        if self.ctx.judge is None:
            msg = "score_model needs a judge endpoint; none is configured for this command"
            return [GradeResult.failed(MODEL_SERVER, msg) for _ in pairs]
        return self.ctx.judge.score_batch(self.config, pairs)


@register("score_model", ScoreModelConfig, "a judge model scores the output within `range`")
def build(config: ScoreModelConfig, ctx: BuildContext) -> ScoreModelGrader:
    return ScoreModelGrader(config, ctx)
