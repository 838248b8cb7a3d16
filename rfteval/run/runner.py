"""`rfteval run` as a library call: N epochs per model, graded while generating, stored before graded, resumable.

One asyncio loop: a producer streams the dataset into a bounded queue, `concurrency` workers take cells from it
(a cell is one (model, item, epoch)), look the cell up in the store, call the endpoint with retries when it is
not there, append the response to the store, and hand it to the grading loops, which grade micro-batches in
worker threads (GradingEngine.grade_batch is sync). Nothing holds the whole dataset or all records in memory.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import signal
import threading
import time
from array import array
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from rfteval.data.dataset import Item, iter_items
from rfteval.data.frame import load_run_frames
from rfteval.data.json_types import JSONObject
from rfteval.data.outfile import write_json_atomic, write_text_atomic
from rfteval.data.reasoning import DEFAULT_MODE, DEFAULT_TAGS
from rfteval.data.rundir import RESOLVED_SPEC, SUMMARY, baseline_label
from rfteval.errors import InputError
from rfteval.graders.base import OTHER, GradeOptions, GradeResult
from rfteval.providers import batchable
from rfteval.providers.base import GenerationRequest, Provider
from rfteval.providers.pricing import Price
from rfteval.run.monitor import RunMonitor
from rfteval.run.results import Cell, LabelTotals, write_results
from rfteval.run.rollout import cell_sample
from rfteval.run.spec import ModelRun, RunSpec, config_hash, resolve_models, to_toml
from rfteval.run.store import (
    GradeEntry,
    ResponseEntry,
    RunStore,
    is_reusable_grade,
    is_reusable_response,
    new_grade_entry,
)
from rfteval.run.summary import RunComparison, RunSummary, build_summary, compare_run
from rfteval.run.turns import FatalRunError, ServerGone, ToolsStopped, TurnSender, retry_kind
from rfteval.status import ExitStatus

if TYPE_CHECKING:
    from rfteval.data.records import Record
    from rfteval.graders.base import GraderConfig
    from rfteval.graders.engine import GradingEngine
    from rfteval.providers.judge import Judge, JudgeBudget, JudgeClient
    from rfteval.run.batch.judge_phase import JudgeBatch
    from rfteval.run.batch.lines import BatchJob
    from rfteval.run.batch.phase import BatchPhase
    from rfteval.run.plan import RunPlan
    from rfteval.run.rollout import Agent
    from rfteval.run.store import StoreReader
    from rfteval.sandbox.policy import SandboxPolicy
    from rfteval.tools.base import ToolBox


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
    baseline_records: list[Record] | None = None  # the baseline's records as written (readiness reads them here)
    plan: RunPlan | None = None  # --dry-run: what the run would send and cost; nothing was sent
    grading: GradeTally | None = None  # this invocation's cells by what grading did with them

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


@dataclass
class _Job:
    run: ModelRun
    item: Item
    epoch: int
    request: GenerationRequest
    key: str  # the cell's key, its grades' and record's: an agent run's rollout key, else first_key
    first_key: str  # the first turn's request key


@dataclass
class _Context:
    spec: RunSpec
    runs: list[ModelRun]
    providers: dict[str, Provider]
    identities: dict[str, JSONObject] = field(default_factory=dict)
    agent: Agent | None = None  # an agent run (--tools): each cell a rollout of turns

    def turn_key(self, run: ModelRun, request: GenerationRequest, epoch: int) -> str:
        """The cache key of one turn's request: the endpoint, the body (the history with it), the epoch."""
        from rfteval.run.store import cell_key

        return cell_key(self.identities[run.label], self.providers[run.label].request_body(request), epoch)

    def jobs(self, runs: list[ModelRun] | None = None) -> Iterator[_Job]:
        """Every cell (of `runs`, default all) in dataset order: item, then model, then epoch (so a partial run is
        still paired)."""
        from rfteval.run.store import cell_key, rollout_key

        for item in stream_items(self.spec.dataset, self.spec.limit):
            for run in runs if runs is not None else self.runs:
                provider = self.providers[run.label]
                ident = self.identities[run.label]
                messages = item.messages
                if run.system_prompt is not None:  # [models.LABEL] system_prompt: this model's, before the item's
                    messages = [{"role": "system", "content": run.system_prompt}, *item.messages]
                # an item that declares no tools is offered those the tool box lists itself (MCP servers')
                tools = item.tools if item.tools is not None or self.agent is None else getattr(
                    self.agent.tools, "offered", None)
                for epoch in range(1, self.spec.epochs + 1):
                    # each epoch its own seed (Sampling.for_epoch): epochs are independent samples
                    req = GenerationRequest(model=run.model, messages=messages,
                                            sampling=run.sampling.for_epoch(epoch), tools=tools,
                                            tool_choice=item.tool_choice, item_id=item.id, epoch=epoch)
                    first = cell_key(ident, provider.request_body(req), epoch)
                    key = first if self.agent is None else rollout_key(first, item.id, self.agent.tools.identity,
                                                                        self._rollout_limits(item))
                    yield _Job(run, item, epoch, req, key, first)

    def _rollout_limits(self, item: Item) -> JSONObject:
        """What the rollout key holds beside the first turn: the limits, and the item's scripted user turns (other
        follow-ups are another rollout; an item without any keeps the key it always had)."""
        assert self.agent is not None
        limits = self.agent.limits.key()
        return {**limits, "followups": list(item.followups)} if item.followups else limits

    def cells(self) -> Iterator[Cell]:
        for job in self.jobs():
            yield Cell(job.run.label, job.run.model, job.item.id, job.epoch, job.key)

    def batch_jobs(self) -> Iterator[BatchJob]:
        """(key, CellInfo, request body) for each cell of a model behind an OpenAI-compatible endpoint."""
        from rfteval.run.batch.lines import CellInfo

        for job in self.jobs():
            provider = self.providers[job.run.label]
            if not batchable(provider):
                continue
            info = CellInfo(job.run.label, job.run.model, job.item.id, job.epoch, provider.api,
                            job.run.sampling.asks_for_json)
            yield job.key, info, provider.request_body(job.request)


