"""A pool of worker processes that run python grader sources: time, memory and network limits, crash recovery.

A grader's source never runs in the rfteval process. Each worker is a fresh interpreter (spawned, never a fork
of the caller, which has threads) running `_worker.py`; it is reused for many batches, caches compiled sources
by hash and keeps the items it was sent, so repeated items cross the pipe once per worker.

Limits, per call of grade(): an in-worker SIGALRM after `timeout_s`; a watchdog here that kills and restarts
a worker whose call did not end `grace` seconds later (alarm blocked, stuck in C code); RLIMIT_AS for memory; a
network namespace for no network. A failure is recorded on the sample that caused it and the rest of its
batch is graded again on a fresh worker.
"""

from __future__ import annotations

import hashlib
import json
import marshal
import math
import mmap
import os
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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from concurrent.futures import CancelledError, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from rfteval.graders.base import (
    PYTHON_MEMORY, PYTHON_RUNTIME, PYTHON_SERVER, PYTHON_TIMEOUT, GradeError, GradeResult, Pair,
)

WORKER_SCRIPT = Path(__file__).with_name("_worker.py")
STDOUT_CAP = 64 * 1024
STARTUP_TIMEOUT_S = 60.0
MAX_REPLY_BYTES = 1 << 30
ITEM_CACHE_ITEMS = 4096  # per worker
ITEM_CACHE_BYTES = 8 << 20  # per worker, as sent; decoded twice there (~20x this in objects, within its limit)
IDLE, LOADING = -1, -2  # as in _worker.py
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
        obj = json.loads(data)
        scores = obj["scores"]
        done = obj["done"]
        if obj["start"] != start or not isinstance(scores, list) or start + len(scores) > n:
            raise ValueError("results out of order")
        if done is True and start + len(scores) != n:
            raise ValueError("wrong number of results")
        results = []
        for s in scores:
            if isinstance(s, bool) or not isinstance(s, (int, float)) or not math.isfinite(s):
                raise ValueError("bad score")
            results.append(GradeResult(float(s)))
        for key, (etype, message) in obj["errors"].items():
            etype = etype if etype in ERROR_TYPES else PYTHON_RUNTIME
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
        self.starts = 0
        self.buffer = bytearray()

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
        self.starts += 1
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

    # -- one batch

    def run(self, key: str, source: str, pairs: Sequence[Pair]) -> list[GradeResult]:
        """Grade pairs on this worker; raises _Failure (worker now stopped) when it died, hung or garbled."""
        if self.proc is None:
            self.start()
        message = self.encode(key, source, pairs)
        if self.buffer:  # bytes nobody asked for: the grader wrote to the reply pipe
            self.stop()
            raise _Failure(None, PYTHON_SERVER, "the grader process wrote outside its replies")
        try:
            self.send(message)
        except OSError:
            raise self.died() from None
        self.sources.add(key)
        results: list[GradeResult] = []
        done = False
        try:
            while not done:
                part, done = decode_reply(self.receive(None, watch=True), len(results), len(pairs))
                results += part
        except _Failure as failure:
            self.stop()
            failure.done = results
            if failure.index is not None and failure.index >= 0 and failure.index < len(results):
                failure.index = None  # a call the worker reported as finished cannot be the culprit
            raise
        return results

    def encode(self, key: str, source: str, pairs: Sequence[Pair]) -> bytes:
        """The request: samples every time; each distinct item once, then by cache slot while it stays cached."""
        samples: list[bytes] = []
        refs: list[int] = []
        new: list[tuple[int, bytes]] = []
        inline: dict[int, int] = {}
        used: set[int] = set()
        for sample, item in pairs:
            samples.append(encode(sample))  # one blob each: the worker decodes one sample at a time
            ident = id(item)
            entry = self.items.get(ident)
            if entry is not None:
                self.items.move_to_end(ident)
                used.add(ident)
                refs.append(entry[0])
                continue
            if ident in inline:
                refs.append(inline[ident])
                continue
            blob = encode(item)
            slot = self.allocate(len(blob), used)
            if slot is None:
                new.append((-1, blob))
                inline[ident] = -len(new)
                refs.append(-len(new))
            else:
                self.items[ident] = (slot, item, len(blob))  # holding `item` keeps its id unique
                self.item_bytes += len(blob)
                used.add(ident)
                new.append((slot, blob))
                refs.append(slot)
        sent_source = None if key in self.sources else source
        return marshal.dumps(("grade", key, sent_source, new, refs, samples))

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

    def send(self, payload: bytes) -> None:
        assert self.proc is not None and self.proc.stdin is not None
        fd = self.proc.stdin.fileno()
        view = memoryview(HEADER.pack(len(payload)) + payload)
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
        output = self.tail(self.output_path)
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
        output = self.tail(self.output_path)
        if self.pid is None:  # still starting: what it printed before its output was captured
            output = self.startup_log or output
        self.stop()
        where = {LOADING: "while loading the grader source", IDLE: "between calls"}.get(index, "during grade()")
        return _Failure(index if index != IDLE else None, PYTHON_RUNTIME,
                        f"the grader process {exit_description(returncode)} {where}", output)

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


class WorkerPool:
    """Thread-safe: grade() may be called from many threads at once; each call's batches spread over workers.

    Workers start lazily, one per pool thread, and live until close().
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
        self._executor: ThreadPoolExecutor | None = None
        self._local = threading.local()
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
                self._pool_executor().submit(self._probe).result()
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
        executor = self._pool_executor()
        size = max(1, min(self.batch_size, -(-len(pairs) // self.workers)))
        futures = [executor.submit(self._run_chunk, key, source, pairs[i:i + size])
                   for i in range(0, len(pairs), size)]
        results: list[GradeResult] = []
        try:
            for future in futures:
                results.extend(future.result())
        except CancelledError:
            raise RuntimeError("the python worker pool was closed while grading") from None
        return results

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=True, cancel_futures=True)
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

    def _pool_executor(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._closed:
                raise RuntimeError("the python worker pool is closed")
            if self._executor is None:
                self._executor = ThreadPoolExecutor(self.workers, thread_name_prefix="rfteval-python")
            return self._executor

    def _key(self, source: str) -> str:
        key = self._keys.get(source)
        if key is None:
            if len(self._keys) > 64:
                self._keys.clear()
            key = self._keys[source] = source_key(source)
        return key

    def _worker(self) -> _Worker:
        worker = getattr(self._local, "worker", None)
        if worker is None:
            worker = self._local.worker = _Worker(self._settings)
            with self._lock:
                self._all.append(worker)
        return worker

    def _probe(self) -> None:
        worker = self._worker()
        if worker.proc is None:
            worker.start()

    def _run_chunk(self, key: str, source: str, pairs: list[Pair]) -> list[GradeResult]:
        """Grade one batch on this thread's worker; a death or hang costs only the sample that caused it."""
        worker = self._worker()
        results: list[GradeResult | None] = [None] * len(pairs)
        todo = list(range(len(pairs)))
        unexplained = 0
        while todo:
            try:
                done = worker.run(key, source, [pairs[i] for i in todo])
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
                    self._broken[key] = failure.error
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
        return results  # type: ignore[return-value]
