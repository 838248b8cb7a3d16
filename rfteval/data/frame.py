"""The one reader of record files: a model's records (a JSONL or Parquet file, a run directory) as one normalised,
columnar frame, with each record's error flags and effective score set once, here.

The frame holds what every statistic needs (item, epoch, score, passed, error, sub-scores) and, with `columns=`,
record fields carried along as the file has them (agree's texts and details). An agent run's records add the
rollout's turns, stop reason, tool calls and tool errors, its tokens, latency and model: read whenever the file has
them, while its transcripts are never decoded (a Parquet column left unread; in JSONL cut off each line before it
is parsed). rfteval's own compact JSONL is parsed column-wise by pyarrow (bench/bench_compare.py holds the speed
target), anything else line by line, naming the line and field of each bad value. compare's sides, agree, a run's
summary and its pass curves all read here.
"""

from __future__ import annotations

import json
import math
import numbers
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rfteval.data import rundir
from rfteval.data.agent_columns import (
    AGENT_FIELDS,
    AGENT_KEY,
    HEAD,
    AgentRows,
    agent_columns,
    arrow_schema_fields,
    bad_count,
    parquet_agent_columns,
    read_head,
    tool_errors_by_line,
    transcript_last,
    without_transcripts,
)
from rfteval.data.agent_columns import TOOL_ERROR as TOOL_ERROR
from rfteval.data.records import (
    RANGE_LOOKS,
    effective_scores,
    frame_range,
    generation_failures,
    iter_jsonl_record_lines,
    read_parquet_records,
    read_record_rows,
    recorded_score_range,
    records_frame,
)
from rfteval.errors import InputError

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

    from rfteval.data.json_types import JSONObject
    from rfteval.data.records import Record, RecordRows

SUB = "sub:"  # prefix of per-record sub-score columns in a frame
# A record file up to this size may be held whole when its reader asks (load_frame's keep_rows): read once, the
# normalised frame built from the same rows. A larger one is read by the column-wise reader alone, as without
# keep_rows, and its reader reads what else it needs itself: holding the rows costs more than reading again (on
# bench_compare's records, `compare --html` took 2.8 CPU-s and 361 MB holding a 16 MB baseline against 2.4 CPU-s and
# 330 MB reading it again; 12 CPU-s and 1.56 GB against 4.8 CPU-s and 767 MB at 160 MB; bench/README.md), so only a
# file as small as an RFT eval's usually is (a few hundred records), where the two cost alike, is held.
HOLD_MAX_BYTES = 4 * 2**20


@dataclass
class RecordFrame:
    """One model's records, normalised: item_id (text), epoch, score (an error record's 0: `effective_scores` with
    errors scored 0), passed (1/0/NaN), truncated_in_reasoning, error_stage/type/message/present, the flags
    is_error and is_generation_failure, and sub:<key> columns; a cell held twice keeps its later record."""

    label: str
    path: str
    frame: pd.DataFrame
    duplicates: int = 0
    grader: str | None = None  # the grader file of the run that wrote the records (spec.resolved.toml), if known
    # the range the records' grader wrote on them (grade_details.score_range: a score_model's `range`), read when
    # no grader file is known and the scores leave [0, 1]
    recorded_range: tuple[float, float] | None = None
    # the grader file's range and its sub-graders' (compare.comparison.grader_range, sub_grader_ranges) when the
    # caller holds that grader loaded (a run: its file read once per command); None: read from the file `grader` names
    declared_range: tuple[float, float, str] | None = None
    declared_sub_ranges: dict[str, tuple[float, float, str]] | None = None
    # an agent run's: the [pricing] table of the run directory's spec.resolved.toml (a rollout's cost), if any
    pricing: dict[str, dict[str, float]] | None = None
    # the file's records as read, when the reader was asked to keep them (load_frame's keep_rows): every label's
    rows: RecordRows | None = None

    @property
    def agent(self) -> bool:
        """Whether these are an agent run's records: some record says how many turns its rollout took."""
        return "turns" in self.frame and bool(self.frame["turns"].notna().any())


