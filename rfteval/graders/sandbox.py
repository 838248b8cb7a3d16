"""A pool of worker processes that run python grader sources: time, memory and network limits, crash recovery.

A grader's source never runs in the rfteval process. Each worker is a fresh interpreter (spawned, never a fork
of the caller, which has threads) running `_worker.py`; it is reused for many batches, caches compiled sources
by hash and keeps the items it was sent, so repeated items cross the pipe once per worker (and a call's samples
are graded grouped by item, so mostly to one worker). A sample that
make_sample built from its output text crosses as that text and is rebuilt there by the same make_sample
(the JSON parse then runs in the workers, in parallel, instead of a marshal of the parsed dict here); any
other sample, or one whose fields were replaced or edited since, crosses whole (edits made in place inside a
parsed output_json are the exception: see rfteval.sample.rebuild_args). The next batch waits in a worker's
pipe while it grades.

Limits, per call of grade(): an in-worker SIGALRM after `timeout_s`; a watchdog here that kills and restarts
a worker whose call did not end `grace` seconds later (alarm blocked, stuck in C code); RLIMIT_AS for memory; a
network namespace for no network. A failure is recorded on the sample that caused it and the rest of its
batch is graded again on a fresh worker.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import json
import marshal
import math
import mmap
import os
import queue
import re
import select
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import CancelledError, Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from rfteval.graders.base import (
    PYTHON_MEMORY, PYTHON_RUNTIME, PYTHON_SERVER, PYTHON_TIMEOUT, GradeError, GradeResult, Pair,
)
from rfteval.sample import ParsedSample, rebuild_args

_decode_json = msgspec.json.Decoder().decode  # ~7x json.loads on a reply's scores

WORKER_SCRIPT = Path(__file__).with_name("_worker.py")
STDOUT_CAP = 64 * 1024
STARTUP_TIMEOUT_S = 60.0
MAX_REPLY_BYTES = 1 << 30
PIPE_BYTES = 1 << 20  # Linux's default pipe-max-size
ITEM_CACHE_ITEMS = 4096  # per worker
ITEM_CACHE_BYTES = 8 << 20  # per worker, as sent; decoded twice there (~20x this in objects, within its limit)
IDLE, LOADING = -1, -2  # as in _worker.py
FD_SENTINEL = b"\xff"  # as in _worker.py: the byte after the text region while fds 1 and 2 wrote nothing
RESEND = "rfteval_resend_whole"  # as in _worker.py: a compact sample the worker could not rebuild
PROGRESS = struct.Struct("<qq")
HEADER = struct.Struct("<Q")
THREAD_ENV = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS",
              "VECLIB_MAXIMUM_THREADS")
SECRET_ENV = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL|AUTH", re.IGNORECASE)
ERROR_TYPES = frozenset({PYTHON_RUNTIME, PYTHON_TIMEOUT, PYTHON_MEMORY, PYTHON_SERVER})


def worker_env() -> dict[str, str]:
    """The caller's environment without anything that looks like a secret (a grader could print it to a
    record), and with one thread per numeric library."""
    env = {k: v for k, v in os.environ.items() if not SECRET_ENV.search(k)}
    env.update({name: "1" for name in THREAD_ENV})
    return env


def grace_s(timeout_s: float) -> float:
    """How long past the limit the watchdog waits for the worker's own alarm before it kills the worker."""
    return 1.0 + 0.05 * timeout_s


