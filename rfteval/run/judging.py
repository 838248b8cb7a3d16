"""A run's judge, for model graders: opened with its cache in the run directory, capped (--max-judge-calls,
--max-judge-cost), its retries shown and its refusal stopping the run, its usage priced; and the key the run's
grades are filed under, which names the judge (another judge is another grader)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from rfteval.data.reasoning import DEFAULT_MODE, DEFAULT_TAGS
from rfteval.data.rundir import JUDGE_CACHE
from rfteval.errors import InputError
from rfteval.providers.pricing import Price
from rfteval.run.monitor import RunMonitor
from rfteval.run.spec import RunSpec, config_hash
from rfteval.run.summary import RunSummary
from rfteval.run.turns import FatalRunError, ServerGone, retry_kind

if TYPE_CHECKING:
    from rfteval.graders.base import GraderConfig
    from rfteval.providers.judge import Judge, JudgeBudget, JudgeClient
    from rfteval.run.invocation import RunOptions


def judge_budget(spec: RunSpec, grader: GraderConfig, opts: RunOptions, monitor: RunMonitor) -> JudgeBudget | None:
    """The judge's cap for this invocation (max_judge_calls, max_judge_cost), checked before anything is sent or
    written: a cost cap needs every judge model's price, and --batch-judge's calls go out as batches, which no
    per-call cap can stop. None when there is no cap, or no judge to cap (said in a note)."""
    if spec.max_judge_calls is None and spec.max_judge_cost is None:
        return None
    from rfteval.providers.judge import JudgeBudget
    from rfteval.providers.pricing import find_price, price_table
    from rfteval.run.preflight import judge_models

    flag = "--max-judge-calls" if spec.max_judge_calls is not None else "--max-judge-cost"
    if not grader.needs_judge:
        monitor.message(f"note: {flag}: the grader calls no judge, there is nothing to cap")
        return None
    if opts.batch_judge:
        raise InputError("cannot be combined with --batch-judge (its calls go out as batches, which a cap on calls "
                         "cannot stop): pick one", field=flag)
    prices = price_table(spec.pricing)
    if spec.max_judge_cost is not None:
        for model in judge_models(grader, spec.judge.model):
            if find_price(model, prices) is None:
                raise InputError(f"no price for the judge model {model!r}: give one in the spec ([pricing.\"{model}\"] "
                                 "input = ..., output = ..., USD per million tokens)", field="--max-judge-cost")
    return JudgeBudget(spec.max_judge_calls, spec.max_judge_cost, prices)


def grades_key(grader: GraderConfig, grader_hash: str, spec: RunSpec, labels: list[str]) -> str:
    """The key stored grades are filed under: the grader config's hash, and for model graders what else decides
    the grade. The judge (endpoint, API, --judge-model): another judge is another grader. For a group judge also
    the grouping (epochs, and the models ranked together with --group-models), since its scores are relative to
    the group: a re-run with other groups re-judges instead of reusing scores from groups that no longer exist."""
    from rfteval.graders.base import needs_groups

    # --reasoning / --think-tags other than the default grade another text of the same stored response: filed
    # apart, so switching them on a resumed run re-grades (and re-sends nothing); the default keeps the plain key
    answers: dict[str, object] = {}  # only hashed (config_hash)
    if spec.reasoning != DEFAULT_MODE or spec.reasoning_tags != DEFAULT_TAGS:
        answers["reasoning"] = {"mode": spec.reasoning, "tags": [list(t) for t in spec.reasoning_tags]}
    if not grader.needs_judge:
        return config_hash({"grader": grader_hash, **answers}) if answers else grader_hash
    endpoint = spec.judge_endpoint()
    judge: dict[str, object] = {"base_url": endpoint.base_url, "api": endpoint.api, "model": endpoint.model}
    if endpoint.developer_as is not None:  # the judge reads its developer messages as system: another request
        judge["developer_as"] = endpoint.developer_as
    extra: dict[str, object] = {"judge": judge}
    if needs_groups(grader):
        extra["groups"] = {"epochs": spec.epochs, "models": sorted(labels) if spec.group_models else None}
    return config_hash({"grader": grader_hash, **extra, **answers})


def build_judge(spec: RunSpec, grader: GraderConfig, out_dir: Path, fresh: bool = False) -> Judge | None:
    """The judge client for model graders ([judge], else the run's endpoint), or None when the grader has none.
    Its cache lives in the run directory, so a re-run re-judges nothing it already judged."""
    if not grader.needs_judge:
        return None
    from rfteval.providers.judge import open_judge

    cache = out_dir / JUDGE_CACHE
    if fresh:
        cache.unlink(missing_ok=True)
    return open_judge(spec.judge_endpoint(), grader, cache)


def report_judge_retries(judge: JudgeClient | None, monitor: RunMonitor) -> Callable[[], None] | None:
    """Count the judge's retries on the progress display (as "judge"), besides any on_retry the judge has; the
    returned function puts the judge's own back (a judge passed in outlives this run)."""
    if judge is None:
        return None
    from rfteval.providers.retry import one_line

    before = judge.on_retry

    def on_retry(n: int, exc: BaseException, wait: float) -> None:
        if before is not None:
            before(n, exc, wait)
        monitor.retry("judge", retry_kind(exc), one_line(str(exc), 160))

    judge.on_retry = on_retry

    def unhook() -> None:
        judge.on_retry = before

    return unhook


def judge_fatal(judge: JudgeClient | None) -> FatalRunError | ServerGone | None:
    """The run-stopping error of a judge that was refused (401/403), does not know its model, is refused every
    request alike or cannot be reached (FatalRunError, exit 2), or that answered and then died (ServerGone: the run
    stops as for a dead model endpoint, exit 3, and the same command resumes), if any."""
    if judge is None or judge.fatal_error is None:
        return None
    error = judge.fatal_error
    model = judge.fatal_model or judge.model_override or "judge"
    if judge.gone:
        return ServerGone("judge", model, error, None)
    return FatalRunError("judge", model, error)


def add_judge_usage(summary: RunSummary, judge: JudgeClient | None, prices: dict[str, Price]) -> RunSummary:
    """Judge tokens and cost, per judge model, apart from the models' own."""
    if judge is None:
        return summary
    from rfteval.providers.pricing import cost_usd

    summary.judge = {model: {**u, "cost_usd": cost_usd(model, u.get("input_tokens") or 0,
                                                        u.get("output_tokens") or 0, prices)}
                        for model, u in judge.usage().items()}
    return summary
