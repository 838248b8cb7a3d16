"""The Batch API path of `rfteval run --batch`: cells go out as batch files and come back into the same store.

Every step is journalled first (rfteval.run.batch.journal). A crash between any two journal lines loses nothing:
a chunk with no file id is uploaded again from its input file (the sha256 says it is the same one); a chunk with a
file id but no batch id may have a batch that was created just before the crash, so the batches are listed and the
one whose `metadata` holds this run id and chunk id is adopted; only when none is found is a batch created. A batch
is therefore never submitted twice.

Results are matched on `custom_id`, which is the cell's cache key, and stored exactly as a synchronous response
(with `tier: "batch"`, so the summary prices them at batch rates): grading does not know the difference.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import os
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol, Required, TypedDict, TypeVar

from rfteval.data.json_types import JSONObject
from rfteval.data.rundir import CHUNK_DIR
from rfteval.errors import InputError
from rfteval.providers.base import ProviderError
from rfteval.run.batch.journal import (
    Abandoned,
    CancelRequested,
    Chunk,
    Collected,
    Created,
    Journal,
    Planned,
    Status,
    Uploaded,
    read_journal,
)
from rfteval.run.batch.lines import (
    ENDPOINTS,
    BatchJob,
    CellInfo,
    entry_from_result,
    parse_result_lines,
    request_line,
    result_key,
)

if TYPE_CHECKING:
    from openai.types import Batch

    from rfteval.providers.base import BatchProvider
    from rfteval.providers.retry import RetryPolicy
    from rfteval.run.store import ResponseEntry, RunStore

T = TypeVar("T")

MAX_LINES = 50_000  # the Batch API's limit per input file
MAX_BYTES = 190 * 1024 * 1024  # under its 200 MB limit, with room for the multipart envelope
LIVE = frozenset({"validating", "in_progress", "finalizing", "cancelling"})
TERMINAL = frozenset({"completed", "failed", "expired", "cancelled"})
META_RUN, META_CHUNK = "rfteval_run", "rfteval_chunk"
BatchEndpoint = Literal["/v1/chat/completions", "/v1/responses"]
# a journalled endpoint as the SDK's batches.create spells its type (every one was written from ENDPOINTS)
_BATCH_ENDPOINTS: dict[str, BatchEndpoint] = {"/v1/chat/completions": "/v1/chat/completions",
                                              "/v1/responses": "/v1/responses"}


class BatchMonitor(Protocol):
    """What the phase tells the run's progress display (RunMonitor.batch)."""

    def batch(self, chunk: str, label: str, status: str, counts: dict[str, int]) -> None: ...


class PhaseOptions(TypedDict, total=False):
    """BatchPhase's settings that a run shares between its generation phase and its judge phase."""

    store: Required[RunStore]
    run_id: Required[str]
    monitor: Required[BatchMonitor]
    policy: Required[RetryPolicy]
    poll_s: float
    max_lines: int
    max_bytes: int
    tail: str
    max_rounds: int
    say: Callable[[str], None] | None


# ---------------------------------------------------------------- the batch phase


@dataclass
class BatchOutcome:
    stored: int = 0
    requeued: list[str] = field(default_factory=list)
    failed_chunks: int = 0
    messages: list[str] = field(default_factory=list)
    sync_keys: set[str] = field(default_factory=set)  # --batch-tail sync: cells the pipeline may send itself