def stream_items(dataset: str | Path, limit: int | None = None) -> Iterator[Item]:
    """The items of a dataset, one at a time (ids are checked once, by count_items); `limit`: the first N only."""
    items = iter_items(dataset, check_duplicates=False)
    return items if limit is None else itertools.islice(items, limit)


def count_items(dataset: str | Path, rollouts: bool = True) -> int:
    """Validate the whole dataset before any request (a bad line is exit 2, not a half-paid run).

    Duplicate ids are found with 8 bytes per item (sorted 64-bit hashes); only when two hashes agree is the
    dataset read again by iter_items, which names the duplicate's file and line. `rollouts=False` (a run without
    tools: one request per cell) refuses an item with scripted user turns, which only a rollout can play.
    """
    import numpy as np

    from rfteval.data.dataset import FOLLOWUPS

    hashes = array("q")
    for item in stream_items(dataset):
        if not rollouts and item.followups:
            raise InputError("scripted user turns are played by an agent run's rollout loop: pass --tools FILE (a "
                             "module with no functions plays them as a plain multi-turn chat)", dataset, item.line,
                             FOLLOWUPS)
        digest = hashlib.blake2b(item.id.encode(), digest_size=8).digest()
        hashes.append(int.from_bytes(digest, "little", signed=True))
    if not hashes:
        raise InputError("the dataset has no items", dataset)
    h = np.sort(np.frombuffer(hashes, dtype=np.int64))
    if bool((h[1:] == h[:-1]).any()):
        for _ in iter_items(dataset):  # raises the duplicate id's InputError
            pass
    return len(hashes)


def build_providers(runs: list[ModelRun], opts: RunOptions | None = None) -> dict[str, Provider]:
    """The providers of a run, with its service tier and transport."""
    from rfteval.run.spec import build_providers as build

    return build(runs, opts.service_tier if opts else None, opts.transport if opts else None)


# ---------------------------------------------------------------- the pipeline