def plain(value: Any) -> Any:
    """JSON-like data made of built-in types only (what OpenAI's sandbox gets: JSON); others become str."""
    if value is None or type(value) in (str, int, float, bool):
        return value
    if isinstance(value, Mapping):
        return {_plain_key(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [plain(v) for v in value]
    if isinstance(value, str):  # subclasses (str enums too): their plain content
        return str.__str__(value)
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    return str(value)


def _plain_key(key: Any) -> Any:
    key = plain(key)
    return key if isinstance(key, (str, int, float, bool)) or key is None else str(key)


def encode(value: Any) -> bytes:
    """marshal: fast, and the worker can only get plain data back out of it (a subclass or an object that
    marshal refuses goes as plain JSON-like data instead)."""
    try:
        return marshal.dumps(value)
    except ValueError:
        return marshal.dumps(plain(value))


def encode_whole(sample: Any) -> bytes:
    """A sample as one marshal blob, decoded in the worker on its own (the collector sees one at a time)."""
    return encode(dict(sample) if type(sample) is ParsedSample else sample)  # a ParsedSample is a plain dict inside


def compact_sample(sample: Any) -> bytes | str | tuple[str, bytes | None, bool]:
    """What the worker needs to have this sample: its text alone when make_sample would rebuild it from that
    (the worker runs the same make_sample, JSON parsing included: in parallel, and no parsed dict to marshal
    here); (text, tools as marshal, whether output_json is the text's parse) when it has tools or no JSON;
    else the whole sample as a marshal blob (bytes)."""
    args = rebuild_args(sample)
    if args is None:
        return encode_whole(sample)
    text, tools, parse = args
    if tools is None:
        return text if parse else (text, None, False)
    try:
        return text, marshal.dumps(tools), parse  # a blob of its own: samples share nothing in the worker
    except ValueError:
        return encode_whole(sample)


def by_item(pairs: Sequence[Pair]) -> list[int] | None:
    """An order of `pairs` with the samples of each item together (items in order of first appearance, samples
    in their own order), or None when that is the order already. Graded in it, an item crosses to one worker
    rather than to every one, is decoded and checked there once, and stays in its cache: ~15% of the pool's
    time on 20,000 ChipStack samples of 1,000 items graded epoch by epoch."""
    groups: dict[int, list[int]] = {}
    last, moved = -1, False
    for i, (_, item) in enumerate(pairs):
        ident = id(item)
        group = groups.get(ident)
        if group is None:
            groups[ident] = [i]
        else:
            moved = moved or ident != last
            group.append(i)
        last = ident
    return [i for group in groups.values() for i in group] if moved else None


def source_key(source: str) -> str:
    return hashlib.sha256(source.encode("utf-8", "surrogatepass")).hexdigest()


def exit_description(returncode: int | None) -> str:
    if returncode is None:
        return "stopped answering"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        hint = " (the system may be out of memory)" if -returncode == signal.SIGKILL else ""
        return f"was killed by {name}{hint}"
    return f"exited with code {returncode}"


def decode_reply(data: bytes, start: int, n: int) -> tuple[list[GradeResult], bool]:
    """One part of the worker's JSON reply: results for samples start.. and whether the batch is done.

    Anything malformed is a protocol error: the worker runs untrusted code and is not believed blindly.
    """
    try:
        try:
            obj = _decode_json(data)
        except ValueError:  # what msgspec refuses and json takes (a lone surrogate, escaped)
            obj = json.loads(data)
        scores = obj["scores"]
        done = obj["done"]
        if obj["start"] != start or not isinstance(scores, list) or start + len(scores) > n:
            raise ValueError("results out of order")
        if done is True and start + len(scores) != n:
            raise ValueError("wrong number of results")
        if not all(type(s) is float for s in scores) or not all(map(math.isfinite, scores)):
            raise ValueError("bad score")
        results = list(map(GradeResult, scores))
        for key, (etype, message) in obj["errors"].items():
            etype = etype if etype in ERROR_TYPES or etype == RESEND else PYTHON_RUNTIME
            results[int(key) - start] = GradeResult.failed(etype, str(message))
        for key, text in obj["stdout"].items():
            results[int(key) - start].stdout = str(text)[: STDOUT_CAP + 100]
        return results, done is True
    except (ValueError, KeyError, TypeError, IndexError, AttributeError, OverflowError) as exc:
        raise _Failure(None, PYTHON_SERVER, f"unreadable reply from the grader process ({exc})") from None


class _Failure(Exception):
    """The worker died, hung or garbled its reply; `index` is the call it was in (or LOADING, or None)."""

    def __init__(self, index: int | None, type: str, message: str, stdout: str | None = None):
        super().__init__(message)
        self.index = index
        self.error = GradeError(type, message)
        self.stdout = stdout
        self.done: list[GradeResult] = []  # results the worker sent before it failed


class _StartError(Exception):
    pass


@dataclass
class _Settings:
    """What workers need from their pool (not the pool itself, so an unclosed pool can still be collected)."""

    timeout_s: float
    memory_mb: int | None
    env: dict[str, str]
    lock: threading.Lock = field(default_factory=threading.Lock)
    isolation: str | None = None

    def note_isolation(self, text: str) -> None:
        with self.lock:
            if self.isolation is None or (text.startswith("not isolated") and text != self.isolation):
                self.isolation = text  # the weakest any worker reported


class _Worker:
    """One worker process and the state shared with it; used by one pool thread at a time."""

    def __init__(self, settings: _Settings):
        self.settings = settings
        self.proc: subprocess.Popen[bytes] | None = None
        self.dir: str | None = None
        self.progress: mmap.mmap | None = None
        self.progress_fd = -1
        self.sources: set[str] = set()
        self.items: OrderedDict[int, tuple[int, Any, int]] = OrderedDict()  # id(item) -> (slot, item, bytes)
        self.free_slots: list[int] = []
        self.next_slot = 0
        self.item_bytes = 0
        self.pid: int | None = None
        self.buffer = bytearray()
        self.generation = 0  # bumped whenever the worker's state (sources, items) is lost
        self.request_pipe_bytes = 0  # the request pipe's capacity, as the kernel reports it

    # -- life cycle

    def start(self) -> None:
        pool = self.settings
        self.dir = tempfile.mkdtemp(prefix="rfteval-grader-")
        if hasattr(os, "memfd_create"):
            self.progress_fd = os.memfd_create("rfteval-progress")
        else:  # pragma: no cover - not Linux
            self.progress_fd = os.open(os.path.join(self.dir, ".progress"), os.O_RDWR | os.O_CREAT, 0o600)
        os.ftruncate(self.progress_fd, PROGRESS.size)
        self.progress = mmap.mmap(self.progress_fd, PROGRESS.size)
        PROGRESS.pack_into(self.progress, 0, 0, IDLE)
        config = {
            "timeout_s": pool.timeout_s, "memory_mb": pool.memory_mb, "stdout_cap": STDOUT_CAP,
            "progress_fd": self.progress_fd, "parent_pid": os.getpid(), "output_path": self.output_path,
        }
        with open(os.path.join(self.dir, ".startup"), "wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, str(WORKER_SCRIPT), json.dumps(config)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, bufsize=0, cwd=self.dir,
                env=pool.env, pass_fds=(self.progress_fd,), start_new_session=True,
            )
        for pipe in (self.proc.stdin, self.proc.stdout):
            try:  # a whole batch in one write instead of 64 KB at a time
                fcntl.fcntl(pipe.fileno(), getattr(fcntl, "F_SETPIPE_SZ", 1031), PIPE_BYTES)  # type: ignore[union-attr]
            except OSError:
                pass
        try:
            self.request_pipe_bytes = fcntl.fcntl(self.proc.stdin.fileno(), getattr(fcntl, "F_GETPIPE_SZ", 1032))  # type: ignore[union-attr]
        except OSError:
            self.request_pipe_bytes = 0
        try:
            ready = json.loads(self.receive(STARTUP_TIMEOUT_S, watch=False))
            if not ready.get("ready"):
                raise ValueError("no ready message")
        except (_Failure, ValueError) as exc:
            detail = self.startup_log or str(exc)
            self.stop()
            raise _StartError(f"the grader process did not start: {detail.strip()[-2000:]}") from None
        self.pid = int(ready["pid"])
        pool.note_isolation(str(ready["isolation"]))

    @property
    def startup_log(self) -> str | None:
        return self.tail(os.path.join(self.dir, ".startup")) if self.dir else None

    @property
    def output_path(self) -> str:
        assert self.dir is not None
        return os.path.join(self.dir, ".output")

    def stop(self, graceful: bool = False) -> None:
        proc, self.proc = self.proc, None
        if proc is not None:
            if proc.stdin is not None:
                try:
                    proc.stdin.close()  # end of requests: an idle worker exits on its own
                except OSError:
                    pass
            if graceful:
                try:
                    proc.wait(timeout=2)
                except subprocess.TimeoutExpired:
                    pass
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # the worker and anything the grader started
            except (ProcessLookupError, PermissionError):
                pass
            proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
        if self.progress is not None:
            self.progress.close()
            self.progress = None
        if self.progress_fd >= 0:
            os.close(self.progress_fd)
            self.progress_fd = -1
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None
        self.sources.clear()
        self.items.clear()
        self.free_slots.clear()
        self.next_slot = self.item_bytes = 0
        self.pid = None
        self.buffer = bytearray()
        self.generation += 1

    # -- one batch

    def send_request(self, key: str, source: str, pairs: Sequence[Pair], message: bytes | None = None,
                     whole: bool = False) -> None:
        """Start the worker if needed and send it a batch (`message`: encoded earlier for this generation)."""
        if self.proc is None:
            self.start()
        if message is None:
            message = self.encode(key, source, pairs, whole)
        if self.buffer:  # bytes nobody asked for: the grader wrote to the reply pipe
            self.stop()
            raise _Failure(None, PYTHON_SERVER, "the grader process wrote outside its replies")
        try:
            self.send(message)
        except OSError:
            raise self.died() from None

    def collect(self, n: int, on_last: Callable[[], None] | None = None) -> list[GradeResult]:
        """The results of the batch in flight. `on_last` runs as soon as the last part has arrived, before it
        is decoded: the caller sends the next batch there, so the worker never waits for this process.
        Raises _Failure (worker stopped, results so far attached) when it died, hung or garbled."""
        results: list[GradeResult] = []
        done = False
        try:
            while not done:
                frame = self.receive(None, watch=True)
                if frame[:1] == b"D" and on_last is not None:
                    on_last()
                part, done = decode_reply(frame[1:], len(results), n)
                results += part
        except _Failure as failure:
            self.stop()
            failure.done = results
            if failure.index is not None and failure.index >= 0 and failure.index < len(results):
                failure.index = None  # a call the worker reported as finished cannot be the culprit
            raise
        return results

    def encode(self, key: str, source: str, pairs: Sequence[Pair], whole: bool = False) -> bytes:
        """The request: each distinct item once, then by cache slot while it stays cached; samples every time,
        as compact_sample() puts them (or all whole). Written for speed: it is most of this process's share
        of the work."""
        dumps = marshal.dumps
        pack = encode_whole if whole else compact_sample
        samples = [pack(sample) for sample, _ in pairs]
        refs: list[int] = []
        new: list[tuple[int, bytes]] = []
        inline: dict[int, int] = {}
        used: set[int] = set()
        cache = self.items
        last_ident, last_ref = -1, 0
        for _, item in pairs:
            ident = id(item)
            if ident == last_ident:  # samples of one item often come together
                refs.append(last_ref)
                continue
            entry = cache.get(ident)
            if entry is not None:
                cache.move_to_end(ident)
                used.add(ident)
                ref = entry[0]
            elif ident in inline:
                ref = inline[ident]
            else:
                blob = encode(item)
                slot = self.allocate(len(blob), used)
                if slot is None:
                    new.append((-1, blob))
                    ref = inline[ident] = -len(new)
                else:
                    cache[ident] = (slot, item, len(blob))  # holding `item` keeps its id unique
                    self.item_bytes += len(blob)
                    used.add(ident)
                    new.append((slot, blob))
                    ref = slot
            refs.append(ref)
            last_ident, last_ref = ident, ref
        sent_source = None if key in self.sources else source
        self.sources.add(key)
        return dumps(("grade", key, sent_source, new, refs, samples))

    def allocate(self, size: int, used: set[int]) -> int | None:
        """A cache slot for an item of `size` bytes, evicting the least recently used items not in this batch."""
        if size > ITEM_CACHE_BYTES // 4:
            return None
        while self.items and (len(self.items) >= ITEM_CACHE_ITEMS or self.item_bytes + size > ITEM_CACHE_BYTES):
            oldest = next(iter(self.items))
            if oldest in used:
                return None
            slot, _, nbytes = self.items.pop(oldest)
            self.item_bytes -= nbytes
            self.free_slots.append(slot)
        if self.free_slots:
            return self.free_slots.pop()
        self.next_slot += 1
        return self.next_slot - 1

    def fits_ahead(self, payload: bytes) -> bool:
        """Whether a request can go into the pipe while the worker still grades the one before: the worker
        reads a whole request before grading it, so at most two are ever in the pipe, and if each fits in half
        of it the write never blocks (a blocked write could wait on a worker that waits on us to read)."""
        return HEADER.size + len(payload) <= self.request_pipe_bytes // 2

    def send(self, payload: bytes) -> None:
        assert self.proc is not None and self.proc.stdin is not None
        fd = self.proc.stdin.fileno()
        written = os.writev(fd, [HEADER.pack(len(payload)), payload])  # no copy of the payload
        if written < HEADER.size + len(payload):
            view = memoryview(HEADER.pack(len(payload)) + payload)[written:]
            while view:
                view = view[os.write(fd, view):]

    def read_progress(self) -> tuple[int, int]:
        assert self.progress is not None
        return PROGRESS.unpack_from(self.progress, 0)

    def receive(self, deadline_s: float | None, watch: bool) -> bytes:
        """One reply. With `watch`, kill the worker when one call outlives the limit plus grace."""
        assert self.proc is not None and self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        poller = select.poll()
        poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
        limit = self.settings.timeout_s + grace_s(self.settings.timeout_s)
        tick_ms = max(20, min(250, int(limit * 1000 / 8)))
        start = time.monotonic()
        seen, _ = self.read_progress()
        changed = start
        buf = self.buffer  # a read may have taken the start of the next part of a reply, too
        while True:
            if len(buf) >= HEADER.size:
                need = HEADER.unpack_from(buf)[0]
                if need > MAX_REPLY_BYTES:
                    self.stop()
                    raise _Failure(None, PYTHON_SERVER, "the grader process sent an oversized reply")
                if len(buf) >= HEADER.size + need:
                    frame = bytes(buf[HEADER.size:HEADER.size + need])
                    del buf[:HEADER.size + need]
                    return frame
            if poller.poll(tick_ms):
                chunk = os.read(fd, 1 << 20)
                if not chunk:
                    raise self.died()
                buf += chunk
                continue
            now = time.monotonic()
            if deadline_s is not None and now - start > deadline_s:
                log = self.startup_log
                self.stop()
                raise _Failure(None, PYTHON_SERVER, f"no answer within {deadline_s:.0f} s {log or ''}".strip())
            if not watch:
                continue
            seq, index = self.read_progress()
            if seq != seen:
                seen, changed = seq, now
            elif index != IDLE and now - changed > limit:
                raise self.kill_stuck(index)

    def kill_stuck(self, index: int) -> _Failure:
        timeout = self.settings.timeout_s
        what = "loading the grader source" if index == LOADING else "grade()"
        output = self.call_output()
        self.stop()
        message = (f"{what} ran over the {timeout:g} s time limit and did not stop (alarm blocked or stuck "
                   f"outside Python); its process was killed and restarted")
        return _Failure(index, PYTHON_TIMEOUT, message, output)

    def died(self) -> _Failure:
        """The worker closed its pipe: find out how it ended and which call it was in."""
        assert self.proc is not None
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        returncode = self.proc.returncode
        _, index = self.read_progress()
        output = self.call_output()
        if self.pid is None:  # still starting: what it printed before its output was captured
            output = self.startup_log or output
        self.stop()
        where = {LOADING: "while loading the grader source", IDLE: "between calls"}.get(index, "during grade()")
        return _Failure(index if index != IDLE else None, PYTHON_RUNTIME,
                        f"the grader process {exit_description(returncode)} {where}", output)

    def call_output(self) -> str | None:
        """What the call in progress printed, read from the capture file after the worker died or was killed:
        its prints (the text region, up to the first NUL) and the end of what reached fds 1 and 2 (say, a
        segfault's traceback)."""
        try:
            with open(self.output_path, "rb") as fh:
                prints = fh.read(STDOUT_CAP).split(b"\0", 1)[0]
                size = os.fstat(fh.fileno()).st_size
                keep = STDOUT_CAP // 2 if prints else STDOUT_CAP
                fh.seek(max(STDOUT_CAP, size - keep))
                fds = fh.read(keep)
                if size == STDOUT_CAP + 1 and fds == FD_SENTINEL:  # the worker's marker: fds wrote nothing
                    fds = b""
        except OSError:
            return None
        data = prints[: STDOUT_CAP - len(fds)] + fds
        return data.decode("utf-8", "replace") or None

    @staticmethod
    def tail(path: str) -> str | None:
        try:
            with open(path, "rb") as fh:
                fh.seek(0, os.SEEK_END)
                size = fh.tell()
                fh.seek(max(0, size - STDOUT_CAP))
                data = fh.read()
        except OSError:
            return None
        return data.decode("utf-8", "replace") or None


def _stop_all(workers: list[_Worker], lock: threading.Lock) -> None:
    with lock:
        todo = list(workers)
        workers.clear()
    for w in todo:
        w.stop(graceful=True)


def _send_ahead(worker: _Worker, task: _Task) -> None:
    """Send a batch encoded ahead, unless the worker it was encoded for is gone (then it is encoded and sent
    again when its turn comes)."""
    if worker.generation == task.generation and worker.proc is not None and task.message is not None:
        try:
            worker.send(task.message)
            task.sent = True
        except OSError:
            pass


@dataclass(eq=False)
class _Task:
    """One batch for one worker thread; `pairs` None is a request to start a worker (isolation probe)."""

    key: str
    source: str
    pairs: list[Pair] | None
    future: Future[list[GradeResult]] = field(default_factory=Future)
    message: bytes | None = None  # encoded ahead, valid for `generation` of the worker that encoded it
    whole: bool = False  # send every sample whole (a second try for samples the worker could not rebuild)
    generation: int = -1
    sent: bool = False


class WorkerPool:
    """Thread-safe: grade() may be called from many threads at once; each call's batches spread over workers.

    One pool thread per worker feeds it batches; while a batch runs, the thread encodes its next one and
    sends it the moment the last results arrive, so a worker does not wait on this process. A call's samples
    are graded with each item's samples together (by_item), results back in the caller's order. Workers start
    lazily and live until close().
    """

    def __init__(self, workers: int | None = None, timeout_s: float = 120.0, memory_mb: int = 2048,
                 batch_size: int = 256):
        self.workers = workers or os.cpu_count() or 1
        if self.workers < 1 or batch_size < 1 or timeout_s <= 0:
            raise ValueError("workers, batch_size and timeout_s must be positive")
        self.timeout_s = float(timeout_s)
        self.memory_mb = memory_mb
        self.batch_size = batch_size
        self._settings = _Settings(self.timeout_s, memory_mb, worker_env())
        self._lock = threading.Lock()
        self._queue: queue.SimpleQueue[_Task | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._idle = 0  # threads waiting for a batch: while any is, nobody takes a second one ahead
        self._all: list[_Worker] = []
        self._keys: dict[str, str] = {}
        self._broken: dict[str, GradeError] = {}
        self._closed = False
        self._finalizer = weakref.finalize(self, _stop_all, self._all, self._lock)

    # -- public

    @property
    def isolation(self) -> str:
        """What cuts the network off from grader code, as the workers found it ("network namespace", or
        "not isolated: <reason>"). Starts a worker when none has started yet."""
        if self._settings.isolation is None:
            try:
                self._submit(_Task("", "", None)).result()
            except _StartError as exc:
                return f"not isolated: {exc}"
        return self._settings.isolation or "not isolated: unknown"

    def grade(self, source: str, pairs: Sequence[Pair]) -> list[GradeResult]:
        """One result per (sample, item), in order. Never raises for what the grader does."""
        pairs = list(pairs)
        if not pairs:
            return []
        key = self._key(source)
        broken = self._broken.get(key)
        if broken is not None:
            return [GradeResult.failed(broken.type, broken.message) for _ in pairs]
        results = self._grade(key, source, pairs, whole=False)
        again = [i for i, r in enumerate(results) if r.error is not None and r.error.type == RESEND]
        if again:  # sent as text, not rebuilt in the worker (a limit set differently there): send them whole
            redone = self._grade(key, source, [pairs[i] for i in again], whole=True)
            for i, result in zip(again, redone):
                if result.error is not None and result.error.type == RESEND:  # never for a whole sample
                    result = GradeResult.failed(PYTHON_SERVER, "the grader process refused the sample, sent whole")
                results[i] = result
        return results

    def _grade(self, key: str, source: str, pairs: list[Pair], whole: bool) -> list[GradeResult]:
        order = by_item(pairs)
        if order is not None:
            pairs = [pairs[i] for i in order]
        size = max(1, min(self.batch_size, -(-len(pairs) // self.workers)))
        futures = [self._submit(_Task(key, source, pairs[i:i + size], whole=whole))
                   for i in range(0, len(pairs), size)]
        results: list[GradeResult] = []
        try:
            for future in futures:
                results.extend(future.result())
        except CancelledError:
            raise RuntimeError("the python worker pool was closed while grading") from None
        if order is not None:  # back in the caller's order
            ordered: list[GradeResult] = [None] * len(results)  # type: ignore[list-item]
            for i, result in zip(order, results):
                ordered[i] = result
            results = ordered
        return results

    def close(self) -> None:
        """Finish the batches being graded, cancel the rest, stop every worker."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            threads = list(self._threads)
        while True:
            try:
                task = self._queue.get_nowait()
            except queue.Empty:
                break
            if task is not None:
                task.future.cancel()
        for _ in threads:
            self._queue.put(None)
        for thread in threads:
            thread.join()
        self._finalizer()

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def pids(self) -> list[int]:
        """Process ids of the running workers (for diagnostics and tests)."""
        with self._lock:
            return [w.pid for w in self._all if w.pid is not None]

    # -- internals

    def _submit(self, task: _Task) -> Future[list[GradeResult]]:
        with self._lock:
            if self._closed:
                raise RuntimeError("the python worker pool is closed")
            if not self._threads:
                for n in range(self.workers):
                    thread = threading.Thread(target=self._serve, name=f"rfteval-python-{n}", daemon=True)
                    self._threads.append(thread)
                    thread.start()
            self._queue.put(task)
        return task.future

    def _key(self, source: str) -> str:
        key = self._keys.get(source)
        if key is None:
            if len(self._keys) > 64:
                self._keys.clear()
            key = self._keys[source] = source_key(source)
        return key

    def _serve(self) -> None:
        """A pool thread: owns one worker, grades the batches it takes until told to stop."""
        worker = _Worker(self._settings)
        with self._lock:
            self._all.append(worker)
        carried: _Task | None = None
        while True:
            task = carried
            carried = None
            if task is None:
                with self._lock:
                    self._idle += 1
                task = self._queue.get()
                with self._lock:
                    self._idle -= 1
                if task is None:
                    return
                if not task.future.set_running_or_notify_cancel():
                    continue
            try:
                if task.pairs is None:
                    if worker.proc is None:
                        worker.start()
                    task.future.set_result([])
                    continue
                results, carried = self._run_task(worker, task)
                task.future.set_result(results)
            except BaseException as exc:  # noqa: BLE001  (a bug here must reach the caller, not kill the thread)
                task.future.set_exception(exc)

    def _take_ahead(self) -> _Task | None:
        """The next batch for this thread to encode while its worker is busy, unless another thread is idle."""
        with self._lock:
            if self._idle or self._closed:
                return None
        try:
            task = self._queue.get_nowait()
        except queue.Empty:
            return None
        if task is None or task.pairs is None:
            self._queue.put(task)  # a stop signal or a probe: for whoever is free
            return None
        return task if task.future.set_running_or_notify_cancel() else None

    def _run_task(self, worker: _Worker, task: _Task) -> tuple[list[GradeResult], _Task | None]:
        """Grade one batch on this thread's worker; a death or hang costs only the sample that caused it.

        Returns the results and the next batch, taken ahead (and maybe already sent), if any.
        """
        pairs = task.pairs
        assert pairs is not None
        broken = self._broken.get(task.key)
        if broken is not None:  # its source hung or killed a worker while loading: do not try again
            return [GradeResult.failed(broken.type, broken.message) for _ in pairs], None
        results: list[GradeResult | None] = [None] * len(pairs)
        todo = list(range(len(pairs)))
        unexplained = 0
        ahead: _Task | None = None
        first = True
        while todo:
            batch = [pairs[i] for i in todo]
            try:
                if not (first and task.sent and task.generation == worker.generation):
                    message = task.message if first and task.generation == worker.generation else None
                    worker.send_request(task.key, task.source, batch, message, task.whole)
                task.message = None
                first = False
                on_last = None
                if ahead is None:
                    ahead = self._take_ahead()
                    if ahead is not None and ahead.pairs is not None:
                        ahead.generation = worker.generation
                        ahead.message = worker.encode(ahead.key, ahead.source, ahead.pairs, ahead.whole)
                        if worker.fits_ahead(ahead.message):  # queued now: the worker goes on without us
                            _send_ahead(worker, ahead)
                        else:  # when this batch's last results are in
                            on_last = functools.partial(_send_ahead, worker, ahead)

                done = worker.collect(len(batch), on_last)
            except _StartError as exc:
                for i in todo:
                    results[i] = GradeResult.failed(PYTHON_SERVER, str(exc))
                break
            except _Failure as failure:
                for i, result in zip(todo, failure.done):
                    results[i] = result
                if failure.index is not None and failure.index >= 0:
                    failure.index -= len(failure.done)
                todo = todo[len(failure.done):]
                if failure.index == LOADING:
                    self._broken[task.key] = failure.error
                    for i in todo:
                        results[i] = GradeResult.failed(failure.error.type, failure.error.message)
                    break
                if failure.index is None or not 0 <= failure.index < len(todo):
                    unexplained += 1
                    if unexplained >= 2:
                        for i in todo:
                            results[i] = GradeResult.failed(failure.error.type, failure.error.message)
                        break
                    continue
                culprit = todo.pop(failure.index)
                results[culprit] = GradeResult.failed(failure.error.type, failure.error.message,
                                                      stdout=failure.stdout)
                continue
            for i, result in zip(todo, done):
                results[i] = result
            break
        return results, ahead  # type: ignore[return-value]
