"""The record contract: one result per (model, item, epoch), as a JSON line and as a Parquet row.

`Record` is the one definition of a record: its fields, their order in a JSON line and their types. The Arrow
(Parquet) schema is derived from it, so the two files cannot drift apart. Writers build `Record`s; readers see
record files as DataFrames (compare, readiness) or, when a file is rewritten, decode them back into `Record`s.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict, overload

import msgspec

from rfteval.data.json_types import JSONField
from rfteval.data.outfile import replace_atomically
from rfteval.errors import InputError

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

    from rfteval.data.json_types import JSONObject, JSONValue

# The public names (what `from ... import *` and the alias package in rfteval/ hand on)
__all__ = [
    "now_iso", "RecordError", "Usage", "no_usage", "Record", "FIELDS", "CORE_FIELDS", "AGENT_FIELDS", "REFUSAL",
    "is_agent_record", "is_generation_failure", "generation_failures", "error_type_of", "error_kinds", "error_flags",
    "effective_scores",
    "ERROR_POLICIES", "check_error_policy", "error_dict", "make_record", "dumps_record", "write_jsonl",
    "iter_jsonl_record_lines", "iter_jsonl_records", "decode_records", "JSON_TEXT_FIELDS", "arrow_schema",
    "to_arrow", "write_parquet", "records_frame", "RecordRows", "read_record_rows", "read_records",
    "read_parquet_records", "iter_jsonl_fields", "iter_parquet_records", "json_safe",
    "RANGE_LOOKS", "details_field", "recorded_score_range", "frame_range",
]


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class RecordError(TypedDict):
    """Why a record has no real score: the stage that failed (generate or grade), a type and a message."""

    stage: str
    type: str
    message: str


class Usage(TypedDict):
    input_tokens: int | None
    output_tokens: int | None
    reasoning_tokens: int | None


def no_usage() -> Usage:
    return {"input_tokens": None, "output_tokens": None, "reasoning_tokens": None}


class Record(msgspec.Struct, kw_only=True):
    """One result. The first fourteen fields are the README's contract ("The run directory"); the rest follow.

    output_json, output_tools and grade_details have a free shape: they are JSON values in a line and JSON text in
    Parquet. Error and usage stay plain dicts (TypedDicts) so record files read back as DataFrames look the same.
    """

    run_id: str
    model_label: str
    model: str
    item_id: str
    epoch: int
    output_text: str | None = None
    output_json: JSONField = None
    score: float | None = None  # None until graded
    sub_scores: dict[str, float] | None = None
    error: RecordError | None = None
    usage: Usage = msgspec.field(default_factory=no_usage)
    latency_s: float | None = None
    cached: bool = False
    finished_at: str = msgspec.field(default_factory=now_iso)
    passed: bool | None = None
    output_tools: list[JSONField] | None = None
    grader_stdout: str | None = None
    grade_details: JSONField = None
    advantage: float | None = None  # a GRPO advantage, written by `readiness --write-advantages`
    reasoning_text: str | None = None  # a reasoning model's thinking, apart from output_text (rfteval.data.reasoning)
    truncated_in_reasoning: bool = False  # the output limit stopped it while still thinking: graded as no answer
    # An agent run's (rfteval run --tools, rfteval.run.rollout) only: unset (UNSET), they are not written at all, so
    # a run without tools writes exactly the lines and the Parquet schema it always did. `transcript` is the
    # rollout's generated messages as JSON text, a string in Parquet too: compare never decodes it.
    turns: int | None | msgspec.UnsetType = msgspec.UNSET  # model turns
    stop_reason: str | None | msgspec.UnsetType = msgspec.UNSET  # rfteval.data.rollout.STOP_REASONS
    tool_calls: int | None | msgspec.UnsetType = msgspec.UNSET  # calls the model made
    tool_errors: dict[str, int] | None | msgspec.UnsetType = msgspec.UNSET  # failed calls by the error's type
    transcript: str | None | msgspec.UnsetType = msgspec.UNSET


AGENT_FIELDS: tuple[str, ...] = ("turns", "stop_reason", "tool_calls", "tool_errors", "transcript")
FIELDS: tuple[str, ...] = tuple(f for f in Record.__struct_fields__ if f not in AGENT_FIELDS)  # every record's
CORE_FIELDS = FIELDS[:14]  # the README's list, in order


def is_agent_record(record: Record) -> bool:
    """Whether a record is an agent run's (its agent fields set)."""
    return record.turns is not msgspec.UNSET


