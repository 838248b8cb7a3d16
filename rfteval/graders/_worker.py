"""Worker side of the python grader sandbox: one process that runs a grader's source on batches of samples.

Started by sandbox.WorkerPool as `python _worker.py CONFIG_JSON`, with requests on stdin and replies on stdout
(moved to private fds at start, so nothing the grader prints can corrupt them). Standard library only at
start-up (and rfteval.sample, which needs json and msgspec): start-up is paid once per worker, and graders that need
nothing heavy should not pay for it.

Wire format, both ways: 8-byte little-endian length, then the payload. Requests are marshal (the main process
is trusted); each sample in them is a marshal blob of the whole sample, or the output text (str) or (text,
tools, parsed) from which make_sample rebuilds it here; see sandbox.compact_sample. Replies are b"P" (a part)
or b"D" (the last part) and JSON, so a hostile grader can at worst send garbage, never code, to the main
process.
"""

from __future__ import annotations

import _signal
import gc
import json
import marshal
import math
import os
import resource
import signal
import struct
import sys
import time
import traceback
import types
from collections.abc import Callable
from typing import Any

# Copies of rfteval.graders.base's error types (importing base would pull pydantic into every worker).
PYTHON_RUNTIME = "python_grader_runtime_error"
PYTHON_TIMEOUT = "python_grader_timeout_error"
PYTHON_MEMORY = "python_grader_memory_error"
PYTHON_SERVER = "python_grader_server_error"
RESEND = "rfteval_resend_whole"  # as in sandbox.py: a sample sent compact that could not be rebuilt here

IDLE, LOADING = -1, -2  # progress index values besides "in call k"
PROGRESS = struct.Struct("<qq")  # (sequence number bumped at every call, index of the call or IDLE/LOADING)
HEADER = struct.Struct("<Q")
PIP_HINT = "pip install 'rfteval[graders]' (the packages of OpenAI's grader image)"
TRACEBACK_CHARS = 4000
FLUSH_S = 0.05  # send finished results at least this often during a batch
CHECK_ALL, CHECK_EVERY = 64, 16  # item-mutation checks: after each of a source's first calls, then every 16th
SIGALRM, ITIMER_REAL = signal.SIGALRM, signal.ITIMER_REAL
# The byte just past the text region of the capture file, where fds 1 and 2 write first (they share one offset,
# kept there while nothing is pending): a call's C-level output overwrites it, so a look at the mapping tells,
# with no system call per call (on this VM one costs ~5 us of the call's time in cache and TLB refills). UTF-8
# text never starts with 0xFF; binary output that does is found at the next flush or the batch's end.
FD_SENTINEL = 0xFF
THREAD_ENV = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS",
              "VECLIB_MAXIMUM_THREADS")

Err = tuple[str, str]
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


# ---------------------------------------------------------------- process set-up


def isolate_network() -> str:
    """Cut the network with a fresh network namespace (only a down loopback in it); say what held."""
    if not sys.platform.startswith("linux"):
        return f"not isolated: no network namespaces on {sys.platform}"
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError as exc:
        return f"not isolated: libc not loadable ({exc})"
    clone_newnet, clone_newuser = 0x40000000, 0x10000000
    if libc.unshare(clone_newnet) == 0:
        return "network namespace"
    first = os.strerror(ctypes.get_errno())
    uid, gid = os.getuid(), os.getgid()
    if libc.unshare(clone_newuser | clone_newnet) == 0:
        for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
            try:
                with open(f"/proc/self/{name}", "w") as fh:
                    fh.write(text)
            except OSError:
                pass
        return "network namespace (in a user namespace)"
    second = os.strerror(ctypes.get_errno())
    return f"not isolated: unshare(CLONE_NEWNET) failed ({first}; with CLONE_NEWUSER: {second})"


def die_with_parent(parent_pid: int) -> None:
    """Ask the kernel to kill this worker when the pool's process goes, so no worker outlives it."""
    if sys.platform.startswith("linux"):
        import ctypes

        try:
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent_pid:
        os._exit(0)


def limit_memory(memory_mb: int | None) -> str:
    if not memory_mb or memory_mb <= 0:
        return "none"
    want = memory_mb * 1024 * 1024
    try:
        resource.setrlimit(resource.RLIMIT_AS, (want, want))
        return f"{memory_mb} MB"
    except (ValueError, OSError) as exc:
        return f"not set ({exc})"


