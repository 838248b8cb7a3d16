"""An agent run's record fields in the normalised frame (rfteval.data.frame), and its JSONL made cheap to read.

An agent run's records carry, after the plain record's fields, the rollout's `turns`, `stop_reason`, `tool_calls`,
`tool_errors` ({type: count}) and `transcript` (its messages as JSON text, often kilobytes: /work/agents-contract.md
in the repository's issue 37). The frame holds the first four and what the rollout cost (tokens, latency, the
model that priced them), never the transcript: a Parquet reader leaves its column unread, and a JSONL reader cuts
each line before its transcript, a chunk of the file at a time, so compare over 100,000 items reads a few hundred
bytes of each record into memory, not the whole file (bench/bench_compare.py measures it).
"""

from __future__ import annotations

import json
import math
import numbers
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from rfteval.errors import InputError

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd
    import pyarrow as pa

TOOL_ERROR = "tool_error:"  # prefix of an agent run's per-record tool error counts by type in a frame
# An agent run's record fields, read when a file has them, as the frame's columns turns, tool_calls (numbers, NaN
# where a record has none), stop_reason (text), tool_errors (the record's count over all types, NaN where it has
# none) and tool_error:<type>; with them what the rollout cost: input_tokens, output_tokens, latency_s and model
# (its price). The transcript is never among them.
AGENT_FIELDS = ("turns", "stop_reason", "tool_calls", "tool_errors")
AGENT_COLUMNS = ("turns", "tool_calls", "stop_reason", "tool_errors", "input_tokens", "output_tokens", "latency_s",
                 "model")
AGENT_READ = (*AGENT_FIELDS, "usage", "latency_s", "model")  # the record fields the columns come from

_TOOL_RE = re.compile(rb'"tool_errors"\s*:\s*(\{[^{}]*\}|null)')
# as rfteval writes a line once its transcript is cut: the record's last field, so one match per line at most
_TOOL_RE_LAST = re.compile(rb'"tool_errors":(\{[^{}]*\}|null)\}\n')
# A JSONL file whose first MiB holds this key is an agent run's. `,"` cannot occur inside a JSON string (a quote
# there is escaped), so the transcript's key below is always a key, the record's own or one nested in a field.
AGENT_KEY = b'"stop_reason":'
_TRANSCRIPT_KEY = b',"transcript":"'
HEAD = 1 << 20  # the bytes of a JSONL file looked at to tell an agent run's
_CHUNK = 8 << 20  # read at a time when the transcripts are cut off


def arrow_schema_fields() -> list[tuple[str, pa.DataType]]:
    """The agent fields the JSONL reader's explicit schema adds (other fields of a line, the transcript among them,
    are skipped by the parser)."""
    import pyarrow as pa

    return [("turns", pa.int64()), ("stop_reason", pa.string()), ("tool_calls", pa.int64()),
            ("usage", pa.struct([("input_tokens", pa.int64()), ("output_tokens", pa.int64())])),
            ("latency_s", pa.float64()), ("model", pa.string())]


_NUMBERS = ("turns", "tool_calls", "input_tokens", "output_tokens", "latency_s")
_TEXTS = ("stop_reason", "model")  # held as categories: a few distinct values over every record