REFUSAL = "refusal"  # the provider's error type for a model that refused (rfteval.providers.base)


def is_generation_failure(error: object) -> bool:
    """The one error policy: a record whose model never answered (the endpoint failed after every retry).

    It is not an answer, so it is left out of means (and counted); a refusal is an answer, and a grading error is
    OpenAI's reward 0, so both score 0. compare, readiness and summary.json all follow this.
    """
    return isinstance(error, dict) and error.get("stage") == "generate" and error.get("type") != REFUSAL


def generation_failures(stage: pd.Series, type_: pd.Series) -> pd.Series:
    """`is_generation_failure` column-wise, over a frame's error stage and type columns (compare's sides)."""
    return (stage == "generate") & (type_ != REFUSAL)


def error_type_of(error: object) -> str | None:
    """The type of a record's error (a dict in a line, a row of a frame), None for no error."""
    if isinstance(error, Mapping):
        kind = error.get("type")
        return kind if isinstance(kind, str) else None
    return None


def _error_kind(error: object) -> str | None:
    if is_generation_failure(error):
        return "generate"
    if not isinstance(error, Mapping):
        return None
    # an error without a stage is a grading error (what records written before the field meant)
    return "refusal" if (error.get("stage") or "grade") == "generate" else str(error.get("stage") or "grade")


def error_kinds(df: pd.DataFrame) -> pd.Series:
    """Per row of a record frame: None, "grade", "refusal" (the model refused: a generation error of type
    refusal) or "generate" (a generation failure, `is_generation_failure`)."""
    import pandas as pd

    if "error" not in df:
        return pd.Series(None, df.index, dtype=object)
    return df["error"].map(_error_kind)


def error_flags(df: pd.DataFrame) -> tuple[pd.Series, pd.Series]:
    """Per row of a record frame: (any error, a generation failure). A normalised frame (rfteval.data.frame) carries
    both, set as it was read; a frame of records as written (read_records, records_frame) has them from its errors."""
    if "is_error" in df and "is_generation_failure" in df:
        return df["is_error"].astype(bool), df["is_generation_failure"].astype(bool)
    kinds = error_kinds(df)
    return kinds.notna(), kinds == "generate"


def effective_scores(df: pd.DataFrame, errors: str = "exclude", exclude_errors: bool = False) -> pd.Series:
    """The score of each row of a record frame under the one error policy; NaN for rows left out of means.

    A grading error scores 0 whatever score it carries, and so does a model refusal (OpenAI's rule: a failed grade
    is reward 0). A generation failure (the endpoint failed after its retries) is not an answer: `errors="exclude"`
    leaves it out (it is counted apart), `errors="zero"` scores it 0 too. A row with no score and no error was never
    graded and is left out. `rfteval grade`'s summaries, readiness and compare's sides all follow this.

    `exclude_errors` leaves every error record out, grading errors and refusals too (compare's --exclude-errors):
    what `rfteval agree` does by default, where the grade itself is what is measured and a failed grade is no grade.
    """
    import pandas as pd

    check_error_policy(errors)
    score = (pd.to_numeric(df["score"], errors="coerce").astype("float64") if "score" in df
             else pd.Series(float("nan"), df.index, dtype="float64"))
    is_error, failed = error_flags(df)
    if exclude_errors:
        return score.mask(is_error, float("nan"))
    score = score.mask(is_error if errors == "zero" else is_error & ~failed, 0.0)
    return score.mask(failed, float("nan")) if errors == "exclude" else score


# What a generation failure counts as: "exclude" leaves it out of every mean (and counts it), "zero" scores it 0.
# Grading errors and refusals score 0 under both (OpenAI's rule).
ERROR_POLICIES = ("exclude", "zero")


def check_error_policy(errors: str) -> str:
    """--errors, validated in one place for compare, readiness and their commands."""
    if errors not in ERROR_POLICIES:
        raise InputError(f"must be {' or '.join(ERROR_POLICIES)}, got {errors!r}", field="--errors")
    return errors


def error_dict(stage: str, type: str, message: str) -> RecordError:
    return {"stage": stage, "type": type, "message": message}