class BatchPhase:
    """Plan, submit, poll and collect batches for every cell without a stored response.

    `jobs` yields (key, CellInfo, body) for every cell of a batchable model; `clients` maps label → the
    provider whose SDK client reaches that endpoint.
    """

    def __init__(self, *, store: RunStore, run_id: str, jobs: Callable[[], Iterable[BatchJob]],
                 providers: Mapping[str, BatchProvider], monitor: BatchMonitor, policy: RetryPolicy, poll_s: float = 30.0,
                 max_lines: int = MAX_LINES, max_bytes: int = MAX_BYTES, tail: str = "batch", max_rounds: int = 3,
                 say: Callable[[str], None] | None = None, phase: str = "generate",
                 have: Callable[[str], bool] | None = None,
                 ingest: Callable[[str, CellInfo, JSONObject], str] | None = None):
        """`phase`, `have` and `ingest` let the judge phase reuse all of this: `have(key)` says a result is
        already filed, `ingest(key, cell, line)` files one result line and says "stored", "error", "requeue"."""
        self.store, self.run_id, self.jobs_fn, self.providers = store, run_id, jobs, providers
        self.phase, self._have_fn, self._ingest_fn = phase, have, ingest
        self.monitor, self.policy, self.poll_s = monitor, policy, poll_s
        self.max_lines, self.max_bytes, self.tail, self.max_rounds = max_lines, max_bytes, tail, max_rounds
        self.say = say or (lambda msg: None)
        self.journal = Journal(store.store_dir)
        self.chunk_dir = store.store_dir / CHUNK_DIR
        self.cells: dict[str, CellInfo] = {}
        self.outcome = BatchOutcome()

    def close(self) -> None:
        self.journal.close()

    # ---- the whole phase
    async def run(self) -> BatchOutcome:

        for key, info, _ in self.jobs_fn():
            if not self._have(key):
                self.cells[key] = info
        await self._recover()
        in_live = {k for c in self.journal.live(self.phase) for k in c.keys}
        todo = [k for k in self.cells if k not in in_live]
        for round_no in range(self.max_rounds + 1):
            if todo:
                if round_no > 0 and self.tail == "sync":
                    self.outcome.sync_keys.update(todo)
                    self.say(f"batch: {len(todo)} re-queued cells go synchronously (--batch-tail sync)")
                    todo = []
                else:
                    await self._submit(set(todo))
            await self._poll_until_done()
            todo = [k for k in self.outcome.requeued if not self._have(k)]
            self.outcome.requeued = []
            if not todo:
                break
        else:
            if todo:
                self.say(f"batch: {len(todo)} cells still have no response after {self.max_rounds} re-queues; "
                         "re-run the same command to send them again")
        return self.outcome

    # ---- after a crash: finish what the journal started
    async def _recover(self) -> None:
        orphans = [c for c in self.journal.live(self.phase) if c.batch_id is None]
        if not orphans:
            return
        found = await self._find_batches({c.chunk_id for c in orphans if c.file_id is not None},
                                         min(c.planned_at for c in orphans))
        for chunk in orphans:
            if chunk.chunk_id in found:
                b = found[chunk.chunk_id]
                self.journal.append(Created(chunk=chunk.chunk_id, batch_id=b.id, status=b.status, adopted=True))
                self.say(f"batch {chunk.chunk_id}: adopted {b.id} (created before the last run stopped)")
                continue
            path = Path(chunk.path)
            if not path.exists() or _sha256_file(path) != chunk.sha256:
                self.journal.append(Abandoned(chunk=chunk.chunk_id, status="abandoned",
                                              reason="input file gone before it was submitted"))
                continue
            await self._send(chunk)

    async def _find_batches(self, chunk_ids: set[str], since: float) -> dict[str, Batch]:
        """This run's batches among the provider's, newest first, stopping at ones older than the oldest chunk."""
        found: dict[str, Batch] = {}
        if not chunk_ids:
            return found
        seen_clients: set[int] = set()
        for provider in self.providers.values():
            client = provider.client
            if id(client) in seen_clients:
                continue
            seen_clients.add(id(client))
            after: str | None = None
            for _ in range(100):  # 10,000 batches at most
                page = await self._call(provider, functools.partial(client.batches.list, limit=100, after=after)
                                        if after else functools.partial(client.batches.list, limit=100))
                data = [b.model_dump(mode="json") for b in page.data]
                for batch, b in zip(page.data, data, strict=True):
                    meta = b.get("metadata") or {}
                    if meta.get(META_RUN) == self.run_id and meta.get(META_CHUNK) in chunk_ids:
                        found.setdefault(meta[META_CHUNK], batch)
                if (not data or not page.has_more or len(found) == len(chunk_ids)
                        or min(int(b.get("created_at") or 0) for b in data) < since - 3600):
                    break
                after = data[-1]["id"]
        return found

    # ---- planning and submission
    async def _submit(self, keys: set[str]) -> None:
        self.chunk_dir.mkdir(parents=True, exist_ok=True)
        writers: dict[str, _ChunkWriter] = {}
        for key, info, body in self.jobs_fn():
            if key not in keys:
                continue
            keys.discard(key)
            w = writers.get(info.label)
            line = request_line(key, ENDPOINTS[info.api], body).encode() + b"\n"
            if w is not None and (w.lines >= self.max_lines or w.bytes + len(line) > self.max_bytes):
                await self._send(self._plan(w))
                w = None
            if w is None:
                w = writers[info.label] = _ChunkWriter(self._next_chunk_id(info.label), info, self.chunk_dir)
            w.add(key, line)
        for w in writers.values():
            if w.lines:
                await self._send(self._plan(w))

    def _next_chunk_id(self, label: str) -> str:
        stem = label if self.phase == "generate" else f"{self.phase}:{label}"  # ':' is in no model label
        n = sum(1 for c in self.journal.chunks.values() if c.label == label and c.phase == self.phase) + 1
        while f"{stem}-{n:04d}" in self.journal.chunks:
            n += 1
        return f"{stem}-{n:04d}"

    def _plan(self, w: _ChunkWriter) -> Chunk:
        w.close()
        self.journal.append(Planned(chunk=w.chunk_id, label=w.info.label, model=w.info.model,
                                    endpoint=ENDPOINTS[w.info.api], keys=w.keys, sha256=w.sha.hexdigest(),
                                    path=str(w.path), lines=w.lines, bytes=w.bytes, phase=self.phase))
        return self.journal.chunks[w.chunk_id]

    async def _send(self, chunk: Chunk) -> None:
        """Upload (unless the journal has the file id), then create the batch; each id is journalled first."""
        provider = self.providers[chunk.label]
        client = provider.client
        if chunk.file_id is None:
            data = Path(chunk.path).read_bytes()
            fobj = await self._no_api_is_input_error(chunk, "POST /files", self._call(
                provider, lambda: client.files.create(file=(f"{chunk.chunk_id.replace(':', '_')}.jsonl", data),
                                                      purpose="batch")))
            self.journal.append(Uploaded(chunk=chunk.chunk_id, file_id=fobj.id))
        assert chunk.file_id is not None
        meta = {META_RUN: self.run_id, META_CHUNK: chunk.chunk_id, "rfteval_sha256": chunk.sha256[:16]}
        file_id, endpoint = chunk.file_id, _BATCH_ENDPOINTS.get(chunk.endpoint)
        if endpoint is None:
            raise InputError(f"chunk {chunk.chunk_id}: {chunk.endpoint!r} is not a Batch API endpoint rfteval writes",
                             self.journal.path, field="endpoint")
        b = await self._no_api_is_input_error(chunk, "POST /batches", self._call(provider, lambda: client.batches.create(
            input_file_id=file_id, endpoint=endpoint, completion_window="24h", metadata=meta)))
        self.journal.append(Created(chunk=chunk.chunk_id, batch_id=b.id, status=b.status))
        self.monitor.batch(chunk.chunk_id, chunk.label, b.status, {"total": chunk.lines})

    # ---- polling and collection
    async def _poll_until_done(self) -> None:
        delay = min(self.poll_s, 1.0)
        while True:
            live = [c for c in self.journal.live(self.phase) if c.batch_id is not None]
            if not live:
                return
            for chunk in live:
                await self._poll(chunk)
            if not any(c.batch_id is not None for c in self.journal.live(self.phase)):
                return
            await asyncio.sleep(delay)
            delay = min(self.poll_s, delay * 2)  # quick at first, then every poll_s

    async def _poll(self, chunk: Chunk) -> None:
        provider, batch_id = self.providers[chunk.label], chunk.batch_id
        if batch_id is None:  # not created yet: nothing to ask about
            return
        b = await self._call(provider, lambda: provider.client.batches.retrieve(batch_id))
        counts = b.request_counts.model_dump() if b.request_counts is not None else {}
        if b.status != chunk.status or counts != chunk.counts:
            self.journal.append(Status(chunk=chunk.chunk_id, status=b.status, counts=counts))
            self.monitor.batch(chunk.chunk_id, chunk.label, b.status, counts)
        if b.status in TERMINAL:
            await self._collect(chunk, b)

    async def _collect(self, chunk: Chunk, b: Batch) -> None:
        provider = self.providers[chunk.label]
        client = provider.client
        status, batch_id = b.status, b.id
        if b.status == "failed":
            errs = (b.errors.data if b.errors is not None and b.errors.data else [])
            why = "; ".join(f"{e.code}: {e.message}" + (f" (line {e.line})" if e.line else "") for e in errs[:3])
            msg = (f"batch {chunk.chunk_id} ({b.id}) failed: {why or 'no reason given'}; its {chunk.lines} cells were "
                   "not sent (re-running the command submits them again)")
            self.say(msg)
            self.outcome.failed_chunks += 1
            self.outcome.messages.append(msg)
            self.journal.append(Collected(chunk=chunk.chunk_id, status=status, batch_id=batch_id, stored=0,
                                          requeued=0, message=msg))
            self._drop_input(chunk)
            return
        seen: set[str] = set()
        stored = errors = requeued = 0
        wanted = set(chunk.keys)
        for file_id in (b.output_file_id, b.error_file_id):
            if not file_id:
                continue
            content = await self._call(provider, functools.partial(client.files.content, file_id))
            for _, line in parse_result_lines(content.content):
                key = result_key(line)
                if key not in wanted or key in seen:
                    continue
                seen.add(key)
                what, entry = self._ingest(key, line)
                if what == "stored":
                    stored += 1
                elif what == "error":
                    errors += 1
                elif what == "requeue" and b.status != "cancelled":
                    requeued += 1
                    self.outcome.requeued.append(key)
        missing = [k for k in chunk.keys if k not in seen]
        if missing and b.status != "cancelled":
            self.outcome.requeued.extend(missing)
            requeued += len(missing)
        if b.status == "completed" and not b.output_file_id and not b.error_file_id:
            msg = (f"batch {chunk.chunk_id} ({b.id}) completed with neither an output nor an error file: "
                   f"none of its {chunk.lines} cells came back; they are re-queued")
            self.say(msg)
            self.outcome.messages.append(msg)
        elif b.status == "completed" and not b.output_file_id:
            msg = (f"batch {chunk.chunk_id} ({b.id}) completed with no output file: all {chunk.lines} lines failed "
                   f"({errors} stored as errors, {requeued} re-queued)")
            self.say(msg)
            self.outcome.messages.append(msg)
        elif b.status in ("expired", "cancelled"):
            self.say(f"batch {chunk.chunk_id} ({b.id}) {b.status}: {stored} cells came back"
                     + (f", {requeued} re-queued" if requeued else ""))
        self.store.commit()
        self.outcome.stored += stored
        self.journal.append(Collected(chunk=chunk.chunk_id, status=status, batch_id=batch_id, stored=stored,
                                      errors=errors, requeued=requeued))
        self._drop_input(chunk)

    def _have(self, key: str) -> bool:
        from rfteval.run.store import is_reusable_response

        if self._have_fn is not None:
            return self._have_fn(key)
        return is_reusable_response(self.store.get_response(key))

    def _ingest(self, key: str, line: JSONObject) -> tuple[str, ResponseEntry | None]:
        from rfteval.run.store import is_reusable_response

        cell = self.cells.get(key)
        if cell is None:  # a key from another spec version of this run: nothing to file it under
            return "unknown", None
        if self._ingest_fn is not None:
            return self._ingest_fn(key, cell, line), None
        what, entry = entry_from_result(key, cell, line, self.store.session)
        if entry is not None and not is_reusable_response(self.store.get_response(key)):
            self.store.put_response(entry)
        return what, entry

    def _drop_input(self, chunk: Chunk) -> None:
        try:
            Path(chunk.path).unlink(missing_ok=True)
        except OSError:
            pass

    async def _no_api_is_input_error(self, chunk: Chunk, route: str, call: Awaitable[T]) -> T:
        """Behind the preflight (which a slow /batches can pass): a 404/405 from the Files or Batches route is an
        endpoint without the API, one line and exit 2, and the chunk is abandoned rather than left planned."""
        try:
            return await call
        except ProviderError as exc:
            if exc.status not in (404, 405):
                raise
            self.journal.append(Abandoned(
                chunk=chunk.chunk_id, status="abandoned",
                reason=f"the endpoint has no Files and Batches API ({route}: HTTP {exc.status})"))
            from rfteval.run.preflight import no_batch_api

            raise no_batch_api(f"{route}: HTTP {exc.status}") from None

    async def _call(self, provider: BatchProvider, fn: Callable[[], Awaitable[T]]) -> T:
        """A Files/Batches call with the run's retries; a 401/404 stops the run as it does for generation."""
        from rfteval.providers.retry import call_with_retries

        async def attempt() -> T:
            try:
                return await fn()
            except Exception as exc:
                err = provider.classify(exc)
                if err is None:
                    raise
                raise err from None

        return await call_with_retries(attempt, self.policy)