def load_frame(path: str | Path, label: str | None = None, keep_rows: bool = False) -> RecordFrame:
    """One model's records from a record file (JSONL or Parquet) or a run directory, filtered to `label` when
    given: the file found (rundir.find_records), read, normalised, with its grader and recorded range.

    `keep_rows`: read the file's records whole, once (rfteval.data.records.read_record_rows), build the frame from
    them and keep them on the result (`rows`) for whoever needs more of each record than the frame holds; a file
    over HOLD_MAX_BYTES is read by the column-wise reader alone (`rows` None)."""
    path = Path(path)
    found = rundir.find_records(path, label)
    file, by_label = found.files[0], found.label is not None
    held = read_record_rows(file) if keep_rows and file.stat().st_size <= HOLD_MAX_BYTES else None
    frame = frame_of_rows(held) if held is not None else read_frame(file)
    labels = frame["model_label"].dropna().unique().tolist() if "model_label" in frame else []
    if label is not None and labels and not by_label:
        frame = frame[frame["model_label"] == label]
        if frame.empty:
            raise InputError(f"no records with model_label {label!r} (labels here: {', '.join(map(str, labels))})",
                             file, field="--label")
    elif label is None and len(labels) > 1:
        raise InputError(f"holds several models ({', '.join(map(str, labels))}); name one with --label", file,
                         field="model_label")
    if frame.empty:
        raise InputError("no records", file)
    name = label or (str(labels[0]) if len(labels) == 1 else file.stem)
    out = normalise(frame.reset_index(drop=True), name, str(file))
    out.grader = rundir.grader_path(file.parent)
    out.rows = held
    if out.agent:
        out.pricing = rundir.spec_pricing(file.parent)
    if out.grader is None and outside_unit(out.frame["score"]):
        out.recorded_range = rows_range(held) if held is not None else recorded_range(file)
    return out


def load_run_frames(out_dir: Path, labels: Sequence[str]) -> dict[str, RecordFrame]:
    """Each label's records of a run directory (DIR/<label>.jsonl), read once for the run's comparison and its pass
    curves; a label with no records yet (a checkpoint early in the run, a model that never answered) is left out."""
    out: dict[str, RecordFrame] = {}
    for label in labels:
        try:
            out[label] = load_frame(out_dir / f"{label}.jsonl", label)
        except InputError:
            continue
    return out


