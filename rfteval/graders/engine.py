"""Build a grader from its config and grade (sample, item) pairs with it."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING

from rfteval.graders.base import REGISTRY, BuildContext, GradeOptions, Grader, GraderConfig, GradeResult, Pair

if TYPE_CHECKING:
    from rfteval.data.json_types import JSONObject
    from rfteval.data.sample import Sample
    from rfteval.providers.judge import JudgeClient
    from rfteval.sandbox import WorkerPool


def build_grader(config: GraderConfig, ctx: BuildContext) -> Grader:
    """The grader for a config (every built-in type registered itself when rfteval.graders was imported)."""
    return REGISTRY[config.type].build(config, ctx)


def python_pool(options: GradeOptions) -> WorkerPool:
    """The python sandbox's pool for these options (their sandbox policy), started on the first grade."""
    from rfteval.sandbox import WorkerPool

    return WorkerPool(workers=options.python_workers, batch_size=options.python_batch_size, policy=options.sandbox)


class GradingEngine:
    """A grader ready to run, owning its resources (the python worker pool); use as a context manager."""

    def __init__(self, config: GraderConfig, options: GradeOptions | None = None, judge: JudgeClient | None = None):
        self.config = config
        self.ctx = BuildContext(options or GradeOptions(), judge, pool_factory=python_pool)
        self.grader = build_grader(config, self.ctx)

    def grade_batch(self, pairs: Sequence[Pair], units: Sequence[Hashable] | None = None) -> list[GradeResult]:
        """One result per pair, in order; `units`: one key per pair, a python grader's grading units (use (model
        label, item id)); None: every sample is graded in a process of its own."""
        if not pairs:
            return []
        return self.grader.grade_batch(pairs, units)

    def grade(self, sample: Sample, item: JSONObject) -> GradeResult:
        return self.grade_batch([(sample, item)])[0]

    def close(self) -> None:
        self.ctx.close()

    def __enter__(self) -> GradingEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
