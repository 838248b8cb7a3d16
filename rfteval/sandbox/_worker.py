"""Inside the python grader sandbox: a supervisor that never runs grader code, and one child per grading unit.

sandbox.WorkerPool starts `python -I _worker.py CONFIG_JSON` inside bubblewrap (see pool.py and
docs/sandbox.md). That process, the supervisor, is trusted: it reads requests (marshal, from the trusted
rfteval process) on stdin and imports what a grader source imports, never running a line of it. In the
sandbox's PID namespace it forks, per source, a template that runs the source's module-level code once and is
kept only when that left nothing a forked unit would share (Supervisor.template_hazard); every grading unit (the
samples of one model for one item) is then a fresh child forked from the template, its samples sent to it alone.
Without a template (unsafe mode, or a refused one) the child is forked from the supervisor and loads the source
itself. The child grades the unit's samples and writes each result into a shared memory region of its own; the
supervisor reads that region, checks and bounds every record (it comes from grader code), keeps the time with its
own clock, kills the child and everything it started when the unit ends, wipes /tmp, and sends the results to
rfteval on stdout. Nothing a child does outlives its unit or reaches another unit's results.

Wire format to rfteval: 8-byte little-endian length, then JSON `[done, [[score, type, message, stdout], ...]]`,
results in request order (rfteval checks them again; see wire.decode_reply).

A "tools" request (sandbox/turns.py) runs a tools module the same way: loaded once in a template, each unit a tool
turn (one rollout's calls of one model turn) in a fresh child, with the same limits, clean-up and checks; what a
turn's child runs and what it reports are _tool_unit.py's, imported only then, so the grading path never loads it.
"""

from __future__ import annotations

import _signal
import ast
import gc
import json
import marshal
import math
import mmap
import os
import resource
import select
import signal
import stat
import struct
import sys
import time
import traceback
import types
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, cast

# Copies of rfteval.data.grades' error types (this script imports rfteval's modules only lazily, in a child).
PYTHON_RUNTIME = "python_grader_runtime_error"
PYTHON_TIMEOUT = "python_grader_timeout_error"
PYTHON_MEMORY = "python_grader_memory_error"
PYTHON_SERVER = "python_grader_server_error"
RESEND = "rfteval_resend_whole"  # as in wire.py: a sample sent compact that could not be rebuilt here
ERROR_TYPES = frozenset({PYTHON_RUNTIME, PYTHON_TIMEOUT, PYTHON_MEMORY, PYTHON_SERVER, RESEND})

HEADER = struct.Struct("<Q")  # frames to and from rfteval
RECORD = struct.Struct("<I")  # records in a child's result region
COUNT = struct.Struct("<QQ")  # the region's head: (records committed, bytes used after the head)
PIP_HINT = "pip install 'rfteval[graders]' (the packages of OpenAI's grader image)"
TRACEBACK_CHARS = 4000
MESSAGE_CHARS = 8000  # an error message as forwarded, at most
RECORD_SLACK = MESSAGE_CHARS * 4 + 4096  # room per record beyond the output cap (UTF-8, JSON escapes)
FLUSH_S = 0.05  # results go to rfteval at least this often while a request runs
HEARTBEAT_S = 1.0  # and something at least this often, so rfteval can tell a stopped supervisor (as in pool.py)
LOADED = -1  # the record index that says the source loaded (or why it did not)
SIGALRM, ITIMER_REAL = signal.SIGALRM, signal.ITIMER_REAL
THREAD_ENV = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS",
              "VECLIB_MAXIMUM_THREADS")
MAX_PREIMPORTS = 64
MAX_TEMPLATES = 4  # sources loaded once per sandbox at a time; the oldest template ends when a fifth is loaded

Err = tuple[str, str]
Record = tuple[int, float, "str | None", "str | None", "str | None"]  # in a child's region: index, score, type, message, output

if TYPE_CHECKING:  # the checker's names only: at run time this script defines and imports none of them
    from typing import TypedDict

    from rfteval.data.json_types import JSONObject, JSONValue
    from rfteval.data.sample import Sample
    from rfteval.sandbox._tool_unit import Tools, Unit

    # What rfteval sends for one sample (wire.compact_sample): the whole sample as marshal, the text of a JSON
    # output alone, or (text, tools as marshal or None, whether output_json is the text's parse).
    Sent = bytes | str | tuple[str, bytes | None, bool]
    Row = list[float | str | None]  # one result to rfteval: [score, error type, message, stdout] (wire.decode_reply)
    GradeFn = Callable[[Sample, JSONObject], object]  # the grader's grade(sample, item); its value is checked
    Loaded = GradeFn | Tools  # what a source's load gives: a grader's grade(), or a tools module's functions
    GradeUnit = tuple[bytes, list["Sent"], int]  # a grading unit: (item as marshal, its samples, the first to grade)
    ParseFn = Callable[[str], JSONValue]  # rfteval.data.sample.parse_output_json
    MakeFn = Callable[[str, list[JSONValue] | None, None, JSONValue], Sample]  # make_sample, as called here

    class SampleFunctions(TypedDict, total=False):
        parse: ParseFn
        make: MakeFn

    class WorkerConfig(TypedDict):
        """The supervisor's settings, the JSON argument pool._Sandbox.start passes."""

        timeout_s: float
        grace_s: float
        memory_mb: int | None
        stdout_cap: int
        workdir: str
        pid_namespace: bool
        outdir: str
        file_bytes: int | None
        nproc: int | None
        oom_file: str | None


LIMITS = {"memory": "none", "timeout": "none"}  # the limits as set, for messages


class GraderTimeout(BaseException):
    """Raised by the SIGALRM handler inside grade(); a BaseException so `except Exception` does not eat it."""


# ---------------------------------------------------------------- framing


def read_exact(fd: int, n: int) -> bytes | None:
    parts: list[bytes] = []
    while n:
        chunk = os.read(fd, min(n, 1 << 24))
        if not chunk:
            return None
        parts.append(chunk)
        n -= len(chunk)
    return b"".join(parts)


def recv(fd: int) -> bytes | None:
    head = read_exact(fd, HEADER.size)
    if head is None:
        return None
    return read_exact(fd, HEADER.unpack(head)[0])


def send(fd: int, payload: bytes) -> None:
    written = os.writev(fd, [HEADER.pack(len(payload)), payload])
    if written < HEADER.size + len(payload):
        view = memoryview(HEADER.pack(len(payload)) + payload)[written:]
        while view:
            view = view[os.write(fd, view):]


# ---------------------------------------------------------------- output capture (in the child)


class Capture:
    """sys.stdout and sys.stderr of a child: writes straight to fd 1, the unit's output file (so prints and C-level
    output stay in order, and what a dying call printed is already in the file for the supervisor), dropping
    what one call prints past the cap."""

    encoding = "utf-8"
    errors = "replace"

    def __init__(self, cap: int):
        self.cap = cap
        self.written = 0
        self.truncated = False
        self.buffer = _BytesCapture(self)

    def write(self, text: str) -> int:
        if type(text) is not str:
            if not isinstance(text, str):
                raise TypeError(f"write() argument must be str, not {type(text).__name__}")
            text = str.__str__(text)
        if not text:
            return 0
        data = text.encode("utf-8", "replace")
        room = self.cap - self.written
        if len(data) > room:
            self.truncated = True
            data = data[:max(room, 0)]
        if data:
            self.written += len(data)
            view = memoryview(data)
            try:
                while view:
                    view = view[os.write(1, view):]
            except OSError:  # the disk or file size limit: what fits is kept
                self.truncated = True
        return len(text)

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        pass

    def fileno(self) -> int:
        return 1

    def isatty(self) -> bool:
        return False

    def writable(self) -> bool:
        return True

    def readable(self) -> bool:
        return False


class _BytesCapture:
    """sys.stdout.buffer for graders that write bytes."""

    def __init__(self, text: Capture):
        self.text = text

    def write(self, data: bytes) -> int:
        self.text.write(bytes(data).decode("utf-8", "replace"))
        return len(data)

    def flush(self) -> None:
        pass


def truncation_marker(cap: int) -> str:
    return f"\n[rfteval: output truncated at {cap // 1024} KB]"


