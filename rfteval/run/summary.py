"""Summaries: of `rfteval grade`'s records per model, and of a run (summary.json, with the run's one comparison).

Per-item means come first, then their mean (docs/statistics.md §2.9), in both."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, TypedDict

import msgspec

from rfteval.data import rundir
from rfteval.data.json_types import JSONField
from rfteval.data.sampling_check import NotSamplingJSON
from rfteval.errors import InputError

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    import pandas as pd

    from rfteval.compare.result import CompareResult
    from rfteval.compare.series import SeriesResult
    from rfteval.compare.sides import Side
    from rfteval.data.json_types import JSONInput, JSONMapping, JSONObject
    from rfteval.data.sampling_check import NotSampling
    from rfteval.graders.base import GraderConfig
    from rfteval.providers.pricing import Price
    from rfteval.run.results import JudgeCalls, LabelTotals
    from rfteval.run.spec import ModelRun, RunSpec


class GradeSummary(TypedDict):
    """One model's summary of `rfteval grade`'s records (its table and `--format json`)."""

    label: str
    mean: float
    se: float
    ci95: list[float]
    items: int  # items with at least one answer: an item whose every sample failed to generate has no mean
    records: int
    errors: int
    errors_by_type: dict[str, int]
    excluded: int  # generation failures, left out of the mean (the one error policy) and counted here
    truncated_in_reasoning: TruncationCount
    per_item: pd.DataFrame


def summarize_models(frame: pd.DataFrame, level: float = 0.95,
                     grader: GraderConfig | None = None) -> list[GradeSummary]:
    """One summary per model label of a record frame (rfteval.data.records.records_frame / read_records): mean of
    item means, its interval (cut to the grader's range, as compare cuts it), counts of items, records and errors.

    The error policy is compare's and readiness's (rfteval.data.records.effective_scores): a generation failure is
    left out of the mean and counted, a grading error or a refusal scores 0."""
    import pandas as pd

    from rfteval.compare.measure import infer_bounds
    from rfteval.compare.result import CompareOptions
    from rfteval.data.records import effective_scores, error_type_of
    from rfteval.stats import paired as stats

    out: list[GradeSummary] = []
    for label, df in frame.groupby("model_label", sort=False):
        rewards = effective_scores(df)
        used = rewards.notna()
        per_item = stats.item_stats(df.loc[used, ["item_id"]].assign(score=rewards[used]))
        means = per_item["mean"].to_numpy()
        side = stats.side_summary(means, level=level)
        bounds = infer_bounds(CompareOptions(), means, declared=[grader.score_range()] if grader else [])
        side["ci95"] = list(stats.clip_interval(side["ci95"][0], side["ci95"][1], bounds))
        errors = df["error"].map(error_type_of).dropna() if "error" in df else pd.Series([], dtype=object)
        out.append({
            "label": str(label), "mean": side["mean"], "se": side["se"], "ci95": side["ci95"],
            "items": int(len(per_item)), "records": int(len(df)), "errors": int(len(errors)),
            "errors_by_type": {str(k): int(v) for k, v in errors.value_counts().items()},
            "excluded": int((~used).sum()),
            # outputs cut off while thinking, as summary.json counts a run's (every output here is an answer)
            "truncated_in_reasoning": truncation(int(df["truncated_in_reasoning"].eq(True).sum())
                                                 if "truncated_in_reasoning" in df else 0, len(df)),
            "per_item": per_item,
        })
    return out


# ---------------------------------------------------------------- a run: summary.json


class _SummaryPart(msgspec.Struct, kw_only=True):
    """A typed part of summary.json. Fields are declared in the order the file has them; `to_dict` gives the
    file's content back exactly (keys in __optional__ are left out while unset, as they always were)."""

    __optional__: ClassVar[frozenset[str]] = frozenset()

    def to_dict(self) -> JSONObject:
        out = msgspec.to_builtins(self)
        return {k: v for k, v in out.items() if not (v is None and k in self.__optional__)}


class ErrorCounts(_SummaryPart, kw_only=True):
    total: int = 0
    by_type: dict[str, int] = {}  # "stage:type" → count


class TokenCounts(_SummaryPart, kw_only=True):
    input: int = 0
    output: int = 0
    reasoning: int | None = None  # None when no record's usage reported any (a server that never says is not 0)


class Truncation(_SummaryPart, kw_only=True):
    n: int = 0
    share: float = 0.0


class GraderInfo(_SummaryPart, kw_only=True):
    name: str = ""
    type: str = ""
    hash: str = ""


class AgentSummary(_SummaryPart, kw_only=True):
    """An agent run's model (rfteval.run.rollout): its rollouts' turns, tool calls and errors, and how they ended."""

    rollouts: int = 0  # finished rollouts (a failed one is a generation error, counted under errors)
    turns: int = 0  # model turns, over the rollouts
    tool_calls: int = 0  # calls the model made
    tool_errors: dict[str, int] = {}  # failed calls by the error's type
    stop_reasons: dict[str, int] = {}  # rollouts by how they ended (rfteval.data.rollout.STOP_REASONS)


class ModelSummary(_SummaryPart, kw_only=True):
    """One model's entry of summary.json's "models"."""

    model: str = ""
    provider: str = ""
    endpoint: str | None = None
    mean: float | None = None
    se: float | None = None
    ci95: list[float | None] = []
    items: int = 0
    records: int = 0
    cells: int = 0
    cached: int = 0
    errors: ErrorCounts = msgspec.field(default_factory=ErrorCounts)
    error_rate: float = 0.0
    tokens: TokenCounts = msgspec.field(default_factory=TokenCounts)
    cost_usd: float | None = None
    truncated_in_reasoning: Truncation | None = None
    pass_at_k: dict[str, float | None] | None = None  # "k" → pass@k, when the records could be read back
    pass_all_k: dict[str, float | None] | None = None
    agent: AgentSummary | None = None  # an agent run's rollouts

    __optional__ = frozenset({"pass_at_k", "pass_all_k", "agent"})


class RunSummary(_SummaryPart, kw_only=True):
    """summary.json: what `rfteval run` reports and a later command reads back, as attributes."""

    run_id: str = ""
    name: str | None = None
    complete: bool = False
    dataset: str = ""
    items: int = 0
    limit: int | None = None  # --limit: the run is over the first `items` of the dataset's `dataset_items`
    dataset_items: int | None = None
    epochs: int = 1
    grader: GraderInfo = msgspec.field(default_factory=GraderInfo)
    baseline: str = ""
    models: dict[str, ModelSummary] = {}
    deltas: dict[str, dict[str, JSONField]] = {}
    cells: int = 0
    missing: int = 0
    errors: int = 0
    error_rate: float = 0.0
    max_error_rate: int | float = 0.0
    finished_at: str = ""
    pass_rule: dict[str, JSONField] = {}
    judge_results: dict[str, dict[str, JSONField]] | None = None  # per judge model, behind the results
    concurrency: dict[str, dict[str, JSONField]] | None = None  # per model label, the limiter's history (a finished run)
    batches: dict[str, JSONField] | None = None  # a --batch run's chunks
    judge: dict[str, dict[str, JSONField]] | None = None  # per judge model, this invocation's calls
    # the models whose every item's epochs are identical although sampling was asked for (data/sampling_check.py)
    not_sampling: list[NotSamplingJSON] | None = None
    # an agent run: its tools module and identity, and the rollout limits it ran under (--tools and its flags)
    tools: dict[str, JSONField] | None = None

    __optional__ = frozenset({"judge_results", "concurrency", "batches", "judge", "limit", "dataset_items",
                              "not_sampling", "tools"})

    def to_dict(self) -> JSONObject:
        out = super().to_dict()
        out["models"] = {label: m.to_dict() for label, m in self.models.items()}
        return out


def as_run_summary(summary: JSONMapping) -> RunSummary:
    """summary.json's content (read from the file, or a part of one) as the typed summary."""
    return msgspec.convert(summary, RunSummary)


@dataclass
class RunComparison:
    """The run's baseline against each other model, computed once from the records just written: summary.json's
    deltas and the tables `rfteval run` prints both come from here. With two or more candidates it is a series
    (rfteval.compare.series), Holm-adjusted across them, as `rfteval compare RUNDIR` reports it."""

    baseline: str
    results: dict[str, CompareResult]
    series: SeriesResult | None = None


def compare_run(sides: Mapping[str, Side], labels: Sequence[str], out_dir: Path,
                grader: GraderConfig | None = None) -> RunComparison | None:
    """The comparison of a run's models against its baseline, from the sides the run read once
    (rfteval.data.frame.load_run_frames); None until two models have records. `grader`: the grader the run graded
    with, whose ranges the sides then hold (its file is not read again)."""
    from rfteval.compare.comparison import compare_sides
    from rfteval.compare.ranges import config_range, config_sub_ranges
    from rfteval.compare.series import series_from_sides

    for side in sides.values():
        if grader is not None and side.grader is not None:  # the run's spec.resolved.toml names the file it read
            side.declared_range = config_range(grader, side.grader)
            side.declared_sub_ranges = config_sub_ranges(grader)
    if len(labels) < 2:
        return None
    base = rundir.baseline_label(labels)
    cands = [sides[label] for label in labels if label != base and label in sides]
    if base not in sides or not cands:
        return None
    try:
        if len(cands) > 1:
            series = series_from_sides(sides[base], cands, run_dir=str(out_dir))
            return RunComparison(base, {c.label: c.result for c in series.candidates}, series)
        return RunComparison(base, {cands[0].label: compare_sides(sides[base], cands[0])})
    except InputError:  # nothing pairs yet (no item has records on both sides)
        return None


def build_summary(spec: RunSpec, runs: list[ModelRun], totals: dict[str, LabelTotals], grader: GraderConfig,
                  grader_hash: str, run_id: str, n_items: int, complete: bool, prices: dict[str, Price],
                  comparison: RunComparison | None, sides: Mapping[str, Side],
                  dataset_items: int | None = None, tools: JSONObject | None = None) -> RunSummary:
    """summary.json: per model, the mean of per-item means with its interval, counts, tokens and cost, and its pass
    curves (from `sides`, the records the run read once); per other model, its paired delta against the baseline
    (from `comparison`, the run's one comparison). A run over fewer items than the dataset's `dataset_items`
    (--limit) says so: `limit` and `dataset_items`, so it is never read as the full dataset's. An agent run
    says its tools and limits (`tools`) and each model's rollouts (`agent`)."""
    import numpy as np

    from rfteval.compare.measure import infer_bounds
    from rfteval.compare.passing import run_pass_curves
    from rfteval.compare.result import CompareOptions
    from rfteval.data.records import json_safe, now_iso
    from rfteval.stats.paired import clip_interval, side_summary

    models: dict[str, dict[str, object]] = {}  # made JSON-safe and converted to ModelSummary below
    for run in runs:
        t = totals[run.label]
        means = np.frombuffer(t.item_means, dtype=np.float64)
        means = means[~np.isnan(means)]
        ci95: list[float] | list[None] = [None, None]
        if means.size:
            found = side_summary(means)
            # cut to what the grader can score, as compare cuts it (its declared range, else [0, 1])
            ci95 = list(clip_interval(found["ci95"][0], found["ci95"][1],
                                      infer_bounds(CompareOptions(), means, declared=[grader.score_range()])))
        side = found if means.size else {"mean": None, "se": None, "ci95": [None, None], "items": 0}
        models[run.label] = {
            "model": run.model, "provider": run.provider,
            "endpoint": run.settings.get("base_url") if run.provider == "openai" else None,
            "mean": side["mean"], "se": side["se"], "ci95": ci95, "items": side["items"],
            "records": t.records, "cells": t.cells, "cached": t.cached,
            "errors": {"total": t.error_count, "by_type": dict(sorted(t.errors.items()))},
            "error_rate": t.error_count / t.cells if t.cells else 0.0,
            # reasoning tokens: None when no record's usage reported any (a server that never says is not 0)
            "tokens": {"input": t.input_tokens, "output": t.output_tokens,
                       "reasoning": t.reasoning_tokens if t.reasoning_reported else None},
            "cost_usd": _model_cost(run.model, t, prices),
            "truncated_in_reasoning": truncation(t.truncated_in_reasoning, t.answers),
            **({"agent": t.agent} if t.agent is not None else {}),
        }
    labels = [r.label for r in runs]
    curves, pass_rule = run_pass_curves(sides, grader)
    for label, curve in curves.items():
        models[label].update(curve)
    base = rundir.baseline_label(labels)
    deltas = {label: {"baseline": base, "candidate": label, **result.delta}
              for label, result in (comparison.results.items() if comparison else ())}
    judge_calls: JudgeCalls = {}
    for t in totals.values():  # a group judge's call may grade samples of several models: once in all
        judge_calls.update(t.judge_calls)
    cells = sum(t.cells for t in totals.values())
    errors = sum(t.error_count for t in totals.values())
    missing = sum(t.cells - t.records for t in totals.values())
    flagged = not_sampling(runs, sides)
    return as_run_summary(json_safe({
        "run_id": run_id, "name": spec.run_name, "complete": complete and missing == 0,
        "dataset": spec.dataset, "items": n_items,
        **({"limit": n_items, "dataset_items": dataset_items} if dataset_items is not None and n_items < dataset_items
           else {}),
        "epochs": spec.epochs,
        "grader": {"name": grader.name, "type": grader.type, "hash": grader_hash},
        "baseline": base, "models": models, "deltas": deltas,
        "cells": cells, "missing": missing, "errors": errors, "error_rate": errors / cells if cells else 0.0,
        "max_error_rate": spec.max_error_rate, "finished_at": now_iso(), "pass_rule": pass_rule,
        **({"judge_results": judge_totals(judge_calls, prices)} if judge_calls else {}),
        **({"not_sampling": [c.to_json() for c in flagged]} if flagged else {}),
        **({"tools": tools} if tools is not None else {}),
    }))


def not_sampling(runs: Sequence[ModelRun], sides: Mapping[str, Side]) -> list[NotSampling]:
    """The models sent a temperature above 0 (or none: the server's default) whose every item's epochs came back
    identical, read from the record files just written (rfteval.data.sampling_check); a replay sends nothing."""
    from rfteval.data.sampling_check import Asked, check_file

    out = []
    for run in runs:
        if run.provider != "replay" and run.label in sides:
            found = check_file(Path(sides[run.label].path), run.label, Asked(run.sampling.temperature))
            if found is not None:
                out.append(found)
    return out


class TruncationCount(TypedDict):
    n: int
    share: float


def truncation(n: int, samples: int) -> TruncationCount:
    """How many of a model's samples (answers, not failed generations) the output limit cut off while thinking."""
    return {"n": int(n), "share": n / samples if samples else 0.0}


def _model_cost(model: str, t: LabelTotals, prices: dict[str, Price]) -> float | None:
    """Standard prices for synchronous tokens, the batch column for Batch API / flex / imported ones."""
    from rfteval.providers.pricing import cost_usd

    sync = cost_usd(model, t.input_tokens - t.discounted_input_tokens, t.output_tokens - t.discounted_output_tokens,
                    prices)
    if sync is None:
        return None
    return sync + (cost_usd(model, t.discounted_input_tokens, t.discounted_output_tokens, prices, batch=True) or 0.0)


class JudgeTotal(TypedDict):
    """One judge model's line of summary.json's judge_results."""

    calls: int
    input_tokens: int
    output_tokens: int
    reasoning_tokens: int | None  # None: never reported, not zero
    cost_usd: float | None


def _token_count(value: JSONInput) -> int:
    """A usage count as a grade's details hold it (a number; null or absent is 0)."""
    if isinstance(value, (bool, int, float, str)):
        return int(value or 0)
    return 0


def judge_totals(calls: JudgeCalls, prices: dict[str, Price]) -> dict[str, JudgeTotal]:
    """Per judge model, the calls behind the grades in the results and their tokens and cost, whichever
    invocation made them (summary["judge"] counts this invocation's calls only)."""
    from rfteval.providers.pricing import cost_usd

    out: dict[str, JudgeTotal] = {}
    for model, usage in calls.values():
        row = out.setdefault(model, {"calls": 0, "input_tokens": 0, "output_tokens": 0, "reasoning_tokens": None,
                                     "cost_usd": None})
        row["calls"] += 1
        row["input_tokens"] += _token_count(usage.get("input_tokens"))
        row["output_tokens"] += _token_count(usage.get("output_tokens"))
        if usage.get("reasoning_tokens") is not None:  # None: never reported, not zero
            row["reasoning_tokens"] = (row["reasoning_tokens"] or 0) + _token_count(usage["reasoning_tokens"])
    for model, row in out.items():
        row["cost_usd"] = cost_usd(model, row["input_tokens"], row["output_tokens"], prices)
    return out
