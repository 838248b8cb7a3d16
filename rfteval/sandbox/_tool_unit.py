"""Inside the sandbox: a tool turn (the calls one model turn made, for one rollout) run in a unit of its own.

_worker.py's supervisor imports this module (the standard library only) when it is first given a tools module,
before it forks that module's template, so the template and every unit's child find it loaded. The template reads
the module's functions once (`Tools`: each signature read there, not per call); a unit's child runs the turn
(`Turn`): the calls in order, each result committed to the unit's region as soon as it is known, then the state.
The supervisor believes none of it before `TurnCheck` has read it: the child runs the tools' code.

What crosses, in order:
- a unit: (item as marshal, the state as JSON text, the calls [(name, arguments as marshal, or None for the
  module's init_state(item))], the output limit in characters);
- the child's records: [i, 0.0, error type | None, error message | None, content | None] for each call it ran, then
  the state record [n, 0.0, None, None, the state as JSON text, or None when unchanged];
- the supervisor's rows to rfteval: [0.0, type, message, content] per call that ran (or was running when the unit
  failed), then [0.0, the module's load error type | None, its message, the state] last. rfteval gives every call
  without a row a "not run" result of the type that ended the turn.

A call that fails in any way leaves the state as it was before the call. A timeout or a MemoryError ends the turn.
"""

from __future__ import annotations

import json
import marshal
import signal
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import inspect

# The error types that are not an exception's name: copies of rfteval.tools.base's (the sandbox may not import
# tools/; tests/sandbox/test__tool_unit.py holds them equal)
BAD_ARGUMENTS = "BadArguments"
UNKNOWN_TOOL = "UnknownTool"
TOOL_TIMEOUT = "ToolTimeout"
TOOL_MEMORY = "ToolMemory"
TOOL_CRASH = "ToolCrash"
TURN_ENDING = frozenset({TOOL_TIMEOUT, TOOL_MEMORY, TOOL_CRASH})
INIT_STATE = "init_state"

STATE_CHARS = 1 << 20  # characters of JSON a rollout's state may hold
MAX_OUTPUT_CHARS = 1_000_000  # a result shown to the model, at most, whatever the output limit says
MESSAGE_CHARS = 2000  # an error's message, one line
TYPE_CHARS = 100  # an error type's name
MARKER_CHARS = 64  # cut's marker, with room for any count
BYTES_PER_CHAR = 6  # a character in a record at worst (a control character, JSON-escaped)
WORKER_TYPES = "python_grader_"  # the worker's own error types (_worker_protocol.PYTHON_*) start so

Err = tuple[str, str]
Call = tuple[str, bytes | None]
Unit = tuple[bytes, str, list[Call], int]
Row = list[float | str | None]


class Recorder(Protocol):
    """What a turn needs of _child.Child: its clock and the region it commits records to."""

    in_call: bool
    call_started: float
    timeout_s: float

    def commit(self, index: int, score: float, error: Err | None, stdout: str | None) -> None: ...


def cut(text: str, limit: int) -> str:
    """rfteval.tools.base.cut, copied (the sandbox may not import tools/; a test holds the two equal)."""
    if len(text) <= limit:
        return text
    return text[:limit] + f"…[cut: {len(text) - limit} more characters]"


def type_name(exc: BaseException) -> str:
    """The exception's type name, as a tool_errors key: a name, or "Exception" when the class forged one."""
    name = type(exc).__name__
    return name if type(name) is str and name.isidentifier() and len(name) <= TYPE_CHARS else "Exception"


def one_line(exc: BaseException) -> str:
    """The exception's message on one line, bounded; never its traceback (the model is shown it)."""
    try:
        text = str(exc)
    except Exception:  # noqa: BLE001  (a hostile __str__)
        text = ""
    return " ".join(text.split())[:MESSAGE_CHARS] or "(no message)"


# ---------------------------------------------------------------- the template: the module read once


class Entry:
    """One tool function and what its call needs: its signature (None when it has none to read) and whether it
    takes `item` and `state` (keyword-only parameters of those names: rfteval passes them, never the model)."""

    __slots__ = ("fn", "signature", "item", "state")

    def __init__(self, fn: Callable[..., object]):
        import inspect

        self.fn = fn
        self.signature: inspect.Signature | None
        try:
            self.signature = inspect.signature(fn)
        except (TypeError, ValueError):
            self.signature = None
        params: Mapping[str, inspect.Parameter] = self.signature.parameters if self.signature is not None else {}
        self.item = "item" in params and params["item"].kind is inspect.Parameter.KEYWORD_ONLY
        self.state = "state" in params and params["state"].kind is inspect.Parameter.KEYWORD_ONLY


