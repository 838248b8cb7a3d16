"""One side of a comparison: a model's records read into a normalised frame, from JSONL, Parquet or a run directory.

The readers keep only what comparing needs (item, epoch, score, error, sub-scores, passed): rfteval's own compact
JSONL is parsed column-wise by pyarrow (bench/bench_compare.py holds the speed target), anything else line by
line, naming the line and field of each bad value.
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
from rfteval.data.records import RANGE_LOOKS, frame_range, generation_failures, recorded_score_range
from rfteval.errors import InputError

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

    from rfteval.data.records import Record

SUB = "sub:"  # prefix of per-record sub-score columns in a side's frame


@dataclass
class Side:
    """One model's records, normalised: item_id, epoch, score, error_* and sub:<key> columns."""

    label: str
    path: str
    frame: pd.DataFrame
    duplicates: int = 0
    grader: str | None = None  # the grader file of the run that wrote the records (spec.resolved.toml), if known
    # the range the records' grader wrote on them (grade_details.score_range: a score_model's `range`), read when
    # no grader file is known and the scores leave [0, 1]
    recorded_range: tuple[float, float] | None = None


def load_side(path: str | Path, label: str | None = None) -> Side:
    """A side from a record file (JSONL or Parquet) or a run directory, filtered to `label` when given."""
    path = Path(path)
    file, by_label = rundir.record_file(path, label)
    frame = read_record_frame(file)
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
    side = normalise_frame(frame.reset_index(drop=True), name, str(file))
    side.grader = rundir.grader_path(file.parent)
    if side.grader is None and outside_unit(side.frame["score"]):
        side.recorded_range = recorded_range(file)
    return side


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


def side_from_records(records: pd.DataFrame | Sequence[Record], label: str, path: str = "") -> Side:
    """A side from records in memory (`Record`s, or a frame from rfteval.data.records.read_records)."""
    import pandas as pd

    from rfteval.data.records import records_frame

    frame = records if isinstance(records, pd.DataFrame) else records_frame(records)
    rows = frame.to_dict("records")
    side = normalise_frame(_frame_from_dicts(rows, Path(path or label), validate=False), label, path)
    side.recorded_range = frame_range(frame)
    return side


def normalise_frame(frame: pd.DataFrame, label: str, path: str) -> Side:
    """Duplicate cells dropped (the later record wins), ids as text, error flags set, error records scored 0."""
    import numpy as np
    import pandas as pd

    before = len(frame)
    has_epoch = frame["epoch"].notna()
    dup = frame.duplicated(subset=["item_id", "epoch"], keep="last") & has_epoch
    if dup.any():  # an append-only store may hold a cell twice: the later record supersedes
        frame = frame[~dup.to_numpy()].reset_index(drop=True)
    frame = frame.copy()
    if not pd.api.types.is_string_dtype(frame["item_id"]):
        frame["item_id"] = frame["item_id"].astype(str)
    frame["is_error"] = frame["error_type"].notna() | frame["error_stage"].notna() | frame["error_present"]
    frame["is_generation_failure"] = generation_failures(frame["error_stage"], frame["error_type"])
    frame["score"] = np.where(frame["is_error"], 0.0, frame["score"].to_numpy(dtype=np.float64))
    return Side(label, path, frame, before - len(frame))


# ---------------------------------------------------------------------------------------------- reading

_NEEDED = ("model_label", "item_id", "epoch", "score", "error", "sub_scores", "passed", "truncated_in_reasoning")
# Inside a JSON string every quote is escaped, so `"sub_scores"` followed by a colon is always a key. A nested
# one (say in grade_details) makes the count differ from the row count, and the slow reader takes over.
_SUB_RE = re.compile(rb'"sub_scores"\s*:\s*(\{[^{}]*\}|null)')
_SUB_RE_COMPACT = re.compile(rb'"sub_scores":(\{[^{}]*\}|null)')  # as rfteval writes it: tried first, the faster match
_HAS_SUB_RE = re.compile(rb'"sub_scores"\s*:\s*\{')


def read_record_frame(path: Path) -> pd.DataFrame:
    """The columns compare needs from a record file: model_label, item_id, epoch, score, error_*, sub:<key>.

    JSONL goes through pyarrow's JSON reader with an explicit schema (other fields, whatever their shape,
    are ignored); sub-scores are found with a regex and parsed by the same reader. Anything unexpected
    (integer ids, a missing field, invalid JSON) falls back to a line-by-line reader that names the line.
    """
    if path.suffix == ".parquet":
        return _read_parquet(path)
    fast = _read_jsonl_fast(path)
    return fast if fast is not None else _read_jsonl_slow(path)


def _arrow_frame(table: pa.Table, subs: pa.Table | None) -> pd.DataFrame:
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
    frame = pd.DataFrame(data)
    if subs is not None and subs.num_rows:
        s = subs.column("s").combine_chunks()
        if pa.types.is_struct(s.type):
            for i in range(s.type.num_fields):
                name = s.type.field(i).name
                frame[SUB + name] = pc.struct_field(s, name).cast(pa.float64()).to_numpy(zero_copy_only=False)
    return frame