class _Pipeline:
    def __init__(self, ctx: _Context, store: RunStore, engine: GradingEngine, grader_hash: str, monitor: RunMonitor,
                 opts: RunOptions, export: Callable[[StoreReader], dict[str, LabelTotals]], judge: Judge | None = None):
        from rfteval.providers.retry import RetryPolicy

        self.ctx, self.store, self.engine, self.grader_hash = ctx, store, engine, grader_hash
        self.monitor, self.opts, self.export = monitor, opts, export
        self.judge = judge
        spec = ctx.spec
        self.policy = RetryPolicy(max_retries=spec.max_retries, base_s=opts.backoff_base_s,
                                  max_backoff_s=opts.backoff_max_s)
        self.n_workers = spec.concurrency
        from rfteval.run.concurrency import AdaptiveLimiter

        self.limiters = {run.label: AdaptiveLimiter(spec.concurrency, opts.start_concurrency,
                                                    fixed=opts.fixed_concurrency) for run in ctx.runs}
        # Each turn goes out through the sender, which stops the run on an endpoint that is not there or died
        # (retry.ConnectionWatch, as every judge does), or that refuses what rfteval sends (a response format,
        # tools, a history after a tool call): the same refusal, no success (retry.RefusalWatch)
        self.sender = TurnSender({run.label: ctx.providers[run.label] for run in ctx.runs}, self.limiters,
                                 self.policy, monitor, spec.timeout)
        self.gone: ServerGone | None = None
        # --batch / --import-responses: cells of OpenAI-compatible models are not sent synchronously, except
        # those the batch phase hands back (--batch-tail sync)
        self.no_sync = {run.label for run in ctx.runs
                        if (opts.batch or opts.import_responses is not None) and batchable(ctx.providers[run.label])}
        self.sync_keys: set[str] = set()
        self.batch_phase: BatchPhase | None = None
        self.judge_batch: JudgeBatch | None = None
        self.jobs: asyncio.Queue[_Job | None] = asyncio.Queue(maxsize=spec.concurrency * 2)
        self.grading: asyncio.Queue[tuple[_Job, ResponseEntry, bool] | None] = asyncio.Queue(
            maxsize=opts.grade_batch_size * 4)
        # A group judge ranks an item's samples against each other: its cells are graded together, once all of
        # the item's epochs (of every model, with group_models) are in.
        from rfteval.graders.base import needs_groups

        self.group_mode = needs_groups(engine.config) if engine is not None else False
        self.group_size = spec.epochs * (len(ctx.runs) if spec.group_models else 1)
        self.tally = GradeTally(in_groups=self.group_mode)
        self.groups: dict[tuple[str, ...], list[tuple[_Job, ResponseEntry, bool, bool]]] = {}
        self.ungraded = 0  # stored responses left ungraded once the judge's cap (JudgeBudget) was reached

    @property
    def capped(self) -> str | None:
        """Why grading stopped: the judge's budget was spent (--max-judge-calls, --max-judge-cost)."""
        budget = self.judge.budget if self.judge is not None else None
        return budget.reached if budget is not None else None

    async def run(self) -> None:
        for label, limiter in self.limiters.items():
            self.monitor.concurrency(label, limiter.current)
        if self.batch_phase is not None:
            outcome = await self.batch_phase.run()
            self.sync_keys = outcome.sync_keys
        if self.judge_batch is not None:
            await self.judge_batch.run()
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self._produce())
            workers = [tg.create_task(self._work()) for _ in range(self.n_workers)]
            graders = [tg.create_task(self._grade_loop()) for _ in range(self.opts.grade_parallel)]
            background = tg.create_task(self._checkpoints()) if self.opts.checkpoint_s > 0 else None
            await asyncio.gather(*workers)
            for _ in graders:
                await self.grading.put(None)
            await asyncio.gather(*graders)
            if background is not None:
                background.cancel()

    async def _produce(self) -> None:
        if self.opts.models_in_turn:
            for run in self.ctx.runs:  # a model's last cells (and their retries) end before the next one's start
                for job in self.ctx.jobs([run]):
                    await self.jobs.put(job)
                await self.jobs.join()
        else:
            for job in self.ctx.jobs():
                await self.jobs.put(job)
        for _ in range(self.n_workers):
            await self.jobs.put(None)

    async def _work(self) -> None:
        while (job := await self.jobs.get()) is not None:
            try:
                await self._cell(job)
            finally:
                self.jobs.task_done()

    async def _cell(self, job: _Job) -> None:
        label = job.run.label
        entry = self.store.get_rollout(job.key) if self.ctx.agent is not None else self.store.get_response(job.key)
        cached = is_reusable_response(entry)
        if not cached and label in self.no_sync and job.key not in self.sync_keys:
            return  # left to a batch (or an import): missing until it comes back, never sent here
        if not cached:
            entry = await self._generate(job)  # stored (and flushed) before it is graded
        assert entry is not None
        cached = cached and entry.session != self.store.session  # a batch result of this run is fresh
        grade = self.store.get_grade(job.key, self.grader_hash) if cached and not entry.error else None
        if self.group_mode:
            await self._group_add(job, entry, cached, grade)
            return
        if entry.error:
            self.tally.not_graded += 1
            self.monitor.advance(label, error=entry.error.type, cached=cached)
            return
        if grade is not None and is_reusable_grade(grade):
            self.tally.reused += 1
            self.monitor.advance(label, error=grade.error_type, cached=cached)
            return
        await self.grading.put((job, entry, cached))

    async def _group_add(self, job: _Job, entry: ResponseEntry, cached: bool, grade: GradeEntry | None) -> None:
        """Hold a cell until its item's group is complete; then grade the group in one batch (or reuse its grades:
        relative scores are only consistent when the whole group was graded together)."""
        key = (job.item.id,) if self.ctx.spec.group_models else (job.run.label, job.item.id)
        reusable = grade is not None and is_reusable_grade(grade)
        group = self.groups.setdefault(key, [])
        group.append((job, entry, cached, reusable))
        if len(group) < self.group_size:
            return
        del self.groups[key]
        ok = [(j, e, c) for j, e, c, _ in group if not e.error]
        self.tally.not_graded += len(group) - len(ok)
        for j, e, c, _ in group:
            if e.error:
                self.monitor.advance(j.run.label, error=e.error.type, cached=c)
        if all(r for _, e, _, r in group if not e.error):
            self.tally.reused += len(ok)
            for j, _, c in ok:
                g = self.store.get_grade(j.key, self.grader_hash)
                self.monitor.advance(j.run.label, error=g.error_type if g else None, cached=c)
            return
        if ok:
            await self._grade_batch(ok)

    async def _generate(self, job: _Job) -> ResponseEntry:
        """The cell played as a rollout (rfteval.run.rollout): its turns sent and stored, the entry it is graded
        from returned."""
        from rfteval.run.rollout import ToolsFailed, play

        try:
            return await play(job, self.sender.send, self.store, self.ctx.agent)
        except ToolsFailed as exc:
            raise ToolsStopped(job.run.label, job.run.model, str(exc)) from None

    async def _grade_loop(self) -> None:
        done = False
        while not done:
            first = await self.grading.get()
            if first is None:
                return
            batch = [first]
            while len(batch) < self.opts.grade_batch_size and not self.grading.empty():
                nxt = self.grading.get_nowait()
                if nxt is None:
                    done = True
                    break
                batch.append(nxt)
            await self._grade_batch(batch)

    async def _grade_batch(self, batch: list[tuple[_Job, ResponseEntry, bool]]) -> None:
        """Grade in a worker thread (graders are sync), store every grade; a grader crash fails these cells only.

        Once the judge's cap is reached, grading stops and generation goes on: the cap is on judge spend, and every
        response stored now is graded by the next run without a model request. A grade that is an error once the
        cap is reached is not stored either (its judge call may have been the one not sent): the next run grades it
        again, from the judge cache for the calls that were answered."""
        if self.capped:
            self.ungraded += len(batch)
            return
        spec = self.ctx.spec
        self.tally.graded += len(batch)
        # a rollout's sample holds its trajectory too (sample["rollout"]); a single answer's is as it always was
        pairs = [(cell_sample(e, spec.reasoning, spec.reasoning_tags), j.item.data) for j, e, _ in batch]
        try:
            # a python grader's unit: one model, one item
            results = await asyncio.to_thread(self.engine.grade_batch, pairs,
                                              [(j.run.label, j.item.id) for j, _, _ in batch])
            if len(results) != len(pairs):
                raise RuntimeError(f"grader returned {len(results)} results for {len(pairs)} samples")
        except Exception as exc:  # noqa: BLE001 - a grader crash fails these cells, never the run
            results = [GradeResult.failed(OTHER, f"grader failed: {type(exc).__name__}: {exc}"[:500])
                       for _ in pairs]
        capped = self.capped
        for (job, _, cached), result in zip(batch, results):
            if capped and result.error is not None:
                self.ungraded += 1
                continue
            self.store.put_grade(new_grade_entry(job.key, self.grader_hash, result))
            self.monitor.advance(job.run.label, error=result.error.type if result.error else None, cached=cached)
        fatal = judge_fatal(self.judge)
        if fatal is not None:  # a refused judge key or an unknown judge model: stop now, not after every cell
            raise fatal

    async def _checkpoints(self) -> None:
        """Rewrite the result files now and then, so a long run shows its results so far."""
        interval = self.opts.checkpoint_s
        while True:
            await asyncio.sleep(interval)
            reader = self.store.reader()
            t0 = time.monotonic()
            try:
                await asyncio.to_thread(self.export, reader)
            except Exception:  # noqa: BLE001 - a failed checkpoint is retried at the next one and at the end
                pass
            finally:
                reader.close()
            interval = max(self.opts.checkpoint_s, 10 * (time.monotonic() - t0))  # never more than ~10% of the time