# ---------------------------------------------------------------- output capture


class Capture:
    """sys.stdout/sys.stderr for grade(): copies text into the first `cap` bytes of the capture file, mapped
    in memory (no system call per print), then drops the rest. Fds 1 and 2 write C-level output after that
    region, from offset `cap` on (see FD_SENTINEL). Both survive the worker: when it dies or hangs, the pool
    reads what the call printed from the file (the text region ends at the first NUL byte; it is zeroed after
    each call)."""

    encoding = "utf-8"
    errors = "replace"

    def __init__(self, region: Any, cap: int):
        self.region = region
        self.cap = cap
        self.pos = 0
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
        pos = self.pos
        end = pos + len(data)
        if end > self.cap:
            self.truncated = True
            end = self.cap
            data = data[: end - pos]
        self.region[pos:end] = data
        self.pos = end
        return len(text)

    def take(self) -> bytes:
        """What was written since the last take, and a clean region for the next call."""
        pos, self.pos = self.pos, 0
        data = self.region[:pos]
        self.region[:pos] = bytes(pos)
        return data

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        pass

    def fileno(self) -> int:
        return 1  # C-level writes to it land in the capture file too

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


# ---------------------------------------------------------------- grading


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
    except Exception:  # a hostile __str__; fall back to the type
        text = type(exc).__name__
    try:
        head = f"{what} raised " + traceback.format_exception_only(type(exc), exc)[-1].strip()[:500]
    except Exception:
        head = f"{what} raised {type(exc).__name__}"
    if len(text) > TRACEBACK_CHARS:
        text = "...\n" + text[-TRACEBACK_CHARS:]
    return PYTHON_RUNTIME, clean(f"{head}\n{text}")


def as_score(value: Any) -> float | Err:
    """grade()'s return value as a finite float; plain floats take a fast path, the rest base.checked_score."""
    if type(value) is float:
        return value if math.isfinite(value) else (PYTHON_RUNTIME, f"grade() returned {value}, not a finite number")
    if type(value) is int:
        try:
            return float(value)
        except OverflowError:
            return PYTHON_RUNTIME, "grade() returned an int too large for a float"
    try:
        from rfteval.graders.base import checked_score  # noqa: PLC0415  (pydantic: only when needed)

        checked = checked_score(value)
    except OverflowError:
        return PYTHON_RUNTIME, "grade() returned an int too large for a float"
    except Exception as exc:  # a hostile __repr__ / __float__
        return PYTHON_RUNTIME, f"grade() returned an unusable {type(value).__name__} ({type(exc).__name__})"
    if isinstance(checked, float):
        return checked
    return checked.type, checked.message