def _read_jsonl_fast(path: Path) -> pd.DataFrame | None:
    import pyarrow as pa
    import pyarrow.json as pj

    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read ({exc.strerror})", path) from None
    if data.startswith(b"\xef\xbb\xbf") or b"\r" in data[:4096]:
        return None
    schema = pa.schema([("model_label", pa.string()), ("item_id", pa.string()), ("epoch", pa.int64()),
                        ("score", pa.float64()), ("passed", pa.bool_()), ("truncated_in_reasoning", pa.bool_()),
                        ("error", pa.struct([("stage", pa.string()), ("type", pa.string()), ("message", pa.string())]))])
    opts = pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
    try:
        table = pj.read_json(pa.BufferReader(pa.py_buffer(data)), parse_options=opts,
                             read_options=pj.ReadOptions(block_size=8 << 20))
        subs = None
        if b'"sub_scores"' in data:
            found = _SUB_RE_COMPACT.findall(data)
            if len(found) != table.num_rows:
                found = _SUB_RE.findall(data)
            if len(found) != table.num_rows:
                return None  # a line without the key, a nested key or a value of the wrong shape
            if _HAS_SUB_RE.search(data):
                subs = pj.read_json(pa.BufferReader(pa.py_buffer(b'{"s":' + b'}\n{"s":'.join(found) + b"}")),
                                    read_options=pj.ReadOptions(block_size=8 << 20))
        del data
        if table.num_rows == 0:
            return None
        frame = _arrow_frame(table, subs)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return None  # e.g. integer ids or a text sub-score: the line-by-line reader handles or names it
    if (frame["item_id"].isna().any() or (frame["item_id"] == "").any()
            or (frame["score"].isna() & ~frame["error_present"]).any()):
        return None  # let the line-by-line reader name the bad line
    return frame


def _check_number(value: object, path: Path, line: int, name: str, *, allow_null: bool) -> float | None:
    if value is None and allow_null:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise InputError(f"must be a finite number, got {json.dumps(value)[:40]}", path, line, name)
    return float(value)


def _frame_from_dicts(rows: Sequence[tuple[int, Mapping[str, object]]] | Sequence[Mapping[str, object]], path: Path,
                      validate: bool = True) -> pd.DataFrame:
    import pandas as pd

    out: dict[str, list[object]] = {k: [] for k in ("model_label", "item_id", "epoch", "score", "error_stage",
                                                 "error_type", "error_message", "error_present", "passed",
                                                 "truncated_in_reasoning")}
    subs: list[dict[str, float | None] | None] = []
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
        if score is None and error is None:
            raise InputError("null without an error: the record was never graded", path, line, "score")
        score = _check_number(score, path, line, "score", allow_null=error is not None)
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
    frame = pd.DataFrame(out)
    keys = sorted({k for s in subs if s for k in s})
    for key in keys:
        frame[SUB + key] = [float("nan") if not s or s.get(key) is None else s[key] for s in subs]
    return frame


def _read_jsonl_slow(path: Path) -> pd.DataFrame:
    from rfteval.data.records import iter_jsonl_record_lines

    rows = list(iter_jsonl_record_lines(path))
    if not rows:
        raise InputError("no records", path)
    return _frame_from_dicts(rows, path)


def _read_parquet(path: Path) -> pd.DataFrame:
    import pyarrow as pa
    import pyarrow.compute as pc

    from rfteval.data.records import read_parquet_records

    table = read_parquet_records(path, columns=_NEEDED)
    for key in ("item_id", "score"):
        if key not in table.column_names:
            raise InputError("missing column; not a record file?", path, field=key)
    subs = None
    if "sub_scores" in table.column_names:
        m = table.column("sub_scores").combine_chunks()
        if pa.types.is_map(m.type) and m.null_count < len(m):
            keys = pc.unique(m.keys).to_pylist()
            import numpy as np

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
            subs = pa.table({"s": pa.StructArray.from_arrays(list(fields.values()), list(fields.keys()))})
    try:
        table = table.set_column(table.column_names.index("item_id"), "item_id",
                                 table.column("item_id").cast(pa.string()))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise InputError(f"item_id column is not text ({exc})", path, field="item_id") from None
    frame = _arrow_frame(table, subs)
    bad = frame.index[frame["item_id"].isna() | (frame["score"].isna() & ~frame["error_present"])]
    if len(bad):
        field_name = "item_id" if frame["item_id"].isna().iloc[bad[0]] else "score"
        raise InputError(f"null in row {bad[0] + 1} ({len(bad)} bad rows)", path, field=field_name)
    return frame




def load_sides(*sides: tuple[str | Path, str | None]) -> list[Side]:
    """Several sides read on threads: one side's single-threaded steps (regex, pandas) overlap the other's
    multi-threaded JSON parse. The first side's error wins, as if they were read in order."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=len(sides)) as pool:
        futures = [pool.submit(load_side, path, label) for path, label in sides]
        return [f.result() for f in futures]
