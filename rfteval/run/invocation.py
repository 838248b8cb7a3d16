"""What one `rfteval run` invocation is asked to do beside the evaluation itself (RunOptions), and what it ends as
(RunResult, GradeTally): the runner's inputs and outputs, apart from the runner, so that its pipeline and finish
can name them without importing it."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rfteval.run.cells import stream_items
from rfteval.run.results import LabelTotals
from rfteval.run.summary import RunComparison, RunSummary
from rfteval.status import ExitStatus

if TYPE_CHECKING:
    from rfteval.data.records import Record
    from rfteval.graders.base import GraderConfig
    from rfteval.run.plan import RunPlan


@dataclass
class RunOptions:
    """Settings of one invocation that are not part of the evaluation itself."""

    fresh: bool = False
    backoff_base_s: float = 0.5
    backoff_max_s: float = 60.0
    grade_batch_size: int = 64
    grade_parallel: int = 2  # micro-batches being graded at once (python graders: the pool runs each in parallel)
    checkpoint_s: float = 60.0  # rewrite the result files this often while running (0: only at the end)
    write_parquet: bool = True
    handle_signals: bool = True
    # concurrency: adaptive (AIMD up to spec.concurrency) unless fixed
    fixed_concurrency: bool = False
    start_concurrency: int | None = None  # default: a quarter of the ceiling, at least 4
    service_tier: str | None = None  # auto | default | flex | priority, sent with every request
    transport: str | None = None  # the openai SDK's HTTP transport: aiohttp (default when installed) | httpx
    # the Batch API (rfteval/run/batch/phase.py)
    batch: bool = False
    batch_judge: bool = False  # model graders' judge calls as a second batch phase (rfteval/run/batch/judge_phase.py)
    batch_tail: str = "batch"  # "sync": cells re-queued after a first window go synchronously
    batch_poll_s: float = 30.0
    batch_max_lines: int = 50_000
    batch_max_bytes: int = 190 * 1024 * 1024
    export_requests: Path | None = None  # write the request lines, send nothing
    import_responses: Path | None = None  # read Batch API output lines into the store, then grade
    # all of one model's cells before the next model's: a server that holds one model at a time (llama.cpp's
    # aliases) swaps models once per model instead of for nearly every request
    models_in_turn: bool = False
    dry_run: bool = False  # every check, then the plan (run/plan.py): nothing sent, nothing written


@dataclass
class GradeTally:
    """This invocation's cells by what grading did with them: why a judge line counts fewer calls than samples
    (rfteval.report.run_table says it). A cell neither graded, reused nor failed has no response yet."""

    graded: int = 0  # handed to the grader now
    reused: int = 0  # grades an earlier invocation stored, kept
    not_graded: int = 0  # generation failed after every retry: nothing to grade
    in_groups: bool = False  # a group judge: each item's samples go to the judge in one request


@dataclass
class RunResult:
    out_dir: Path
    summary: RunSummary
    totals: dict[str, LabelTotals]
    interrupted: bool = False
    batches_open: int = 0  # batches still running at the provider (after Ctrl-C): re-run to collect them
    exported: dict[str, int] | None = None  # --export-requests: file → lines written
    comparison: RunComparison | None = None  # the baseline against the others: what summary.json's deltas are
    stopped: str | None = None  # why the run stopped early (an endpoint that died): resumable, exit 3
    # the baseline's records as written (readiness reads them here); None past HOLD_MAX_BYTES (it reads the file)
    baseline_records: list[Record] | None = None
    plan: RunPlan | None = None  # --dry-run: what the run would send and cost; nothing was sent
    grading: GradeTally | None = None  # this invocation's cells by what grading did with them
    grader: GraderConfig | None = None  # the grader the run graded with (the readiness verdict reads its range)

    def item_ids(self) -> Iterator[str]:
        """The items in dataset order (aligned with each LabelTotals.item_means), streamed from the dataset."""
        return (item.id for item in stream_items(self.summary.dataset, self.summary.limit))

    @property
    def exit_code(self) -> int:
        if self.interrupted:
            return ExitStatus.INTERRUPTED
        if self.stopped is not None:
            return ExitStatus.INCOMPLETE
        if self.summary.error_rate > self.summary.max_error_rate:
            return ExitStatus.INCOMPLETE
        return ExitStatus.SUCCESS