def read_output(fd: int, cap: int, truncated: bool = False) -> str | None:
    """What the output file holds (one call's output), capped and marked; None when empty."""
    try:
        size = os.fstat(fd).st_size
        data = os.pread(fd, min(size, cap), 0) if size else b""
    except OSError:
        return None
    truncated = truncated or size > cap
    if not data and not truncated:
        return None
    text = data.decode("utf-8", "replace")
    return text + truncation_marker(cap) if truncated else text


# ---------------------------------------------------------------- grading


def loading(tools: bool) -> str:
    return "loading the tools module" if tools else "loading the grader source"


def clean(text: str) -> str:
    """Text safe to write as UTF-8 (a grader's exception may carry lone surrogates)."""
    return text.encode("utf-8", "replace").decode("utf-8")


def missing_module_message(exc: ModuleNotFoundError) -> str:
    name = exc.name or str(exc)
    return f"the grader imports {name!r}, which is not installed: {PIP_HINT}, or install the package providing it"


def describe(exc: BaseException, what: str) -> Err:
    """An error type and message for an exception out of the grader, traceback trimmed to its own frames."""
    if isinstance(exc, GraderTimeout):
        return PYTHON_TIMEOUT, f"{what} ran over the {LIMITS['timeout']} time limit"
    if isinstance(exc, MemoryError):
        detail = clean(str(exc))[:200]
        return PYTHON_MEMORY, f"{what} ran out of memory (limit {LIMITS['memory']})" + (f": {detail}" if detail else "")
    if isinstance(exc, SystemExit):
        return PYTHON_RUNTIME, f"{what} called sys.exit({exc.code!r})"
    if isinstance(exc, ModuleNotFoundError):
        return PYTHON_RUNTIME, missing_module_message(exc)
    tb = exc.__traceback__.tb_next if exc.__traceback__ is not None else None  # drop the worker's own frame
    try:
        text = "".join(traceback.format_exception(type(exc), exc, tb)).rstrip()
    except Exception:  # noqa: BLE001  (a hostile __str__; fall back to the type)
        text = type(exc).__name__
    try:
        head = f"{what} raised " + traceback.format_exception_only(type(exc), exc)[-1].strip()[:500]
    except Exception:  # noqa: BLE001
        head = f"{what} raised {type(exc).__name__}"
    if len(text) > TRACEBACK_CHARS:
        text = "...\n" + text[-TRACEBACK_CHARS:]
    return PYTHON_RUNTIME, clean(f"{head}\n{text}")


def as_score(value: object) -> float | Err:
    """grade()'s return value as a finite float; plain floats take a fast path, the rest grades.checked_score."""
    if type(value) is float:
        return value if math.isfinite(value) else (PYTHON_RUNTIME, f"grade() returned {value}, not a finite number")
    if type(value) is int:
        try:
            return float(value)
        except OverflowError:
            return PYTHON_RUNTIME, "grade() returned an int too large for a float"
    try:
        from rfteval.data.grades import checked_score

        checked = checked_score(value)
    except OverflowError:
        return PYTHON_RUNTIME, "grade() returned an int too large for a float"
    except Exception as exc:  # noqa: BLE001  (a hostile __repr__ / __float__)
        return PYTHON_RUNTIME, f"grade() returned an unusable {type(value).__name__} ({type(exc).__name__})"
    if isinstance(checked, float):
        return checked
    return checked.type, checked.message



SAMPLE: SampleFunctions = {}


def sample_functions() -> tuple[ParseFn, MakeFn]:
    """rfteval.data.sample's parse_output_json and make_sample: the pool's process built the samples with them."""
    if not SAMPLE:
        from rfteval.data.sample import (  # json and msgspec: cheap at start-up
            make_sample,
            parse_output_json,
        )

        SAMPLE["parse"], SAMPLE["make"] = parse_output_json, make_sample
    return SAMPLE["parse"], SAMPLE["make"]


def rebuild(sent: str | tuple[str, bytes | None, bool]) -> Sample:
    """The sample the pool sent as (text, tools, whether output_json is the text's parse), built by the same
    make_sample the pool's process built it with. Raises when the parse fails here though it succeeded there
    (a limit set differently, say): the pool then sends the sample whole."""
    text: str
    tools_blob: bytes | None
    if isinstance(sent, str):
        text, tools_blob, parse = sent, None, True
    else:
        text, tools_blob, parse = sent
    tools = marshal.loads(tools_blob) if tools_blob is not None else None
    parse_output_json, make_sample = sample_functions()
    if not parse:
        return make_sample(text, tools, None, None)
    parsed = parse_output_json(text)
    if parsed is None:
        raise ValueError("the output did not parse as JSON here")
    return make_sample(text, tools, None, parsed)


def undecodable(exc: BaseException, whole: bool) -> Err:
    """The error for a sample this process could not decode: sent compact, the pool sends it again whole;
    sent whole, it is that sample's error."""
    if not whole:
        return RESEND, f"{type(exc).__name__}: {clean(str(exc))[:200]}"
    if isinstance(exc, MemoryError):
        return PYTHON_MEMORY, f"the sample does not fit in the grader process's memory limit ({LIMITS['memory']})"
    return PYTHON_SERVER, f"the grader process could not decode the sample ({type(exc).__name__})"


# ---------------------------------------------------------------- the child: one grading unit


