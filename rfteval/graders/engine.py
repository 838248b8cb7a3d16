"""Build a grader from its config and grade (sample, item) pairs with it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rfteval.graders.base import REGISTRY, BuildContext, GradeOptions, GradeResult, Grader, GraderConfig, Pair


def build_grader(config: GraderConfig, ctx: BuildContext) -> Grader:
    import rfteval.graders.registry  # noqa: F401

    return REGISTRY[config.type].build(config, ctx)


class GradingEngine:
    """A grader ready to run, owning its resources (the python worker pool); use as a context manager."""

    def __init__(self, config: GraderConfig, options: GradeOptions | None = None, judge: Any = None):
        self.config = config
        self.ctx = BuildContext(options or GradeOptions(), judge)
        self.grader = build_grader(config, self.ctx)

    def grade_batch(self, pairs: Sequence[Pair]) -> list[GradeResult]:
        if not pairs:
            return []
        return self.grader.grade_batch(pairs)

    def grade(self, sample: dict[str, Any], item: dict[str, Any]) -> GradeResult:
        return self.grade_batch([(sample, item)])[0]

    def close(self) -> None:
        self.ctx.close()

    def __enter__(self) -> GradingEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
