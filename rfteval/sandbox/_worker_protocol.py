"""What the sandbox worker's processes share: error types, the layouts of a frame to rfteval and of a child's
result region, framing over a file descriptor, a record's encoding, the limits as set (for messages) and the
process flags. The supervisor, a template and a unit's child all import it: the standard library only.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Callable
from typing import TYPE_CHECKING

# Copies of rfteval.data.grades' error types (the worker imports rfteval's other modules only lazily, in a child).
PYTHON_RUNTIME = "python_grader_runtime_error"
PYTHON_TIMEOUT = "python_grader_timeout_error"
PYTHON_MEMORY = "python_grader_memory_error"
PYTHON_SERVER = "python_grader_server_error"
RESEND = "rfteval_resend_whole"  # as in wire.py: a sample sent compact that could not be rebuilt here
ERROR_TYPES = frozenset({PYTHON_RUNTIME, PYTHON_TIMEOUT, PYTHON_MEMORY, PYTHON_SERVER, RESEND})

HEADER = struct.Struct("<Q")  # frames to and from rfteval
RECORD = struct.Struct("<I")  # records in a child's result region
COUNT = struct.Struct("<QQ")  # the region's head: (records committed, bytes used after the head)
MESSAGE_CHARS = 8000  # an error message as forwarded, at most
RECORD_SLACK = MESSAGE_CHARS * 4 + 4096  # room per record beyond the output cap (UTF-8, JSON escapes)
LOADED = -1  # the record index that says the source loaded (or why it did not)

TEMPLATE_FD = 3  # in a template: its socket to the supervisor
UNIT_FD, REGION_FD = 3, 4  # in a unit forked from a template: its own socket to the supervisor, its result region
WORD = struct.Struct("<q")  # a template's replies after its first: a child's pid, then that child's wait status

Err = tuple[str, str]
Record = tuple[int, float, "str | None", "str | None", "str | None"]  # in a child's region: index, score, type, message, output

if TYPE_CHECKING:  # the checker's names only: at run time the worker defines and imports none of them
    from typing import TypedDict

    from rfteval.data.json_types import JSONObject, JSONValue
    from rfteval.data.sample import Sample
    from rfteval.sandbox._tool_unit import Tools

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


def loading(tools: bool) -> str:
    return "loading the tools module" if tools else "loading the grader source"


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


def encode_record(record: list[int | float | str | None]) -> bytes:
    try:
        return ENCODE(record)
    except (TypeError, ValueError):  # a lone surrogate in a message: json escapes it
        return json.dumps(record).encode()


def _json_bytes(value: object) -> bytes:
    return json.dumps(value).encode()


ENCODE: Callable[[object], bytes] = _json_bytes  # msgspec's encoder once it is imported


def use_msgspec_encoder() -> None:
    """Records encoded by msgspec from now on (floats written to round-trip exactly); the supervisor calls it once
    msgspec is imported, before any child exists."""
    global ENCODE
    import msgspec

    ENCODE = msgspec.json.encode


# ---------------------------------------------------------------- process flags


def prctl(option: int, value: int) -> bool:
    import ctypes

    try:
        return ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_CHILD_SUBREAPER = 1, 4, 36
