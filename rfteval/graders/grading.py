"""Grade outputs that already exist (no model calls): the library behind `rfteval grade`."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from rfteval.data.dataset import Dataset
from rfteval.data.outputs import Output
from rfteval.data.reasoning import DEFAULT_MODE, DEFAULT_TAGS, split_reasoning
from rfteval.data.records import Record, error_dict, make_record, now_iso
from rfteval.data.rollout import Rollout, rollout_sample
from rfteval.data.sample import make_sample
from rfteval.graders.base import GradeOptions, GraderConfig, GradeResult
from rfteval.graders.engine import GradingEngine

if TYPE_CHECKING:
    from rfteval.data.sample import Sample
    from rfteval.data.transcripts import Transcript
    from rfteval.providers.judge import JudgeClient


def apply_grade(record: Record, result: GradeResult, finished_at: str | None = None) -> Record:
    """Fill a record's grade fields; a generation error stays the record's error (score 0). `finished_at` is when
    the grade was made (a stored grade's time, when the record is rebuilt from the run store); default now."""
    if record.error and record.error.get("stage") == "generate":
        record.score = 0.0
        return record
    record.score = float(result.score)
    record.sub_scores = result.sub_scores
    record.passed = result.passed
    record.grader_stdout = result.stdout or None
    record.grade_details = result.details
    record.error = error_dict("grade", result.error.type, result.error.message) if result.error else None
    record.finished_at = finished_at or now_iso()
    return record


def _batches(outputs: Iterable[Output], size: int) -> Iterator[list[Output]]:
    batch: list[Output] = []
    for out in outputs:
        batch.append(out)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


def grade_outputs(
    dataset: Dataset,
    config: GraderConfig,
    outputs: Iterable[Output],
    options: GradeOptions | None = None,
    run_id: str | None = None,
    batch_size: int = 2048,
    on_progress: Callable[[int], None] | None = None,
    judge: JudgeClient | None = None,
    parse_json: bool = True,
    reasoning: str = DEFAULT_MODE,
    tags: Sequence[tuple[str, str]] = DEFAULT_TAGS,
) -> list[Record]:
    """One graded record per output, in input order. Grading errors are recorded, never raised.

    `parse_json=False` leaves every sample's output_json empty, as OpenAI does for a job without response_format.
    `reasoning` / `tags`: outputs of reasoning models may hold their thinking in a leading think block; graders see
    the answer ("strip", as in `rfteval run`) or the text as written ("keep"), and records keep the thinking apart;
    an output's own reasoning field and finish_reason are read as a run reads the server's (truncated_in_reasoning).
    """
    from rfteval.graders.base import needs_groups

    items = dataset.by_id()
    if needs_groups(config):  # a group judge ranks an item's samples together: never split an item across batches
        outputs = sorted(outputs, key=lambda o: o.item_id)
        batch_size = max(len(outputs), 1)
    run_id = run_id or "grade-" + hashlib.sha1(now_iso().encode()).hexdigest()[:10]
    records: list[Record] = []
    with GradingEngine(config, options, judge=judge) as engine:
        for batch in _batches(outputs, batch_size):
            splits = [split_reasoning(o.output_text, o.reasoning, mode=reasoning, tags=tags,
                                      finish_reason=o.finish_reason) for o in batch]
            pairs = [(_sample(o, sp.answer, parse_json, reasoning, tags), items[o.item_id].data)
                     for o, sp in zip(batch, splits)]
            # a rollout that failed where it was played (a verifiers trace's error) is no answer: never graded
            failures = [o.transcript.error if o.transcript is not None else None for o in batch]
            graded = [(pair, (o.label, o.item_id)) for o, pair, f in zip(batch, pairs, failures) if f is None]
            results = iter(engine.grade_batch([p for p, _ in graded], [u for _, u in graded]) if graded else ())
            for out, sp, (sample, _), failure in zip(batch, splits, pairs, failures):
                final = sample["output_tools"]  # a transcript's: its final turn's calls
                tools = (final if isinstance(final, list) else None) if out.transcript is not None else out.output_tools
                rec = make_record(
                    run_id=run_id, model_label=out.label, model=out.model, item_id=out.item_id, epoch=out.epoch,
                    output_text=sp.answer, output_json=sample["output_json"], output_tools=tools,
                    reasoning_text=sp.reasoning, truncated_in_reasoning=sp.truncated_in_reasoning,
                    error=error_dict("generate", *failure) if failure is not None else None,
                )
                if out.transcript is not None:
                    _agent_fields(rec, out.transcript)
                if failure is not None:  # as the run records a cell whose generation failed: counted, not a score
                    rec.score = 0.0
                    records.append(rec)
                    continue
                records.append(apply_grade(rec, next(results)))
            if on_progress:
                on_progress(len(batch))
    return records


def _sample(out: Output, answer: str, parse_json: bool, reasoning: str, tags: Sequence[tuple[str, str]]) -> Sample:
    """The grader's sample of one output: a transcript's as a run's rollout is built (data.rollout.rollout_sample,
    the one rule), else the answer's own."""
    t = out.transcript
    if t is not None:
        return rollout_sample(t.messages, stop_reason=t.stop_reason, output_json=... if parse_json else None,
                              choices=t.choices, reasoning=out.reasoning, finish_reason=out.finish_reason,
                              mode=reasoning, tags=tags)
    if parse_json:
        return make_sample(answer, out.output_tools)
    return make_sample(answer, out.output_tools, output_json=None)


def _agent_fields(record: Record, transcript: Transcript) -> None:
    """A transcript's record carries what an agent run's does: turns, stop reason, calls, errors by type (none
    known: another harness's tool messages say no error type), the transcript."""
    rollout = Rollout(transcript.messages, transcript.stop_reason)
    record.turns, record.stop_reason, record.tool_calls = rollout.turns, rollout.stop_reason, len(rollout.tool_calls())
    record.tool_errors, record.transcript = rollout.tool_errors(), rollout.transcript()


def default_records_path(outputs_path: Path) -> Path:
    return outputs_path.with_name(outputs_path.stem + ".records.jsonl")