class Tools:
    """A tools module as its template loaded it: its public functions, each read once here (a unit's child
    then reads nothing but the call's own arguments), and its init_state."""

    def __init__(self, namespace: dict[str, object], module: str):
        import inspect

        self.namespace = namespace
        self.entries: dict[str, Entry] = {}
        for name, value in list(namespace.items()):
            if (not name.startswith("_") and name != INIT_STATE and inspect.isfunction(value)
                    and value.__module__ == module):
                self.entries[name] = Entry(value)
        init = namespace.get(INIT_STATE)
        self.init = init if callable(init) else None

    def find(self, name: str) -> Entry | str:
        """The tool called `name`, or why there is none."""
        entry = self.entries.get(name)
        if entry is None:
            value = namespace_value(self.namespace, name)
            if not callable(value):
                return f"the tools module defines no function {name!r}"
            entry = self.entries[name] = Entry(value)
        return entry


def namespace_value(namespace: dict[str, object], name: str) -> object:
    """A public name of the module other than init_state (a callable object, a function made by a decorator)."""
    return None if name.startswith("_") or name == INIT_STATE else namespace.get(name)


def load_failure(exc: BaseException, filename: str) -> str:
    """Why the tools module did not load, on one line: "line N: ModuleNotFoundError: ..." (N the module's own
    line, when one of its frames is in the traceback). A timeout or MemoryError is described by the worker."""
    line = None
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == filename:
            line = tb.tb_lineno
        tb = tb.tb_next
    where = f"line {line}: " if line is not None else ""
    return f"{where}{type_name(exc)}: {one_line(exc)}"


# ---------------------------------------------------------------- the unit's child: one turn


