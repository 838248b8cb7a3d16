"""`rfteval run --batch --batch-judge`: the judge calls of model graders as a second batch phase.

Why a dry pass: which judge requests a grader makes depends on the grader (score_model, label_model, multi,
a group judge) and on the output it grades, and only the grader knows. So once the generation batches are in,
every cell that still needs a grade is graded once with a stand-in judge that answers from the judge's cache
and *records* every request it cannot answer, keyed by the judge cache key (the key the real judge would use).
Those requests go out as batches (one judge model per input file, the same crash-safe journal, `custom_id` =
the judge cache key), their answers are filed in the judge cache, and then the normal grading pass runs: every
judge call it makes is a cache hit. Nothing from the dry pass is stored. A request the dry pass could not
foresee (a grader whose second call depends on the first answer) is simply a cache miss then, and goes
synchronously, as without --batch-judge.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

from rfteval.data.json_types import JSONObject
from rfteval.providers import batchable
from rfteval.providers.base import BatchProvider, Generation, GenerationRequest, ProviderError
from rfteval.run.batch.lines import BatchJob, CellInfo, entry_from_result
from rfteval.run.batch.phase import BatchPhase, PhaseOptions

if TYPE_CHECKING:
    from rfteval.data.dataset import Item
    from rfteval.graders.engine import GradingEngine
    from rfteval.providers.judge import Judge, JudgeAnswer
    from rfteval.providers.retry import OnRetry
    from rfteval.run.spec import ModelRun, RunSpec
    from rfteval.run.store import ResponseEntry, RunStore, StoreReader

DEFERRED = "deferred to a judge batch"


# What the dry pass reads of the run's pipeline (rfteval.run.pipeline.Pipeline, which this module must not
# import: the runner imports it). Read-only properties, so the runner's own attribute types satisfy them.
class DryPassJob(Protocol):
    @property
    def key(self) -> str: ...

    @property
    def run(self) -> ModelRun: ...

    @property
    def item(self) -> Item: ...


class DryPassCells(Protocol):
    @property
    def spec(self) -> RunSpec: ...

    def jobs(self) -> Iterator[DryPassJob]: ...


class DryPassPipeline(Protocol):
    @property
    def store(self) -> RunStore: ...

    @property
    def engine(self) -> GradingEngine: ...

    @property
    def ctx(self) -> DryPassCells: ...

    @property
    def group_mode(self) -> bool: ...

    @property
    def group_size(self) -> int: ...

    @property
    def grader_hash(self) -> str: ...


class _Recorder:
    """The Judge's stand-in during the dry pass (providers.judge.JudgeClient): it sends nothing, so it never stops."""

    def __init__(self, judge: Judge):
        self.judge = judge
        self.model_override = judge.model_override
        self.provider = judge.provider
        self.identity = self.provider.identity()
        self.requests: dict[str, tuple[str, JSONObject]] = {}  # judge cache key → (model, body)
        self.on_retry: OnRetry | None = None
        self.fatal_error: ProviderError | None = None
        self.fatal_model: str | None = None
        self.gone = False

    def complete(self, requests: Sequence[GenerationRequest]) -> list[JudgeAnswer]:
        from rfteval.providers.judge import answer_from_entry, cache_key, current_repeat

        out: list[JudgeAnswer] = []
        for r in requests:
            if self.model_override:
                r = dataclasses.replace(r, model=self.model_override)
            try:
                body = self.provider.request_body(r)
            except ProviderError as exc:
                out.append(exc)
                continue
            key = cache_key(self.identity, body, current_repeat())
            entry = self.judge.cache.get(key)
            if entry is not None:
                out.append(answer_from_entry(entry))
                continue
            self.requests.setdefault(key, (r.model, body))
            out.append(ProviderError("server", DEFERRED))
        return out

    def usage(self) -> dict[str, dict[str, int | None]]:
        return {}


class _SameProvider(Mapping[str, BatchProvider]):
    """Every judge model's chunks go to the one judge endpoint: any label maps to it, and it is listed once."""

    def __init__(self, provider: BatchProvider):
        self.provider = provider

    def __getitem__(self, key: str) -> BatchProvider:
        return self.provider

    def __iter__(self) -> Iterator[str]:
        return iter(("judge",))

    def __len__(self) -> int:
        return 1


