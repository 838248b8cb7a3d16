"""A run's pipeline, in one asyncio loop: a producer streams the cells into a bounded queue, `concurrency` workers
take them, look each up in the store, call the endpoint with retries when it is not there, append the response to
the store, and hand it to the grading loops, which grade micro-batches in worker threads (GradingEngine.grade_batch
is sync). Ctrl-C and SIGTERM stop it with every stored response kept; the providers and tools close in its loop."""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rfteval.graders.base import OTHER, GradeResult
from rfteval.providers import batchable
from rfteval.providers.base import Provider
from rfteval.run.cells import Job, RunContext
from rfteval.run.invocation import GradeTally, RunOptions
from rfteval.run.judging import judge_fatal
from rfteval.run.monitor import RunMonitor
from rfteval.run.results import LabelTotals
from rfteval.run.rollout import cell_sample
from rfteval.run.store import GradeEntry, ResponseEntry, RunStore, is_reusable_grade, is_reusable_response, new_grade_entry
from rfteval.run.turns import FatalRunError, ServerGone, ToolsStopped, TurnSender

if TYPE_CHECKING:
    from rfteval.graders.engine import GradingEngine
    from rfteval.providers.judge import Judge
    from rfteval.run.batch.judge_phase import JudgeBatch
    from rfteval.run.batch.phase import BatchPhase
    from rfteval.run.store import StoreReader
    from rfteval.tools.base import ToolBox


class Pipeline:
    def __init__(self, ctx: RunContext, store: RunStore, engine: GradingEngine, grader_hash: str, monitor: RunMonitor,
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
        self.jobs: asyncio.Queue[Job | None] = asyncio.Queue(maxsize=spec.concurrency * 2)
        self.grading: asyncio.Queue[tuple[Job, ResponseEntry, bool] | None] = asyncio.Queue(
            maxsize=opts.grade_batch_size * 4)
        # A group judge ranks an item's samples against each other: its cells are graded together, once all of
        # the item's epochs (of every model, with group_models) are in.
        from rfteval.graders.base import needs_groups

        self.group_mode = needs_groups(engine.config) if engine is not None else False
        self.group_size = spec.epochs * (len(ctx.runs) if spec.group_models else 1)
        self.tally = GradeTally(in_groups=self.group_mode)
        self.groups: dict[tuple[str, ...], list[tuple[Job, ResponseEntry, bool, bool]]] = {}
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

    async def _cell(self, job: Job) -> None:
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

    async def _group_add(self, job: Job, entry: ResponseEntry, cached: bool, grade: GradeEntry | None) -> None:
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

    async def _generate(self, job: Job) -> ResponseEntry:
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

    async def _grade_batch(self, batch: list[tuple[Job, ResponseEntry, bool]]) -> None:
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


@dataclass
class HeldTools:
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


def run_loop(pipeline: Pipeline, handle_signals: bool, providers: dict[str, Provider], tools: HeldTools) -> bool:
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


def preload_in_background() -> None:
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


def close_providers(providers: dict[str, Provider]) -> None:
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
