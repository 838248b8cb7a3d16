"""`rfteval run --dry-run`: what a run would send and what it could cost, worked out after every check a run makes
before its first request, from the spec, the dataset and what the run directory already holds; nothing is sent
and nothing is written.

The figures are ceilings where they can be: the judge calls are one per sample and judge (one per group for a
group judge), before the judge cache saves any; the output tokens are max_output_tokens for every request. The
input tokens are an estimate, characters / 4 of each request's messages and tools as JSON: rfteval has no
tokenizer (a model's own is not known here), and the figure is meant for an order of magnitude.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from rfteval.providers.pricing import cost_usd, find_price

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from rfteval.graders.base import GraderConfig
    from rfteval.providers.base import GenerationRequest
    from rfteval.providers.judge import JudgeBudget
    from rfteval.providers.pricing import Price
    from rfteval.run.spec import ModelRun, RunSpec

# one cell of the run as the runner lays them out (cells.RunContext.jobs): its model, item id, cache key and request
PlannedCell = tuple["ModelRun", str, str, "GenerationRequest"]

TOKENS_METHOD = "characters / 4 of each request's messages and tools as JSON (no tokenizer)"
CHARS_PER_TOKEN = 4
NO_PRICE = "no price"  # the model is in neither the default price table nor the spec's [pricing]
NO_CEILING = "no output ceiling"  # no max_output_tokens: a request's output is bounded by the server only


def estimate_tokens(messages: object, tools: object = None) -> int:
    """A request's input tokens, roughly: characters / 4 of its messages (and tools) as JSON."""
    chars = len(json.dumps(messages, ensure_ascii=False, default=str))
    if tools:
        chars += len(json.dumps(tools, ensure_ascii=False, default=str))
    return math.ceil(chars / CHARS_PER_TOKEN)


@dataclass
class ModelPlan:
    """One model label's share of the plan."""

    label: str
    model: str
    replayed: bool  # recorded outputs: nothing is sent, nothing costs
    cells: int = 0
    stored: int = 0  # responses the run directory holds and a resume keeps
    to_send: int = 0
    input_tokens: int = 0  # estimated (TOKENS_METHOD), of the requests to send
    max_output_tokens: int | None = None  # per request; None: no ceiling
    cost_usd: float | None = None  # the ceiling: input estimate + output ceiling at the model's price
    no_cost: str | None = None  # why there is no cost ceiling: NO_PRICE or NO_CEILING
    max_turns: int = 1  # an agent run's --max-turns: a cell to send is a rollout of up to that many requests

    @property
    def output_ceiling(self) -> int | None:
        return None if self.max_output_tokens is None else self.max_output_tokens * self.to_send * self.max_turns


@dataclass
class JudgePlan:
    """The judge calls grading would make at most, before the judge cache saves any."""

    calls: int
    samples: int  # samples to grade (stored ones without a kept grade, and the ones to send)
    how: list[str]  # per judge: "score_model judge-model: 1 per sample"
    max_calls: int | None = None  # --max-judge-calls
    max_cost_usd: float | None = None  # --max-judge-cost


@dataclass
class RunPlan:
    out_dir: Path
    resume: bool  # the run directory holds stored cells of this run
    fresh: bool  # --fresh: what it holds would be discarded
    items: int
    dataset_items: int
    epochs: int
    batch: bool  # sent through the Batch API (or flex): batch prices
    models: list[ModelPlan] = field(default_factory=list)
    max_turns: int | None = None  # an agent run (--tools): model turns per rollout at most
    judge: JudgePlan | None = None
    tokens_method: str = TOKENS_METHOD

    @property
    def cells(self) -> int:
        return sum(m.cells for m in self.models)

    @property
    def stored(self) -> int:
        return sum(m.stored for m in self.models)

    @property
    def to_send(self) -> int:
        return sum(m.to_send for m in self.models)

    @property
    def input_tokens(self) -> int:
        return sum(m.input_tokens for m in self.models)

    @property
    def output_ceiling(self) -> int | None:
        """max_output_tokens x requests over the models that send; None when one of them has no ceiling."""
        sending = [m for m in self.models if m.to_send]
        if any(m.output_ceiling is None for m in sending):
            return None
        return sum(m.output_ceiling or 0 for m in sending)

    @property
    def cost_usd(self) -> float | None:
        """The models' cost ceiling (the judge's is its --max-judge-cost, if any); None when a model that sends has
        none."""
        sending = [m for m in self.models if m.to_send]
        if any(m.cost_usd is None for m in sending):
            return None
        return sum(m.cost_usd or 0.0 for m in sending)