# ---------------------------------------------------------------- one run, start to end


def run_eval(spec: RunSpec, monitor: RunMonitor | None = None, options: RunOptions | None = None,
             providers: dict[str, Provider] | None = None, judge: Judge | None = None,
             sandbox: SandboxPolicy | None = None, tools: ToolBox | None = None) -> RunResult:
    """Run (or resume) the evaluation `spec` describes; results in spec.out_dir. Raises InputError, FatalRunError.

    `providers` (label → Provider) replaces the ones the spec describes (tests, notebooks); `judge` is handed to
    model graders (score_model, label_model) through the grading engine; `sandbox` is python graders' policy
    (default: the spec's, `spec.sandbox_policy()`). `tools` makes it an agent run (each cell a rollout,
    rfteval.run.rollout) with that tool box; without it, the spec's [tools] (--tools FILE) are opened in the sandbox.
    The run closes the tool box when it ends, as it closes the providers.
    """
    from rfteval.run.rollout import open_tools

    opts = options or RunOptions()
    if tools is not None or spec.tools is not None:  # before anything is opened, sent or written
        refuse_with_tools(spec, opts)
    held = _HeldTools(tools if tools is not None else open_tools(spec, sandbox or spec.sandbox_policy(),
                                                                 opts.backoff_base_s))
    try:
        return _run_eval(spec, monitor, opts, providers, judge, sandbox, held)
    finally:
        held.close()