def make_record(
    *, run_id: str, model_label: str, model: str, item_id: str, epoch: int, output_text: str | None,
    output_json: JSONValue = None, output_tools: list[JSONValue] | None = None,
    usage: Usage | Mapping[str, int | None] | None = None,
    latency_s: float | None = None, cached: bool = False, error: RecordError | None = None,
    reasoning_text: str | None = None, truncated_in_reasoning: bool = False,
) -> Record:
    """A record before grading: score None until a grade is applied."""
    return Record(
        run_id=run_id, model_label=model_label, model=model, item_id=str(item_id), epoch=int(epoch),
        output_text=output_text, output_json=output_json, error=error,
        usage=usage or no_usage(),  # type: ignore[arg-type]  # a provider's usage dict has these keys
        latency_s=latency_s, cached=cached, output_tools=output_tools or None,
        reasoning_text=reasoning_text, truncated_in_reasoning=truncated_in_reasoning,
    )


def _enc_hook(value: object) -> object:
    """Values a grader may leave in its details that JSON has no word for: numpy scalars become numbers, the rest
    their text (as json.dumps(default=str) did)."""
    item = getattr(value, "item", None)
    if item is not None and not isinstance(value, (str, bytes)):
        return item()
    return str(value)


_ENCODER = msgspec.json.Encoder(enc_hook=_enc_hook)


def dumps_record(record: Record) -> str:
    """One JSON line, fields in the contract's order; NaN and infinity are null (strict parsers refuse them)."""
    return _ENCODER.encode(record).decode()


