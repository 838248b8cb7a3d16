"""The process pool: one supervisor per sandbox (inside bubblewrap unless unsafe), fed batches of whole units by
one thread each; a supervisor that dies, hangs or garbles costs only the sample it was on."""

from __future__ import annotations

import json
import marshal
import os
import queue
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Hashable, Sequence
from concurrent.futures import CancelledError, Future
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Self

from rfteval.data.grades import PYTHON_MEMORY, PYTHON_RUNTIME, PYTHON_SERVER, PYTHON_TIMEOUT, GradeResult, Pair
from rfteval.limits import PYTHON_BATCH_SIZE
from rfteval.sandbox.cgroup import Cgroup, cgroup_root
from rfteval.sandbox.host_probe import (
    OOM_FILE,
    SHM_BYTES,
    TMP_MARGIN,
    bwrap_args,
    host,
    note_once,
    sandbox_problem,
    seccomp_program,
)
from rfteval.sandbox.policy import (
    SANDBOX_TMP,
    UNSAFE_HINT,
    SandboxPolicy,
    SandboxUnavailable,
    grace_s,
    group_units,
    worker_env,
)
from rfteval.sandbox.wire import (
    HEADER,
    MAX_REPLY_BYTES,
    STDOUT_CAP,
    Failure,
    Outcome,
    Resend,
    compact_sample,
    decode_reply,
    encode,
    encode_whole,
    source_key,
)

if TYPE_CHECKING:
    from rfteval.sandbox._worker_protocol import Sent, WorkerConfig

WORKER_SCRIPT = Path(__file__).with_name("_worker.py")
STARTUP_TIMEOUT_S = 60.0
TEMPLATE_BYTES = 512 << 20  # the cgroup's room for the supervisor while it imports a source's packages
CHILD_SLACK = 32 << 20  # beyond the template and --grader-memory: a child's page tables and copied template pages
HEARTBEAT_S = 1.0  # the supervisor's beat (_supervisor_results.py): a frame at least this often, at most twice this apart
SILENCE_S = 6.0  # a few missed beats: a sandbox silent this long was stopped or is stuck, whatever the grader's limit
PREPARE_TIMEOUT_S = 60.0  # a new source's imports, before any grader code runs: nothing there can stop the supervisor
MAX_ZERO_PROGRESS = 8  # supervisor failures in a row with no result in between before a batch gives up


class _StartError(Exception):
    pass



@dataclass
class _Settings:
    """What sandboxes need from their pool (not the pool itself, so an unclosed pool can still be collected)."""

    policy: SandboxPolicy
    lock: threading.Lock = field(default_factory=threading.Lock)
    isolation: str | None = None


def tmp_bytes(policy: SandboxPolicy, cgroup: bool) -> int:
    """The size of the sandbox's /tmp: --disk, and under a cgroup (where its pages count against --grader-memory)
    at most --grader-memory less /dev/shm and TMP_MARGIN, so that filling /tmp is a full disk (ENOSPC), not an
    OOM kill of whatever process the kernel picks."""
    size = policy.disk_mb << 20
    if cgroup and policy.memory_mb:
        size = min(size, max(16 << 20, (policy.memory_mb << 20) - SHM_BYTES - TMP_MARGIN))
    return size