def refuse_with_tools(spec: RunSpec, opts: RunOptions) -> None:
    """What an agent run cannot do yet, one line each: replayed models hold single answers, and the Batch API paths
    send each request once, while a rollout's next turn depends on the answer before it."""
    from rfteval.run.spec import REPLAY_PREFIX

    for label, m in spec.models.items():
        if m.replay is not None or (m.model or "").startswith(REPLAY_PREFIX):
            raise InputError(f"model {label} replays recorded answers, which hold no rollouts: an agent run needs "
                             "its models' endpoints (replay: with tools is not supported yet)", field="--tools")
    for flag, on in (("--batch", opts.batch), ("--export-requests", opts.export_requests is not None),
                     ("--import-responses", opts.import_responses is not None)):
        if on:
            raise InputError("cannot be combined with --tools yet: a rollout's turns are sent one after another, "
                             "each on the answer before it", field=flag)


@dataclass
class _HeldTools:
    """The run's tool box, closed once: in the run's event loop when it ran (as the providers are), else here."""

    box: ToolBox | None
    closed: bool = False

    async def aclose(self) -> None:
        if self.box is not None and not self.closed:
            self.closed = True
            await self.box.aclose()

    def close(self) -> None:
        if self.box is not None and not self.closed:
            try:
                asyncio.run(self.aclose())
            except Exception:  # noqa: BLE001 - closing is best effort, and never hides why the run ended
                pass