def write_jsonl(records: Iterable[Record], path: str | Path) -> int:
    """Write records atomically (temp file, then rename): never a half-written result."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    n = 0

    def write(tmp: Path) -> None:
        nonlocal n
        with open(tmp, "wb") as fh:
            for rec in records:
                fh.write(_ENCODER.encode(rec) + b"\n")
                n += 1

    replace_atomically(path, write)
    return n


def iter_jsonl_record_lines(path: str | Path) -> Iterator[tuple[int, JSONObject]]:
    """(line number, record) of each line of a JSONL record file: the one check of what a record line must be
    (read_records here, compare's sides when its fast reader gives up)."""
    from rfteval.data.dataset import iter_jsonl

    path = Path(path)
    for lineno, row in iter_jsonl(path):
        if isinstance(row, InputError):
            raise row
        if not isinstance(row, dict):
            raise InputError("expected a JSON object (a record)", path, lineno)
        for key in ("item_id", "score"):
            if key not in row:
                raise InputError("missing; not a record file?", path, lineno, key)
        yield lineno, row


def iter_jsonl_records(path: str | Path) -> Iterator[JSONObject]:
    return (row for _, row in iter_jsonl_record_lines(path))


def decode_records(path: str | Path) -> Iterator[Record]:
    """A record file's lines as `Record`s, for rewriting it; a line that is not a record is bad input."""
    path = Path(path)
    decoder = msgspec.json.Decoder(Record)
    with open(path, "rb") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                yield decoder.decode(line)
            except msgspec.ValidationError as exc:
                where, _, field = str(exc).rpartition(" - at `$.")
                raise InputError(where or str(exc), path, lineno, field.rstrip("`") or None) from None
            except msgspec.DecodeError as exc:
                raise InputError(f"not JSON ({exc})", path, lineno) from None


def _arrow_type(info: msgspec.inspect.Type) -> pa.DataType:
    """The Arrow type of one field: free-shaped values (Any, lists) are JSON text; optional is nullable."""
    import pyarrow as pa

    mi = msgspec.inspect
    if isinstance(info, mi.UnionType):
        (inner,) = [t for t in info.types if not isinstance(t, mi.NoneType)]
        return _arrow_type(inner)
    if isinstance(info, mi.StrType):
        return pa.string()
    if isinstance(info, mi.BoolType):
        return pa.bool_()
    if isinstance(info, mi.IntType):
        return pa.int64()
    if isinstance(info, mi.FloatType):
        return pa.float64()
    if isinstance(info, mi.DictType):
        return pa.map_(_arrow_type(info.key_type), _arrow_type(info.value_type))
    if isinstance(info, mi.TypedDictType):  # msgspec lists its keys sorted; the class declares their order
        by_name = {f.name: f for f in info.fields}
        return pa.struct([(name, _arrow_type(by_name[name].type)) for name in info.cls.__annotations__])
    if isinstance(info, (mi.AnyType, mi.ListType)):
        return pa.string()
    raise TypeError(f"no Arrow type for {info!r}")  # a new Record field needs a mapping here


@functools.cache
def _record_fields() -> tuple[msgspec.inspect.Field, ...]:
    info = msgspec.inspect.type_info(Record)
    assert isinstance(info, msgspec.inspect.StructType)
    return info.fields


# Fields whose shape is free: stored as JSON text in Parquet.
JSON_TEXT_FIELDS = tuple(
    f.name for f in _record_fields()
    if isinstance(f.type, msgspec.inspect.AnyType)
    or (isinstance(f.type, msgspec.inspect.UnionType)
        and any(isinstance(t, msgspec.inspect.ListType) for t in f.type.types))
)


@functools.cache
def arrow_schema(agent: bool = False) -> pa.Schema:
    """The Parquet schema of a record, derived from `Record`: same fields, same order (built once: the result
    files ask for it with every batch of rows they write). `agent`: an agent run's, its fields after the others."""
    import pyarrow as pa

    return pa.schema([(f.name, _arrow_type(f.type)) for f in _record_fields() if agent or f.name not in AGENT_FIELDS])


def _json_text(value: object) -> str | None:
    return None if value is None else _ENCODER.encode(value).decode()


def to_arrow(records: Iterable[Record], agent: bool | None = None) -> pa.Table:
    """Records as an Arrow table of the record schema; `agent` (None: whether any record is an agent run's) adds
    the agent fields' columns."""
    import pyarrow as pa

    rows = list(records)
    if agent is None:
        agent = any(is_agent_record(r) for r in rows)
    columns: dict[str, list[object]] = {name: [getattr(r, name) for r in rows] for name in FIELDS}
    if agent:
        columns.update({name: [_set(getattr(r, name)) for r in rows] for name in AGENT_FIELDS})
    for name in JSON_TEXT_FIELDS:
        columns[name] = [_json_text(v) for v in columns[name]]
    columns["sub_scores"] = [None if r.sub_scores is None else list(r.sub_scores.items()) for r in rows]
    columns["score"] = [None if r.score is None or not math.isfinite(r.score) else r.score for r in rows]
    if agent:
        columns["tool_errors"] = [list(v.items()) if isinstance(v, dict) else None for v in columns["tool_errors"]]
    return pa.Table.from_pydict(columns, schema=arrow_schema(agent))


def _set(value: object) -> object:
    """A field's value, None where it is unset (an agent field of a record that is not an agent run's)."""
    return None if value is msgspec.UNSET else value


def write_parquet(records: Iterable[Record], path: str | Path) -> None:
    import pyarrow.parquet as pq

    table = to_arrow(records)
    replace_atomically(path, lambda tmp: pq.write_table(table, tmp))


def records_frame(records: Iterable[Record]) -> pd.DataFrame:
    """Records in memory as the DataFrame `read_records` gives for a file of them: one row per record (an agent
    run's with its agent fields' columns)."""
    import pandas as pd

    rows = [msgspec.structs.asdict(r) for r in records]
    if not any(row["turns"] is not msgspec.UNSET for row in rows):
        return pd.DataFrame.from_records(rows, columns=list(FIELDS))
    names = FIELDS + AGENT_FIELDS
    return pd.DataFrame.from_records([{k: _set(row[k]) for k in names} for row in rows], columns=list(names))


class RecordRows:
    """A record file's records read once, as written: a JSONL file's (line number, record) pairs, or a Parquet
    file's table. Whoever needs them in another shape takes it from here rather than reading the file again
    (compare --html: the normalised frame, the sampling check, readiness and the listed samples of the baseline)."""

    def __init__(self, path: Path, lines: list[tuple[int, JSONObject]] | None = None,
                 table: pa.Table | None = None) -> None:
        self.path = path
        self.lines = lines
        self.table = table

    def __len__(self) -> int:
        return self.table.num_rows if self.table is not None else len(self.lines or ())

    def frame(self) -> pd.DataFrame:
        """The records as read_records gives them: one row per record, every field the file has."""
        import pandas as pd

        if self.table is not None:
            return self.table.to_pandas()
        return pd.DataFrame.from_records([row for _, row in self.lines or ()])

    def dicts(self) -> list[JSONObject]:
        """The records as dicts, in file order (a Parquet file's as its rows read: JSON fields as text)."""
        if self.table is not None:
            return self.table.to_pylist()
        return [row for _, row in self.lines or ()]


def read_record_rows(path: str | Path) -> RecordRows:
    """A record file's records, read once: each JSON line checked to be a record (iter_jsonl_record_lines), or
    the Parquet file's every column (read_parquet_records)."""
    path = Path(path)
    if not path.exists():
        raise InputError("no such file", path)
    if path.suffix == ".parquet":
        return RecordRows(path, table=read_parquet_records(path))
    return RecordRows(path, lines=list(iter_jsonl_record_lines(path)))


def read_records(path: str | Path, columns: Sequence[str] | None = None) -> pd.DataFrame:
    """Any record file (JSONL or Parquet) as a DataFrame of the records as written, one row per record; `columns`
    keeps only those (a Parquet file reads only them; each JSON line is cut to them as it is parsed, so the texts
    are never all held at once). The normalised frame compare and a run's summary read is rfteval.data.frame's."""
    import pandas as pd

    path = Path(path)
    if not path.exists():
        raise InputError("no such file", path)
    if columns is None:
        return read_record_rows(path).frame()
    if path.suffix == ".parquet":
        return read_parquet_records(path, columns).to_pandas()
    return pd.DataFrame.from_records([{c: r[c] for c in columns if c in r} for r in iter_jsonl_records(path)])


def read_parquet_records(path: str | Path, columns: Sequence[str] | None = None) -> pa.Table:
    """A Parquet record file as an Arrow table: the one Parquet reader (read_records, compare's sides, readiness's
    advantages). `columns` reads only those of them the file has (a file written before a field lacks it)."""
    import pyarrow.parquet as pq

    try:
        if columns is not None:
            names = set(pq.read_schema(path).names)
            columns = [c for c in columns if c in names]
        return pq.read_table(path, columns=columns)
    except Exception as exc:  # noqa: BLE001 - any unreadable Parquet is bad input
        raise InputError(f"not a readable Parquet file ({exc})", path) from None


def iter_jsonl_fields(path: str | Path, fields: type[msgspec.Struct]) -> Iterator[msgspec.Struct]:
    """Each non-blank line of a JSONL record file decoded into `fields`, a Struct of the few fields a reader needs:
    the others are skipped unparsed, so a check that reads three fields of every record costs a fraction of a full
    parse (rfteval.data.sampling_check). Raises msgspec's errors (or OSError) on a line or file it cannot read."""
    decoder = msgspec.json.Decoder(fields)
    with open(path, "rb") as fh:
        for line in fh:
            if line.strip():
                yield decoder.decode(line)


def iter_parquet_records(path: str | Path, columns: Sequence[str], batch_size: int = 1024) -> Iterator[JSONObject]:
    """A Parquet record file's rows as dicts, `columns` only (those the file has), a batch at a time: the texts of
    a large file are never all held at once. Raises InputError on a file that is not readable Parquet."""
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(path)
        names = [c for c in columns if c in pf.schema_arrow.names]
        batches = pf.iter_batches(batch_size=batch_size, columns=names)
        for batch in batches:
            yield from batch.to_pylist()
    except InputError:
        raise
    except Exception as exc:  # noqa: BLE001 - any unreadable Parquet is bad input
        raise InputError(f"not a readable Parquet file ({exc})", path) from None


@overload
def json_safe(value: Mapping[str, object]) -> JSONObject: ...


@overload
def json_safe(value: object) -> JSONValue: ...


def json_safe(value: object) -> JSONValue:
    """A value strict JSON takes: NaN and infinity become null (strict parsers refuse NaN), numpy scalars plain
    numbers, tuples lists, keys strings; anything else JSON has no word for, its text (as json.dumps(default=str)
    writes it)."""
    if isinstance(value, Mapping):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    item = getattr(value, "item", None)  # a numpy scalar
    if callable(item) and not isinstance(value, (str, bytes)):
        value = item()
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if value is None or isinstance(value, (bool, int, str)):
        return value
    return str(value)


RANGE_LOOKS = 50  # records looked at for a recorded range before giving up (a judge error has no details)


def details_field(details: object, key: str) -> object:
    """One field of a record's grade_details, from a dict (JSONL) or JSON text (Parquet); None without it."""
    if isinstance(details, str):
        try:
            details = json.loads(details)
        except ValueError:
            return None
    return details.get(key) if isinstance(details, dict) else None


def recorded_score_range(details: object) -> tuple[float, float] | None:
    """A record's grade_details.score_range as (low, high): the grader's range, which a score_model writes on each
    record so record files read without their run directory keep it (compare, readiness, agree). None otherwise."""
    value = details_field(details, "score_range")
    if (isinstance(value, list) and len(value) == 2 and all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                                            and math.isfinite(v) for v in value)
            and value[0] < value[1]):
        return float(value[0]), float(value[1])
    return None


def frame_range(frame: pd.DataFrame) -> tuple[float, float] | None:
    """The score range the grader wrote on records held in memory (a frame with grade_details)."""
    if "grade_details" not in frame:
        return None
    for value in frame["grade_details"].head(RANGE_LOOKS).tolist():
        found = recorded_score_range(value)
        if found is not None:
            return found
    return None
