"""One cell of a run played as a rollout: the model's turns, each stored before it is used.

A cell (model, item, epoch) is a rollout of one or more turns. Without tools it is exactly one turn: the item's
request, sent once, its answer (or the error it ended in) stored under the cell's key as it always was.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from rfteval.data.dataset import Item
    from rfteval.providers.base import GenerationRequest
    from rfteval.run.spec import ModelRun
    from rfteval.run.store import CellKeys, ResponseEntry, RunStore

# How a turn goes out (rfteval.run.turns.TurnSender.send): the model run, its request, the keys its entry is stored
# under, the turn's number; the answer or the error it ended in after every retry.
SendTurn = Callable[["ModelRun", "GenerationRequest", "CellKeys", int], Awaitable["ResponseEntry"]]


class RolloutCell(Protocol):
    """What a rollout is played for (the runner's job): one (model, item, epoch), its first request and that
    request's key. Read-only properties, so the runner's own attribute types satisfy them."""

    @property
    def run(self) -> ModelRun: ...

    @property
    def item(self) -> Item: ...

    @property
    def epoch(self) -> int: ...

    @property
    def request(self) -> GenerationRequest: ...

    @property
    def key(self) -> str: ...  # the first turn's cache key (rfteval.run.store.cell_key over its request body)


async def play(cell: RolloutCell, send: SendTurn, store: RunStore) -> ResponseEntry:
    """Play `cell`: its turns sent through `send`, each stored (and flushed) before anything uses it; the entry
    the cell is graded from."""
    keys: CellKeys = {"key": cell.key, "label": cell.run.label, "model": cell.run.model, "item_id": cell.item.id,
                      "epoch": cell.epoch, "session": store.session}
    entry = await send(cell.run, cell.request, keys, 1)
    store.put_response(entry)  # stored (and flushed) before it is graded
    return entry
