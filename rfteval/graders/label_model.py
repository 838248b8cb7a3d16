"""`label_model`: a judge model picks one of `labels`; score 1 when it is in `passing_labels`, else 0."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import Field, model_validator

from rfteval.graders.base import MODEL_SERVER, BuildContext, GradeResult, GraderConfig, Pair, register
from rfteval.graders.judge_config import InputMessage


class LabelModelConfig(GraderConfig):
    type: Literal["label_model"]
    model: str
    input: list[InputMessage] = Field(min_length=1)
    labels: list[str] = Field(min_length=1)
    passing_labels: list[str] = Field(min_length=1)

    @model_validator(mode="after")
    def _passing_subset(self) -> LabelModelConfig:
        extra = [x for x in self.passing_labels if x not in self.labels]
        if extra:
            raise ValueError(f"passing_labels {extra} are not in labels")
        return self


class LabelModelGrader:
    def __init__(self, config: LabelModelConfig, ctx: BuildContext):
        self.config = config
        self.ctx = ctx

    def grade_batch(self, pairs: Sequence[Pair]) -> list[GradeResult]:
        if self.ctx.judge is None:
            msg = "label_model needs a judge endpoint; none is configured for this command"
            return [GradeResult.failed(MODEL_SERVER, msg) for _ in pairs]
        return self.ctx.judge.label_batch(self.config, pairs)


@register("label_model", LabelModelConfig, "a judge model picks a label; 1 when it passes, else 0")
def build(config: LabelModelConfig, ctx: BuildContext) -> LabelModelGrader:
    return LabelModelGrader(config, ctx)