class _Sandbox:
    """One supervisor process (inside bubblewrap unless unsafe) and its cgroup; used by one pool thread at a time."""

    counter = 0

    def __init__(self, settings: _Settings):
        self.settings = settings
        self.proc: subprocess.Popen[bytes] | None = None
        self.dir: str | None = None
        self.cgroup: Cgroup | None = None
        self.pid: int | None = None
        self.sources: set[str] = set()
        self.buffer = bytearray()
        self.oom_seen = 0  # the cgroup's OOM kills already accounted for
        self.memory_limit: int | None = None  # the cgroup's limit once fitted (for tests and diagnostics)

    def start(self) -> None:
        s = self.settings.policy
        found = host()
        sandboxed = found.refused is None
        if not sandboxed and not s.unsafe:
            raise SandboxUnavailable(sandbox_problem(s) or found.refused)
        self.dir = tempfile.mkdtemp(prefix="rfteval-grader-")
        workdir = SANDBOX_TMP if sandboxed else os.path.join(self.dir, "tmp")
        os.makedirs(workdir, exist_ok=True)
        if found.cgroup:
            _Sandbox.counter += 1
            # room for the template's imports until the first source is prepared, when it is fitted (_prepare)
            memory = (s.memory_mb << 20) + TEMPLATE_BYTES if s.memory_mb else None
            self.cgroup = Cgroup.make(f"rfteval-{os.getpid()}-{_Sandbox.counter}", memory, s.processes)
            if self.cgroup is None and not s.unsafe:
                self.stop()
                raise SandboxUnavailable(f"could not create the sandbox's cgroup under {cgroup_root()}; "
                                         f"{UNSAFE_HINT}")
        if self.cgroup is None and s.memory_mb:
            note_once(f"rfteval: no cgroup here, so --grader-memory {s.memory_mb} MB is a limit per process "
                      "(RLIMIT_AS): a grader that forks can hold more than that in all")
        oom_host = self.cgroup.oom_file if self.cgroup is not None and s.memory_mb else None
        config: WorkerConfig = {"timeout_s": s.timeout_s, "grace_s": grace_s(s.timeout_s), "memory_mb": s.memory_mb,
                  "stdout_cap": STDOUT_CAP, "workdir": workdir, "pid_namespace": sandboxed,
                  "outdir": "/dev/shm" if sandboxed else workdir,
                  "file_bytes": s.disk_mb << 20, "nproc": None if found.cgroup else s.processes,
                  "oom_file": (OOM_FILE if sandboxed else oom_host) if oom_host else None}
        env = worker_env(s.never_pass)
        if not sandboxed:
            env.update(HOME=workdir, TMPDIR=workdir)
        command = [sys.executable, "-I", str(WORKER_SCRIPT), json.dumps(config)]
        pass_fds: tuple[int, ...] = ()
        read_fd = -1
        if sandboxed:
            read_fd, write_fd = os.pipe()
            os.write(write_fd, seccomp_program())
            os.close(write_fd)
            pass_fds = (read_fd,)
            command = [found.bwrap or "bwrap", *bwrap_args(tmp_bytes(s, self.cgroup is not None), read_fd, oom_host),
                       "--", *command]
        if self.cgroup is not None:  # the shell joins the cgroup, then becomes bwrap: nothing starts outside
            procs = self.cgroup.procs
            script = ('n=$1; shift; while [ "$n" -gt 0 ]; do echo $$ > "$1" || exit 97; shift; n=$((n-1)); done; '
                      'exec "$@"')
            command = ["/bin/sh", "-c", script, "sh", str(len(procs)), *procs, *command]
        try:
            with open(os.path.join(self.dir, ".startup"), "wb") as err:
                self.proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                                             bufsize=0, cwd=workdir if not sandboxed else self.dir, env=env,
                                             pass_fds=pass_fds, start_new_session=True)
        finally:
            if read_fd >= 0:
                os.close(read_fd)
        try:
            ready = json.loads(self.receive(STARTUP_TIMEOUT_S)[:4096])
            if not ready.get("ready"):
                raise ValueError("no ready message")
        except (Failure, ValueError) as exc:
            detail = self.startup_log or str(exc)
            self.stop()
            raise _StartError(f"the grader sandbox did not start: {detail.strip()[-2000:]}") from None
        self.pid = int(ready["pid"])
        self.oom_seen = self.cgroup.oom_kills() if self.cgroup is not None else 0
        text = ("bubblewrap: user, PID, mount, network and IPC namespaces, seccomp, read-only packages, private /tmp"
                + (", cgroup memory and process limits" if self.cgroup else ", RLIMIT_AS and RLIMIT_NPROC limits")
                if sandboxed else f"unsafe: no sandbox ({found.refused})")
        with self.settings.lock:
            self.settings.isolation = text

    @property
    def startup_log(self) -> str | None:
        if not self.dir:
            return None
        try:
            with open(os.path.join(self.dir, ".startup"), "rb") as fh:
                fh.seek(0, os.SEEK_END)
                fh.seek(max(0, fh.tell() - STDOUT_CAP))
                return fh.read().decode("utf-8", "replace") or None
        except OSError:
            return None

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None:
            for pipe in (proc.stdin, proc.stdout):
                try:
                    if pipe is not None:
                        pipe.close()
                except OSError:
                    pass
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # bwrap, hence its PID namespace: everything in the sandbox
            except (ProcessLookupError, PermissionError):
                pass
            proc.wait()
        if self.cgroup is not None:
            self.cgroup.remove()
            self.cgroup = None
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None
        self.sources.clear()
        self.pid = None
        self.buffer = bytearray()

    def send(self, payload: bytes) -> None:
        assert self.proc is not None and self.proc.stdin is not None
        fd = self.proc.stdin.fileno()
        written = os.writev(fd, [HEADER.pack(len(payload)), payload])
        if written < HEADER.size + len(payload):
            view = memoryview(HEADER.pack(len(payload)) + payload)[written:]
            while view:
                view = view[os.write(fd, view):]

    def receive(self, silence_s: float) -> bytes:
        """One frame; Failure when the supervisor ends, garbles, or says nothing for `silence_s` (it sends a
        heartbeat every second while a unit runs, so silence means it was stopped or is stuck)."""
        assert self.proc is not None and self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        buf = self.buffer
        last = time.monotonic()
        while True:
            if len(buf) >= HEADER.size:
                need = HEADER.unpack_from(buf)[0]
                if need > MAX_REPLY_BYTES:
                    raise Failure(PYTHON_SERVER, "the grader sandbox sent an oversized reply")
                if len(buf) >= HEADER.size + need:
                    frame = bytes(buf[HEADER.size:HEADER.size + need])
                    del buf[:HEADER.size + need]
                    return frame
            ready = select.select([fd], [], [], max(0.0, last + silence_s - time.monotonic()))[0]
            if ready:
                chunk = os.read(fd, 1 << 20)
                if not chunk:
                    try:
                        code = self.proc.wait(timeout=5)
                    except subprocess.TimeoutExpired:
                        code = None
                    raise Failure(PYTHON_RUNTIME, f"the grader's sandbox ended ({exit_description(code)}) while "
                                                   "grading this sample")
                buf += chunk
                last = time.monotonic()
                continue
            raise Failure(PYTHON_TIMEOUT, f"the grader's sandbox sent no heartbeat for {silence_s:g} s (its "
                                           "supervisor was stopped or is stuck) while grading this sample; it "
                                           "was killed")

    def memory_killed(self, result: GradeResult) -> GradeResult:
        """The sample a supervisor died on, as a memory error naming the limit when the cgroup's OOM killer has
        killed since the last kill accounted for: the kernel may pick the supervisor itself when /tmp pages and
        many small processes fill the unit's limit. (A child's OOM kill the supervisor charges itself.)"""
        error = result.error
        if error is None or self.cgroup is None or error.type not in (PYTHON_RUNTIME, PYTHON_SERVER):
            return result
        kills = self.cgroup.oom_kills()
        if kills <= self.oom_seen:
            return result
        self.oom_seen = kills
        what = "loading the grader source" if "loading the grader source" in error.message else "grade()"
        memory_mb = self.settings.policy.memory_mb
        limit = f"{memory_mb} MB" if memory_mb else "the sandbox's memory"
        return GradeResult.failed(PYTHON_MEMORY, f"{what} ran out of memory (limit {limit} for the unit and every "
                                                 "process it started): the kernel's OOM killer ended it",
                                  stdout=result.stdout)

    def prepare(self, key: str, source: str, kind: str = "grade") -> None:
        """Have the supervisor import what a new source imports, then fit the cgroup's memory limit above the
        template it made: --grader-memory is then what a unit's processes may hold together, not the template.
        `kind` "tools": a tools module (sandbox/turns.py)."""
        memory = (self.settings.policy.memory_mb or 0) << 20
        if self.cgroup is not None and memory:
            try:
                self.cgroup.set_memory(self.cgroup.resident() + memory + TEMPLATE_BYTES)  # room for the imports
            except (OSError, ValueError):
                pass  # the limit from before stays: tighter, never looser
        self.send(marshal.dumps(("prepare", key, source, kind)))
        self.sources.add(key)
        finished = False
        while not finished:
            _, finished = decode_reply(self.receive(PREPARE_TIMEOUT_S), 0, 0)
        if self.cgroup is not None and memory:
            try:
                self.memory_limit = self.cgroup.fit(memory, CHILD_SLACK)
            except (OSError, ValueError) as exc:
                raise Failure(PYTHON_SERVER, f"the sandbox's memory limit could not be set ({exc})") from None

    def request(self, key: str, source: str, units: list[tuple[bytes, list[Sent]]]) -> bytes:
        sent_source = None if key in self.sources else source
        self.sources.add(key)
        return marshal.dumps(("grade", key, sent_source, units))