class _ChunkWriter:
    """Writes one chunk's input file while hashing it, so the journal can name its sha256."""

    def __init__(self, chunk_id: str, info: CellInfo, directory: Path):
        self.chunk_id, self.info = chunk_id, info
        self.path = directory / f"{chunk_id.replace(':', '_')}.jsonl"
        self.fh = open(self.path, "wb")
        self.sha = hashlib.sha256()
        self.keys: list[str] = []
        self.lines = 0
        self.bytes = 0

    def add(self, key: str, line: bytes) -> None:
        self.fh.write(line)
        self.sha.update(line)
        self.keys.append(key)
        self.lines += 1
        self.bytes += len(line)

    def close(self) -> None:
        self.fh.flush()
        os.fsync(self.fh.fileno())
        self.fh.close()


def _sha256_file(path: Path) -> str:
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


# ---------------------------------------------------------------- rfteval batches DIR --cancel


def cancel_open_batches(run_dir: Path) -> list[str]:
    """Cancel every open batch of a run at its provider (endpoints from DIR/spec.resolved.toml); one line each.

    When no run holds the directory, each cancel is journalled; when one does, only the provider is told, and
    the running process sees `cancelled` at its next poll and collects what finished.
    """
    import fcntl

    from rfteval.providers import batchable
    from rfteval.run.spec import build_providers, build_spec, resolve_models

    run_dir = Path(run_dir)
    spec_path = run_dir / "spec.resolved.toml"
    if not spec_path.exists():
        raise InputError("no spec.resolved.toml: cannot tell which endpoint holds the batches", run_dir)
    runs = resolve_models(build_spec(spec_path))
    providers = {label: p for label, p in build_providers(runs).items() if batchable(p)}
    chunks = [(c, c.batch_id) for c in read_journal(run_dir) if c.live and c.batch_id]
    lock = open(run_dir / "store" / "lock", "a+")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        journal: Journal | None = Journal(run_dir / "store")
    except BlockingIOError:
        journal = None
    lines: list[str] = []

    async def main() -> None:
        for chunk, batch_id in chunks:
            provider = providers.get(chunk.label)  # an OpenAI-compatible one: batchable() above
            if provider is None:
                lines.append(f"{chunk.chunk_id}: model {chunk.label} is no longer in the spec; not cancelled")
                continue
            try:
                b = await provider.client.batches.cancel(batch_id)
                lines.append(f"{chunk.chunk_id} ({chunk.batch_id}): {b.status}")
                if journal is not None:
                    journal.append(CancelRequested(chunk=chunk.chunk_id))
                    journal.append(Status(chunk=chunk.chunk_id, status=b.status, counts=dict(chunk.counts)))
            except Exception as exc:  # noqa: BLE001 - one line per batch, the others still get cancelled
                err = provider.classify(exc)
                lines.append(f"{chunk.chunk_id} ({chunk.batch_id}): not cancelled: {err or type(exc).__name__}")
        for provider in providers.values():
            await provider.aclose()

    try:
        asyncio.run(main())
    finally:
        if journal is not None:
            journal.close()
        lock.close()
    if not chunks:
        lines.append("no open batch to cancel")
    return lines