class _Columns:
    """An agent run's columns for n records (AGENT_COLUMNS, tool_error:<type>), filled a batch of records at a time,
    so no file's agent fields are ever all held as Arrow arrays at once; a field the file lacks is missing on every
    record."""

    def __init__(self, n: int):
        import numpy as np

        self.n = n
        self.numbers = {name: np.full(n, np.nan) for name in _NUMBERS}
        self.codes = {name: np.full(n, -1, dtype=np.int32) for name in _TEXTS}
        self.names: dict[str, dict[str, int]] = {name: {} for name in _TEXTS}
        self.errors = np.full(n, np.nan)
        self.types: dict[str, np.ndarray] = {}

    def add(self, batch: pa.RecordBatch | pa.Table, at: int) -> None:
        import pyarrow as pa
        import pyarrow.compute as pc

        end, names = at + batch.num_rows, batch.schema.names
        for name in ("turns", "tool_calls", "latency_s"):
            if name in names:
                self.numbers[name][at:end] = _floats(batch.column(name))
        if "usage" in names:
            usage = _array(batch.column("usage"))
            known = {f.name for f in usage.type} if pa.types.is_struct(usage.type) else set()
            for key in ("input_tokens", "output_tokens"):
                if key in known:
                    self.numbers[key][at:end] = _floats(pc.struct_field(usage, key))
        for name in _TEXTS:
            if name in names:
                self._text(name, _array(batch.column(name)), at)

    def _text(self, name: str, values: pa.Array, at: int) -> None:
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        encoded = values if pa.types.is_dictionary(values.type) else pc.dictionary_encode(values)
        seen = self.names[name]
        known = np.array([seen.setdefault(str(v), len(seen)) for v in encoded.dictionary.to_pylist()] + [-1],
                         dtype=np.int32)
        local = pc.fill_null(encoded.indices, -1).to_numpy(zero_copy_only=False).astype(np.int64)
        self.codes[name][at:at + len(values)] = known[local]  # -1 (missing) takes the list's last: -1

    def add_errors(self, counts: Mapping[str, np.ndarray], valid: np.ndarray, at: int) -> None:
        """A batch's tool errors: per type its count on each record (NaN where it has none of that type), and which
        records have a tool_errors value at all."""
        import numpy as np

        end = at + len(valid)
        total = np.where(valid, 0.0, np.nan)
        for kind, values in counts.items():
            column = self.types.setdefault(kind, np.full(self.n, np.nan))
            column[at:end] = values
            total = total + np.nan_to_num(values)
        self.errors[at:end] = total

    def add_struct_errors(self, table: pa.Table | None) -> None:
        """The JSONL reader's tool errors: one struct per record, a field per type (tool_errors_by_line)."""
        import pyarrow as pa
        import pyarrow.compute as pc

        s = _array(table.column("s")) if table is not None else None
        if s is not None and pa.types.is_struct(s.type):
            counts = {s.type.field(i).name: _floats(pc.struct_field(s, s.type.field(i).name))
                      for i in range(s.type.num_fields)}
            self.add_errors(counts, s.is_valid().to_numpy(zero_copy_only=False), 0)

    def add_map_errors(self, m: pa.Array, at: int) -> None:
        """A Parquet batch's tool errors: a map {type: count} per record."""
        import numpy as np
        import pyarrow as pa

        if not pa.types.is_map(m.type):
            return
        offsets = m.offsets.to_numpy()
        parents = np.repeat(np.arange(len(m)), np.diff(offsets))
        keys = m.keys.to_numpy(zero_copy_only=False)[offsets[0]:offsets[-1]]
        items = m.items.cast(pa.float64()).to_numpy(zero_copy_only=False)[offsets[0]:offsets[-1]]
        counts = {}
        for kind in dict.fromkeys(keys.tolist()):
            values = np.full(len(m), np.nan)
            sel = keys == kind
            values[parents[sel]] = items[sel]
            counts[str(kind)] = values
        self.add_errors(counts, m.is_valid().to_numpy(zero_copy_only=False), at)

    def columns(self) -> dict[str, object]:
        import pandas as pd

        out: dict[str, object] = dict(self.numbers)
        for name in _TEXTS:
            out[name] = pd.Categorical.from_codes(self.codes[name], categories=list(self.names[name]))
        out["tool_errors"] = self.errors
        out.update({TOOL_ERROR + kind: values for kind, values in sorted(self.types.items())})
        return out


