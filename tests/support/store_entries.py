"""Store entries for tests: a response that came back, and a cell whose generation failed."""

from __future__ import annotations

from rfteval.providers.base import Generation
from rfteval.run.store import ResponseEntry, new_response_entry


def ok(key: str, text: str = "out", label: str = "base", item: str = "1", epoch: int = 1,
       session: str = "s") -> ResponseEntry:
    gen = Generation(output_text=text, usage={"input_tokens": 3, "output_tokens": 5, "reasoning_tokens": 1})
    return new_response_entry(key=key, label=label, model="m", item_id=item, epoch=epoch, generation=gen,
                              latency_s=0.1, session=session)


def failed(key: str, kind: str = "server", item: str = "1", epoch: int = 1) -> ResponseEntry:
    return new_response_entry(key=key, label="base", model="m", item_id=item, epoch=epoch,
                              error=(kind, "HTTP 500: boom"))
