"""The record contract: one result per (model, item, epoch), as a JSON line and as a Parquet row.

Every command writes and reads records through this module, so the contract lives in one place.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rfteval.errors import InputError

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

    from rfteval.graders.base import GradeResult

# The record's fields, in order (README "The run directory"); extra fields follow them.
CORE_FIELDS = (
    "run_id", "model_label", "model", "item_id", "epoch", "output_text", "output_json", "score", "sub_scores",
    "error", "usage", "latency_s", "cached", "finished_at",
)


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


REFUSAL = "refusal"  # the provider's error type for a model that refused (rfteval.providers.base)


def is_generation_failure(error: Any) -> bool:
    """The one error policy: a record whose model never answered (the endpoint failed after every retry).

    It is not an answer, so it is left out of means (and counted); a refusal is an answer, and a grading error is
    OpenAI's reward 0, so both score 0. compare, readiness and summary.json all follow this.
    """
    return isinstance(error, dict) and error.get("stage") == "generate" and error.get("type") != REFUSAL


def error_dict(stage: str, type: str, message: str) -> dict[str, str]:
    return {"stage": stage, "type": type, "message": message}


def make_record(
    *, run_id: str, model_label: str, model: str, item_id: str, epoch: int, output_text: str | None,
    output_json: Any = None, output_tools: list[Any] | None = None, usage: dict[str, int | None] | None = None,
    latency_s: float | None = None, cached: bool = False, error: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A record before grading: score None until a grade is applied."""
    return {
        "run_id": run_id, "model_label": model_label, "model": model, "item_id": item_id, "epoch": int(epoch),
        "output_text": output_text, "output_json": output_json, "score": None, "sub_scores": None,
        "error": error, "usage": usage or {"input_tokens": None, "output_tokens": None, "reasoning_tokens": None},
        "latency_s": latency_s, "cached": cached, "finished_at": now_iso(),
        "passed": None, "output_tools": output_tools or None, "grader_stdout": None, "grade_details": None,
        "advantage": None,
    }


def apply_grade(record: dict[str, Any], result: GradeResult) -> dict[str, Any]:
    """Fill a record's grade fields; a generation error stays the record's error (score 0)."""
    if record.get("error") and record["error"].get("stage") == "generate":
        record["score"] = 0.0
        return record
    record["score"] = float(result.score)
    record["sub_scores"] = result.sub_scores
    record["passed"] = result.passed
    record["grader_stdout"] = result.stdout or None
    record["grade_details"] = result.details
    record["error"] = error_dict("grade", result.error.type, result.error.message) if result.error else None
    record["finished_at"] = now_iso()
    return record


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def dumps_record(record: dict[str, Any]) -> str:
    ordered = {k: record.get(k) for k in CORE_FIELDS}
    for k, v in record.items():
        if k not in ordered:
            ordered[k] = v
    ordered["score"] = _jsonable(ordered["score"])
    return json.dumps(ordered, ensure_ascii=False, separators=(",", ":"), allow_nan=False, default=str)


def write_jsonl(records: Iterable[dict[str, Any]], path: str | Path) -> int:
    """Write records atomically (temp file, then rename): never a half-written result."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    n = 0
    with open(tmp, "w", encoding="utf-8") as fh:
        for rec in records:
            fh.write(dumps_record(rec) + "\n")
            n += 1
    tmp.replace(path)
    return n


def iter_jsonl_records(path: str | Path) -> Iterator[dict[str, Any]]:
    from rfteval.dataset import iter_jsonl

    path = Path(path)
    for lineno, row in iter_jsonl(path):
        if isinstance(row, InputError):
            raise row
        if not isinstance(row, dict):
            raise InputError("expected a JSON object (a record)", path, lineno)
        for key in ("item_id", "score"):
            if key not in row:
                raise InputError("missing; not a record file?", path, lineno, key)
        yield row


def arrow_schema() -> pa.Schema:
    """Parquet schema of a record. output_json and grade_details are JSON text (their shape is free)."""
    import pyarrow as pa

    return pa.schema([
        ("run_id", pa.string()), ("model_label", pa.string()), ("model", pa.string()), ("item_id", pa.string()),
        ("epoch", pa.int64()), ("output_text", pa.string()), ("output_json", pa.string()), ("score", pa.float64()),
        ("sub_scores", pa.map_(pa.string(), pa.float64())),
        ("error", pa.struct([("stage", pa.string()), ("type", pa.string()), ("message", pa.string())])),
        ("usage", pa.struct([("input_tokens", pa.int64()), ("output_tokens", pa.int64()),
                             ("reasoning_tokens", pa.int64())])),
        ("latency_s", pa.float64()), ("cached", pa.bool_()), ("finished_at", pa.string()),
        ("passed", pa.bool_()), ("output_tools", pa.string()), ("grader_stdout", pa.string()),
        ("grade_details", pa.string()), ("advantage", pa.float64()),
    ])


_JSON_TEXT_COLUMNS = ("output_json", "output_tools", "grade_details")


def to_arrow(records: Iterable[dict[str, Any]]) -> pa.Table:
    import pyarrow as pa

    schema = arrow_schema()
    rows = []
    for rec in records:
        row = {name: rec.get(name) for name in schema.names}
        for col in _JSON_TEXT_COLUMNS:
            if row[col] is not None:
                row[col] = json.dumps(row[col], ensure_ascii=False)
        if row["sub_scores"] is not None:
            row["sub_scores"] = list(row["sub_scores"].items())
        row["item_id"] = str(row["item_id"])
        rows.append(row)
    return pa.Table.from_pylist(rows, schema=schema)


def write_parquet(records: Iterable[dict[str, Any]], path: str | Path) -> None:
    import pyarrow.parquet as pq

    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    pq.write_table(to_arrow(records), tmp)
    tmp.replace(path)


def read_records(path: str | Path) -> pd.DataFrame:
    """Any record file (JSONL or Parquet) as a DataFrame, one row per record."""
    import pandas as pd

    path = Path(path)
    if not path.exists():
        raise InputError("no such file", path)
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        try:
            return pq.read_table(path).to_pandas()
        except Exception as exc:  # noqa: BLE001 - any unreadable Parquet is bad input
            raise InputError(f"not a readable Parquet file ({exc})", path) from None
    return pd.DataFrame.from_records(list(iter_jsonl_records(path)))


def json_safe(value: Any) -> Any:
    """A value strict JSON takes: NaN and infinity become null (strict parsers refuse NaN), numpy scalars plain
    numbers, tuples lists, keys strings."""
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
