"""`text_similarity`: a similarity metric between two rendered templates, a score in [0, 1].

The metrics live in metrics.py. `cosine` is accepted (the config is OpenAI's) but needs OpenAI embeddings, which
OpenAI offers for evals only, so grading with it is an error result, never a silent 0.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import AfterValidator

from rfteval.graders.base import (
    INVALID_VARIABLE,
    OTHER,
    BuildContext,
    GraderConfig,
    GradeResult,
    SampleGrader,
    register,
)
from rfteval.graders.template import TemplateError, check_template, compile_template

if TYPE_CHECKING:
    from rfteval.data.json_types import JSONObject
    from rfteval.data.sample import Sample

TemplateStr = Annotated[str, AfterValidator(check_template)]
MetricName = Literal[
    "cosine", "fuzzy_match", "bleu", "gleu", "meteor",
    "rouge_1", "rouge_2", "rouge_3", "rouge_4", "rouge_5", "rouge_l",
]

COSINE_MESSAGE = (
    "evaluation_metric 'cosine' compares text-embedding-3-large embeddings; OpenAI offers it in evals only and "
    "rfteval cannot compute it offline: use another metric, or a python grader that calls an embeddings endpoint"
)


class TextSimilarityConfig(GraderConfig):
    type: Literal["text_similarity"]
    input: TemplateStr
    reference: TemplateStr
    evaluation_metric: MetricName
    pass_threshold: float | None = None  # required by Evals, absent from RFT; only sets `passed`

    def score_range(self) -> tuple[float, float, str]:
        return 0.0, 1.0, "text_similarity metrics lie in [0, 1]"

    def compared_templates(self) -> tuple[str, str]:
        return self.input, self.reference


class TextSimilarity(SampleGrader):
    config: TextSimilarityConfig

    def __init__(self, config: TextSimilarityConfig):
        from rfteval.graders.metrics import METRICS

        self.config = config
        self._input = compile_template(config.input)
        self._reference = compile_template(config.reference)
        self._metric = METRICS.get(config.evaluation_metric)

    def grade_one(self, sample: Sample, item: JSONObject) -> GradeResult:
        if self._metric is None:
            return GradeResult.failed(OTHER, COSINE_MESSAGE)
        try:
            text = self._input.render(item, sample)
            reference = self._reference.render(item, sample)
        except TemplateError as exc:
            return GradeResult.failed(INVALID_VARIABLE, str(exc))
        try:
            score = self._metric(text, reference)
        except Exception as exc:  # a library bug on odd input is one failed sample, not a crashed run
            return GradeResult.failed(OTHER, f"{self.config.evaluation_metric} failed: {type(exc).__name__}: {exc}")
        threshold = self.config.pass_threshold
        return GradeResult(score, passed=None if threshold is None else score >= threshold)


@register("text_similarity", TextSimilarityConfig,
          "fuzzy_match, BLEU, GLEU, METEOR or ROUGE between two templates (0 to 1)")
def build(config: TextSimilarityConfig, ctx: BuildContext) -> TextSimilarity:
    return TextSimilarity(config)
