"""The batch journal, DIR/store/batches.jsonl: its typed events, appended (fsynced) and read back into chunks.

Why a journal: a batch costs money the moment it is created, and its id is the only way to collect what it
paid for. So every step is appended (and fsynced) *before* the next one starts:

    planned   chunk id, label, model, endpoint, the cell keys, the input file's sha256 and path
    uploaded  the file id
    created   the batch id (or `adopted`: found by listing batches after a crash)
    status    each change of status and request counts (what `rfteval batches DIR` shows offline)
    collected the end: how many cells were stored, re-queued, failed; the chunk is done

How the batch phase (rfteval.run.batch.phase) recovers from a crash between any two lines is told there.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import msgspec

from rfteval.data.json_types import JSONField, JSONMapping, JSONObject
from rfteval.data.rundir import JOURNAL
from rfteval.errors import InputError


@dataclass
class Chunk:
    """One batch input file and what became of it, as the journal tells it."""

    chunk_id: str
    label: str
    model: str
    endpoint: str
    keys: list[str]
    sha256: str
    path: str
    lines: int
    bytes: int
    planned_at: float
    file_id: str | None = None
    batch_id: str | None = None
    status: str = "planned"
    counts: dict[str, int] = field(default_factory=dict)
    done: bool = False
    result: JSONObject = field(default_factory=dict)  # the Collected/Abandoned event, as journalled
    cancel_requested: bool = False
    phase: str = "generate"  # or "judge": --batch-judge's calls, filed in the judge cache

    @property
    def live(self) -> bool:
        return not self.done


class _Event(msgspec.Struct, kw_only=True, tag_field="event"):
    """One line of the batch journal. Fields are declared in the order they are written; `to_dict` leaves out
    the keys in __optional__ while unset, so the journal's lines are what the dict-based code wrote."""

    chunk: str
    __optional__: ClassVar[frozenset[str]] = frozenset()

    def to_dict(self) -> JSONObject:
        out = msgspec.to_builtins(self)
        at = out.pop("at", None)
        out = {k: v for k, v in out.items() if not (v is None and k in self.__optional__)}
        if at is not None:
            out["at"] = at  # stamped by Journal.append, always last
        return out


class Planned(_Event, kw_only=True, tag="planned"):
    label: str
    model: str
    endpoint: str
    keys: list[str]
    sha256: str
    path: str
    lines: int
    bytes: int
    phase: str = "generate"  # or "judge"
    at: float | None = None


class Uploaded(_Event, kw_only=True, tag="uploaded"):
    file_id: str
    at: float | None = None


class Created(_Event, kw_only=True, tag="created"):
    batch_id: str
    status: str | None = None
    adopted: bool | None = None  # created before the last run stopped, found again
    at: float | None = None
    __optional__ = frozenset({"adopted"})


class Status(_Event, kw_only=True, tag="status"):
    status: str
    counts: dict[str, JSONField] = {}  # the provider's request_counts, as it sent them
    at: float | None = None


class CancelRequested(_Event, kw_only=True, tag="cancel_requested"):
    at: float | None = None


class Collected(_Event, kw_only=True, tag="collected"):
    status: str | None = None
    batch_id: str | None = None
    stored: int = 0
    errors: int | None = None
    requeued: int = 0
    message: str | None = None
    at: float | None = None
    __optional__ = frozenset({"errors", "message"})


class Abandoned(_Event, kw_only=True, tag="abandoned"):
    status: str | None = None
    reason: str | None = None
    at: float | None = None
    __optional__ = frozenset({"reason"})


JournalEvent = Planned | Uploaded | Created | Status | CancelRequested | Collected | Abandoned


def decode_event(obj: object) -> JournalEvent | None:
    """A journal line as its typed event; None for a line that is not one (torn, foreign, or of a later kind)."""
    try:
        return msgspec.convert(obj, JournalEvent)
    except msgspec.ValidationError:
        return None


class Journal:
    """DIR/store/batches.jsonl: append-only, fsynced per line; a torn last line (a kill mid-write) is cut."""

    def __init__(self, store_dir: Path):
        from rfteval.run.store import _Log

        self.path = store_dir / JOURNAL
        self.log = _Log(self.path)
        self.chunks: dict[str, Chunk] = {}
        for event in _read_events(self.path):
            self._apply(event)

    def append(self, event: JournalEvent | JSONMapping) -> None:
        """Journal an event (a dict is a line as written: tests and tools), stamped with the time, fsynced."""
        typed = event if isinstance(event, _Event) else decode_event(event)
        if typed is None:
            raise ValueError(f"not a batch journal event: {event!r}")
        typed.at = round(time.time(), 3)
        self.log.append(typed.to_dict())
        os.fsync(self.log.fh.fileno())
        self._apply(typed)

    def _apply(self, e: JournalEvent | None) -> None:
        if e is None:  # a torn or foreign line: nothing to apply
            return
        cid = e.chunk
        if isinstance(e, Planned):
            self.chunks[cid] = Chunk(cid, e.label, e.model, e.endpoint, list(e.keys), e.sha256, e.path, e.lines,
                                     e.bytes, float(e.at or 0), phase=e.phase or "generate")
            return
        chunk = self.chunks.get(cid)
        if chunk is None:
            return
        if isinstance(e, Uploaded):
            chunk.file_id, chunk.status = e.file_id, "uploaded"
        elif isinstance(e, Created):
            chunk.batch_id, chunk.status = e.batch_id, e.status or "validating"
        elif isinstance(e, Status):
            chunk.status = e.status
            chunk.counts = {k: v for k, v in (e.counts or {}).items() if isinstance(v, int)}  # the SDK's: ints
        elif isinstance(e, CancelRequested):
            chunk.cancel_requested = True
        elif isinstance(e, (Collected, Abandoned)):
            chunk.done = True
            chunk.status = e.status or chunk.status
            chunk.result = {k: v for k, v in e.to_dict().items() if k not in ("event", "chunk", "at")}

    def live(self, phase: str | None = None) -> list[Chunk]:
        return [c for c in self.chunks.values() if c.live and (phase is None or c.phase == phase)]

    def close(self) -> None:
        self.log.close()


def _read_events(path: Path) -> Iterator[JournalEvent | None]:
    from rfteval.run.store import iter_log

    if path.exists():
        for line in iter_log(path):
            yield decode_event(line) if isinstance(line, dict) else None


def read_journal(run_dir: Path) -> list[Chunk]:
    """The chunks of a run directory, read-only (for `rfteval batches`): no lock, no writes."""
    j = object.__new__(Journal)
    j.chunks = {}
    for event in _read_events(Path(run_dir) / "store" / JOURNAL):
        j._apply(event)
    return list(j.chunks.values())


def refuse_fresh_while_open(run_dir: Path) -> None:
    """--fresh would forget the ids of batches still open at the provider while they still cost money: refuse."""
    live = [c for c in read_journal(Path(run_dir)) if c.live and not c.cancel_requested and c.file_id]
    if live:
        raise InputError(f"{len(live)} batch(es) of this run are still open at the provider; re-run without "
                         f"--fresh to collect them, or cancel them first (rfteval batches {run_dir} --cancel)",
                         run_dir, field="--fresh")