class Worker:
    def __init__(self, timeout_s: float, cap: int, out_fd: int, progress: Any):
        import mmap

        self.timeout_s = timeout_s
        self.cap = cap
        self.out_fd = out_fd  # the capture file: prints in its first `cap` bytes, fds 1 and 2 after them
        self.rewind_fds()
        self.capture = Capture(mmap.mmap(out_fd, cap + 1), cap)  # the text region and the sentinel after it
        self.progress = progress
        self.seq = 0
        self.in_call = False
        self.call_started = 0.0
        self.handler = self.on_alarm  # one bound method, so the identity check in arm() holds
        self.modules: dict[str, Callable[..., Any] | Err] = {}
        self.items: dict[int, list[Any]] = {}  # slot -> [bytes as sent, working copy, pristine copy]
        self.checks: dict[str, list[Any]] = {}  # per source: [item checks done, has it ever changed an item]

    # -- alarm

    def on_alarm(self, signum: int, frame: Any) -> None:
        """The timer is armed once per batch, not per call (a syscall per call is most of a cheap grader's
        cost): on firing, interrupt the current call if it is over its limit, else re-arm for its rest."""
        if not self.in_call:
            signal.setitimer(ITIMER_REAL, self.timeout_s)
            return
        remaining = self.call_started + self.timeout_s - time.monotonic()
        if remaining > 0.001:
            signal.setitimer(ITIMER_REAL, remaining)
            return
        signal.setitimer(ITIMER_REAL, 1.0)  # again in a second, in case the grader swallows this one
        raise GraderTimeout()

    def arm(self) -> None:
        if _signal.getsignal(SIGALRM) is not self.handler:  # (signal.getsignal is slow: enums)
            signal.signal(SIGALRM, self.handler)
        signal.setitimer(ITIMER_REAL, self.timeout_s)

    def mark(self, index: int) -> None:
        self.seq += 1
        PROGRESS.pack_into(self.progress, 0, self.seq, index)

    def rewind_fds(self) -> None:
        """Drop what fds 1 and 2 wrote, put the sentinel back and their shared offset on it."""
        os.ftruncate(self.out_fd, self.cap)
        os.pwrite(self.out_fd, bytes((FD_SENTINEL,)), self.cap)
        os.lseek(self.out_fd, self.cap, os.SEEK_SET)

    def fds_written(self) -> bool:
        """Whether fds 1 and 2 wrote since the last take (one system call: for flushes, not for every call)."""
        return os.lseek(self.out_fd, 0, os.SEEK_CUR) != self.cap

    def take_output(self) -> str | None:
        """The call's output: its prints, then what reached fds 1 and 2, capped; None when there was none."""
        text = self.capture.take()
        written = os.lseek(self.out_fd, 0, os.SEEK_CUR) - self.cap
        if written > 0:
            text += os.pread(self.out_fd, min(written, self.cap + 1), self.cap)
        if written or self.capture.region[self.cap] != FD_SENTINEL:
            self.rewind_fds()
        truncated = self.capture.truncated or len(text) > self.cap
        self.capture.truncated = False
        if not text and not truncated:
            return None
        out = text[: self.cap].decode("utf-8", "replace")
        return out + truncation_marker(self.cap) if truncated else out

    def run_guarded(self, fn: Callable[..., Any], *args: Any) -> tuple[Any, BaseException | None]:
        """fn(*args) under the per-call alarm, with output captured; (value, None) or (None, exception)."""
        sys.stdout = sys.stderr = self.capture
        try:
            try:
                self.arm()
                self.call_started = time.monotonic()
                self.in_call = True
                return fn(*args), None
            finally:
                self.in_call = False
        except BaseException as exc:  # noqa: BLE001  (everything the grader does is data)
            return None, exc

    # -- source

    def module(self, key: str, source: str | None) -> Callable[..., Any] | Err:
        found = self.modules.get(key)
        if found is not None:
            return found
        if source is None:
            return PYTHON_RUNTIME, "internal: the pool did not send the grader source"
        self.mark(LOADING)
        result = self.load(key, source)
        self.take_output()  # module-level prints are not any sample's output
        PROGRESS.pack_into(self.progress, 0, self.seq, IDLE)
        self.modules[key] = result
        gc.collect()
        gc.freeze()  # what the source imported is long-lived: keep it out of later collections
        return result

    def load(self, key: str, source: str) -> Callable[..., Any] | Err:
        import linecache

        name = f"rfteval_grader_{key[:16]}"
        filename = f"<grader {key[:8]}>"
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        try:
            code = compile(source, filename, "exec", dont_inherit=True)  # no __future__ flags leak from this module
        except (SyntaxError, ValueError) as exc:
            return PYTHON_RUNTIME, f"the grader source does not compile: {exc}"
        mod = types.ModuleType(name)
        mod.__file__ = filename
        sys.modules[name] = mod  # pydantic and dataclasses look their module up here
        _, exc = self.run_guarded(exec, code, mod.__dict__)
        signal.setitimer(signal.ITIMER_REAL, 0)
        if exc is not None:
            kind, message = describe(exc, "loading the grader source")
            return kind, message
        fn = mod.__dict__.get("grade")
        if not callable(fn):
            return PYTHON_RUNTIME, "the grader source defines no function grade(sample, item)"
        return fn

    # -- batches

    def install(self, new: list[tuple[int, bytes]]) -> None:
        """Cache newly sent items: the bytes, a working copy handed to grade() and a pristine copy to compare
        it with, decoded at the first check (many items are never checked in a given worker)."""
        for slot, blob in new:
            if slot >= 0:
                self.items[slot] = [blob, marshal.loads(blob), None]

    def restore_if_mutated(self, entry: list[Any]) -> bool:
        """Every call must see the item as sent (OpenAI hands each call fresh data): if grade() changed the
        shared copy, the next call gets a fresh one. True when it had been changed."""
        if entry[2] is None:
            entry[2] = marshal.loads(entry[0])
        try:
            same = entry[1] == entry[2]
        except Exception:  # noqa: BLE001  (the grader put something odd in it)
            same = False
        if not same:
            entry[1] = marshal.loads(entry[0])
        return not same

    def grade(self, request: tuple[Any, ...], reply: Callable[[dict[str, Any]], None]) -> None:
        """Grade a batch, replying in parts: results finished more than FLUSH_S ago are already sent, so a
        death or hang later in the batch costs the pool little re-grading. The per-call path is written
        flat on purpose: for a cheap grader it is most of the pool's cost."""
        _, key, source, new, refs, samples = request
        self.install(new)
        n = len(samples)
        fn = self.module(key, source)
        if isinstance(fn, tuple):
            reply({"start": 0, "scores": [0.0] * n, "errors": {str(i): fn for i in range(n)}, "stdout": {},
                   "done": True})
            return
        if hasattr(signal, "pthread_sigmask"):  # a previous batch's grader may have blocked the alarm
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGALRM})
        checks = self.checks.setdefault(key, [0, False])  # [calls checked, ever mutated]
        items, capture, handler, progress = self.items, self.capture, self.handler, self.progress
        setitimer, getsignal, pack, loads, monotonic = (
            signal.setitimer, _signal.getsignal, PROGRESS.pack_into, marshal.loads, time.monotonic)
        start, scores, errors, stdout = 0, [], {}, {}
        flushed = monotonic()
        self.arm()
        seq, region, sentinel_at = self.seq, capture.region, self.cap
        parse, make = sample_functions()
        for i in range(n):
            ref = refs[i]
            entry = items[ref] if ref >= 0 else None
            item = entry[1] if entry is not None else loads(new[-ref - 1][1])
            sent = samples[i]  # decoded one at a time: the collector only ever sees one sample
            try:
                if type(sent) is bytes:  # the whole sample
                    sample = loads(sent)
                elif type(sent) is str and (parsed := parse(sent)) is not None:  # text of a JSON output
                    sample = make(sent, None, None, parsed)
                else:
                    sample = rebuild(sent)
            except BaseException as exc:  # noqa: BLE001
                errors[str(i)] = undecodable(exc, type(sent) is bytes)
                scores.append(0.0)
                continue
            seq += 1
            pack(progress, 0, seq, i)
            sys.stdout = sys.stderr = capture
            if getsignal(SIGALRM) is not handler:  # the grader may have replaced it
                signal.signal(SIGALRM, handler)
            try:
                try:
                    self.call_started = monotonic()
                    self.in_call = True
                    value = fn(sample, item)
                finally:
                    self.in_call = False
            except BaseException as exc:  # noqa: BLE001  (everything the grader does is data)
                errors[str(i)] = describe(exc, "grade()")
                scores.append(0.0)
            else:
                if type(value) is float and value - value == 0.0:  # finite float: the common case
                    scores.append(value)
                else:
                    score = as_score(value)
                    if isinstance(score, tuple):
                        errors[str(i)] = score
                        scores.append(0.0)
                    else:
                        scores.append(score)
            if capture.pos or capture.truncated or region[sentinel_at] != FD_SENTINEL:
                text = self.take_output()
                if text is not None:
                    stdout[str(i)] = text
            if entry is not None and (checks[1] or checks[0] < CHECK_ALL or i % CHECK_EVERY == 0):
                checks[0] += 1
                if self.restore_if_mutated(entry):
                    checks[1] = True  # this grader changes items: check after every call from now on
            now = monotonic()
            if now - flushed > FLUSH_S and i + 1 < n:
                self.take_stray_output(stdout, i)
                pack(progress, 0, seq, IDLE)
                reply({"start": start, "scores": scores, "errors": errors, "stdout": stdout, "done": False})
                start, scores, errors, stdout = i + 1, [], {}, {}
                flushed = now
        setitimer(ITIMER_REAL, 0)
        if n:
            self.take_stray_output(stdout, n - 1)
        self.seq = seq
        pack(progress, 0, seq, IDLE)
        reply({"start": start, "scores": scores, "errors": errors, "stdout": stdout, "done": True})

    def take_stray_output(self, stdout: dict[str, str], i: int) -> None:
        """C-level output the per-call look missed (it began with the sentinel byte, or a child process of the
        grader wrote between calls): it goes with call `i`, the last one graded."""
        if self.fds_written():
            text = self.take_output()
            if text is not None:
                stdout[str(i)] = stdout.get(str(i), "") + text