def _run_eval(spec: RunSpec, monitor: RunMonitor | None, opts: RunOptions, providers: dict[str, Provider] | None,
              judge: Judge | None, sandbox: SandboxPolicy | None, tools: _HeldTools) -> RunResult:
    from rfteval.graders.base import load_notes
    from rfteval.graders.engine import GradingEngine
    from rfteval.graders.loader import load_grader
    from rfteval.providers.pricing import price_table

    monitor = monitor or RunMonitor()
    runs = resolve_models(spec)
    grader = load_grader(spec.grader)
    for note in load_notes(grader):  # defaults loading filled in, a job's hyperparameters used or ignored
        monitor.message(f"note: {note}")
    grader_hash = config_hash(grader.model_dump(mode="json"))
    stored_under = grades_key(grader, grader_hash, spec, [r.label for r in runs])
    # every line checked, also when --limit runs only the first N
    dataset_items = count_items(spec.dataset, tools.box is not None)
    n_items = min(spec.limit or dataset_items, dataset_items)
    from rfteval.run.batch.offline import read_responses

    # read whole and checked before a client is opened or the run directory exists: a malformed file leaves nothing
    imported = read_responses(Path(opts.import_responses)) if opts.import_responses is not None else []
    own_providers = providers is None  # preflight
    providers = providers if providers is not None else build_providers(runs, opts)
    for run in runs:  # replaying more epochs than were recorded could only record missing cells: say so first
        provider = providers.get(run.label)
        recorded = provider.max_epoch if provider is not None else None
        if recorded is not None and 0 < recorded < spec.epochs:
            raise InputError(f"model {run.label} replays {recorded} recorded epoch(s); --epochs is {spec.epochs}",
                             run.settings.get("path"), field="--epochs")
    # ---- preflight (rfteval/run/preflight.py): model names, Batch and Responses APIs, before anything is
    # written or sent; and the providers' one-line warnings go to the monitor
    if opts.export_requests is None and opts.import_responses is None:
        from rfteval.run.preflight import preflight, run_checks

        try:
            preflight(run_checks(spec, runs, providers, grader, judge, opts.batch), not spec.skip_model_check)
        except InputError:
            if own_providers:
                _close_providers(providers)
            raise
    for p in providers.values():
        p.on_warning = monitor.message
    # ---- end of preflight
    ctx = _Context(spec, runs, providers, {label: p.identity() for label, p in providers.items()})
    agent_tools = None  # summary.json's `tools`
    if tools.box is not None:
        from rfteval.run.rollout import Agent, tools_summary

        ctx.agent = Agent(tools.box, spec.rollout_limits(), ctx.turn_key)
        agent_tools = tools_summary(spec, tools.box)
    labels = [r.label for r in runs]
    out_dir = spec.out_dir
    interrupted = False
    export_lock = threading.Lock()
    if (opts.batch or opts.export_requests or opts.import_responses) and not any(
            batchable(p) for p in providers.values()):
        raise InputError("no model behind an OpenAI-compatible endpoint: nothing to batch, export or import",
                         field="--batch" if opts.batch else "--export-requests" if opts.export_requests
                         else "--import-responses")
    if not (opts.batch or opts.fresh or opts.export_requests or opts.import_responses):
        from rfteval.run.batch.journal import read_journal

        open_chunks = [c for c in read_journal(out_dir) if c.live and c.file_id and not c.cancel_requested]
        if open_chunks:  # sending their cells synchronously would pay for them twice
            raise InputError(f"{len(open_chunks)} batch(es) of this run are still open at the provider; re-run with "
                             f"--batch to collect them, or cancel them first (rfteval batches {out_dir} --cancel)",
                             out_dir, field="--batch")
    budget = judge_budget(spec, grader, opts, monitor)
    if opts.dry_run:
        from rfteval.run.plan import plan_run

        try:
            cells = ((job.run, job.item.id, job.key, job.request) for job in ctx.jobs())
            plan = plan_run(spec, runs, cells, grader, stored_under, dataset_items, price_table(spec.pricing),
                            fresh=opts.fresh, batch=opts.batch or opts.service_tier == "flex", budget=budget,
                            max_turns=ctx.agent.limits.max_turns if ctx.agent is not None else None)
        finally:
            if own_providers:
                _close_providers(providers)
        return RunResult(out_dir, RunSummary(cells=plan.cells), {}, plan=plan)
    from rfteval.run.batch.journal import refuse_fresh_while_open

    store = RunStore(out_dir, fresh=opts.fresh, before_wipe=refuse_fresh_while_open)
    restore_signals = False
    unhook_judge: Callable[[], None] | None = None
    engine = None
    own_judge = judge is None
    batch_phase = None
    try:
        write_text_atomic(out_dir / RESOLVED_SPEC, to_toml(spec))
        if opts.export_requests is not None:
            from rfteval.run.batch.offline import export_requests

            written = export_requests(Path(opts.export_requests), ctx.batch_jobs(), store)
            _close_providers(providers)
            return RunResult(out_dir, RunSummary(cells=n_items * spec.epochs * len(runs)), {}, exported=written)
        if opts.import_responses is not None:
            from rfteval.run.batch.offline import import_responses

            counts = import_responses(imported, ctx.batch_jobs(), store)
            monitor.message(f"imported {opts.import_responses}: {counts['stored']} responses stored, "
                            f"{counts['errors']} errors, {counts['failed']} failed lines, {counts['already']} already "
                            f"stored, {counts['unknown']} not cells of this run")
        if own_judge:
            judge = build_judge(spec, grader, out_dir, fresh=opts.fresh)
        if judge is not None:  # its ignored-limit warning, as the models' (preflight above)
            judge.provider.on_warning = monitor.message
            judge.budget = budget
        unhook_judge = report_judge_retries(judge, monitor)
        engine = GradingEngine(grader, GradeOptions(sandbox=sandbox or spec.sandbox_policy()), judge=judge)

        def export(reader: StoreReader) -> dict[str, LabelTotals]:
            with export_lock:
                totals = write_results(out_dir, ctx.cells(), reader, stored_under, store.run_id, labels,
                                       session=store.session, parquet=opts.write_parquet, reasoning=spec.reasoning,
                                       tags=spec.reasoning_tags, rollouts=ctx.agent is not None)
                sides = load_run_frames(out_dir, labels)  # the records just written, read once for both
                summary = build_summary(spec, runs, totals, grader, grader_hash, store.run_id, n_items, False, prices,
                                        compare_run(sides, labels, out_dir), sides, dataset_items, agent_tools)
                write_json_atomic(out_dir / SUMMARY, add_judge_usage(summary, judge, prices).to_dict())
                return totals

        prices = price_table(spec.pricing)
        _preload_in_background()
        monitor.start({label: n_items * spec.epochs for label in labels})
        pipeline = _Pipeline(ctx, store, engine, stored_under, monitor, opts, export, judge=judge)
        if opts.batch:
            from rfteval.providers.retry import RetryPolicy
            from rfteval.run.batch.phase import BatchPhase, PhaseOptions

            common = PhaseOptions(store=store, run_id=store.run_id, monitor=monitor,
                          policy=RetryPolicy(max_retries=spec.max_retries, base_s=opts.backoff_base_s,
                                             max_backoff_s=opts.backoff_max_s),
                          poll_s=opts.batch_poll_s, max_lines=opts.batch_max_lines, max_bytes=opts.batch_max_bytes,
                          tail=opts.batch_tail, say=monitor.message)
            batch_phase = pipeline.batch_phase = BatchPhase(
                jobs=ctx.batch_jobs, providers={label: p for label, p in providers.items() if batchable(p)},
                **common)
            if opts.batch_judge and judge is not None:
                from rfteval.run.batch.judge_phase import JudgeBatch

                pipeline.judge_batch = JudgeBatch(pipeline, judge, common)
        try:
            interrupted = _run_loop(pipeline, opts.handle_signals, providers, tools)
        finally:
            monitor.stop()
        if interrupted:
            restore_signals = True
        store.commit()
        fatal = judge_fatal(judge)
        if isinstance(fatal, FatalRunError):  # a 401 or unknown judge model: as fatal as the models' own
            raise fatal
        if fatal is not None and pipeline.gone is None:  # a judge that died after the last batch was graded
            pipeline.gone = fatal
        with export_lock:
            reader = store.reader()
            base = baseline_label(labels)
            held: list[Record] = []  # the baseline's records as written: readiness reads them here, not the file
            try:
                totals = write_results(out_dir, ctx.cells(), reader, stored_under, store.run_id, labels,
                                       session=store.session, parquet=opts.write_parquet, reasoning=spec.reasoning,
                                       tags=spec.reasoning_tags, rollouts=ctx.agent is not None,
                                       hold=lambda rec: held.append(rec) if rec.model_label == base else None)
            finally:
                reader.close()
            sides = load_run_frames(out_dir, labels)  # the records just written, read once for both
            comparison = compare_run(sides, labels, out_dir)
            summary = build_summary(spec, runs, totals, grader, grader_hash, store.run_id, n_items,
                                    not interrupted and pipeline.gone is None, prices, comparison, sides, dataset_items,
                                    agent_tools)
            summary.concurrency = {label: lim.summary() for label, lim in pipeline.limiters.items()}
            open_batches = 0
            if batch_phase is not None:
                chunks = list(batch_phase.journal.chunks.values())
                open_batches = sum(1 for c in chunks if c.live and (c.batch_id or c.file_id))
                summary.batches = {"chunks": len(chunks), "open": open_batches,
                                      "stored_this_invocation": batch_phase.outcome.stored,
                                      "failed_chunks": batch_phase.outcome.failed_chunks,
                                      "messages": list(batch_phase.outcome.messages)}
            write_json_atomic(out_dir / SUMMARY, add_judge_usage(summary, judge, prices).to_dict())
        # the line a stopped run ends with: a judge's cap stops grading only (generation went on), a dead endpoint
        # the run; either way the same command resumes
        stopped, done = None, sum(t.records for t in totals.values())
        if pipeline.gone is not None:
            stopped = (f"{pipeline.gone}; run stopped after {done} of {summary.cells} cells, every stored response is "
                       f"kept. Re-run the same command to resume (same --out {out_dir}).")
        elif pipeline.capped:
            stopped = (f"{done} of {summary.cells} cells graded, then grading stopped: {pipeline.capped}; "
                       f"{done + pipeline.ungraded} responses stored (generation goes on past the judge's cap); the "
                       f"same command resumes grading, re-sending no model request (same --out {out_dir})")
        return RunResult(out_dir, summary, totals, interrupted, batches_open=open_batches, comparison=comparison,
                         stopped=stopped, baseline_records=held, grading=pipeline.tally)
    finally:
        if unhook_judge is not None:
            unhook_judge()
        if restore_signals:  # the shutdown after Ctrl-C is written: Ctrl-C is Ctrl-C again
            signal.signal(signal.SIGINT, signal.default_int_handler)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
        if batch_phase is not None:
            batch_phase.close()
        if engine is not None:
            engine.close()
        if own_judge and judge is not None:
            judge.close()
        elif judge is not None:  # a judge handed in outlives this run, and its cap was this run's
            judge.budget = None
        store.close()