def read_labels(path: Path) -> list[str]:
    """The model labels in a record file (its one column read: the viewer lists a file's models before reading any
    of them); [] when it has none, or its lines are not rfteval's."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if path.suffix == ".parquet":
        table = read_parquet_records(path, columns=("model_label",))
        if "model_label" not in table.column_names:
            return []
        return [str(v) for v in pc.unique(table.column("model_label")).to_pylist() if v is not None]
    import pyarrow.json as pj

    try:
        table = pj.read_json(path, parse_options=pj.ParseOptions(
            explicit_schema=pa.schema([("model_label", pa.string())]), unexpected_field_behavior="ignore"))
        return [str(v) for v in pc.unique(table.column("model_label")).to_pylist() if v is not None]
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return []


def outside_unit(scores: pd.Series) -> bool:
    """Whether some score lies outside [0, 1]: only then does a range other than the default matter."""
    import numpy as np

    values = scores.to_numpy(dtype=np.float64)
    return bool(values.size) and bool((np.nanmin(values) < 0.0) or (np.nanmax(values) > 1.0))


_RANGE_KEY = b'"score_range"'


def recorded_range(path: Path) -> tuple[float, float] | None:
    """The score range the grader wrote on the records of a file (its first record that carries one)."""
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        try:
            pf = pq.ParquetFile(path)
            if "grade_details" not in pf.schema_arrow.names:
                return None
            batch = next(pf.iter_batches(batch_size=RANGE_LOOKS, columns=["grade_details"]), None)
        except (OSError, ValueError):
            return None
        for value in batch.column(0).to_pylist() if batch is not None else []:
            found = recorded_score_range(value)
            if found is not None:
                return found
        return None
    try:
        data = path.read_bytes()
    except OSError:
        return None
    at = data.find(_RANGE_KEY)
    for _ in range(RANGE_LOOKS):
        if at < 0:
            return None
        start, end = data.rfind(b"\n", 0, at) + 1, data.find(b"\n", at)
        try:
            record = json.loads(data[start:end if end >= 0 else len(data)])
        except ValueError:
            record = None
        found = recorded_score_range(record.get("grade_details")) if isinstance(record, dict) else None
        if found is not None:
            return found
        at = data.find(_RANGE_KEY, end) if end >= 0 else -1
    return None


def rows_range(rows: RecordRows) -> tuple[float, float] | None:
    """recorded_range of records already read: the first of those that carry a score range (up to RANGE_LOOKS of
    them; a Parquet file's first RANGE_LOOKS rows), as recorded_range looks in the file."""
    if rows.table is not None:
        if "grade_details" not in rows.table.column_names:
            return None
        return frame_range(rows.table.select(["grade_details"]).slice(0, RANGE_LOOKS).to_pandas())
    looks = 0
    for _, record in rows.lines or ():
        details = record.get("grade_details")
        if not (isinstance(details, dict) and "score_range" in details):
            continue
        found = recorded_score_range(details)
        if found is not None:
            return found
        looks += 1
        if looks >= RANGE_LOOKS:
            break
    return None


def frame_from_records(records: pd.DataFrame | Sequence[Record], label: str, path: str = "") -> RecordFrame:
    """A frame from records in memory (`Record`s, or a frame from rfteval.data.records.read_records)."""
    import pandas as pd

    frame = records if isinstance(records, pd.DataFrame) else records_frame(records)
    rows = frame.to_dict("records")
    out = normalise(_frame_from_dicts(rows, Path(path or label), validate=False), label, path)
    out.recorded_range = frame_range(frame)
    return out


def normalise(frame: pd.DataFrame, label: str, path: str) -> RecordFrame:
    """Duplicate cells dropped (the later record wins), ids as text, error records scored 0 (the error policy's
    flags, set by the reader, decide which records then enter a mean)."""
    import pandas as pd

    before = len(frame)
    has_epoch = frame["epoch"].notna()
    dup = frame.duplicated(subset=["item_id", "epoch"], keep="last") & has_epoch
    if dup.any():  # an append-only store may hold a cell twice: the later record supersedes
        frame = frame[~dup.to_numpy()].reset_index(drop=True)
    frame = frame.copy()
    if not pd.api.types.is_string_dtype(frame["item_id"]):
        frame["item_id"] = frame["item_id"].astype(str)
    if "is_error" not in frame:  # a frame built from the normalised columns elsewhere (compare.simulation)
        _flag_errors(frame)
    frame["score"] = effective_scores(frame, "zero").to_numpy()
    return RecordFrame(label, path, frame, before - len(frame))


def _flag_errors(frame: pd.DataFrame) -> pd.DataFrame:
    """The error flags, set once as a file is read: any error (graded 0 or left out), and a generation failure."""
    frame["is_error"] = frame["error_type"].notna() | frame["error_stage"].notna() | frame["error_present"]
    frame["is_generation_failure"] = generation_failures(frame["error_stage"], frame["error_type"])
    return frame


# ---------------------------------------------------------------------------------------------- reading

_NEEDED = ("model_label", "item_id", "epoch", "score", "error", "sub_scores", "passed", "truncated_in_reasoning")
_COLUMNS = ("model_label", "item_id", "epoch", "score", "passed", "truncated_in_reasoning")  # the frame's own names
# Inside a JSON string every quote is escaped, so `"sub_scores"` followed by a colon is always a key. A nested
# one (say in grade_details) makes the count differ from the row count, and the slow reader takes over.
_SUB_RE = re.compile(rb'"sub_scores"\s*:\s*(\{[^{}]*\}|null)')
_SUB_RE_COMPACT = re.compile(rb'"sub_scores":(\{[^{}]*\}|null)')  # as rfteval writes it: tried first, the faster match
_HAS_SUB_RE = re.compile(rb'"sub_scores"\s*:\s*\{')


def read_frame(path: Path, columns: Sequence[str] = (), *, require_grades: bool = True) -> pd.DataFrame:
    """A record file as the normalised columns (model_label, item_id, epoch, score, passed, truncated_in_reasoning,
    error_*, the error flags, sub:<key>; an agent run's AGENT_COLUMNS and tool_error:<type>) and the record fields
    named in `columns`, as the file holds them.

    JSONL goes through pyarrow's JSON reader with an explicit schema (other fields, whatever their shape,
    are ignored); sub-scores and tool errors are found with a regex and parsed by the same reader. Anything unexpected
    (integer ids, a missing field, invalid JSON) and any field asked for in `columns` goes to a line-by-line
    reader that names the line. A record with no score and no error was never graded: bad input, unless
    `require_grades` is False (then its score is NaN).
    """
    extra = [c for c in dict.fromkeys(columns) if c not in _COLUMNS]
    if path.suffix == ".parquet":
        return _read_parquet(path, extra, require_grades)
    fast = None if extra else _read_jsonl_fast(path)
    return fast if fast is not None else _read_jsonl_slow(path, extra, require_grades)


def _arrow_frame(table: pa.Table, subs: pa.Table | None, agent: Mapping[str, object] | None = None) -> pd.DataFrame:
    import pandas as pd
    import pyarrow as pa
    import pyarrow.compute as pc

    def col(name: str, typ: pa.DataType) -> pa.ChunkedArray:
        if name in table.column_names:
            return table.column(name)
        return pa.chunked_array([pa.nulls(table.num_rows, typ)])

    err = table.column("error").combine_chunks() if "error" in table.column_names else None
    data: dict[str, object] = {  # columns for a DataFrame: arrays and Series
        "model_label": col("model_label", pa.string()).to_pandas(),
        "item_id": col("item_id", pa.string()).to_pandas(),
        "epoch": pc.cast(col("epoch", pa.int64()), pa.float64()).to_numpy(zero_copy_only=False),  # null -> NaN
        "score": col("score", pa.float64()).to_numpy(zero_copy_only=False),
        # the grader's own verdict: 1.0 / 0.0, NaN where it gave none
        "passed": pc.cast(col("passed", pa.bool_()), pa.float64()).to_numpy(zero_copy_only=False),
        # cut off while still thinking (rfteval.data.reasoning); records written before the field: False
        "truncated_in_reasoning": pc.fill_null(pc.cast(col("truncated_in_reasoning", pa.bool_()), pa.bool_()),
                                               False).to_numpy(zero_copy_only=False),
    }
    err_fields = {f.name for f in err.type} if err is not None else set()
    for key in ("stage", "type", "message"):
        data[f"error_{key}"] = (pc.struct_field(err, key).to_pandas() if key in err_fields
                                else pd.Series([None] * table.num_rows, dtype=object))
    data["error_present"] = err.is_valid().to_numpy(zero_copy_only=False) if err is not None else False
    data.update(agent or {})
    frame = pd.DataFrame(data)
    if subs is not None and subs.num_rows:
        s = subs.column("s").combine_chunks()
        if pa.types.is_struct(s.type):
            for i in range(s.type.num_fields):
                name = s.type.field(i).name
                frame[SUB + name] = pc.struct_field(s, name).cast(pa.float64()).to_numpy(zero_copy_only=False)
    return _flag_errors(frame)


def _read_jsonl_fast(path: Path) -> pd.DataFrame | None:
    import pyarrow as pa
    import pyarrow.json as pj

    head = read_head(path)
    if head.startswith(b"\xef\xbb\xbf") or b"\r" in head[:4096]:
        return None
    agent = AGENT_KEY in head
    try:
        if agent and transcript_last(head):
            data: bytes | bytearray = without_transcripts(path)
        else:
            data = head if len(head) < HEAD else path.read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read ({exc.strerror})", path) from None
    fields = [("model_label", pa.string()), ("item_id", pa.string()), ("epoch", pa.int64()),
              ("score", pa.float64()), ("passed", pa.bool_()), ("truncated_in_reasoning", pa.bool_()),
              ("error", pa.struct([("stage", pa.string()), ("type", pa.string()), ("message", pa.string())]))]
    if agent:
        fields += arrow_schema_fields()
    opts = pj.ParseOptions(explicit_schema=pa.schema(fields), unexpected_field_behavior="ignore")
    try:
        table = pj.read_json(pa.BufferReader(pa.py_buffer(data)), parse_options=opts,
                             read_options=pj.ReadOptions(block_size=8 << 20))
        subs = tool_errors = None
        if b'"sub_scores"' in data:
            found = _SUB_RE_COMPACT.findall(data)
            if len(found) != table.num_rows:
                found = _SUB_RE.findall(data)
            if len(found) != table.num_rows:
                return None  # a line without the key, a nested key or a value of the wrong shape
            if _HAS_SUB_RE.search(data):
                subs = pj.read_json(pa.BufferReader(pa.py_buffer(b'{"s":' + b'}\n{"s":'.join(found) + b"}")),
                                    read_options=pj.ReadOptions(block_size=8 << 20))
        if agent and b'"tool_errors"' in data:
            tool_errors = tool_errors_by_line(data, table.num_rows)
            if tool_errors is None:
                return None
        del data
        if table.num_rows == 0:
            return None
        frame = _arrow_frame(table, subs, agent_columns(table, tool_errors) if agent else None)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return None  # e.g. integer ids or a text sub-score: the line-by-line reader handles or names it
    if (frame["item_id"].isna().any() or (frame["item_id"] == "").any()
            or (frame["score"].isna() & ~frame["error_present"]).any() or (agent and bad_count(frame))):
        return None  # let the line-by-line reader name the bad line
    return frame


def _check_number(value: object, path: Path, line: int, name: str, *, allow_null: bool) -> float | None:
    if value is None and allow_null:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise InputError(f"must be a finite number, got {json.dumps(value)[:40]}", path, line, name)
    return float(value)


def _frame_from_dicts(rows: Sequence[tuple[int, Mapping[str, object]]] | Sequence[Mapping[str, object]], path: Path,
                      validate: bool = True, extra: Sequence[str] = (), require_grades: bool = True) -> pd.DataFrame:
    import pandas as pd

    out: dict[str, list[object]] = {k: [] for k in ("model_label", "item_id", "epoch", "score", "error_stage",
                                                 "error_type", "error_message", "error_present", "passed",
                                                 "truncated_in_reasoning")}
    carried: dict[str, list[object]] = {name: [] for name in extra}
    subs: list[dict[str, float | None] | None] = []
    agent = AgentRows() if any(
        "stop_reason" in (entry[1] if isinstance(entry, tuple) else entry) for entry in rows) else None
    for pos, entry in enumerate(rows):
        line, row = entry if isinstance(entry, tuple) else (pos + 1, entry)
        item_id = row.get("item_id")
        if isinstance(item_id, bool) or not isinstance(item_id, (str, numbers.Integral)) or str(item_id) == "":
            raise InputError("must be a non-empty string or an integer", path, line, "item_id")
        epoch = row.get("epoch")
        if not validate and isinstance(epoch, numbers.Real) and not isinstance(epoch, bool):
            epoch = None if math.isnan(epoch) else int(float(epoch))
        if epoch is not None and (isinstance(epoch, bool) or not isinstance(epoch, numbers.Integral)):
            raise InputError("must be an integer", path, line, "epoch")
        error = row.get("error")
        if isinstance(error, float) and math.isnan(error):  # pandas' missing value
            error = None
        if error is not None and not isinstance(error, dict):
            raise InputError("must be null or an object {stage, type, message}", path, line, "error")
        score = row.get("score")
        if isinstance(score, float) and math.isnan(score) and not validate:
            score = None
        if score is None and error is None and require_grades:
            raise InputError("null without an error: the record was never graded", path, line, "score")
        score = _check_number(score, path, line, "score", allow_null=error is not None or not require_grades)
        sub = row.get("sub_scores")
        if sub is not None and not isinstance(sub, dict):
            if isinstance(sub, list) and not validate:  # a Parquet map read by pandas: a list of pairs
                sub = dict(sub)
            elif not (isinstance(sub, float) and math.isnan(sub)):
                raise InputError("must be null or an object {name: number}", path, line, "sub_scores")
            else:
                sub = None
        if sub:
            sub = {str(k): _check_number(v, path, line, f"sub_scores.{k}", allow_null=True) for k, v in sub.items()}
        label = row.get("model_label")
        out["model_label"].append(label if isinstance(label, str) else None)
        out["item_id"].append(str(item_id))
        out["epoch"].append(float(epoch) if epoch is not None else float("nan"))
        out["score"].append(score if score is not None else float("nan"))
        for key in ("stage", "type", "message"):
            out[f"error_{key}"].append(str(error.get(key)) if error and error.get(key) is not None else None)
        out["error_present"].append(error is not None)
        passed = row.get("passed")
        out["passed"].append(float(passed) if isinstance(passed, bool) else float("nan"))  # other values: no verdict
        out["truncated_in_reasoning"].append(row.get("truncated_in_reasoning") is True)
        subs.append(sub or None)
        if agent is not None:
            agent.add(row, path, line)
        for name in extra:
            carried[name].append(row.get(name))
    frame = pd.DataFrame(out)
    keys = sorted({k for s in subs if s for k in s})
    for key in keys:
        frame[SUB + key] = [float("nan") if not s or s.get(key) is None else s[key] for s in subs]
    if agent is not None:
        agent.into(frame)
    for name, values in carried.items():
        frame[name] = pd.Series(values, dtype=object)
    return _flag_errors(frame)


def _read_jsonl_slow(path: Path, extra: Sequence[str] = (), require_grades: bool = True) -> pd.DataFrame:
    return _jsonl_frame(list(iter_jsonl_record_lines(path)), path, extra, require_grades)


def _jsonl_frame(rows: list[tuple[int, JSONObject]], path: Path, extra: Sequence[str] = (),
                 require_grades: bool = True) -> pd.DataFrame:
    if not rows:
        raise InputError("no records", path)
    return _frame_from_dicts(rows, path, extra=extra, require_grades=require_grades)


def frame_of_rows(rows: RecordRows) -> pd.DataFrame:
    """read_frame's frame of records already read (read_record_rows): the same columns, checks and messages."""
    if rows.table is not None:
        return _parquet_frame(rows.table.select([c for c in _NEEDED if c in rows.table.column_names]), rows.path)
    return _jsonl_frame(rows.lines or [], rows.path)


def _map_struct(m: pa.Array) -> pa.Table | None:
    """A Parquet map column ({name: number} per row) as a table {"s": struct of one field per name}, NaN where a
    row lacks a name; None when no row has one."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    if not pa.types.is_map(m.type) or m.null_count == len(m):
        return None
    keys = pc.unique(m.keys).to_pylist()
    offsets = m.offsets.to_numpy()
    parents = np.repeat(np.arange(len(m)), np.diff(offsets))
    flat_keys = m.keys.to_numpy(zero_copy_only=False)[offsets[0]:offsets[-1]]
    flat_vals = m.items.cast(pa.float64()).to_numpy(zero_copy_only=False)[offsets[0]:offsets[-1]]
    fields = {}
    for key in keys:
        col = np.full(len(m), np.nan)
        sel = flat_keys == key
        col[parents[sel]] = flat_vals[sel]
        fields[key] = pa.array(col, mask=np.isnan(col))
    return pa.table({"s": pa.StructArray.from_arrays(list(fields.values()), list(fields.keys()))})


def _parquet_agent(path: Path) -> set[str]:
    """A Parquet record file's columns when it is an agent run's (it has the agent fields' columns), else none; a
    file whose schema does not read is left to the reader, which names it."""
    import pyarrow.parquet as pq

    try:
        names = set(pq.read_schema(path).names)
    except Exception:  # noqa: BLE001 - the reader that follows says what is wrong with the file
        return set()
    return names if names & set(AGENT_FIELDS) else set()


def _read_parquet(path: Path, extra: Sequence[str] = (), require_grades: bool = True) -> pd.DataFrame:
    return _parquet_frame(read_parquet_records(path, columns=tuple(dict.fromkeys((*_NEEDED, *extra)))), path, extra,
                          require_grades)


def _parquet_frame(table: pa.Table, path: Path, extra: Sequence[str] = (), require_grades: bool = True
                   ) -> pd.DataFrame:
    import pandas as pd
    import pyarrow as pa

    agent = _parquet_agent(path)
    for key in ("item_id", "score"):
        if key not in table.column_names:
            raise InputError("missing column; not a record file?", path, field=key)
    subs = _map_struct(table.column("sub_scores").combine_chunks()) if "sub_scores" in table.column_names else None
    try:
        table = table.set_column(table.column_names.index("item_id"), "item_id",
                                 table.column("item_id").cast(pa.string()))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise InputError(f"item_id column is not text ({exc})", path, field="item_id") from None
    frame = _arrow_frame(table, subs, parquet_agent_columns(path, agent) if agent else None)
    for name in extra:
        frame[name] = (table.column(name).to_pandas() if name in table.column_names
                       else pd.Series([None] * table.num_rows, dtype=object))
    bad_agent = bad_count(frame) if agent else None
    if bad_agent is not None:
        raise InputError(f"must be a whole number >= 0 (row {bad_agent[1] + 1})", path, field=bad_agent[0])
    ungraded = frame["score"].isna() & ~frame["error_present"] if require_grades else False
    bad = frame.index[frame["item_id"].isna() | ungraded]
    if len(bad):
        field_name = "item_id" if frame["item_id"].isna().iloc[bad[0]] else "score"
        raise InputError(f"null in row {bad[0] + 1} ({len(bad)} bad rows)", path, field=field_name)
    return frame