class Child:
    """Runs in the forked child: loads the source, grades the unit's samples, writes each result to the region.
    Everything here can be rewritten by the grader; the supervisor believes none of it beyond this unit."""

    def __init__(self, region: mmap.mmap | None, timeout_s: float, cap: int, tools: bool = False):
        self.region = region  # None in a template's loader, which commits nothing
        self.timeout_s = timeout_s
        self.cap = cap
        self.tools = tools  # a tools module's unit (_tool_unit.py), not a grader's
        self.count = 0
        self.used = 0
        self.in_call = False
        self.call_started = 0.0
        self.capture = Capture(cap)

    def on_alarm(self, signum: int, frame: types.FrameType | None) -> None:
        """The timer is armed once per unit, not per call: on firing, interrupt the current call if it is over its
        limit, else re-arm for its rest."""
        if not self.in_call:
            signal.setitimer(ITIMER_REAL, self.timeout_s)
            return
        remaining = self.call_started + self.timeout_s - time.monotonic()
        if remaining > 0.001:
            signal.setitimer(ITIMER_REAL, remaining)
            return
        signal.setitimer(ITIMER_REAL, 1.0)  # again in a second, in case the grader swallows this one
        raise GraderTimeout()

    def commit(self, index: int, score: float, error: Err | None, stdout: str | None) -> None:
        etype, message = error if error is not None else (None, None)
        if message is not None and len(message) > MESSAGE_CHARS:
            message = message[:MESSAGE_CHARS]
        body = encode_record([index, score, etype, message, stdout])
        region = self.region
        assert region is not None
        end = COUNT.size + self.used + RECORD.size + len(body)
        if end > len(region):
            body = encode_record([index, 0.0, PYTHON_SERVER, "the result did not fit in its region", None])
            end = COUNT.size + self.used + RECORD.size + len(body)
        start = COUNT.size + self.used
        RECORD.pack_into(region, start, len(body))
        region[start + RECORD.size:end] = body
        self.used = end - COUNT.size
        self.count += 1
        COUNT.pack_into(region, 0, self.count, self.used)

    def take_output(self) -> str | None:
        """The call's output from the output file, and a clean file for the next call (one system call when the
        call printed nothing)."""
        capture = self.capture
        if not os.lseek(1, 0, os.SEEK_CUR) and not capture.truncated:
            return None
        text = read_output(1, self.cap, capture.truncated)
        os.ftruncate(1, 0)
        os.lseek(1, 0, os.SEEK_SET)
        capture.written = 0
        capture.truncated = False
        return text

    def load(self, code: types.CodeType, key: str) -> Loaded | Err:
        mod = types.ModuleType(f"rfteval_grader_{key[:16]}")
        mod.__file__ = code.co_filename
        sys.modules[mod.__name__] = mod  # pydantic and dataclasses look their module up here
        try:
            try:
                self.call_started = time.monotonic()
                self.in_call = True
                exec(code, mod.__dict__)  # noqa: S102  (the grader's own source, in its own process)
            finally:
                self.in_call = False
            if self.tools:  # (_tool_unit: imported by the supervisor before any tools module's template forks)
                from rfteval.sandbox._tool_unit import Tools

                return Tools(mod.__dict__, mod.__name__)
        except BaseException as exc:  # noqa: BLE001
            if self.tools and not isinstance(exc, (GraderTimeout, MemoryError)):
                from rfteval.sandbox._tool_unit import load_failure

                return PYTHON_RUNTIME, load_failure(exc, code.co_filename)
            return describe(exc, loading(self.tools))
        fn = mod.__dict__.get("grade")
        if not callable(fn):
            return PYTHON_RUNTIME, "the grader source defines no function grade(sample, item)"
        return fn

    def run(self, code: types.CodeType, key: str, unit: GradeUnit | Unit) -> None:
        """Load the source, then run the unit; each result is committed as soon as it is known."""
        sys.stdout = sys.stderr = self.capture
        signal.signal(SIGALRM, self.on_alarm)
        signal.setitimer(ITIMER_REAL, self.timeout_s)
        fn = self.load(code, key)
        output = self.take_output()
        if isinstance(fn, tuple):
            self.commit(LOADED, 0.0, fn, output)
            return
        self.work(fn, unit, loaded=True)

    def work(self, fn: Loaded, unit: GradeUnit | Unit, loaded: bool) -> None:
        """With the source loaded (here, `loaded`, or in the template this child was forked from, which reported
        the load itself), a grading unit's samples or a tool turn's calls."""
        if not self.tools:
            item_blob, samples, start = cast("GradeUnit", unit)
            self.grade_all(cast("GradeFn", fn), item_blob, samples, start, loaded)
            return
        from rfteval.sandbox._tool_unit import Turn

        if loaded:
            self.commit(LOADED, 0.0, None, None)
        Turn(self, cast("Tools", fn), cast("Unit", unit), GraderTimeout, LIMITS).run()

    def grade_all(self, fn: GradeFn, item_blob: bytes, samples: list[Sent], start: int, loaded: bool = True) -> None:
        """With the source loaded (here, or in the template this child was forked from, which reported the load
        itself: `loaded` False), grade samples[start:]."""
        if loaded:
            self.commit(LOADED, 0.0, None, None)
        parse, make = sample_functions()
        loads, monotonic, handler, getsignal = marshal.loads, time.monotonic, self.on_alarm, _signal.getsignal
        for i in range(start, len(samples)):
            sent = samples[i]
            try:
                item = loads(item_blob)  # a fresh copy for every call: no call sees what another did to it
                if type(sent) is bytes:  # the whole sample
                    sample = loads(sent)
                elif type(sent) is str and (parsed := parse(sent)) is not None:  # the text of a JSON output
                    sample = make(sent, None, None, parsed)
                else:
                    assert not isinstance(sent, bytes)  # for the checker: marshal gives exact bytes, taken above
                    sample = rebuild(sent)
            except BaseException as exc:  # noqa: BLE001
                self.commit(i, 0.0, undecodable(exc, type(sent) is bytes), None)
                continue
            sys.stdout = sys.stderr = self.capture
            if getsignal(SIGALRM) is not handler:  # the grader may have replaced it
                signal.signal(SIGALRM, handler)
            if hasattr(signal, "pthread_sigmask"):
                signal.pthread_sigmask(signal.SIG_UNBLOCK, {SIGALRM})
            error: Err | None = None
            score = 0.0
            try:
                try:
                    self.call_started = monotonic()
                    self.in_call = True
                    value = fn(sample, item)
                finally:
                    self.in_call = False
            except BaseException as exc:  # noqa: BLE001  (everything the grader does is data)
                error = describe(exc, "grade()")
            else:
                if type(value) is float and value - value == 0.0:  # a finite float: the common case
                    score = value
                else:
                    checked = as_score(value)
                    if isinstance(checked, tuple):
                        error = checked
                    else:
                        score = checked
            self.commit(i, score, error, self.take_output())


def encode_record(record: list[int | float | str | None]) -> bytes:
    try:
        return ENCODE(record)
    except (TypeError, ValueError):  # a lone surrogate in a message: json escapes it
        return json.dumps(record).encode()


def _json_bytes(value: object) -> bytes:
    return json.dumps(value).encode()


ENCODE: Callable[[object], bytes] = _json_bytes  # msgspec's encoder once it is imported


def child_main(child: Child, limits: list[tuple[int, tuple[int, int]]], code: types.CodeType, key: str,
               unit: GradeUnit | Unit, null_fd: int, out_fd: int) -> None:
    """In the forked child, before any grader code: its own session, fds 0-2 only (the supervisor's pipes are
    closed), limits for this process and what it starts, then the unit. Never returns.

    Everything else a child needs was made ready in the supervisor before the fork (the Child object, the limits
    as numbers, signal dispositions, faulthandler on fd 2): each page a child writes that it shares with the
    template is copied on its first write, and that copying, not the work itself, is most of a unit's set-up."""
    try:
        os.setsid()
        os.dup2(null_fd, 0)
        os.dup2(out_fd, 1)
        os.dup2(out_fd, 2)
        os.closerange(3, 1 << 20)  # the requests, the replies, the output file's own fd: none is the grader's
        setrlimit = resource.setrlimit
        for which, value in limits:
            setrlimit(which, value)
        child.run(code, key, unit)
    except BaseException:  # noqa: BLE001, S110  (a failure here shows as a missing result; the supervisor reports it)
        pass
    os._exit(0)


# ---------------------------------------------------------------- a template: the source loaded once


TEMPLATE_FD = 3  # in a template: its socket to the supervisor
UNIT_FD, REGION_FD = 3, 4  # in a unit forked from a template: its own socket to the supervisor, its result region
WORD = struct.Struct("<q")  # a template's replies after its first: a child's pid, then that child's wait status


def template_main(loader: Child, limits: list[tuple[int, tuple[int, int]]], code: types.CodeType, key: str,
                  null_fd: int, out_fd: int, sock_fd: int) -> None:
    """In a template, forked from the supervisor for one source: the unit's limits, fds 0-3 only, then the
    grader's module-level code, run once, under the unit's time limit. It reports how the load went (a record
    as a child commits it), then forks one child per unit on the supervisor's word and reports that child's pid
    and wait status. Never returns.

    It is dumpable while the supervisor inspects it after the load (its threads, fds and mappings, read from
    /proc), and not dumpable again, on the supervisor's word, before any unit exists, so no unit can read or
    write its memory. It never receives a model output: those go to each child on a socket only that child
    holds (unit_main)."""
    try:
        os.setsid()
        os.dup2(null_fd, 0)
        os.dup2(out_fd, 1)
        os.dup2(out_fd, 2)
        os.dup2(sock_fd, TEMPLATE_FD)
        os.closerange(TEMPLATE_FD + 1, 1 << 20)
        for which, value in limits:
            resource.setrlimit(which, value)
        prctl(PR_SET_DUMPABLE, 1)
        sys.stdout = sys.stderr = loader.capture
        signal.signal(SIGALRM, loader.on_alarm)
        signal.setitimer(ITIMER_REAL, loader.timeout_s)
        fn = loader.load(code, key)
        signal.setitimer(ITIMER_REAL, 0)
        loader.take_output()  # what the import printed: a unit's output starts empty, as when it loads itself
        failed = fn if isinstance(fn, tuple) else None
        etype, message = failed if failed is not None else (None, None)
        send(TEMPLATE_FD, encode_record([LOADED, 0.0, etype, message, None]))
        if not isinstance(fn, tuple):
            gc.collect()
            gc.freeze()  # the units' collections then never touch (and copy) what the load made
            serve_units(fn, loader.timeout_s, loader.cap, loader.tools)
    except BaseException:  # noqa: BLE001, S110  (a failure shows as the template's end; the supervisor copes)
        pass
    os._exit(0)


def serve_units(fn: Loaded, timeout_s: float, cap: int, tools: bool) -> None:
    """A template's loop: on "D" become not dumpable; on "F" with (a socket, a result region, an output file)
    fork a unit's child, keep none of the three, report the child's pid, wait for it, report its status."""
    import socket

    sock = socket.socket(fileno=TEMPLATE_FD)
    while True:
        message, fds, _, _ = socket.recv_fds(sock, 16, 3)
        if not message:
            return
        if message == b"D":
            prctl(PR_SET_DUMPABLE, 0)
            sock.sendall(b"d")
            continue
        if message != b"F" or len(fds) != 3:
            return
        pid = os.fork()
        if pid == 0:
            unit_main(fn, timeout_s, cap, fds, tools)
        for fd in fds:
            os.close(fd)
        sock.sendall(WORD.pack(pid))
        sock.sendall(WORD.pack(os.waitpid(pid, 0)[1]))