class JudgeBatch:
    """The judge phase of one run: dry grading pass, then batches filed in the judge cache."""

    def __init__(self, pipeline: DryPassPipeline, judge: Judge, phase_kwargs: PhaseOptions):
        self.pipeline, self.judge, self.phase_kwargs = pipeline, judge, phase_kwargs
        self.requests: dict[str, tuple[str, JSONObject]] = {}
        self.phase: BatchPhase | None = None
        self.dry_failures = 0  # cells whose dry grading raised: their judge calls will go synchronously
        self.dry_error: str | None = None

    async def run(self) -> None:
        provider = self.judge.provider if self.judge is not None else None
        if provider is None or not batchable(provider):
            return
        reader = self.pipeline.store.reader()  # its own connection: the dry pass runs in a worker thread
        try:
            self.requests = await asyncio.to_thread(self._dry_pass, reader)
        finally:
            reader.close()
        say = self.phase_kwargs.get("say")
        if self.dry_failures and say is not None:
            say(f"--batch-judge: the dry pass could not grade {self.dry_failures} cell(s) ({self.dry_error}); "
                "their judge calls go synchronously, at the synchronous price")
        models = sorted({model for model, _ in self.requests.values()})
        labels = {m: f"m{i + 1}" for i, m in enumerate(models)}  # a short per-model label names its chunks
        api = provider.api

        def jobs() -> Iterator[BatchJob]:
            for key, (model, body) in self.requests.items():
                yield key, CellInfo(labels[model], model, "", 0, api, False), body

        self.phase = BatchPhase(jobs=jobs, providers=_SameProvider(provider), phase="judge",
                                have=lambda key: self.judge.cache.get(key) is not None, ingest=self._file,
                                **self.phase_kwargs)
        try:
            await self.phase.run()
        finally:
            self.phase.close()

    def _file(self, key: str, cell: CellInfo, line: JSONObject) -> str:
        """One judge answer into the judge cache, exactly as the judge files a synchronous one."""
        from rfteval.providers.judge import cache_entry

        what, entry = entry_from_result(key, cell, line, session="")
        if what == "stored" and entry is not None:
            gen = Generation(output_text=entry.output_text or "", usage=dict(entry.usage or {}),
                             finish_reason=entry.finish_reason)
            self.judge.cache.put(cache_entry(key, cell.model, gen))
        elif what == "error" and entry is not None and entry.error is not None and entry.error.type == "refusal":
            self.judge.cache.put(cache_entry(key, cell.model, ProviderError("refusal", entry.error.message)))
        return what

    def _dry_pass(self, store: StoreReader) -> dict[str, tuple[str, JSONObject]]:
        """Grade every cell that needs a grade with the recorder; return the judge requests it could not answer."""
        from rfteval.data.reasoning import entry_sample
        from rfteval.graders.engine import GradingEngine
        from rfteval.run.store import is_reusable_grade

        p = self.pipeline
        recorder = _Recorder(self.judge)
        engine = GradingEngine(p.engine.config, p.engine.ctx.options, judge=recorder)
        try:
            groups: dict[tuple[str, ...], list[tuple[DryPassJob, ResponseEntry]]] = {}
            batch: list[tuple[DryPassJob, ResponseEntry]] = []

            def grade(cells: list[tuple[DryPassJob, ResponseEntry]]) -> None:
                spec = p.ctx.spec
                pairs = [(entry_sample(e, mode=spec.reasoning, tags=spec.reasoning_tags), j.item.data)
                         for j, e in cells]
                try:
                    engine.grade_batch(pairs, [(j.run.label, j.item.id) for j, _ in cells])
                except Exception as exc:  # noqa: BLE001 - these cells batch nothing; the grading pass reports them
                    self.dry_failures += len(cells)
                    self.dry_error = self.dry_error or f"{type(exc).__name__}: {exc}"[:200]

            for job in p.ctx.jobs():
                entry = store.get_response(job.key)
                if entry is None or entry.error:
                    continue
                if p.group_mode:
                    key = (job.item.id,) if p.ctx.spec.group_models else (job.run.label, job.item.id)
                    group = groups.setdefault(key, [])
                    group.append((job, entry))
                    if len(group) == p.group_size:
                        del groups[key]
                        if not all(is_reusable_grade(store.get_grade(j.key, p.grader_hash)) for j, _ in group):
                            grade(group)
                    continue
                if is_reusable_grade(store.get_grade(job.key, p.grader_hash)):
                    continue
                batch.append((job, entry))
                if len(batch) >= 256:
                    grade(batch)
                    batch = []
            if batch:
                grade(batch)
        finally:
            engine.close()
        return recorder.requests
