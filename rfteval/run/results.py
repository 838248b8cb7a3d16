"""The result files, rebuilt from the store: DIR/<label>.jsonl, DIR/results.parquet, and the totals summary.json needs.

The store's logs are the truth (rfteval.run.store); these files are a view of them, rewritten whole after every run
and resume, streaming in dataset order so that per-item means come out as the records go past.
"""

from __future__ import annotations

import itertools
from array import array
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TypeAlias, TypedDict

from rfteval.data.reasoning import DEFAULT_MODE, DEFAULT_TAGS, answer_of
from rfteval.data.records import Record, Usage, dumps_record, error_dict, is_generation_failure, make_record
from rfteval.data.rundir import RESULTS
from rfteval.providers.pricing import DISCOUNTED_TIERS

if TYPE_CHECKING:
    from rfteval.data.json_types import JSONInput, JSONMapping
    from rfteval.run.store import GradeEntry, ResponseEntry, RolloutEntry, StoreReader

# The judge calls behind a model's grades: call id → (judge model, the call's usage as its grade details hold it).
JudgeCalls: TypeAlias = "dict[str, tuple[str, JSONMapping]]"


def build_record(run_id: str, label: str, model: str, item_id: str, epoch: int,
                 response: ResponseEntry | None, grade: GradeEntry | None,
                 cached: bool = False, reasoning: str = DEFAULT_MODE,
                 tags: Sequence[tuple[str, str]] = DEFAULT_TAGS) -> Record | None:
    """The record of one cell from its stored response and grade; None when the cell has no response yet.

    The store keeps the content as the server sent it; output_text is the answer the grader saw under `reasoning`
    (rfteval.data.reasoning), the thinking goes to reasoning_text. A rollout's record (an agent run's) has its
    agent fields set: turns, stop_reason, tool_calls, tool_errors and the transcript (its messages as JSON text)."""
    from rfteval.graders.grading import apply_grade  # lazily: it brings the grading engine
    from rfteval.run.entries import RolloutEntry

    if response is None:
        return None
    gen_err = response.error
    text, output_json = response.output_text, response.output_json
    thinking, truncated = None, False
    if not gen_err:
        answer = answer_of(text, output_json, None, response.reasoning, response.finish_reason,
                           mode=reasoning, tags=tags)
        text, output_json = answer.output_text, answer.output_json
        thinking, truncated = answer.reasoning, answer.truncated_in_reasoning
    rec = make_record(
        run_id=run_id, model_label=label, model=model, item_id=item_id, epoch=epoch,
        output_text=text, output_json=output_json,
        output_tools=response.output_tools, usage=response.usage, latency_s=response.latency_s,
        cached=cached, error=error_dict("generate", gen_err.type, gen_err.message) if gen_err else None,
        reasoning_text=thinking, truncated_in_reasoning=truncated,
    )
    if isinstance(response, RolloutEntry):  # an agent run's: its usage summed, its time, the final turn's output
        from rfteval.data.rollout import Rollout

        rec.turns, rec.stop_reason, rec.tool_calls = response.turns, response.stop_reason, response.tool_calls
        rec.tool_errors = dict(response.tool_errors)
        rec.transcript = Rollout(response.messages, response.stop_reason or "", response.call_errors).transcript()
    if gen_err:
        rec.score = 0.0  # OpenAI's rule for a failure; the error stays on the record and is counted
        rec.finished_at = response.at or rec.finished_at
        return rec
    if grade is None:
        return None  # generated, not graded yet: not a result
    return apply_grade(rec, grade.result(), finished_at=grade.at or rec.finished_at)


@dataclass
class Cell:
    """One (model, item, epoch) of the run, in dataset order, with its cache key."""

    label: str
    model: str
    item_id: str
    epoch: int
    key: str


class AgentTotals(TypedDict):
    """One model's rollouts, as summary.json's `agent` holds them (rfteval.run.summary.AgentSummary)."""

    rollouts: int
    turns: int
    tool_calls: int
    tool_errors: dict[str, int]
    stop_reasons: dict[str, int]


def add_rollout(t: LabelTotals, entry: RolloutEntry) -> None:
    """Count a finished rollout into its model's totals."""
    agent = t.agent
    if agent is None:
        agent = t.agent = {"rollouts": 0, "turns": 0, "tool_calls": 0, "tool_errors": {}, "stop_reasons": {}}
    agent["rollouts"] += 1
    agent["turns"] += entry.turns
    agent["tool_calls"] += entry.tool_calls
    for kind, n in entry.tool_errors.items():
        agent["tool_errors"][kind] = agent["tool_errors"].get(kind, 0) + n
    reason = entry.stop_reason or ""
    agent["stop_reasons"][reason] = agent["stop_reasons"].get(reason, 0) + 1


@dataclass
class LabelTotals:
    """What summary.json needs about one model, accumulated while the records stream past."""

    cells: int = 0
    records: int = 0
    errors: Counter = field(default_factory=Counter)  # "stage:type" → count
    input_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0
    reasoning_reported: int = 0  # records whose usage said how many reasoning tokens (0 reported is reported)
    answers: int = 0  # records that are an answer (not a failed generation): the samples below are shares of it
    with_reasoning: int = 0  # answers that came with thinking (reasoning_text)
    truncated_in_reasoning: int = 0  # answers the output limit cut off while still thinking
    cached: int = 0
    # of the tokens above, those billed at batch prices (Batch API, flex, imported batch output)
    discounted_input_tokens: int = 0
    discounted_output_tokens: int = 0
    item_means: array = field(default_factory=lambda: array("d"))  # per item in dataset order; NaN: no record yet
    judge_calls: JudgeCalls = field(default_factory=dict)
    agent: AgentTotals | None = None  # an agent run's rollouts (summary.json's models.LABEL.agent)

    @property
    def error_count(self) -> int:
        return sum(self.errors.values())