def exit_description(returncode: int | None) -> str:
    if returncode is None:
        return "stopped answering"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"killed by {name}"
    return f"exit code {returncode}"




def _stop_all(sandboxes: list[_Sandbox], lock: threading.Lock) -> None:
    with lock:
        todo = list(sandboxes)
        sandboxes.clear()
    for box in todo:
        box.stop()


@dataclass(eq=False)
class _Task:
    """One batch of whole units for one pool thread; `units` None is a request to start a sandbox (a probe)."""

    key: str
    source: str
    pairs: list[Pair]
    units: list[list[int]] | None  # indices into pairs, one list per unit
    whole: bool = False
    future: Future[list[Outcome]] = field(default_factory=Future)


def default_workers() -> int:
    """One sandbox more than there are cores: a sandbox's core idles while its supervisor waits for rfteval's next
    batch and between a child's exit and the next fork, and the spare one fills those gaps. Units in different
    sandboxes share nothing (separate namespaces, supervisors and cgroups), so this costs memory, not isolation."""
    return (os.cpu_count() or 1) + 1


class WorkerPool:
    """Thread-safe: grade() may be called from many threads at once; each call's units spread over sandboxes.

    One pool thread per sandbox feeds it batches of whole units. Sandboxes start lazily and live until close();
    the grader processes inside them live for one unit each.
    """

    def __init__(self, workers: int | None = None, timeout_s: float | None = None, memory_mb: int | None = None,
                 batch_size: int = PYTHON_BATCH_SIZE, *, policy: SandboxPolicy | None = None,
                 unsafe: bool | None = None, disk_mb: int | None = None, processes: int | None = None):
        """`policy`: what its sandboxes may do (default: SandboxPolicy(), safe unless RFTEVAL_UNSAFE_PYTHON_GRADERS=1),
        for this pool alone; timeout_s, memory_mb, unsafe, disk_mb and processes, when given, change it."""
        self.workers = workers or default_workers()
        if self.workers < 1 or batch_size < 1:
            raise ValueError("workers and batch_size must be positive")
        base = policy or SandboxPolicy()
        self.policy = replace(base, unsafe=base.unsafe if unsafe is None else unsafe,
                              timeout_s=base.timeout_s if timeout_s is None else timeout_s,
                              memory_mb=base.memory_mb if memory_mb is None else memory_mb,
                              disk_mb=base.disk_mb if disk_mb is None else disk_mb,
                              processes=base.processes if processes is None else processes)
        self.batch_size = batch_size
        self._settings = _Settings(self.policy)
        self._lock = threading.Lock()
        self._queue: queue.SimpleQueue[_Task | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._all: list[_Sandbox] = []
        self._keys: dict[str, str] = {}
        self._closed = False
        self._finalizer = weakref.finalize(self, _stop_all, self._all, self._lock)

    # -- public

    @property
    def timeout_s(self) -> float:
        return self.policy.timeout_s

    @property
    def memory_mb(self) -> int | None:
        return self.policy.memory_mb

    @property
    def unsafe(self) -> bool:
        return self.policy.unsafe

    @property
    def isolation(self) -> str:
        """What holds grader code here: "bubblewrap: ..." or "unsafe: ..."; raises SandboxUnavailable when
        neither may run. Starts a sandbox when none has started yet."""
        if self._settings.isolation is None:
            try:
                self._submit(_Task("", "", [], None)).result()
            except _StartError as exc:
                return f"not started: {exc}"
        return self._settings.isolation or "not started"

    def grade(self, source: str, pairs: Sequence[Pair], units: Sequence[Hashable] | None = None) -> list[GradeResult]:
        """One result per (sample, item), in order. Never raises for what the grader does; raises
        SandboxUnavailable when the sandbox cannot be built here and the pool is not unsafe.
        `units`: one key per pair (a model's label and an item's id); pairs with equal keys and the same item may
        share a process. None: every pair is graded in a process of its own."""
        pairs = list(pairs)
        if not pairs:
            return []
        if not self.policy.unsafe and host().refused is not None:
            raise SandboxUnavailable(f"{host().refused}; {UNSAFE_HINT}")
        key = self._key(source)
        results = self._grade(key, source, pairs, group_units(pairs, units), whole=False)
        again = [i for i, r in enumerate(results) if isinstance(r, Resend)]
        if again:
            subset = [pairs[i] for i in again]
            redone = self._grade(key, source, subset, [[i] for i in range(len(subset))], whole=True)
            for i, result in zip(again, redone, strict=True):
                results[i] = result
        return [r if isinstance(r, GradeResult)  # a child asks again only for compact samples: never here
                else GradeResult.failed(PYTHON_SERVER, "the grader process refused the sample, sent whole")
                for r in results]

    def _grade(self, key: str, source: str, pairs: list[Pair], units: list[list[int]],
               whole: bool) -> list[Outcome]:
        size = max(1, min(self.batch_size, -(-len(pairs) // self.workers)))
        tasks: list[_Task] = []
        batch: list[list[int]] = []
        count = 0
        for unit in units:
            if batch and count + len(unit) > size:
                tasks.append(_Task(key, source, pairs, batch, whole))
                batch, count = [], 0
            batch.append(unit)
            count += len(unit)
        if batch:
            tasks.append(_Task(key, source, pairs, batch, whole))
        futures = [self._submit(task) for task in tasks]
        results: list[Outcome] = [None] * len(pairs)  # type: ignore[list-item]
        try:
            for task, future in zip(tasks, futures, strict=True):
                flat = [i for unit in task.units or [] for i in unit]
                for i, result in zip(flat, future.result(), strict=True):
                    results[i] = result
        except CancelledError:
            raise RuntimeError("the python worker pool was closed while grading") from None
        return results

    def close(self) -> None:
        """Finish the batches being graded, cancel the rest, stop every sandbox."""
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

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def pids(self) -> list[int]:
        """Host process ids of the running sandboxes (bubblewrap or the supervisor; for diagnostics and tests)."""
        with self._lock:
            return [box.proc.pid for box in self._all if box.proc is not None]

    # -- internals

    def _submit(self, task: _Task) -> Future[list[Outcome]]:
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
        """A pool thread: owns one sandbox, grades the batches it takes until told to stop."""
        box = _Sandbox(self._settings)
        with self._lock:
            self._all.append(box)
        while True:
            task = self._queue.get()
            if task is None:
                return
            if not task.future.set_running_or_notify_cancel():
                continue
            try:
                if task.units is None:
                    if box.proc is None:
                        box.start()
                    task.future.set_result([])
                    continue
                task.future.set_result(self._run_task(box, task))
            except BaseException as exc:  # noqa: BLE001  (a bug here must reach the caller, not kill the thread)
                task.future.set_exception(exc)

    def _run_task(self, box: _Sandbox, task: _Task) -> list[Outcome]:
        """Grade one batch of units; a supervisor that dies, hangs or garbles costs only the sample it was on
        (the first without a result), and the rest go to a fresh sandbox. Results in the batch's flat order."""
        assert task.units is not None
        pack = encode_whole if task.whole else compact_sample
        flat = [i for unit in task.units for i in unit]
        encoded_items: dict[int, bytes] = {}
        units: list[tuple[int, bytes, list[Sent]]] = []  # (flat start, item, samples)
        pos = 0
        for unit in task.units:
            item = task.pairs[unit[0]][1]
            blob = encoded_items.get(id(item))
            if blob is None:
                blob = encoded_items[id(item)] = encode(item)
            units.append((pos, blob, [pack(task.pairs[i][0]) for i in unit]))
            pos += len(unit)
        results: list[Outcome] = []
        failures = 0
        while len(results) < len(flat):
            done = len(results)
            remaining = []
            for start, blob, samples in units:
                end = start + len(samples)
                if end > done:
                    remaining.append((blob, samples[max(0, done - start):]))
            try:
                if box.proc is None:
                    box.start()
                elif box.cgroup is not None:  # OOM kills of earlier batches are theirs (a helper's, say)
                    box.oom_seen = box.cgroup.oom_kills()
                if task.key not in box.sources:
                    box.prepare(task.key, task.source)
                box.send(box.request(task.key, task.source, remaining))
                finished = False
                while not finished:
                    part, finished = decode_reply(box.receive(SILENCE_S), len(results), len(flat))
                    results += part
                    if box.cgroup is not None and any(isinstance(r, GradeResult) and r.error is not None
                                                      and r.error.type == PYTHON_MEMORY for r in part):
                        box.oom_seen = box.cgroup.oom_kills()  # the supervisor charged those kills already
                    if part:
                        failures = 0
            except _StartError as exc:
                results += [GradeResult.failed(PYTHON_SERVER, str(exc)) for _ in range(len(flat) - len(results))]
                break
            except Failure as failure:
                failed = box.memory_killed(GradeResult.failed(failure.error.type, failure.error.message))
                box.stop()
                results.append(failed)
                failures += 1
                if failures >= MAX_ZERO_PROGRESS:
                    results += [GradeResult.failed(failure.error.type, failure.error.message)
                                for _ in range(len(flat) - len(results))]
            except OSError:  # the request pipe broke: the supervisor is gone
                box.stop()
                results.append(GradeResult.failed(PYTHON_RUNTIME,
                                                  "the grader's sandbox ended while grading this sample"))
                failures += 1
        return results
