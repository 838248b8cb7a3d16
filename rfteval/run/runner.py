"""`rfteval run` as a library call: N epochs per model, graded while generating, stored before graded, resumable.

The run from start to end: the grader, the models and the dataset checked (preflight), the cells planned
(rfteval.run.cells), the store opened, the pipeline run (rfteval.run.pipeline: one asyncio loop of workers and
grading loops), then the finish: the result files and summary.json written, and why the run stopped, if it did.
Nothing holds the whole dataset or all records in memory.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from rfteval.data.frame import HOLD_MAX_BYTES, load_run_frames
from rfteval.data.outfile import write_json_atomic, write_text_atomic
from rfteval.data.rundir import RESOLVED_SPEC, SUMMARY, baseline_label
from rfteval.errors import InputError
from rfteval.graders.base import GradeOptions
from rfteval.graders.loader import GraderFile
from rfteval.providers import batchable
from rfteval.providers.base import Provider
from rfteval.run.cells import RunContext, count_items
from rfteval.run.invocation import RunOptions, RunResult
from rfteval.run.judging import (
    add_judge_usage,
    build_judge,
    grades_key,
    judge_budget,
    judge_fatal,
    report_judge_retries,
)
from rfteval.run.monitor import RunMonitor
from rfteval.run.pipeline import HeldTools, Pipeline, close_providers, preload_in_background, run_loop
from rfteval.run.results import LabelTotals, write_results
from rfteval.run.spec import ModelRun, RunSpec, config_hash, resolve_models, to_toml
from rfteval.run.store import RunStore
from rfteval.run.summary import RunSummary, build_summary, compare_run
from rfteval.run.turns import FatalRunError

if TYPE_CHECKING:
    from rfteval.data.records import Record
    from rfteval.providers.judge import Judge
    from rfteval.run.store import StoreReader
    from rfteval.sandbox.policy import SandboxPolicy
    from rfteval.tools.base import ToolBox

__all__ = ["FatalRunError", "RunOptions", "RunResult", "build_judge", "grades_key", "run_eval"]


class HeldBaseline:
    """The baseline's records as the finish writes them, kept for readiness while they are as small as an RFT eval's
    usually are (HOLD_MAX_BYTES of JSONL, a few thousand records); past that readiness reads the file back, as
    compare does: holding every record kept the run's memory growing with the dataset (2.1 KB an item at 100,000
    items, where the run is otherwise flat; bench/README.md)."""

    def __init__(self, label: str | None) -> None:
        self.label = label
        self.bytes = 0
        self.records: list[Record] | None = []

    def add(self, rec: Record, size: int) -> None:
        if self.records is None or rec.model_label != self.label:
            return
        self.bytes += size
        if self.bytes > HOLD_MAX_BYTES:
            self.records = None  # readiness reads the file
        else:
            self.records.append(rec)


def build_providers(runs: list[ModelRun], opts: RunOptions | None = None) -> dict[str, Provider]:
    """The providers of a run, with its service tier and transport."""
    from rfteval.run.spec import build_providers as build

    return build(runs, opts.service_tier if opts else None, opts.transport if opts else None)


# ---------------------------------------------------------------- one run, start to end


def run_eval(spec: RunSpec, monitor: RunMonitor | None = None, options: RunOptions | None = None,
             providers: dict[str, Provider] | None = None, judge: Judge | None = None,
             sandbox: SandboxPolicy | None = None, tools: ToolBox | None = None,
             grader_file: GraderFile | None = None) -> RunResult:
    """Run (or resume) the evaluation `spec` describes; results in spec.out_dir. Raises InputError, FatalRunError.

    `providers` (label → Provider) replaces the ones the spec describes (tests, notebooks); `judge` is handed to
    model graders (score_model, label_model) through the grading engine; `sandbox` is python graders' policy
    (default: the spec's, `spec.sandbox_policy()`). `tools` makes it an agent run (each cell a rollout,
    rfteval.run.rollout) with that tool box; without it, the spec's [tools] (--tools FILE) are opened in the sandbox.
    The run closes the tool box when it ends, as it closes the providers. `grader_file` is the spec's grader file
    as the caller already read it (run.paths.run_paths: read once per command); without it, it is read here.
    """
    from rfteval.run.rollout import open_tools

    opts = options or RunOptions()
    if tools is not None or spec.tools is not None:  # before anything is opened, sent or written
        refuse_with_tools(spec, opts)
    held = HeldTools(tools if tools is not None else open_tools(spec, sandbox or spec.sandbox_policy(),
                                                                 opts.backoff_base_s))
    try:
        return _run_eval(spec, monitor, opts, providers, judge, sandbox, held,
                         grader_file if grader_file is not None else GraderFile(spec.grader))
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


def _run_eval(spec: RunSpec, monitor: RunMonitor | None, opts: RunOptions, providers: dict[str, Provider] | None,
              judge: Judge | None, sandbox: SandboxPolicy | None, tools: HeldTools,
              grader_file: GraderFile) -> RunResult:
    from rfteval.graders.base import load_notes
    from rfteval.graders.engine import GradingEngine
    from rfteval.providers.pricing import price_table

    monitor = monitor or RunMonitor()
    runs = resolve_models(spec, grader_file)
    grader = grader_file.config
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
                close_providers(providers)
            raise
    for p in providers.values():
        p.on_warning = monitor.message
    # ---- end of preflight
    ctx = RunContext(spec, runs, providers, {label: p.identity() for label, p in providers.items()})
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
                close_providers(providers)
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
            close_providers(providers)
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
                                        compare_run(sides, labels, out_dir, grader), sides, dataset_items, agent_tools)
                write_json_atomic(out_dir / SUMMARY, add_judge_usage(summary, judge, prices).to_dict())
                return totals

        prices = price_table(spec.pricing)
        preload_in_background()
        monitor.start({label: n_items * spec.epochs for label in labels})
        pipeline = Pipeline(ctx, store, engine, stored_under, monitor, opts, export, judge=judge)
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
            interrupted = run_loop(pipeline, opts.handle_signals, providers, tools)
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
            held = HeldBaseline(base)  # the baseline's records as written: readiness reads them, not the file
            try:
                totals = write_results(out_dir, ctx.cells(), reader, stored_under, store.run_id, labels,
                                       session=store.session, parquet=opts.write_parquet, reasoning=spec.reasoning,
                                       tags=spec.reasoning_tags, rollouts=ctx.agent is not None, hold=held.add)
            finally:
                reader.close()
            sides = load_run_frames(out_dir, labels)  # the records just written, read once for both
            comparison = compare_run(sides, labels, out_dir, grader)
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
                         stopped=stopped, baseline_records=held.records, grading=pipeline.tally, grader=grader)
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