def _add_usage(t: LabelTotals, usage: Usage | None) -> None:
    if usage:
        t.input_tokens += int(usage.get("input_tokens") or 0)
        t.output_tokens += int(usage.get("output_tokens") or 0)
        reasoning = usage.get("reasoning_tokens")
        if reasoning is not None:
            t.reasoning_tokens += int(reasoning)
            t.reasoning_reported += 1


_UNNAMED_CALLS = itertools.count()


def add_judge_calls(calls: JudgeCalls, details: JSONInput) -> None:
    """The judge calls behind a record's grade (multi graders nest theirs), each once: by `judge_call`, or,
    for grades stored before it was recorded, one per grade."""
    if isinstance(details, dict):
        usage = details.get("judge_usage")
        if "judge_model" in details and isinstance(usage, dict):
            call = details.get("judge_call") or f"grade-{next(_UNNAMED_CALLS)}"
            calls.setdefault(str(call), (str(details["judge_model"]), usage))
        for value in details.values():
            if isinstance(value, (dict, list)):
                add_judge_calls(calls, value)
    elif isinstance(details, list):
        for value in details:
            add_judge_calls(calls, value)


def write_results(
    out_dir: Path, cells: Iterable[Cell], reader: StoreReader, grader: str, run_id: str, labels: list[str],
    session: str | None = None, parquet: bool = True, batch_rows: int = 2048, reasoning: str = DEFAULT_MODE,
    tags: Sequence[tuple[str, str]] = DEFAULT_TAGS, hold: Callable[[Record, int], None] | None = None,
    rollouts: bool = False,
) -> dict[str, LabelTotals]:
    """Rewrite DIR/<label>.jsonl and DIR/results.parquet from the store, streaming; return the totals.

    `cells` must come in dataset order, grouped by item, so per-item means are computed on the fly. `reasoning`
    and `tags` split answers from thinking as the grades were made (rfteval.data.reasoning). `hold` is handed each
    record as it is written, with its line's length (a run's finish keeps a small baseline's for readiness instead of
    reading the file back).
    `rollouts`: an agent run, whose cells are its finished rollouts (rollouts.jsonl), keyed by the rollout key.
    """
    from rfteval.data.records import arrow_schema, to_arrow

    totals = {label: LabelTotals() for label in labels}
    tmp_paths = {label: out_dir / f"{label}.jsonl.tmp" for label in labels}
    files = {label: open(path, "w", encoding="utf-8") for label, path in tmp_paths.items()}
    writer = None
    pq_tmp = out_dir / (RESULTS + ".tmp")
    if parquet:
        import pyarrow.parquet as pq

        writer = pq.ParquetWriter(pq_tmp, arrow_schema(agent=rollouts))  # an agent run's columns: its runs' only
    batch: list[Record] = []
    current: dict[str, tuple[str, float, int]] = {}  # label → (item_id, score sum, count)

    def close_item(label: str) -> None:
        _, total, n = current.pop(label)
        totals[label].item_means.append(total / n if n else float("nan"))

    try:
        for cell in cells:
            t = totals[cell.label]
            cur = current.get(cell.label)
            if cur is not None and cur[0] != cell.item_id:
                close_item(cell.label)
                cur = None
            if cur is None:
                current[cell.label] = cur = (cell.item_id, 0.0, 0)
            t.cells += 1
            rollout = reader.get_rollout(cell.key) if rollouts else None
            response = rollout if rollouts else reader.get_response(cell.key)
            grade = reader.get_grade(cell.key, grader) if response and not response.error else None
            cached = bool(response and session and response.session != session)
            rec = build_record(run_id, cell.label, cell.model, cell.item_id, cell.epoch, response, grade, cached,
                               reasoning, tags)
            if rec is None or response is None:
                continue
            t.records += 1
            if not is_generation_failure(rec.error):
                t.answers += 1
                t.with_reasoning += rec.reasoning_text is not None
                t.truncated_in_reasoning += rec.truncated_in_reasoning
            t.cached += cached
            if rollout is not None and not is_generation_failure(rec.error):
                add_rollout(t, rollout)
            _add_usage(t, rec.usage)
            if response.tier in DISCOUNTED_TIERS and rec.usage:
                t.discounted_input_tokens += int(rec.usage.get("input_tokens") or 0)
                t.discounted_output_tokens += int(rec.usage.get("output_tokens") or 0)
            add_judge_calls(t.judge_calls, rec.grade_details)
            if rec.error:
                t.errors[f"{rec.error['stage']}:{rec.error['type']}"] += 1
            if not is_generation_failure(rec.error) and rec.score is not None:  # the one error policy (records)
                current[cell.label] = (cur[0], cur[1] + rec.score, cur[2] + 1)
            line = dumps_record(rec)
            files[cell.label].write(line + "\n")
            if hold is not None:
                hold(rec, len(line))
            if writer is not None:
                batch.append(rec)
                if len(batch) >= batch_rows:
                    writer.write_table(to_arrow(batch, agent=rollouts))
                    batch.clear()
        for label in list(current):
            close_item(label)
        if writer is not None and batch:
            writer.write_table(to_arrow(batch, agent=rollouts))
    except BaseException:
        for fh in files.values():
            fh.close()
        for path in tmp_paths.values():
            path.unlink(missing_ok=True)
        if writer is not None:
            writer.close()
            pq_tmp.unlink(missing_ok=True)
        raise
    for fh in files.values():
        fh.close()
    for label, path in tmp_paths.items():
        path.replace(out_dir / f"{label}.jsonl")
    if writer is not None:
        writer.close()
        pq_tmp.replace(out_dir / RESULTS)
    return totals