JUDGE_CACHE = "judge_cache.jsonl"


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


def _run_loop(pipeline: _Pipeline, handle_signals: bool, providers: dict[str, Provider], tools: _HeldTools) -> bool:
    """Run the pipeline; True when Ctrl-C (or SIGTERM) stopped it. A fatal endpoint error raises."""

    async def main() -> bool:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None
        stopped = False

        def on_signal() -> None:
            nonlocal stopped
            if stopped:  # a second Ctrl-C (timeout -s INT, CI runners) while shutting down: the first one is enough
                return
            stopped = True
            task.cancel()

        installed = []
        if handle_signals and threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                try:
                    loop.add_signal_handler(sig, on_signal)
                    installed.append(sig)
                except (NotImplementedError, RuntimeError):
                    pass
        try:
            await pipeline.run()
        except asyncio.CancelledError:
            if not stopped:
                raise
        except BaseExceptionGroup as group:
            fatal = group.subgroup(FatalRunError)
            if fatal is not None:
                raise _first(fatal) from None
            gone = group.subgroup(ServerGone)
            if gone is not None:  # stored answers stay stored; the result files say what is missing
                first = _first(gone)
                assert isinstance(first, ServerGone)
                pipeline.gone = first
                return False
            raise _first(group) from None
        finally:
            for sig in installed:
                loop.remove_signal_handler(sig)
                if stopped:  # until the records, summary and resume line are written (run_eval restores it)
                    signal.signal(sig, signal.SIG_IGN)
            for provider in providers.values():
                try:
                    await provider.aclose()
                except Exception:  # noqa: BLE001 - closing is best effort
                    pass
            try:
                await tools.aclose()
            except Exception:  # noqa: BLE001 - closing is best effort
                pass
        return stopped

    return asyncio.run(main())


def _preload_in_background() -> None:
    """Import what only the end of a run needs (Parquet, pandas for the readiness verdict) in a thread while the
    requests are in flight: the event loop mostly waits on the network then, so the imports take that idle
    time instead of adding to the wall time after the last answer."""

    def preload() -> None:
        try:
            import pandas  # noqa: F401
            import pyarrow.parquet  # noqa: F401
        except Exception:  # noqa: BLE001 - only a head start; the real import reports any problem
            pass

    threading.Thread(target=preload, name="rfteval-preload", daemon=True).start()


def _close_providers(providers: dict[str, Provider]) -> None:
    async def close() -> None:
        for provider in providers.values():
            try:
                await provider.aclose()
            except Exception:  # noqa: BLE001 - closing is best effort
                pass

    asyncio.run(close())


def _first(group: BaseExceptionGroup) -> BaseException:
    exc: BaseException = group
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    return exc