def unit_main(fn: Loaded, timeout_s: float, cap: int, fds: list[int], tools: bool) -> None:
    """In a child forked from a template: its own session, fds 0-2 and its two channels only (the template's
    socket is closed), then the unit's samples, read from a socket only this process holds. Never returns."""
    try:
        unit_fd, region_fd, out_fd = fds
        os.setsid()
        os.dup2(out_fd, 1)
        os.dup2(out_fd, 2)
        os.dup2(unit_fd, UNIT_FD)  # replaces the template's socket
        os.dup2(region_fd, REGION_FD)
        os.closerange(REGION_FD + 1, 1 << 20)
        region = mmap.mmap(REGION_FD, 0)
        os.close(REGION_FD)
        data = recv(UNIT_FD)
        os.close(UNIT_FD)
        if data is None:
            os._exit(0)
        child = Child(region, timeout_s, cap, tools)
        sys.stdout = sys.stderr = child.capture
        signal.signal(SIGALRM, child.on_alarm)
        signal.setitimer(ITIMER_REAL, timeout_s)
        child.work(fn, marshal.loads(data), loaded=False)
    except BaseException:  # noqa: BLE001, S110  (a failure here shows as a missing result; the supervisor reports it)
        pass
    os._exit(0)


def child_limits(config: WorkerConfig, vsize: int) -> list[tuple[int, tuple[int, int]]]:
    """Per-process limits of the unit (the cgroup, when rfteval has one, limits the whole unit's memory and
    processes on top): address space beyond what the template maps, file size, process count, no core files.
    Computed once per source in the supervisor; a child only applies them."""
    limits: list[tuple[int, tuple[int, int]]] = []
    memory_mb = config.get("memory_mb")
    if memory_mb:
        want = vsize + int(memory_mb) * 1024 * 1024
        limits.append((resource.RLIMIT_AS, (want, want)))
    fsize = config.get("file_bytes")
    if fsize:
        limits.append((resource.RLIMIT_FSIZE, (int(fsize), int(fsize))))  # SIGXFSZ is ignored: EFBIG instead
    nproc = config.get("nproc")
    if nproc:
        limits.append((resource.RLIMIT_NPROC, (int(nproc), int(nproc))))
    limits.append((resource.RLIMIT_CORE, (0, 0)))
    return limits


# ---------------------------------------------------------------- the supervisor


