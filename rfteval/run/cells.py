"""A run's cells, planned from the spec and the dataset: each (model, item, epoch) with its request and cache key,
in dataset order, streamed (nothing holds the whole dataset); and the dataset checked whole before any request."""

from __future__ import annotations

import hashlib
import itertools
from array import array
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from rfteval.data.dataset import Item, iter_items
from rfteval.data.json_types import JSONObject
from rfteval.errors import InputError
from rfteval.providers import batchable
from rfteval.providers.base import GenerationRequest, Provider
from rfteval.run.results import Cell
from rfteval.run.spec import ModelRun, RunSpec

if TYPE_CHECKING:
    from rfteval.run.batch.lines import BatchJob
    from rfteval.run.rollout import Agent


@dataclass
class Job:
    run: ModelRun
    item: Item
    epoch: int
    request: GenerationRequest
    key: str  # the cell's key, its grades' and record's: an agent run's rollout key, else first_key
    first_key: str  # the first turn's request key


@dataclass
class RunContext:
    spec: RunSpec
    runs: list[ModelRun]
    providers: dict[str, Provider]
    identities: dict[str, JSONObject] = field(default_factory=dict)
    agent: Agent | None = None  # an agent run (--tools): each cell a rollout of turns

    def turn_key(self, run: ModelRun, request: GenerationRequest, epoch: int) -> str:
        """The cache key of one turn's request: the endpoint, the body (the history with it), the epoch."""
        from rfteval.run.store import cell_key

        return cell_key(self.identities[run.label], self.providers[run.label].request_body(request), epoch)

    def jobs(self, runs: list[ModelRun] | None = None) -> Iterator[Job]:
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
                    yield Job(run, item, epoch, req, key, first)

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
