"""Is the judge stable enough to train on? Grade the same outputs K times and measure how much the scores move.

OpenAI's RFT guide asks you to "evaluate the judge": a reward that changes when nothing changed is noise that
the policy learns from. Each repeat k uses its own judge cache slot (`judge_repeat(k)`), so the K answers are
K real calls, never cache hits of each other. Spread is measured on the grader's range scaled to 0..1, so one
threshold fits a [0, 1] and a [0, 10] judge.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from rfteval.graders.base import GraderConfig, GradeResult, Pair, judge_types
from rfteval.limits import JUDGE_SD_THRESHOLD
from rfteval.providers.judge import judge_repeat

if TYPE_CHECKING:
    from rfteval.graders.base import GradeOptions
    from rfteval.graders.engine import GradingEngine
    from rfteval.graders.loader import GraderFile
    from rfteval.providers.judge import JudgeClient

DEFAULT_THRESHOLD = JUDGE_SD_THRESHOLD  # sd of a repeated score, on a 0..1 scale, above which a judge is flagged


class StabilityOutput(TypedDict):
    """One output graded `repeat` times; sd and range on the grader's range scaled to 0..1."""

    item_id: str
    epoch: int
    scores: list[float]
    errors: int
    error_types: list[str]
    mean: float
    sd: float
    range: float
    flipped: bool


class StabilityItem(TypedDict):
    item_id: str
    outputs: int
    sd: float  # the mean over its outputs; NaN when none was measured twice
    range: float
    flipped: bool
    errors: int
    flagged: bool


class StabilityOverall(TypedDict):
    items: int
    outputs: int
    repeats: int
    threshold: float
    pass_threshold: float
    mean_sd: float
    max_range: float
    flip_share: float
    flagged_items: int
    errors: int
    error_share: float
    error_types: dict[str, int]  # grades that were errors, by type: left out of every spread and flip
    flagged: bool
    inconclusive: bool  # no output was scored twice (every repeat's grades errors, or all but one): nothing measured


class StabilityReport(TypedDict):
    """What `stability_report` returns and `validate grader --repeat` prints (report.judge_stability_render)."""

    grader: str
    type: str
    scale: list[float]
    overall: StabilityOverall
    items: list[StabilityItem]
    outputs: list[StabilityOutput]


def _pass_threshold(config: GraderConfig, override: float | None) -> float:
    if override is not None:
        return override
    own = getattr(config, "pass_threshold", None)
    if own is not None:
        return float(own)
    low, high, _ = config.score_range()
    return (low + high) / 2


def _passed(result: GradeResult, threshold: float) -> bool:
    return bool(result.passed) if result.passed is not None else result.score >= threshold


def spread(scores: Sequence[float]) -> tuple[float, float]:
    """(sample standard deviation, max − min) of repeated scores; 0 for fewer than two."""
    if len(scores) < 2:
        return 0.0, 0.0
    return statistics.stdev(scores), max(scores) - min(scores)