SAMPLE: dict[str, Callable[..., Any]] = {}


def sample_functions() -> tuple[Callable[..., Any], Callable[..., Any]]:
    """rfteval.sample's parse_output_json and make_sample: the pool's process built the samples with them."""
    if not SAMPLE:
        from rfteval.sample import make_sample, parse_output_json  # json and msgspec: cheap at start-up

        SAMPLE.update(parse=parse_output_json, make=make_sample)
    return SAMPLE["parse"], SAMPLE["make"]


def rebuild(sent: str | tuple[str, bytes | None, bool]) -> dict[str, Any]:
    """The sample the pool sent as (text, tools, whether output_json is the text's parse), built by the same
    make_sample the pool's process built it with. Raises when the parse fails here though it succeeded there
    (a limit set differently, say): the pool then sends the sample whole."""
    if type(sent) is str:
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


def setup(config: dict[str, Any]) -> tuple[int, int, int, dict[str, Any]]:
    """Private protocol fds, fds 0-2 away from the terminal, limits and isolation; returns the fds and facts."""
    if sys.path and os.path.abspath(sys.path[0] or ".") == os.path.dirname(os.path.abspath(__file__)):
        del sys.path[0]  # `import template` in a grader must not find rfteval's modules
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    sys.path.append(root)  # last: only for the lazy import of rfteval.graders.base
    in_fd, reply_fd = os.dup(0), os.dup(1)  # non-inheritable: children of the grader do not get them
    out_fd = os.open(config["output_path"], os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)  # no O_APPEND: FD_SENTINEL
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(out_fd, 1)
    os.dup2(out_fd, 2)
    os.close(null)
    sys.stdin = open(os.devnull)  # noqa: SIM115
    import faulthandler

    faulthandler.enable(file=open(2, "w", closefd=False))  # noqa: SIM115  (a segfault's traceback → output)
    for name in THREAD_ENV:
        os.environ[name] = "1"
    isolation = isolate_network()  # first: a user namespace needs a single thread, and it resets the next
    die_with_parent(config["parent_pid"])
    try:
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    except (ValueError, OSError):
        pass
    memory = LIMITS["memory"] = limit_memory(config.get("memory_mb"))
    LIMITS["timeout"] = f"{float(config['timeout_s']):g} s"
    return in_fd, reply_fd, out_fd, {"pid": os.getpid(), "isolation": isolation, "memory_limit": memory,
                                     "python": sys.version.split()[0]}


def main(argv: list[str]) -> int:
    import mmap

    config = json.loads(argv[1])
    in_fd, reply_fd, out_fd, facts = setup(config)
    progress = mmap.mmap(config["progress_fd"], PROGRESS.size)
    os.close(config["progress_fd"])  # the mapping stays; processes the grader starts do not inherit it
    worker = Worker(float(config["timeout_s"]), int(config["stdout_cap"]), out_fd, progress)
    sample_functions()  # before any grader source runs
    gc.freeze()
    send(reply_fd, json.dumps({"ready": True, **facts}).encode())
    import msgspec  # rfteval.sample has loaded it

    encode = msgspec.json.encode  # ~14x json.dumps on a batch's scores; floats written to round-trip exactly

    def reply(part: dict[str, Any]) -> None:
        try:
            body = encode(part)
        except (TypeError, ValueError):  # a lone surrogate in a message: json escapes it
            body = json.dumps(part).encode()
        send(reply_fd, (b"D" if part["done"] else b"P") + body)

    while True:
        message = recv(in_fd)
        if message is None:
            return 0
        request = marshal.loads(message)
        if request[0] == "grade":
            worker.grade(request, reply)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