def plan_run(spec: RunSpec, runs: Sequence[ModelRun], cells: Iterable[PlannedCell], grader: GraderConfig,
             grades_key: str, dataset_items: int, prices: dict[str, Price], *, fresh: bool = False,
             batch: bool = False, budget: JudgeBudget | None = None, max_turns: int | None = None) -> RunPlan:
    """The plan of the run `spec` describes, over its `cells` in dataset order; every check a run makes before it
    sends was made by the caller (run_eval). The run directory is read only, without its lock or index. `fresh`:
    what it holds would be discarded; `batch`: sent at batch prices (the Batch API, flex). `max_turns`: an agent
    run, whose cells are rollouts (keyed by the rollout key) of up to that many requests each."""
    from rfteval.errors import InputError
    from rfteval.graders.base import needs_groups, walk
    from rfteval.run.store import check_run_dir, read_stored, run_dir_busy

    out_dir = spec.out_dir
    check_run_dir(out_dir)
    if run_dir_busy(out_dir):
        raise InputError("another rfteval run is using this run directory", out_dir, field="--out")
    stored = read_stored(out_dir, grades_key) if not fresh else None
    models = {run.label: ModelPlan(run.label, run.model, run.provider == "replay",
                                   max_output_tokens=run.sampling.max_output_tokens, max_turns=max_turns or 1)
              for run in runs}
    group_mode = needs_groups(grader)
    to_grade: set[tuple[str, ...]] = set()  # groups (group mode) or cells with a sample to grade
    groups: dict[tuple[str, ...], int] = {}  # group → samples in it (group mode)
    tokens: tuple[str, str, int] | None = None  # (item, label, estimate): the epochs of one item share it
    for run, item_id, key, request in cells:
        m = models[run.label]
        m.cells += 1
        kept = stored.responses.get(key) if stored is not None else None
        if kept is not None:
            m.stored += 1
        elif not m.replayed:
            m.to_send += 1
            if tokens is None or tokens[:2] != (item_id, m.label):
                tokens = (item_id, m.label, estimate_tokens(request.messages, request.tools))
            m.input_tokens += tokens[2]
        if kept is True:
            continue  # a stored final error (a refusal): never graded
        group = (item_id,) if spec.group_models else (m.label, item_id)
        groups[group] = groups.get(group, 0) + 1
        if stored is None or key not in stored.graded:
            to_grade.add(group if group_mode else (key,))
    for m in models.values():
        if m.replayed or not m.to_send:
            continue
        price = find_price(m.model, prices)
        if price is None:
            m.no_cost = NO_PRICE
        elif m.output_ceiling is None:
            m.no_cost = NO_CEILING
        else:
            m.cost_usd = cost_usd(m.model, m.input_tokens, m.output_ceiling, prices, batch=batch)
    judges = [c for c in walk(grader) if c.calls_judge]
    judge = None
    if judges:
        samples = sum(groups[g] for g in to_grade) if group_mode else len(to_grade)
        n_groups = len(to_grade) if group_mode else 0
        calls, how = 0, []
        override = spec.judge.model
        for c in judges:
            model = override or getattr(c, "model", None) or "judge"
            if c.grades_groups:
                calls += n_groups
                group_size = spec.epochs * (len(runs) if spec.group_models else 1)
                how.append(f"{c.type} {model}: 1 per group of {group_size}")
            else:
                calls += samples
                how.append(f"{c.type} {model}: 1 per sample")
        if budget is not None and budget.max_calls is not None:
            calls = min(calls, budget.max_calls)
        judge = JudgePlan(calls, samples, how, budget.max_calls if budget else None,
                          budget.max_cost_usd if budget else None)
    return RunPlan(out_dir, resume=any(m.stored for m in models.values()), fresh=fresh,
                   items=min(spec.limit or dataset_items, dataset_items), dataset_items=dataset_items,
                   epochs=spec.epochs, batch=batch, models=list(models.values()), judge=judge, max_turns=max_turns)

