"""A unit's child, forked for one grading unit (or one tool turn): loads the source (or finds it loaded in the
template it was forked from), grades the unit's samples, and commits each result to its own result region.
Everything here can be rewritten by the grader; the supervisor believes none of it beyond this unit. The
standard library only at import: rfteval.data's modules (and _tool_unit.py, for a tools module) lazily.
"""

from __future__ import annotations

import _signal
import marshal
import math
import mmap
import os
import resource
import signal
import sys
import time
import traceback
import types
from typing import TYPE_CHECKING, cast

from rfteval.sandbox._capture import Capture, read_output
from rfteval.sandbox._worker_protocol import (
    COUNT,
    LIMITS,
    LOADED,
    MESSAGE_CHARS,
    PYTHON_MEMORY,
    PYTHON_RUNTIME,
    PYTHON_SERVER,
    PYTHON_TIMEOUT,
    RECORD,
    RESEND,
    Err,
    encode_record,
    loading,
)

if TYPE_CHECKING:
    from rfteval.data.sample import Sample
    from rfteval.sandbox._tool_unit import Tools, Unit
    from rfteval.sandbox._worker_protocol import (
        GradeFn,
        GradeUnit,
        Loaded,
        MakeFn,
        ParseFn,
        SampleFunctions,
        Sent,
    )

PIP_HINT = "pip install 'rfteval[graders]' (the packages of OpenAI's grader image)"
TRACEBACK_CHARS = 4000
SIGALRM, ITIMER_REAL = signal.SIGALRM, signal.ITIMER_REAL


class GraderTimeout(BaseException):
    """Raised by the SIGALRM handler inside grade(); a BaseException so `except Exception` does not eat it."""


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