def imported_modules(source: str) -> list[str]:
    """The absolute module names the source imports anywhere (top level or inside functions), read from its
    syntax tree without running it: the supervisor imports them once, so each unit's child starts with them."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
            names += [f"{node.module}.{alias.name}" for alias in node.names if alias.name != "*"]
    seen: dict[str, None] = {}
    for name in names:
        if all(part.isidentifier() for part in name.split(".")):
            seen.setdefault(name, None)
    return list(seen)[:MAX_PREIMPORTS]


def preimport(names: list[str]) -> None:
    """Import what a source will import (installed, read-only packages: trusted code), ignoring what fails;
    a submodule name that is really an attribute (`from collections import Counter`) fails quietly too."""
    import importlib

    for name in names:
        if name in sys.modules:
            continue
        try:
            importlib.import_module(name)
        except BaseException:  # noqa: BLE001, S110
            pass


WARMED: set[str] = set()  # the packages warm_up has done


def warm_up() -> None:
    """Do, once in the template, the first-use work of packages a grader imported (trusted code of ours, never the
    grader's): pydantic imports most of itself and builds its schema machinery when the first model class is
    defined, which a grader defining models would otherwise pay in every unit's child. Failures are ignored."""
    if "pydantic" in sys.modules and "pydantic" not in WARMED:
        WARMED.add("pydantic")
        try:
            from typing import Optional

            import pydantic

            class Part(pydantic.BaseModel):
                name: str = pydantic.Field(description="a name", examples=["x"])
                value: Optional[float] = None  # noqa: UP045  (the spelling graders use)

            class Whole(pydantic.BaseModel):
                parts: list[Part] = pydantic.Field(default_factory=list)
                tags: Optional[list[str]] = pydantic.Field(default=None, description="tags")  # noqa: UP045
                extra: dict[str, Any] = {}  # Any: the spelling graders use, whose schema path this warms
                flag: bool = False
                count: int = 0

            Whole.model_validate({"parts": [{"name": "a", "value": 1}], "tags": ["t"]}).model_dump()
        except BaseException:  # noqa: BLE001, S110
            pass


def vm_size() -> int:
    """This process's mapped address space in bytes (what RLIMIT_AS counts)."""
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def describe_exit(status: int | None) -> str:
    if status is None:
        return "stopped answering"
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = f"signal {number}"
        hint = " (the system may be out of memory)" if number == signal.SIGKILL else ""
        return f"was killed by {name}{hint}"
    return f"exited with code {os.WEXITSTATUS(status)}" if os.WIFEXITED(status) else "ended"


class Template:
    """In the supervisor: a template process that has loaded one source (pid -1 once reaped) and its socket."""

    def __init__(self, key: str, pid: int, fd: int):
        self.key = key
        self.pid = pid
        self.fd = fd
        self.unread = 0  # wait statuses of exited children not read yet (read when a failure needs one)


class Supervisor:
    """Trusted: never runs grader code, never maps a child's memory but its result region. One unit at a time."""

    def __init__(self, config: WorkerConfig, reply_fd: int):
        import msgspec

        self.config = config
        self.reply_fd = reply_fd
        self.timeout_s = float(config["timeout_s"])
        self.grace_s = float(config["grace_s"])
        self.cap = int(config["stdout_cap"])
        self.workdir = config["workdir"]
        self.outdir = config.get("outdir") or self.workdir  # apart from /tmp: a full disk still shows the output
        self.pid_namespace = bool(config.get("pid_namespace"))
        self.codes: dict[str, types.CodeType | Err] = {}
        self.broken: dict[str, Err] = {}
        self.limits: dict[str, list[tuple[int, tuple[int, int]]]] = {}
        # a source loaded once in a template process, units forked from it (in the PID namespace alone, where
        # everything but the templates can be found and killed after a unit); sources that may not have one
        self.templates: dict[str, Template] = {}
        self.no_template: dict[str, str] = {}
        self.tool_keys: set[str] = set()  # sources that are tools modules
        self.use_templates = self.pid_namespace and hasattr(os, "pidfd_open")
        # what /tmp and /dev/shm hold before any unit: the directories bubblewrap made for read-only binds under
        # /tmp (an interpreter or a checkout there), which no wipe removes and no template put there
        self.baseline: dict[str, set[str]] = {}
        for directory in (self.workdir, "/dev/shm") if self.pid_namespace else ():
            try:
                self.baseline[directory] = set(os.listdir(directory))
            except OSError:
                continue
        self.null_fd = os.open(os.devnull, os.O_RDONLY)  # a child's stdin
        self.decode_record = msgspec.json.Decoder(tuple[int, float, str | None, str | None, str | None]).decode
        self.encode = msgspec.json.encode
        self.pending: list[Row] = []
        self.sent_at = time.monotonic()
        self.oom_file: str | None = config.get("oom_file")  # the cgroup's OOM-kill count, bound in read-only
        self.oom_fd = -1  # kept open: one pread per look (a child closes it with every fd above 2)
        if self.oom_file is not None:
            try:
                self.oom_fd = os.open(self.oom_file, os.O_RDONLY)
            except OSError:
                self.oom_file = None
        self.oom_seen = self.oom_kills()

    # -- replies to rfteval

    def emit(self, results: list[Row]) -> None:
        self.pending += results
        self.flush(False)

    def flush(self, done: bool, heartbeat: bool = False, force: bool = False) -> None:
        now = time.monotonic()
        due = (self.pending and now - self.sent_at > FLUSH_S) or (heartbeat and now - self.sent_at > HEARTBEAT_S)
        if done or force or due:
            try:
                body = self.encode([done, self.pending])
            except (TypeError, ValueError):
                body = json.dumps([done, self.pending]).encode()
            send(self.reply_fd, body)
            self.pending = []
            self.sent_at = now

    def oom_kills(self) -> int:
        """How many processes of this sandbox the kernel's OOM killer has ended (the cgroup's own count); 0 where
        there is no cgroup. Read after a unit's results, so a kill is charged to the unit it happened in."""
        if self.oom_fd < 0:
            return 0
        try:
            text = os.pread(self.oom_fd, 4096, 0)  # a cgroup file is regenerated from offset 0 on every read
        except OSError:
            return 0
        at = text.find(b"oom_kill ")
        if at < 0:
            return 0
        try:
            return int(text[at + 9:].split(b"\n", 1)[0])
        except ValueError:
            return 0

    # -- a source

    def code_for(self, key: str, source: str | None, kind: str = "grade") -> types.CodeType | Err:
        """The source compiled, its imports done and its limits set, once per source. `kind` "tools": a tools
        module (_tool_unit.py), which the template loads as its functions, not as a grade()."""
        code = self.codes.get(key)
        if code is not None:
            return code
        if source is None:
            return PYTHON_SERVER, "internal: the pool did not send the grader source"
        filename = f"<grader {key[:8]}>"
        if kind == "tools":
            import rfteval.sandbox._tool_unit  # noqa: F401  (before any template forks: units find it loaded)

            self.tool_keys.add(key)
            filename = f"<tools {key[:8]}>"
        try:
            code = compile(source, filename, "exec", dont_inherit=True)  # no __future__ flags leak from here
        except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
            failed = self.codes[key] = (PYTHON_RUNTIME, f"the grader source does not compile: {exc}"[:MESSAGE_CHARS])
            return failed  # kept: the grade request after "prepare" comes without the source
        import linecache

        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)  # tracebacks show lines
        preimport(imported_modules(source))  # silent: rfteval allows a "prepare" request PREPARE_TIMEOUT_S
        warm_up()
        gc.collect()
        gc.freeze()  # a child's collections then never touch (and copy) the template's objects
        self.limits[key] = child_limits(self.config, vm_size())
        self.codes[key] = code
        return code

    # -- a request

    def grade(self, request: tuple[str, str, str | None, list[tuple[bytes, list[Sent]]]] | tuple[
            str, str, str | None, list[Unit]]) -> None:
        """A "grade" request (pool._Sandbox.request): the source's key, the source unless sent before, and
        the units, each (item as marshal, its samples as sent); or a "tools" request (sandbox/turns.py), whose
        units are tool turns (_tool_unit.py)."""
        kind, key, source, units = request
        code = self.code_for(key, source, kind)
        if (self.use_templates and not isinstance(code, tuple) and key not in self.broken
                and key not in self.templates and key not in self.no_template):
            self.start_template(key, code)
        if kind == "tools":
            for turn in cast("list[Unit]", units):
                self.emit(self.run_turn(code, key, turn))
            self.flush(True)
            return
        for item_blob, samples in cast("list[tuple[bytes, list[Sent]]]", units):
            start = 0
            while start < len(samples):
                if isinstance(code, tuple) or key in self.broken:  # did not compile, or its loading failed
                    failed = code if isinstance(code, tuple) else self.broken[key]
                    self.emit([[0.0, failed[0], failed[1], None] for _ in range(start, len(samples))])
                    break
                start = self.run_unit(code, key, item_blob, samples, start)
        self.flush(True)

    def run_unit(self, code: types.CodeType, key: str, item_blob: bytes, samples: list[Sent], start: int) -> int:
        """Fork a child for samples[start:], forward its results; returns where the next child must start
        (len(samples) when the unit is done). A child that dies, hangs or garbles costs the sample it was in."""
        if self.pending:  # what earlier units earned is safe in rfteval before this one's code runs
            self.flush(False, force=True)
        size = COUNT.size + (len(samples) - start + 1) * (self.cap + RECORD_SLACK + RECORD.size)
        out_fd = self.output_file()
        pid, pidfd, region, template = self.spawn(code, key, size, out_fd, (item_blob, samples, start))
        status: int | None = None
        read = 0  # records taken from the region
        offset = COUNT.size
        expected = LOADED if template is None else start  # the index the next record must have (a template's
        # child has the source loaded already: what it writes can never be blamed on the source)
        failure: Err | None = None
        limit = self.timeout_s + self.grace_s
        started = deadline_from = time.monotonic()
        cap_at = started + (len(samples) - start + 1) * limit  # the whole unit's budget, whatever it claims
        try:
            while True:
                now = time.monotonic()
                deadline = min(deadline_from + limit, cap_at)
                wait = max(0.0, min(deadline - now, HEARTBEAT_S))
                exited = self.wait_exit(pid, pidfd, wait) if template is None else self.wait_unit(template, pidfd, wait)
                if exited is not None:
                    status = exited
                count, used = COUNT.unpack_from(region, 0)
                if count > read:
                    results, read, offset, expected, failure = self.take(region, read, offset, count, used,
                                                                         expected, start, len(samples))
                    if results:
                        self.emit(self.charge_oom(results))
                    deadline_from = time.monotonic()
                    if failure is not None:
                        break
                if status is not None:
                    break
                if time.monotonic() >= deadline:
                    failure = (PYTHON_TIMEOUT, self.stuck_message(expected))
                    break
                self.flush(False, heartbeat=True)
        finally:
            status = self.end_unit(pid, pidfd, region, template, status)
        done = start if expected == LOADED else expected
        kills = self.oom_kills() if self.oom_file is not None else 0
        if done >= len(samples) and failure is None:
            self.oom_seen = kills  # an orphan's kill after the last result: never charged to the next unit
            os.close(out_fd)
            return done
        output = read_output(out_fd, self.cap)
        os.close(out_fd)
        if failure is None:
            if template is not None and template.unread:
                status = self.unit_status(template)
            where = "while loading the grader source" if expected == LOADED else "during grade()"
            failure = (PYTHON_RUNTIME, f"the grader process {describe_exit(status)} {where}")
        if kills > self.oom_seen:  # a process of the unit was OOM-killed: that, not what followed, is the cause
            failure = (PYTHON_MEMORY, self.oom_message("loading the grader source" if expected == LOADED
                                                       else "grade()"))
        self.oom_seen = kills
        if expected == LOADED:  # the source itself: no sample has run in this child yet
            self.broken[key] = failure
            return start
        self.emit([[0.0, failure[0], failure[1], output]])
        return done + 1

    def spawn(self, code: types.CodeType, key: str, size: int, out_fd: int,
              unit: GradeUnit | Unit) -> tuple[int, int, mmap.mmap, Template | None]:
        """A unit's child, with a fresh result region of `size` bytes and `out_fd` as its output: forked from the
        source's template (which then reports its exit), else from here, loading the source itself.
        (pid, pidfd, region, the template or None)."""
        template = self.templates.get(key)
        forked = self.fork_from(template, size, out_fd, unit) if template is not None else None
        if forked is not None:
            pid, pidfd, region = forked
            return pid, pidfd, region, template
        if template is not None:  # the template failed: this source's units load it themselves from now on
            self.no_template[key] = "its template stopped answering"
            self.drop_template(key)
        region = mmap.mmap(-1, size)  # shared with the child alone; fresh for every child
        child = Child(region, self.timeout_s, self.cap, key in self.tool_keys)
        pid = os.fork()
        if pid == 0:
            child_main(child, self.limits[key], code, key, unit, self.null_fd, out_fd)
        pidfd = os.pidfd_open(pid) if hasattr(os, "pidfd_open") else -1
        return pid, pidfd, region, None

    def end_unit(self, pid: int, pidfd: int, region: mmap.mmap, template: Template | None,
                 status: int | None) -> int | None:
        """After a unit: its child killed unless it has exited, and reaped; everything it started killed and its
        files wiped (clean_up). The child's wait status."""
        if status is None:
            self.kill(pid)
            status = self.reap(pid) if template is None else self.unit_status(template)
        self.clean_up()
        if pidfd >= 0:
            os.close(pidfd)
        region.close()
        return status

    def run_turn(self, code: types.CodeType | Err, key: str, turn: Unit) -> list[Row]:
        """One tool turn (_tool_unit.py) in a fresh child: rows for rfteval, one per call that ran (or was running
        when the unit failed), then the state row. A unit that overruns its time, runs out of memory or dies ends
        the turn there; a module that does not load fails it whole (and every later turn: `broken`)."""
        from rfteval.sandbox._tool_unit import TOOL_CRASH, TOOL_MEMORY, TOOL_TIMEOUT, TurnCheck, load_failed_rows

        failed = code if isinstance(code, tuple) else self.broken.get(key)
        if failed is not None:
            return load_failed_rows(failed)
        if self.pending:  # what earlier units earned is safe in rfteval before this one's code runs
            self.flush(False, force=True)
        check = TurnCheck(len(turn[2]), turn[3])
        out_fd = self.output_file()
        pid, pidfd, region, template = self.spawn(cast("types.CodeType", code), key,
                                                  COUNT.size + check.region_bytes(RECORD.size + RECORD_SLACK),
                                                  out_fd, turn)
        loaded = template is not None  # a template's child has the module loaded already
        status: int | None = None
        failure: Err | None = None
        read, offset = 0, COUNT.size
        deadline = time.monotonic() + self.timeout_s + self.grace_s
        try:
            while not check.done and failure is None and key not in self.broken:
                wait = max(0.0, min(deadline - time.monotonic(), HEARTBEAT_S))
                exited = self.wait_exit(pid, pidfd, wait) if template is None else self.wait_unit(template, pidfd, wait)
                if exited is not None:
                    status = exited
                count, used = COUNT.unpack_from(region, 0)
                if count > read:
                    records, read, offset, garbled = self.records(region, read, offset, count, used, len(region),
                                                                  "tool")
                    before = len(check.rows)
                    for index, _, etype, message, content in records:
                        if loaded and check.add(index, etype, message, content):
                            continue
                        if not loaded and index == LOADED and etype is None:
                            loaded = True
                            continue
                        if not loaded and index == LOADED:  # the module did not load: no call can run
                            self.broken[key] = (etype if etype in ERROR_TYPES else PYTHON_RUNTIME,
                                                (message or "")[:MESSAGE_CHARS])
                        else:
                            garbled = "the tool process garbled its results"
                        break
                    if garbled:
                        failure = TOOL_CRASH, garbled
                    if self.oom_file is not None and (kills := self.oom_kills()) > self.oom_seen:
                        self.oom_seen = kills  # the unit's processes went past the limit together: these calls did
                        del check.rows[before:]
                        check.done, check.state = False, None
                        failure = TOOL_MEMORY, self.oom_message("the call")
                if status is not None:
                    break
                if time.monotonic() >= deadline:
                    failure = TOOL_TIMEOUT, self.stuck_message(LOADED, "the turn's tool calls" if loaded
                                                               else loading(True))
                    break
                self.flush(False, heartbeat=True)
        finally:
            status = self.end_unit(pid, pidfd, region, template, status)
        kills = self.oom_kills() if self.oom_file is not None else 0
        oomed, self.oom_seen = kills > self.oom_seen, max(kills, self.oom_seen)
        os.close(out_fd)
        if key in self.broken:
            return load_failed_rows(self.broken[key])
        if not check.done and (failure is None or oomed):  # an OOM kill, not what followed it, is the cause
            if status is not None and template is not None and template.unread:
                status = self.unit_status(template)
            what = "the call" if loaded else loading(True)
            failure = (TOOL_MEMORY, self.oom_message(what)) if oomed else (
                TOOL_CRASH, f"the tool process {describe_exit(status)} during {what}")
        if not loaded:  # the child ended before it said whether the module loaded: the module is charged
            assert failure is not None
            kind = {TOOL_MEMORY: PYTHON_MEMORY, TOOL_TIMEOUT: PYTHON_TIMEOUT}.get(failure[0], PYTHON_RUNTIME)
            self.broken[key] = kind, failure[1]
            return load_failed_rows(self.broken[key])
        return check.finish(failure)

    def records(self, region: mmap.mmap, read: int, offset: int, count: int, used: int, max_length: int,
                who: str = "grader") -> tuple[list[Record], int, int, str | None]:
        """The region's records read..count-1, decoded, each at most `max_length` bytes: (records, read, offset,
        why the reading stopped short or None). A child's region is not believed: bounds and shape are checked."""
        out: list[Record] = []
        end = min(COUNT.size + used, len(region))
        while read < count:
            if offset + RECORD.size > end:
                return out, read, offset, f"the {who} process garbled its results"
            (length,) = RECORD.unpack_from(region, offset)
            if length > max_length or offset + RECORD.size + length > end:
                return out, read, offset, f"the {who} process sent an oversized result"
            try:
                out.append(self.read_record(region[offset + RECORD.size:offset + RECORD.size + length]))
            except BaseException:  # noqa: BLE001  (msgspec's DecodeError, ValidationError, RecursionError, ...)
                return out, read, offset, f"the {who} process garbled its results"
            read += 1
            offset += RECORD.size + length
        return out, read, offset, None

    def charge_oom(self, results: list[Row]) -> list[Row]:
        """Results just read from a child, as memory errors when the cgroup's OOM killer ended a process since
        the last results were read: the unit's processes together went past the limit (each one alone may be
        under its own), and one of these samples did it. Only this unit's samples can be charged: the count is
        read again before the next unit starts."""
        if self.oom_file is None:
            return results
        kills = self.oom_kills()
        if kills <= self.oom_seen:
            return results
        self.oom_seen = kills
        message = self.oom_message("grade()")
        return [row if row[1] == PYTHON_MEMORY else [0.0, PYTHON_MEMORY, message, row[3]]
                for row in results]

    @staticmethod
    def oom_message(what: str) -> str:
        return (f"{what} ran out of memory: the unit's processes together went past its limit of "
                f"{LIMITS['memory']} and the kernel's OOM killer ended one")

    def stuck_message(self, expected: int, what: str | None = None) -> str:
        what = what or ("loading the grader source" if expected == LOADED else "grade()")
        return (f"{what} ran over the {self.timeout_s:g} s time limit and did not stop (alarm blocked or stuck "
                f"outside Python); its process was killed")

    def take(self, region: mmap.mmap, read: int, offset: int, count: int, used: int, expected: int,
             start: int, n: int) -> tuple[list[Row], int, int, int, Err | None]:
        """The new records of the region, checked: in order, well formed, within bounds. A bad one stops the
        child; it is charged to the sample it claims to be."""
        results: list[Row] = []
        cap = self.cap + 200
        records, read, offset, garbled = self.records(region, read, offset, count, used, self.cap * 4 + RECORD_SLACK)
        for index, score, etype, message, stdout in records:
            if index != expected or index >= n:
                return results, read, offset, expected, (PYTHON_SERVER, "the grader process sent results out of order")
            if index == LOADED:
                if etype is not None:
                    return results, read, offset, expected, (
                        etype if etype in ERROR_TYPES else PYTHON_RUNTIME, (message or "")[:MESSAGE_CHARS])
                expected = start
                continue
            if not math.isfinite(score):
                etype, message, score = PYTHON_RUNTIME, "grade() returned a score that is not a finite number", 0.0
            if etype is not None:
                etype = etype if etype in ERROR_TYPES else PYTHON_RUNTIME
                message = (message or "")[:MESSAGE_CHARS]
                score = 0.0
            else:
                message = None
            if stdout is not None and len(stdout) > cap:
                stdout = stdout[:self.cap] + truncation_marker(self.cap)
            results.append([score, etype, message, stdout])
            expected = index + 1
        return results, read, offset, expected, (PYTHON_SERVER, garbled) if garbled else None

    def read_record(self, body: bytes) -> Record:
        try:
            return self.decode_record(body)
        except ValueError:  # what msgspec refuses and json takes (a lone surrogate, escaped): the same shape
            row = json.loads(body)
            if not (type(row) is list and len(row) == 5 and type(row[0]) is int and type(row[1]) in (int, float)
                    and all(v is None or type(v) is str for v in row[2:])):
                raise ValueError("not a result") from None
            return row[0], float(row[1]), row[2], row[3], row[4]

    # -- a template: the source loaded once, units forked from it

    def start_template(self, key: str, code: types.CodeType) -> None:
        """Fork a template for this source and have it run the source's module-level code once; keep it when the
        load succeeded and left nothing a forked unit would share with the next (see template_hazard), else end
        it: a failed load fails the source as a unit's failed load does, a hazard makes this source's units load
        it themselves (the per-unit path), and the reason is kept in no_template."""
        import socket

        while len(self.templates) >= MAX_TEMPLATES:
            self.drop_template(next(iter(self.templates)))
        mine, theirs = (end.detach() for end in socket.socketpair())
        out_fd = self.output_file()
        loader = Child(None, self.timeout_s, self.cap, key in self.tool_keys)
        try:
            pid = os.fork()
        except OSError:  # out of processes or memory: units load the source themselves, as before
            pid = -1
        if pid == 0:
            template_main(loader, self.limits[key], code, key, self.null_fd, out_fd, theirs)
        os.close(theirs)
        os.close(out_fd)
        if pid < 0:
            os.close(mine)
            self.no_template[key] = "no template could be forked"
            return
        template = Template(key, pid, mine)
        failure, refused = self.template_loaded(template)
        if failure is None and refused is None:
            refused = self.template_hazard(template)
            if refused is None:
                self.templates[key] = template
                return
        if failure is not None:
            self.broken[key] = failure
        if refused is not None:
            self.no_template[key] = refused
        self.end_template(template)

    def template_loaded(self, template: Template) -> tuple[Err | None, str | None]:
        """How the template's load went: (the source's failure, as a unit's load would report it) or (None, why
        no template is kept) or (None, None) when it loaded."""
        limit = self.timeout_s + self.grace_s
        what = loading(template.key in self.tool_keys)
        head, ended = self.template_reply(template, HEADER.size, limit)
        body = None
        if head is not None:
            (length,) = HEADER.unpack(head)
            if length > self.cap * 4 + RECORD_SLACK:
                return None, "it garbled its report"
            body, ended = self.template_reply(template, length, limit)
        kills = self.oom_kills() if self.oom_file is not None else 0
        oomed, self.oom_seen = kills > self.oom_seen, max(self.oom_seen, kills)
        if body is None:
            if oomed:
                return (PYTHON_MEMORY, self.oom_message(what)), None
            if not ended:
                return (PYTHON_TIMEOUT, self.stuck_message(LOADED, what)), None
            self.kill(template.pid)
            status = self.reap(template.pid)
            template.pid = -1  # reaped
            return (PYTHON_RUNTIME, f"the {'tool' if template.key in self.tool_keys else 'grader'} process "
                                    f"{describe_exit(status)} while {what}"), None
        try:
            index, _, etype, message, _ = self.read_record(body)
        except BaseException:  # noqa: BLE001  (msgspec's errors, RecursionError, ...)
            return None, "it garbled its report"
        if index != LOADED:
            return None, "it garbled its report"
        if oomed:
            return (PYTHON_MEMORY, self.oom_message(what)), None
        if etype is not None:
            return (etype if etype in ERROR_TYPES else PYTHON_RUNTIME, (message or "")[:MESSAGE_CHARS]), None
        return None, None

    def template_hazard(self, template: Template) -> str | None:
        """Why a loaded template must not be kept, or None. Every unit would inherit what the load left behind, so
        the template must hold nothing another unit could reach or that could carry one unit's data to the next:
        no thread (a fork copies its state, maybe half-locked, and it would run on between units), no other
        process (a child started at import would outlive units and be shared by them), no fd beyond 0-3 (a socket,
        a pipe, a file: shared offsets and contents), no shared writable mapping, no file left in /tmp or
        /dev/shm (wiped after every unit, so a later unit would not find it). Read from /proc by this process,
        not believed from the template; then the template turns not dumpable (checked), so no unit can reach
        its memory."""
        pid = template.pid
        try:
            with open(f"/proc/{pid}/status") as fh:
                threads = next((line.split()[1] for line in fh if line.startswith("Threads:")), "?")
            fds = set(os.listdir(f"/proc/{pid}/fd"))
            with open(f"/proc/{pid}/maps") as fh:
                shared = any(len(f := line.split(maxsplit=2)) > 1 and f[1][1] == "w" and f[1][3] == "s" for line in fh)
        except (OSError, IndexError):
            return "its state could not be read"
        if threads != "1":
            return "its module-level code started a thread"
        if self.other_processes({pid} | {other.pid for other in self.templates.values()}):
            return "its module-level code started a process"
        if fds != {"0", "1", "2", str(TEMPLATE_FD)}:
            return "its module-level code left a file, pipe or socket open"
        if shared:
            return "its module-level code mapped shared memory"
        for directory in (self.workdir, "/dev/shm"):
            try:
                if set(os.listdir(directory)) - self.baseline.get(directory, set()):
                    return f"its module-level code left files in {directory}"
            except OSError:
                continue
        import socket

        try:
            with socket.socket(fileno=os.dup(template.fd)) as sock:
                sock.settimeout(5.0)
                sock.sendall(b"D")
                answered = sock.recv(1) == b"d"
                sock.settimeout(None)  # the socket's blocking mode is the template fd's too
        except OSError:
            answered = False
        try:  # its environ is open to a reader that may inspect its memory (the fd directory is not: root owns it)
            os.close(os.open(f"/proc/{pid}/environ", os.O_RDONLY))
        except PermissionError:
            return None if answered else "it did not answer"
        except OSError:
            return "it ended"
        return "it stayed dumpable"

    def fork_from(self, template: Template, size: int, out_fd: int,
                  unit: GradeUnit | Unit) -> tuple[int, int, mmap.mmap] | None:
        """A unit's child forked from the template: (pid, pidfd, result region), or None when the template fails.
        The child gets a fresh socket, result region and output file; the unit's samples go on that socket after
        the template has closed its copy, so they reach the child alone."""
        import socket

        while template.unread:  # statuses of earlier children, reported by now
            self.unit_status(template)
            if template.fd < 0:
                return None
        region_fd = self.output_file()  # an unnamed file in the sandbox's /dev/shm: mapped here and in the child
        mine, theirs = (end.detach() for end in socket.socketpair())
        region: mmap.mmap | None = None
        pidfd = -1
        try:
            os.ftruncate(region_fd, size)
            region = mmap.mmap(region_fd, size)
            with socket.socket(fileno=os.dup(template.fd)) as sock:
                socket.send_fds(sock, [b"F"], [theirs, region_fd, out_fd])
            os.close(theirs)
            theirs = -1
            reply, _ = self.template_reply(template, WORD.size, 5.0)
            if reply is None:
                raise OSError("no pid")
            (pid,) = WORD.unpack(reply)
            if pid <= 1 or pid in (os.getpid(), template.pid):
                raise OSError("a wrong pid")
            pidfd = os.pidfd_open(pid)
            send(mine, marshal.dumps(unit))
            return pid, pidfd, region
        except (OSError, ValueError):
            if region is not None:
                region.close()
            if pidfd >= 0:
                os.close(pidfd)
            return None
        finally:
            os.close(region_fd)
            os.close(mine)
            if theirs >= 0:
                os.close(theirs)

    def template_reply(self, template: Template, n: int, wait_s: float) -> tuple[bytes | None, bool]:
        """Exactly n bytes from the template within wait_s (beating meanwhile), or (None, whether it ended)."""
        buf = b""
        end = time.monotonic() + wait_s
        while len(buf) < n:
            left = end - time.monotonic()
            if left <= 0:
                return None, False
            if not select.select([template.fd], [], [], min(left, HEARTBEAT_S))[0]:
                self.beat()
                continue
            try:
                chunk = os.read(template.fd, n - len(buf))
            except OSError:
                chunk = b""
            if not chunk:
                return None, True
            buf += chunk
        return buf, False

    def wait_unit(self, template: Template, pidfd: int, wait: float) -> int | None:
        """A template's child's wait status once it has exited (the template reaps it), else None after `wait`."""
        if not select.select([pidfd], [], [], wait)[0]:
            return None
        template.unread += 1  # exited: its status waits in the socket, read when a failure needs it
        return 0

    def unit_status(self, template: Template) -> int:
        """The next wait status the template reports for a child; a template that does not report is ended."""
        template.unread = max(0, template.unread - 1)
        reply = self.template_reply(template, WORD.size, 5.0)[0] if template.fd >= 0 else None
        if reply is None:
            self.no_template[template.key] = "its template stopped answering"
            self.drop_template(template.key)
            return 0
        return WORD.unpack(reply)[0]

    def drop_template(self, key: str) -> None:
        template = self.templates.pop(key, None)
        if template is not None:
            self.end_template(template)

    def end_template(self, template: Template) -> None:
        """End a template and everything else but the other templates; wipe /tmp and /dev/shm."""
        if template.pid > 0:
            self.kill(template.pid)
            self.reap(template.pid)
            template.pid = -1
        if template.fd >= 0:
            os.close(template.fd)
            template.fd = -1
        self.clean_up()

    def other_processes(self, keep: set[int]) -> list[int]:
        """Live processes of this PID namespace but bubblewrap's init, this one and `keep` (zombies are left to
        their parents, which reap them)."""
        found = []
        me = os.getpid()
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            pid = int(name)
            if pid == 1 or pid == me or pid in keep:
                continue
            try:
                with open(f"/proc/{pid}/stat", "rb") as fh:
                    state = fh.read().rsplit(b")", 1)[1].split()[0]
            except (OSError, IndexError):
                continue
            if state not in (b"Z", b"X"):
                found.append(pid)
        return found

    def kill_all_but(self, keep: set[int]) -> None:
        """With templates alive, kill(-1) would end them too: find every other process in /proc and kill it,
        until none is left (a unit forking as fast as it can is bounded by the cgroup's pids.max); reap ours."""
        while True:
            self.reap_orphans()
            victims = self.other_processes(keep)
            if not victims:
                return
            for pid in victims:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            self.beat()

    def reap_orphans(self) -> None:
        """Reap what has ended among this process's children (orphans of units come here: a subreaper); a
        template among them has ended, and its units load the source themselves from now on."""
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            for key, template in list(self.templates.items()):
                if template.pid == pid:  # reaped: only its socket is left to close
                    template.pid = -1
                    os.close(template.fd)
                    template.fd = -1
                    self.no_template[key] = "its template ended"
                    del self.templates[key]

    # -- processes and files of a unit

    def output_file(self) -> int:
        """A fresh unnamed file for the child's fds 1 and 2 (in a tmpfs of the sandbox, so its size is bounded)."""
        try:
            return os.open(self.outdir, os.O_TMPFILE | os.O_RDWR, 0o600)
        except (OSError, AttributeError):
            path = os.path.join(self.outdir, f".rfteval-output-{os.getpid()}")
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
            os.unlink(path)
            return fd

    @staticmethod
    def wait_exit(pid: int, pidfd: int, wait: float) -> int | None:
        """The child's wait status once it has exited (reaped), else None after up to `wait` seconds."""
        if pidfd >= 0:
            ready = select.select([pidfd], [], [], wait)[0]
            if not ready:
                return None
        else:  # pragma: no cover - kernels before 5.3
            end = time.monotonic() + wait
            while True:
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    return status
                if time.monotonic() >= end:
                    return None
                time.sleep(0.005)
        done, status = os.waitpid(pid, 0)
        return status

    def kill(self, pid: int) -> None:
        try:
            os.killpg(pid, signal.SIGKILL)  # the child's own session
        except (ProcessLookupError, PermissionError):
            pass
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    @staticmethod
    def reap(pid: int) -> int | None:
        try:
            return os.waitpid(pid, 0)[1]
        except ChildProcessError:
            return None

    def clean_up(self) -> None:
        """After a unit: nothing it started lives on, nothing it wrote stays. In the sandbox's PID namespace every
        process but this one and bubblewrap's init is the unit's (it may have left its session): kill(-1) ends
        them all; orphans come to this supervisor (a subreaper) to be reaped. Outside a PID namespace (the
        unsafe mode) kill(-1) would reach the user's own processes, so only the child's session is killed there.
        With templates alive, every process but them is found in /proc and killed instead (kill_all_but)."""
        if self.pid_namespace and self.templates:
            self.kill_all_but({template.pid for template in self.templates.values()})
        while not (self.pid_namespace and self.templates):
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break  # no process of the unit is left
            if not self.pid_namespace:
                if pid == 0:
                    break  # a process that left the child's session: beyond reach without a PID namespace
                continue
            if pid == 0:
                try:
                    os.kill(-1, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                try:
                    os.waitpid(-1, 0)
                except ChildProcessError:
                    break
            self.beat()
        for directory in (self.workdir, "/dev/shm") if self.pid_namespace else (self.workdir,):
            try:
                clear_directory(directory, os.stat(directory).st_dev, self.beat)
            except OSError:
                continue

    def beat(self) -> None:
        """A heartbeat if one is due: clean-up can take a while (a unit may leave 100,000 files in /tmp), and
        rfteval kills a sandbox that is silent for a few beats. (No thread beats for us: with the threading
        module in the template, every child would run its after-fork hook: more faults a unit, bench/README.md.)"""
        if time.monotonic() - self.sent_at > HEARTBEAT_S:
            self.flush(False, heartbeat=True)


def clear_directory(path: str, device: int, beat: Callable[[], None] = lambda: None) -> None:
    """Remove what a unit left in `path`, staying on its filesystem: a read-only bind inside it (the interpreter
    or a checkout that lives under /tmp, as a CI clone may) is another device and is neither walked nor touched."""
    for entry in os.scandir(path):
        beat()
        try:
            info = entry.stat(follow_symlinks=False)
            if stat.S_ISDIR(info.st_mode):
                if info.st_dev != device:
                    continue
                clear_directory(entry.path, device, beat)
                os.rmdir(entry.path)  # refused while it still holds a bind: the directories above it stay
            else:
                os.unlink(entry.path)
        except OSError:
            pass


# ---------------------------------------------------------------- start-up


def prctl(option: int, value: int) -> bool:
    import ctypes

    try:
        return ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_CHILD_SUBREAPER = 1, 4, 36


def setup(config: WorkerConfig) -> tuple[int, int, dict[str, int | str | bool]]:
    """Private protocol fds, fds 0-2 away from them, and what the supervisor must be before any child exists:
    not dumpable (children cannot read its memory, fds or environment through /proc), the reaper of every
    orphan of a unit (in the PID namespace), killed with its parent."""
    if sys.path and os.path.abspath(sys.path[0] or ".") == os.path.dirname(os.path.abspath(__file__)):
        del sys.path[0]  # `import template` in a grader must not find rfteval's modules
    root = os.path.abspath(__file__)
    for _ in range(3):  # rfteval/sandbox/_worker.py: the directory that holds the rfteval package
        root = os.path.dirname(root)
    if root not in sys.path:
        sys.path.append(root)  # last: for rfteval.data.sample (and rfteval.data.grades, lazily) in a child
    in_fd, reply_fd = os.dup(0), os.dup(1)  # non-inheritable
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(2, 1)  # what a package prints on import goes to the start-up log, never into a reply
    os.close(null)
    sys.stdin = open(os.devnull)  # noqa: SIM115
    for name in THREAD_ENV:
        os.environ[name] = "1"
    # what every child needs, set once here and inherited: default SIGINT, SIGXFSZ ignored (a write past the file
    # size limit fails with EFBIG), and faulthandler writing a crash's traceback to fd 2 (the unit's output)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    import faulthandler

    faulthandler.enable(file=2)
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    prctl(PR_SET_DUMPABLE, 0)
    subreaper = bool(config.get("pid_namespace")) and prctl(PR_SET_CHILD_SUBREAPER, 1)
    LIMITS["memory"] = f"{config['memory_mb']} MB" if config.get("memory_mb") else "none"
    LIMITS["timeout"] = f"{float(config['timeout_s']):g} s"
    os.chdir(config["workdir"])
    return in_fd, reply_fd, {"pid": os.getpid(), "python": sys.version.split()[0], "subreaper": subreaper,
                             "uid": os.getuid()}


def main(argv: list[str]) -> int:
    global ENCODE
    config = json.loads(argv[1])
    in_fd, reply_fd, facts = setup(config)
    sample_functions()  # rfteval.data.sample: json and msgspec, before any child exists
    import msgspec

    ENCODE = msgspec.json.encode  # floats written to round-trip exactly
    supervisor = Supervisor(config, reply_fd)
    gc.collect()
    gc.freeze()
    send(reply_fd, json.dumps({"ready": True, **facts}).encode())
    while True:
        message = recv(in_fd)
        if message is None:
            return 0
        request = marshal.loads(message)
        if request[0] in ("grade", "tools"):  # a grading request, or a tool turn (_tool_unit.py)
            supervisor.grade(request)
        elif request[0] == "prepare":  # load a source's imports; rfteval then sets the memory limit above them
            supervisor.code_for(*request[1:])  # key, source[, kind]
            supervisor.flush(True)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