class Turn:
    """A turn's calls in a unit's child, in order, under one clock: the turn's time limit counts from its start.
    Everything here can be rewritten by the tools' code; the supervisor believes none of it beyond this unit."""

    def __init__(self, child: Recorder, tools: Tools, unit: Unit, timeout_error: type[BaseException],
                 limits: dict[str, str]):
        self.child = child
        self.tools = tools
        self.item_blob, self.sent, self.calls, limit = unit
        self.limit = min(limit, MAX_OUTPUT_CHARS)
        self.timeout_error = timeout_error
        self.limits = limits
        self.text = self.sent  # the state as JSON text after the last call that succeeded
        self.state: dict[str, object] = json.loads(self.sent)
        self.stateful = False  # whether the call being run was given the state

    def run(self) -> None:
        child = self.child
        started = child.call_started = time.monotonic()  # the child's alarm counts from here (Child.on_alarm)
        deadline = started + child.timeout_s
        for index, (name, args) in enumerate(self.calls):
            error, content = self.step(name, args, deadline)
            child.commit(index, 0.0, error, content)
            if error is not None and error[0] in TURN_ENDING:
                break
        child.commit(len(self.calls), 0.0, None, self.text if self.text != self.sent else None)

    def step(self, name: str, args: bytes | None, deadline: float) -> tuple[Err | None, str | None]:
        """One call: its result (an error, or the content shown to the model, cut), its changes to the state kept
        only when it succeeded and left the state JSON."""
        left = deadline - time.monotonic()
        if left <= 0:
            return (TOOL_TIMEOUT, f"{name} was not started: the turn's {self.child.timeout_s:g} s time limit had "
                                  "run out"), None
        signal.setitimer(signal.ITIMER_REAL, left)
        self.stateful = False
        error: Err | None
        content: str | None = None
        self.child.in_call = True
        try:
            try:
                error, content = self.init() if args is None else self.call(name, args)
                if error is None and self.stateful:
                    error = self.keep_state(name)
            finally:
                self.child.in_call = False
        except self.timeout_error:
            error = TOOL_TIMEOUT, f"{name} ran past the turn's {self.child.timeout_s:g} s time limit"
        except MemoryError:
            error = TOOL_MEMORY, f"{name} ran out of memory (limit {self.limits['memory']})"
        if error is not None:
            content = None
            if self.stateful:  # what the failed call did to the state is undone
                self.state = json.loads(self.text)
        return error, content

    def call(self, name: str, args_blob: bytes) -> tuple[Err | None, str | None]:
        entry = self.tools.find(name)
        if isinstance(entry, str):
            return (UNKNOWN_TOOL, entry), None
        args = marshal.loads(args_blob)
        if type(args) is not dict:
            return (BAD_ARGUMENTS, "the arguments are not a JSON object"), None
        for given in ("item", "state"):
            if given in args and getattr(entry, given):
                return (BAD_ARGUMENTS, f"{given!r} is not an argument the model gives (rfteval passes it)"), None
        if entry.item:
            args["item"] = marshal.loads(self.item_blob)  # a fresh copy for every call
        if entry.state:
            args["state"] = self.state
            self.stateful = True
        if entry.signature is not None:
            try:
                entry.signature.bind(**args)
            except TypeError as exc:
                return (BAD_ARGUMENTS, one_line(exc)), None
        try:
            value = entry.fn(**args)
        except (self.timeout_error, MemoryError):
            raise
        except BaseException as exc:  # noqa: BLE001  (whatever the tool raises is its call's result)
            return (type_name(exc), one_line(exc)), None
        return self.content(name, value)

    def init(self) -> tuple[Err | None, str | None]:
        """The module's init_state(item): the rollout's first state."""
        fn = self.tools.init
        if fn is None:
            return (UNKNOWN_TOOL, "the tools module defines no init_state(item)"), None
        try:
            value = fn(marshal.loads(self.item_blob))
        except (self.timeout_error, MemoryError):
            raise
        except BaseException as exc:  # noqa: BLE001
            return (type_name(exc), one_line(exc)), None
        if type(value) is not dict:
            return ("TypeError", f"init_state returned a {type(value).__name__}, not a dict"), None
        self.state = value
        self.stateful = True
        return None, ""

    def content(self, name: str, value: object) -> tuple[Err | None, str | None]:
        """The return value as the model is shown it: a str as it is, anything else as JSON, cut at the limit."""
        if type(value) is str:
            text = value
        elif isinstance(value, str):
            text = str.__str__(value)
        else:
            try:
                text = json.dumps(value, ensure_ascii=False)
            except (self.timeout_error, MemoryError):
                raise
            except Exception as exc:  # noqa: BLE001  (TypeError, ValueError: a circular reference, a hostile object)
                return (type_name(exc), f"{name} returned a {type(value).__name__}, which is not JSON "
                                        f"({one_line(exc)}): return a str or JSON data"), None
        return None, cut(text, self.limit)

    def keep_state(self, name: str) -> Err | None:
        """The state after a call that succeeded, kept as JSON text; an error (and the call's changes undone) when
        it is not JSON or is too large to carry to the next turn."""
        try:
            text = json.dumps(self.state, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        except (self.timeout_error, MemoryError):
            raise
        except Exception as exc:  # noqa: BLE001
            return (type_name(exc), f"the state after {name} is not JSON ({one_line(exc)}): the call's changes to "
                                    "it are undone")
        if len(text) > STATE_CHARS:
            return ("ValueError", f"the state after {name} is {len(text):,} characters of JSON, more than the "
                                  f"{STATE_CHARS:,} a rollout's state may hold: the call's changes to it are undone")
        self.text = text
        return None


# ---------------------------------------------------------------- the supervisor: the unit's records checked


class TurnCheck:
    """The supervisor's reading of a tool unit's records (they come from the tools' process): calls in order,
    well formed, within bounds, then the state record, then nothing."""

    def __init__(self, calls: int, limit: int):
        self.calls = calls
        self.content_chars = min(limit, MAX_OUTPUT_CHARS) + MARKER_CHARS
        self.rows: list[Row] = []
        self.state: str | None = None
        self.done = False

    def region_bytes(self, slack: int) -> int:
        """Room in the unit's result region for a record per call (each at most the output limit, every character
        at its worst), the state record and the load record; `slack` is the worker's room per record for the rest."""
        return (self.calls + 2) * slack + self.calls * self.content_chars * BYTES_PER_CHAR + STATE_CHARS * BYTES_PER_CHAR

    def add(self, index: int, etype: str | None, message: str | None, content: str | None) -> bool:
        """Take one record; False when it is malformed (the unit is then charged with a crash)."""
        if self.done:
            return False
        if index == self.calls:  # the state record
            if etype is not None or message is not None or (content is not None and len(content) > STATE_CHARS):
                return False
            self.state, self.done = content, True
            return True
        if index != len(self.rows) or index > self.calls:
            return False
        if etype is None:
            if content is None or message is not None or len(content) > self.content_chars:
                return False
            self.rows.append([0.0, None, None, content])
        else:
            if not (etype.isidentifier() and len(etype) <= TYPE_CHARS) or content is not None:
                return False
            if etype.startswith(WORKER_TYPES):  # the child's own failure (a record that did not fit its region)
                etype = TOOL_CRASH
            self.rows.append([0.0, etype, (message or "")[:MESSAGE_CHARS + 200], None])
        return True

    def finish(self, failure: Err | None) -> list[Row]:
        """The rows for rfteval: one per call that ran, the call the unit failed in (when it did, before every
        call had a row), and the state row."""
        rows = self.rows
        if failure is not None and len(rows) < self.calls:
            rows = [*rows, [0.0, failure[0], failure[1], None]]
        return [*rows, [0.0, None, None, self.state]]


def load_failed_rows(failure: Err) -> list[Row]:
    """A tools module that did not load: no call ran; the state row says why."""
    return [[0.0, failure[0], failure[1], None]]