def _array(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    import pyarrow as pa

    return values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values


def _floats(values: pa.Array | pa.ChunkedArray) -> np.ndarray:
    import pyarrow as pa
    import pyarrow.compute as pc

    return pc.cast(values, pa.float64()).to_numpy(zero_copy_only=False)  # null -> NaN


def agent_columns(table: pa.Table, tool_errors: pa.Table | None) -> dict[str, object]:
    """An agent run's columns from the JSONL reader's table (its lines cut before their transcripts) and its tool
    errors (tool_errors_by_line), for the frame to be built with at once."""
    out = _Columns(table.num_rows)
    out.add(table, 0)
    out.add_struct_errors(tool_errors)
    return out.columns()


def parquet_agent_columns(path: Path, names: set[str]) -> dict[str, object]:
    """An agent run's columns from a Parquet record file (`names`: its columns), read a batch of rows at a time
    (the transcript column never among them), text columns kept dictionary-encoded as Parquet stores them."""
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(path, read_dictionary=[n for n in _TEXTS if n in names])
        out = _Columns(pf.metadata.num_rows)
        at = 0
        for batch in pf.iter_batches(batch_size=1 << 13, columns=[n for n in AGENT_READ if n in names]):
            out.add(batch, at)
            if "tool_errors" in batch.schema.names:
                out.add_map_errors(batch.column("tool_errors"), at)
            at += batch.num_rows
    except Exception as exc:  # noqa: BLE001 - any unreadable Parquet is bad input
        raise InputError(f"not a readable Parquet file ({exc})", path) from None
    return out.columns()


def bad_count(frame: pd.DataFrame) -> tuple[str, int] | None:
    """The first count (turns, tool calls, a type's tool errors) that is not a whole number >= 0, as (field, row);
    None when all are."""
    import numpy as np

    for name in ("turns", "tool_calls", *(c for c in frame.columns if c.startswith(TOOL_ERROR))):
        values = frame[name].to_numpy(dtype=np.float64)
        bad = np.flatnonzero(~np.isnan(values) & ((values < 0) | (values != np.floor(values))))
        if bad.size:
            field = name if not name.startswith(TOOL_ERROR) else f"tool_errors.{name[len(TOOL_ERROR):]}"
            return field, int(bad[0])
    return None


def read_head(path: Path) -> bytes:
    try:
        with open(path, "rb") as fh:
            return fh.read(HEAD)
    except OSError as exc:
        raise InputError(f"cannot read ({exc.strerror})", path) from None


def transcript_last(head: bytes) -> bool:
    """Whether the first record's last field is its transcript, as rfteval writes it: only then is every line's
    transcript cut off before parsing (the fields after it would be lost)."""
    end = head.find(b"\n")
    if end < 0:
        return False
    try:
        first = json.loads(head[:end])
    except ValueError:
        return False
    return isinstance(first, dict) and bool(first) and next(reversed(first)) == "transcript"


def without_transcripts(path: Path) -> bytearray:
    """The file's lines with each one's transcript cut off: a record's fields compare reads take a few hundred bytes,
    its transcript kilobytes. Read a chunk at a time, so the transcripts are never all in memory."""
    out = bytearray()
    buf = bytearray(_CHUNK)
    start = end = 0
    with open(path, "rb", buffering=0) as fh:
        while True:
            if start:  # the unfinished line to the front
                buf[:end - start] = buf[start:end]
                end -= start
                start = 0
            if end == len(buf):  # one line longer than the buffer
                buf.extend(bytes(len(buf)))
            with memoryview(buf) as view:
                got = fh.readinto(view[end:])
            end += got
            stop = buf.rfind(b"\n", 0, end) + 1 if got else end
            _cut_lines(buf, start, stop, out)
            start = stop
            if not got:
                return out


def _cut_lines(buf: bytearray, start: int, stop: int, out: bytearray) -> None:
    """Each whole line of buf[start:stop] onto `out`, ending at its top-level transcript's key when that field
    closes the line (a JSON string, then the object's brace); any other line whole."""
    find, rfind = buf.find, buf.rfind
    with memoryview(buf) as view:
        pos = start
        while pos < stop:
            nl = find(b"\n", pos, stop)
            end = stop if nl < 0 else nl
            # the line's last key of that name: a nested one (in grade_details, say) comes before the record's own
            at = rfind(_TRANSCRIPT_KEY, pos, end)
            if at >= 0 and end - pos > 2 and buf[end - 1] == 0x7D and buf[end - 2] == 0x22:  # ..."}
                out += view[pos:at]
                out += b"}\n"
            else:
                out += view[pos:end]
                out += b"\n"
            pos = end + 1


def _line_ends(data: bytes | bytearray) -> list[int]:
    """The end of each non-blank line (pyarrow's rows)."""
    ends, pos, find = [], 0, data.find
    while pos < len(data):
        nl = find(b"\n", pos)
        end = len(data) if nl < 0 else nl
        if data[pos:end].strip():
            ends.append(end)
        pos = end + 1
    return ends


def tool_errors_by_line(data: bytes | bytearray, rows: int) -> pa.Table | None:
    """Each record's tool_errors object ({type: count}), found by regex and parsed by pyarrow as {"s": …} lines.
    As rfteval writes a line (its transcript cut), the field closes the line: one match per line. Else (a record with
    no rollout has none, a file not cut) each match is placed on its line, the line's last one kept: the record's
    own field comes after every field that could nest one. None when the lines cannot be matched to the rows."""
    import bisect

    import pyarrow as pa
    import pyarrow.json as pj

    found: list[bytes] = _TOOL_RE_LAST.findall(data)
    if len(found) != rows:
        ends = _line_ends(data)
        matches = list(_TOOL_RE.finditer(data))
        if len(ends) != rows or len(matches) != data.count(b'"tool_errors"'):
            return None  # or a value of another shape: the line-by-line reader names it
        found = [b"null"] * rows
        for m in matches:
            found[bisect.bisect_left(ends, m.start())] = m.group(1)
    return pj.read_json(pa.BufferReader(pa.py_buffer(b'{"s":' + b'}\n{"s":'.join(found) + b"}")),
                        read_options=pj.ReadOptions(block_size=8 << 20))


def _number(value: object, path: Path, line: int, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise InputError(f"must be a finite number or null, got {json.dumps(value)[:40]}", path, line, name)
    return float(value)


def _missing(value: object) -> bool:
    """None, or pandas' missing value (a frame of records in memory)."""
    return value is None or (isinstance(value, float) and math.isnan(value))


def _count(value: object, path: Path, line: int, name: str) -> float:
    """A count an agent record holds (turns, tool calls, a type's tool errors): a whole number >= 0, or null."""
    if _missing(value):
        return float("nan")
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not float(value).is_integer() \
            or float(value) < 0:
        raise InputError(f"must be a whole number >= 0 or null, got {json.dumps(value)[:40]}", path, line, name)
    return float(value)


class AgentRows:
    """An agent run's fields, gathered line by line (the line-by-line reader), each checked where it is read."""

    def __init__(self) -> None:
        self.columns: dict[str, list[object]] = {name: [] for name in AGENT_COLUMNS if name != "tool_errors"}
        self.errors: list[dict[str, float] | None] = []

    def add(self, row: Mapping[str, object], path: Path, line: int) -> None:
        c = self.columns
        c["turns"].append(_count(row.get("turns"), path, line, "turns"))
        c["tool_calls"].append(_count(row.get("tool_calls"), path, line, "tool_calls"))
        stop = row.get("stop_reason")
        if not _missing(stop) and not isinstance(stop, str):
            raise InputError("must be text or null", path, line, "stop_reason")
        c["stop_reason"].append(None if _missing(stop) else stop)
        errors = row.get("tool_errors")
        if isinstance(errors, (list, tuple)) and all(isinstance(e, tuple) and len(e) == 2 for e in errors):
            errors = dict(errors)  # a Parquet map read by pandas: a list of pairs
        if isinstance(errors, dict):
            self.errors.append({str(k): _count(v, path, line, f"tool_errors.{k}") for k, v in errors.items()})
        elif _missing(errors):
            self.errors.append(None)
        else:
            raise InputError("must be null or an object {error type: count}", path, line, "tool_errors")
        usage = row.get("usage")
        usage = usage if isinstance(usage, Mapping) else {}
        for key in ("input_tokens", "output_tokens"):
            value = usage.get(key)
            c[key].append(float("nan") if _missing(value) else _number(value, path, line, f"usage.{key}"))
        latency = row.get("latency_s")
        c["latency_s"].append(float("nan") if _missing(latency) else _number(latency, path, line, "latency_s"))
        model = row.get("model")
        c["model"].append(model if isinstance(model, str) else None)

    def into(self, frame: pd.DataFrame) -> None:
        import numpy as np
        import pandas as pd

        for name, values in self.columns.items():
            frame[name] = (pd.Series(values, dtype=object) if name in ("stop_reason", "model")
                           else np.asarray(values, dtype=np.float64))
        kinds = sorted({k for e in self.errors if e for k in e})
        for kind in kinds:
            frame[TOOL_ERROR + kind] = [float("nan") if e is None else e.get(kind, float("nan")) for e in self.errors]
        frame["tool_errors"] = [float("nan") if e is None else float(sum(e.values())) for e in self.errors]


