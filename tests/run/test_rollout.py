"""rfteval/run/rollout.py: one cell played as a rollout."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from pathlib import Path

from rfteval.data.dataset import Item
from rfteval.providers.base import GenerationRequest, Sampling
from rfteval.run.rollout import play
from rfteval.run.spec import ModelRun
from rfteval.run.store import CellKeys, ResponseEntry, RunStore, new_response_entry

RUN = ModelRun("base", "m-base", "openai", {}, Sampling())
ITEM = Item("i1", 1, {"id": "i1", "messages": [{"role": "user", "content": "q"}]})


@dataclass(frozen=True)
class Job:
    run: ModelRun
    item: Item
    epoch: int
    request: GenerationRequest
    key: str


def job(epoch: int = 1) -> Job:
    return Job(RUN, ITEM, epoch, GenerationRequest(model="m-base", messages=ITEM.messages, item_id="i1", epoch=epoch),
               f"key{epoch}")


def test_without_tools_a_cell_is_one_turn_sent_once_and_stored_before_it_is_returned(tmp_path: Path):
    sent: list[tuple[GenerationRequest, CellKeys, int]] = []
    with RunStore(tmp_path / "run") as store:
        async def send(run: ModelRun, request: GenerationRequest, keys: CellKeys, turn: int) -> ResponseEntry:
            sent.append((request, keys, turn))
            assert store.get_response(keys["key"]) is None  # nothing stored before the answer
            return new_response_entry(**keys, latency_s=0.1)

        cell = job()
        entry = asyncio.run(play(cell, send, store))
        assert [(r, t) for r, _, t in sent] == [(cell.request, 1)]  # the item's own request, as the runner built it
        assert sent[0][1] == {"key": "key1", "label": "base", "model": "m-base", "item_id": "i1", "epoch": 1,
                              "session": store.session}
        assert store.get_response("key1") == entry
    lines = (tmp_path / "run" / "store" / "responses.jsonl").read_text().splitlines()
    assert [json.loads(line)["key"] for line in lines] == ["key1"]
    assert sorted(p.name for p in (tmp_path / "run" / "store").glob("*.jsonl")) == ["grades.jsonl", "responses.jsonl"]