def stability_report(
    engine: GradingEngine,
    pairs: Sequence[Pair],
    repeat: int = 3,
    threshold: float = DEFAULT_THRESHOLD,
    keys: Sequence[tuple[str, int]] | None = None,
    pass_threshold: float | None = None,
) -> StabilityReport:
    """Grade `pairs` `repeat` times with `engine` (a GradingEngine with a judge) and report the spread.

    `keys` names each pair (item_id, epoch); by default the item's `id` (or its position) and 1. Per output:
    the K scores, sd, range, whether pass/fail flipped, errors. Per item: the mean sd and the widest range of
    its outputs, flipped when any output flipped, flagged when its sd is above `threshold`. Overall: the mean
    sd, the share of items that flipped, the flagged items, and `flagged` when the mean sd is above `threshold`.
    """
    if repeat < 2:
        raise ValueError("repeat must be at least 2 to measure a spread")
    if keys is None:
        keys = [(str(item.get("id", i)), 1) for i, (_, item) in enumerate(pairs)]
    if len(keys) != len(pairs):
        raise ValueError("keys and pairs differ in length")
    config: GraderConfig = engine.config
    low, high, _ = config.score_range()
    scale = high - low if high > low else 1.0
    cut = _pass_threshold(config, pass_threshold)

    runs: list[list[GradeResult]] = []
    for k in range(repeat):
        with judge_repeat(k):
            results = engine.grade_batch(list(pairs))
        if len(results) != len(pairs):
            raise RuntimeError(f"the grader returned {len(results)} results for {len(pairs)} outputs")
        runs.append(results)

    outputs: list[StabilityOutput] = []
    for n, (item_id, epoch) in enumerate(keys):
        results = [run[n] for run in runs]
        ok = [r for r in results if r.error is None]
        scores = [r.score for r in ok]
        sd, width = spread(scores)
        verdicts = {_passed(r, cut) for r in ok}
        outputs.append({
            "item_id": item_id, "epoch": epoch, "scores": scores, "errors": len(results) - len(ok),
            "error_types": sorted({r.error.type for r in results if r.error is not None}),
            "mean": statistics.fmean(scores) if scores else math.nan,
            "sd": sd / scale, "range": width / scale, "flipped": len(verdicts) > 1,
        })

    by_item: dict[str, list[StabilityOutput]] = {}
    for row in outputs:
        by_item.setdefault(row["item_id"], []).append(row)
    items: list[StabilityItem] = []
    for item_id, rows in by_item.items():
        measured = [r for r in rows if len(r["scores"]) >= 2]
        sd = statistics.fmean(r["sd"] for r in measured) if measured else math.nan
        items.append({
            "item_id": item_id, "outputs": len(rows), "sd": sd,
            "range": max((r["range"] for r in measured), default=math.nan),
            "flipped": any(r["flipped"] for r in rows), "errors": sum(r["errors"] for r in rows),
            "flagged": bool(measured) and sd > threshold,
        })

    # an item none of whose outputs was scored twice could neither move nor flip: it is left out of the shares
    measured_items = [it for it in items if not math.isnan(it["sd"])]
    mean_sd = statistics.fmean(it["sd"] for it in measured_items) if measured_items else math.nan
    errors = sum(r["errors"] for r in outputs)
    types = Counter(r.error.type for run in runs for r in run if r.error is not None)
    overall: StabilityOverall = {
        "items": len(items), "outputs": len(outputs), "repeats": repeat, "threshold": threshold,
        "pass_threshold": cut, "mean_sd": mean_sd,
        "max_range": max((it["range"] for it in measured_items), default=math.nan),
        "flip_share": (sum(it["flipped"] for it in measured_items) / len(measured_items)) if measured_items
        else math.nan,
        "flagged_items": sum(it["flagged"] for it in items),
        "errors": errors, "error_share": errors / (len(outputs) * repeat) if outputs else 0.0,
        "error_types": dict(types.most_common()),
        "flagged": (not math.isnan(mean_sd)) and mean_sd > threshold,
        "inconclusive": not measured_items,
    }
    return {"grader": config.name, "type": config.type, "scale": [low, high], "overall": overall,
            "items": items, "outputs": outputs}


def load_pairs(dataset_path: str | Path, outputs_path: str | Path) -> tuple[list[Pair], list[tuple[str, int]]]:
    """The (sample, item) pairs and their (item_id, epoch) keys from a dataset and an outputs file
    (`rfteval grade`'s format); bad lines raise InputError naming file:line."""
    from rfteval.data.dataset import load_dataset
    from rfteval.data.outputs import iter_outputs
    from rfteval.data.sample import make_sample

    items = load_dataset(dataset_path).by_id()
    pairs: list[Pair] = []
    keys: list[tuple[str, int]] = []
    for out in iter_outputs(outputs_path, set(items)):
        if out.transcript is not None and out.transcript.error is not None:
            continue  # a rollout that failed where it was played: nothing was generated for the judge to score
        pairs.append((make_sample(out.output_text, out.output_tools), items[out.item_id].data))
        keys.append((out.item_id, out.epoch))
    return pairs, keys


def run_stability(
    grader_path: str | Path | GraderFile,
    dataset_path: str | Path,
    outputs_path: str | Path,
    judge: JudgeClient | None,  # None only for a grader without a model grader, which is refused
    repeat: int = 3,
    threshold: float = DEFAULT_THRESHOLD,
    options: GradeOptions | None = None,
) -> StabilityReport:
    """`rfteval validate grader G --dataset D --outputs O --repeat K`, as a library call; InputError on bad input.
    `grader_path` may be the GraderFile the command already read."""
    from rfteval.errors import InputError
    from rfteval.graders import GradingEngine
    from rfteval.graders.loader import GraderFile

    if repeat < 2:
        raise InputError("must be at least 2 to measure a spread", field="--repeat")
    source = GraderFile.of(grader_path)
    config = source.config
    if not judge_types(config):
        raise InputError(f"a {config.type} grader has no judge model to check; --repeat needs score_model, "
                         "label_model or group_judge", source.path, field="type")
    pairs, keys = load_pairs(dataset_path, outputs_path)
    if not pairs:
        raise InputError("no outputs to grade", outputs_path)
    with GradingEngine(config, options, judge=judge) as engine:
        return stability_report(engine, pairs, repeat=repeat, threshold=threshold, keys=keys)
