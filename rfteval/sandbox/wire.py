"""The wire between rfteval and a sandbox: samples and items encoded for the worker, replies decoded and bounded.

Requests go as marshal (plain built-in data only); a supervisor's reply, a length-prefixed JSON frame, is checked
here once more, since the supervisor shares a sandbox with grader code and is not believed blindly.
"""

from __future__ import annotations

import hashlib
import json
import marshal
import math
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeAlias

import msgspec

from rfteval.data.grades import (
    PYTHON_MEMORY,
    PYTHON_RUNTIME,
    PYTHON_SERVER,
    PYTHON_TIMEOUT,
    GradeError,
    GradeResult,
)
from rfteval.data.sample import ParsedSample, rebuild_args

if TYPE_CHECKING:
    from rfteval.data.json_types import JSONObject
    from rfteval.data.sample import Sample
    from rfteval.sandbox._worker_protocol import Sent

# What plain() makes: the built-in types marshal carries (keys too may be numbers, as in a Python dict)
PlainKey: TypeAlias = "str | int | float | bool | None"
Plain: TypeAlias = "PlainKey | list[Plain] | dict[PlainKey, Plain]"

STDOUT_CAP = 64 * 1024
MESSAGE_CAP = 8000  # characters of an error message, as in _worker_protocol.py
MAX_REPLY_BYTES = 64 << 20  # one frame from a supervisor: a batch's results, outputs capped
HEADER = struct.Struct("<Q")
RESEND = "rfteval_resend_whole"  # the wire's word for Resend (as in _worker_protocol.py)
TURN_CONTENT_CAP = 1 << 21  # a tool turn's content or state (_tool_unit's STATE_CHARS and MAX_OUTPUT_CHARS, below)
ERROR_TYPES = frozenset({PYTHON_RUNTIME, PYTHON_TIMEOUT, PYTHON_MEMORY, PYTHON_SERVER})

_Reply = tuple[bool, list[tuple[float, str | None, str | None, str | None]]]
_decode_reply = msgspec.json.Decoder(_Reply).decode


def plain(value: object) -> Plain:
    """JSON-like data made of built-in types only (what OpenAI's sandbox gets: JSON); others become str."""
    if value is None or type(value) is str or type(value) is int or type(value) is float or type(value) is bool:
        return value
    if isinstance(value, Mapping):
        return {_plain_key(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [plain(v) for v in value]
    if isinstance(value, str):  # subclasses (str enums too): their plain content
        return str.__str__(value)
    if isinstance(value, int):  # int subclasses (IntEnum); bool cannot be subclassed, so it was handled above
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    return str(value)


def _plain_key(key: object) -> PlainKey:
    key = plain(key)
    return key if isinstance(key, (str, int, float, bool)) or key is None else str(key)


def encode(value: Sample | JSONObject) -> bytes:
    """marshal: fast, and the worker can only get plain data back out of it (a subclass or an object that
    marshal refuses goes as plain JSON-like data instead)."""
    try:
        return marshal.dumps(value)
    except ValueError:
        return marshal.dumps(plain(value))


def encode_whole(sample: Sample) -> bytes:
    """A sample as one marshal blob, decoded in the worker on its own (the collector sees one at a time)."""
    return encode(dict(sample) if type(sample) is ParsedSample else sample)  # a ParsedSample is a plain dict inside


def compact_sample(sample: Sample) -> Sent:
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


def source_key(source: str) -> str:
    return hashlib.sha256(source.encode("utf-8", "surrogatepass")).hexdigest()




@dataclass(frozen=True)
class Resend:
    """Not a result but a request: the child could not rebuild a sample sent compact (a limit set differently
    there), so the pool sends that sample again whole. It never leaves the pool."""

    reason: str


Outcome = GradeResult | Resend


def decode_reply(data: bytes, start: int, n: int) -> tuple[list[Outcome], bool]:
    """One frame from a supervisor: results for samples start.. and whether the request is done.

    The supervisor shares a sandbox with grader code and is not believed blindly: anything malformed (any
    decode error, nesting included), out of range or too long is a protocol error, never a crash here."""
    try:
        try:
            done, rows = _decode_reply(data)
        except msgspec.DecodeError:  # what msgspec refuses and json takes (a lone surrogate, escaped)
            done, rows = _reply_from_json(data)
        if start + len(rows) > n or (done and start + len(rows) != n):
            raise ValueError("wrong number of results")
        results: list[Outcome] = []
        for score, etype, message, stdout in rows:
            if etype == RESEND:
                results.append(Resend((message or "")[:MESSAGE_CAP]))
                continue
            if etype is not None:
                kind = etype if etype in ERROR_TYPES else PYTHON_RUNTIME
                result = GradeResult.failed(kind, (message or "")[:MESSAGE_CAP])
            elif not math.isfinite(score):
                raise ValueError("bad score")
            else:
                result = GradeResult(score)
            if stdout is not None:
                result.stdout = stdout[: STDOUT_CAP + 100]
            results.append(result)
        return results, done
    except Exception as exc:  # noqa: BLE001  (msgspec's errors, RecursionError, MemoryError, ValueError...)
        raise Failure(PYTHON_SERVER, f"unreadable reply from the grader sandbox ({type(exc).__name__})") from None


TurnRow = tuple["str | None", "str | None", "str | None"]  # a tool turn's row: (error type, message, content)


def decode_turn_reply(data: bytes) -> tuple[list[TurnRow], bool]:
    """One frame from a supervisor running a tool turn (_tool_unit.py): its rows and whether the turn is done.
    Only the shape and sizes are checked here (sandbox/turns.py reads the rows): anything malformed is a protocol
    error, never a crash here."""
    try:
        try:
            done, rows = _decode_reply(data)
        except msgspec.DecodeError:  # what msgspec refuses and json takes (a lone surrogate, escaped)
            done, rows = _reply_from_json(data)
        out: list[TurnRow] = []
        for _, etype, message, content in rows:
            if etype is not None and not (etype.isidentifier() and len(etype) <= 100):
                raise ValueError("bad error type")
            if (message is not None and len(message) > MESSAGE_CAP) or (content is not None
                                                                          and len(content) > TURN_CONTENT_CAP):
                raise ValueError("too long")
            out.append((etype, message, content))
        return out, done
    except Exception as exc:  # noqa: BLE001  (msgspec's errors, RecursionError, MemoryError, ValueError...)
        raise Failure(PYTHON_SERVER, f"unreadable reply from the tool sandbox ({type(exc).__name__})") from None


def _reply_from_json(data: bytes) -> _Reply:
    """json's reading of a reply, held to the same shape as msgspec's typed decoder (nesting beyond it fails)."""
    obj = json.loads(data)
    if not (isinstance(obj, list) and len(obj) == 2 and type(obj[0]) is bool and isinstance(obj[1], list)):
        raise ValueError("not a reply")
    rows = []
    for row in obj[1]:
        if not (isinstance(row, list) and len(row) == 4 and type(row[0]) in (int, float)
                and all(v is None or type(v) is str for v in row[1:])):
            raise ValueError("not a result")
        rows.append((float(row[0]), row[1], row[2], row[3]))
    return obj[0], rows


class Failure(Exception):
    """The supervisor died, stopped answering or garbled its reply: the sample it was on is charged."""

    def __init__(self, type: str, message: str):
        super().__init__(message)
        self.error = GradeError(type, message)
