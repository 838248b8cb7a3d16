"""Paired comparison of two models' records: load each side, pair items, slice, and apply the CI gate.

Library first: `compare_paths` is what `rfteval compare` calls; `compare_sides` takes records already in
memory (the run command's base → tuned table). Reports render a `CompareResult`; nothing here prints.
"""

from __future__ import annotations

import json
import math
import numbers
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rfteval import stats
from rfteval.errors import InputError

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd
    import pyarrow as pa

SUB = "sub:"  # prefix of per-record sub-score columns in a side's frame
HARDEST = "hardest"
MISSING = "(missing)"
NOT_IN_DATASET = "(not in dataset)"
GATE_EPS = 1e-12  # a value equal to a threshold (up to float rounding) passes


# ---------------------------------------------------------------------------------------------- options


@dataclass(frozen=True)
class Gate:
    """The CI gate; None / False leaves a check off."""

    fail_under: float | None = None
    max_drop: float | None = None
    require_improvement: bool = False
    max_item_drop: float | None = None

    @property
    def active(self) -> bool:
        return (self.fail_under is not None or self.max_drop is not None or self.require_improvement
                or self.max_item_drop is not None)


@dataclass(frozen=True)
class CompareOptions:
    tie: float = 1e-9
    level: float = 0.95
    ci_method: str = "t"  # or "bootstrap"
    seed: int = 0
    exclude_errors: bool = False
    strict: bool = False
    by: tuple[str, ...] = ()
    gate: Gate = field(default_factory=Gate)


# ---------------------------------------------------------------------------------------------- sides


@dataclass
class Side:
    """One model's records, normalised: item_id, epoch, score, error_* and sub:<key> columns."""

    label: str
    path: str
    frame: pd.DataFrame
    duplicates: int = 0


def _resolve(path: Path, label: str | None) -> tuple[Path, bool]:
    """The record file for a side, and whether it was chosen by label (DIR/<label>.jsonl)."""
    if not path.exists():
        raise InputError("no such file or directory", path)
    if path.is_file():
        return path, False
    if label is not None:
        candidate = path / f"{label}.jsonl"
        if candidate.is_file():
            return candidate, True
        if (path / "results.parquet").is_file():
            return path / "results.parquet", False
        found = sorted(p.stem for p in path.glob("*.jsonl"))
        raise InputError(f"no records for label {label!r} (labels here: {', '.join(found) or 'none'})", path,
                         field="--label")
    jsonl = sorted(path.glob("*.jsonl"))
    if len(jsonl) == 1:
        return jsonl[0], False
    if not jsonl and (path / "results.parquet").is_file():
        return path / "results.parquet", False
    if not jsonl:
        raise InputError("no record files (*.jsonl or results.parquet) in this directory", path)
    names = ", ".join(p.stem for p in jsonl)
    raise InputError(f"holds several models ({names}); name one with --label", path, field="--label")


def load_side(path: str | Path, label: str | None = None) -> Side:
    """A side from a record file (JSONL or Parquet) or a run directory, filtered to `label` when given."""
    path = Path(path)
    file, by_label = _resolve(path, label)
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
    return _normalise(frame.reset_index(drop=True), name, str(file))


def side_from_records(records: pd.DataFrame | Sequence[dict[str, Any]], label: str, path: str = "") -> Side:
    """A side from records in memory (dicts, or a frame from rfteval.records.read_records)."""
    import pandas as pd

    rows = records.to_dict("records") if isinstance(records, pd.DataFrame) else list(records)
    return _normalise(_frame_from_dicts(rows, Path(path or label), validate=False), label, path)


def _normalise(frame: pd.DataFrame, label: str, path: str) -> Side:
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
    frame["score"] = np.where(frame["is_error"], 0.0, frame["score"].to_numpy(dtype=np.float64))
    return Side(label, path, frame, before - len(frame))


# ---------------------------------------------------------------------------------------------- reading

_NEEDED = ("model_label", "item_id", "epoch", "score", "error", "sub_scores")
# Inside a JSON string every quote is escaped, so `"sub_scores"` followed by a colon is always a key. A nested
# one (say in grade_details) makes the count differ from the row count, and the slow reader takes over.
_SUB_RE = re.compile(rb'"sub_scores"\s*:\s*(\{[^{}]*\}|null)')
_SUB_RE_COMPACT = re.compile(rb'"sub_scores":(\{[^{}]*\}|null)')  # as rfteval writes it: 20% faster
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
    data: dict[str, Any] = {
        "model_label": col("model_label", pa.string()).to_pandas(),
        "item_id": col("item_id", pa.string()).to_pandas(),
        "epoch": pc.cast(col("epoch", pa.int64()), pa.float64()).to_numpy(zero_copy_only=False),  # null -> NaN
        "score": col("score", pa.float64()).to_numpy(zero_copy_only=False),
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
                        ("score", pa.float64()),
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


def _check_number(value: Any, path: Path, line: int, name: str, *, allow_null: bool) -> float | None:
    if value is None and allow_null:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise InputError(f"must be a finite number, got {json.dumps(value)[:40]}", path, line, name)
    return float(value)


def _frame_from_dicts(rows: Sequence[tuple[int, dict[str, Any]]] | Sequence[dict[str, Any]], path: Path,
                      validate: bool = True) -> pd.DataFrame:
    import pandas as pd

    out: dict[str, list[Any]] = {k: [] for k in ("model_label", "item_id", "epoch", "score", "error_stage",
                                                 "error_type", "error_message", "error_present")}
    subs: list[dict[str, Any] | None] = []
    for pos, entry in enumerate(rows):
        line, row = entry if isinstance(entry, tuple) else (pos + 1, entry)
        item_id = row.get("item_id")
        if isinstance(item_id, bool) or not isinstance(item_id, (str, numbers.Integral)) or str(item_id) == "":
            raise InputError("must be a non-empty string or an integer", path, line, "item_id")
        epoch = row.get("epoch")
        if not validate and isinstance(epoch, numbers.Real) and not isinstance(epoch, bool):
            epoch = None if math.isnan(epoch) else int(epoch)
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
        subs.append(sub or None)
    frame = pd.DataFrame(out)
    keys = sorted({k for s in subs if s for k in s})
    for key in keys:
        frame[SUB + key] = [float("nan") if not s or s.get(key) is None else s[key] for s in subs]
    return frame


def _read_jsonl_slow(path: Path) -> pd.DataFrame:
    from rfteval.dataset import iter_jsonl

    rows: list[tuple[int, dict[str, Any]]] = []
    for line, row in iter_jsonl(path):
        if isinstance(row, InputError):
            raise row
        if not isinstance(row, dict):
            raise InputError("expected a JSON object (a record)", path, line)
        for key in ("item_id", "score"):
            if key not in row:
                raise InputError("missing; not a record file?", path, line, key)
        rows.append((line, row))
    if not rows:
        raise InputError("no records", path)
    return _frame_from_dicts(rows, path)


def _read_parquet(path: Path) -> pd.DataFrame:
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    try:
        names = pq.read_schema(path).names
        table = pq.read_table(path, columns=[c for c in _NEEDED if c in names])
    except Exception as exc:  # noqa: BLE001 - any unreadable Parquet is bad input
        raise InputError(f"not a readable Parquet file ({exc})", path) from None
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


# ---------------------------------------------------------------------------------------------- result


@dataclass
class CompareResult:
    baseline: dict[str, Any]
    candidate: dict[str, Any]
    delta: dict[str, Any]
    items: pd.DataFrame  # one row per paired item, sorted by delta (largest drop first)
    slices: dict[str, dict[str, Any]]
    sub_scores: dict[str, dict[str, Any]]
    unpaired: dict[str, list[str]]
    gate: dict[str, Any]
    options: CompareOptions
    notes: list[str] = field(default_factory=list)
    baseline_scores: np.ndarray | None = None  # raw record scores, for distribution plots
    candidate_scores: np.ndarray | None = None

    def to_json(self) -> dict[str, Any]:
        """The documented `--format json` shape (extra keys allowed, none removed)."""
        o = self.options
        out = _clean({
            "baseline": self.baseline, "candidate": self.candidate, "delta": self.delta, "items": [],
            "slices": self.slices, "sub_scores": self.sub_scores, "unpaired": self.unpaired, "gate": self.gate,
            "options": {"tie": o.tie, "level": o.level, "ci_method": o.ci_method, "seed": o.seed,
                        "exclude_errors": o.exclude_errors, "strict": o.strict, "by": list(o.by)},
            "notes": self.notes,
        })
        out["items"] = self.items_json()
        return out

    def items_json(self) -> list[dict[str, Any]]:
        """Per-item rows, built column-wise (10^5 items in a fraction of a second)."""
        it = self.items
        cols = {name: _column(it[src]) for name, src in (
            ("item_id", "item_id"), ("baseline", "baseline"), ("candidate", "candidate"), ("delta", "delta"),
            ("lo", "delta_lo"), ("hi", "delta_hi"), ("baseline_epochs", "baseline_n"),
            ("candidate_epochs", "candidate_n"), ("baseline_errors", "baseline_errors"),
            ("candidate_errors", "candidate_errors"))}
        return [
            {"item_id": i, "baseline": b, "candidate": c, "delta": d, "delta_ci95": [lo, hi], "baseline_epochs": kb,
             "candidate_epochs": kc, "baseline_errors": eb, "candidate_errors": ec}
            for i, b, c, d, lo, hi, kb, kc, eb, ec in zip(*cols.values())
        ]


def _column(series: pd.Series) -> list[Any]:
    """A column as Python values, NaN as None."""
    import numpy as np

    if series.dtype.kind == "f":
        values = series.to_numpy()
        out = values.tolist()
        if not np.isfinite(values).all():
            out = [v if math.isfinite(v) else None for v in out]
        return out
    return series.tolist()


def _clean(value: Any) -> Any:
    """JSON-safe: NaN/inf become null, numpy scalars become Python numbers."""
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


# ---------------------------------------------------------------------------------------------- pairing


def _side_stats(side: Side, exclude_errors: bool) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(records used, per-item stats with error counts and the first error message)."""
    import numpy as np

    f = side.frame
    errors = f[f["is_error"]]
    used = f[~f["is_error"]] if exclude_errors else f
    st = stats.item_stats(used[["item_id", "score"]]).set_index("item_id")
    counts = errors.groupby("item_id").size()
    st["errors"] = counts.reindex(st.index, fill_value=0).to_numpy(dtype=np.int64) if len(counts) else 0
    first = errors.drop_duplicates("item_id").set_index("item_id")
    msg = (first["error_stage"].fillna("?") + "/" + first["error_type"].fillna("error") + ": "
           + first["error_message"].fillna("")) if len(first) else None
    st["first_error"] = msg.reindex(st.index) if msg is not None else None
    return used, st


def _summary(side: Side, used: pd.DataFrame, means: np.ndarray, o: CompareOptions) -> dict[str, Any]:
    s = stats.side_summary(means, o.level, o.ci_method, o.seed)
    return {"label": side.label, "mean": s["mean"], "ci95": s["ci95"], "items": s["items"],
            "records": int(len(side.frame)), "errors": int(side.frame["is_error"].sum()), "se": s["se"],
            "sd": s["sd"], "records_used": int(len(used)), "duplicates_dropped": side.duplicates,
            "path": side.path}


def paired_row(base: np.ndarray, cand: np.ndarray, o: CompareOptions, **extra: Any) -> dict[str, Any]:
    """Both sides' means with intervals, and the paired delta, for one set of items (a slice, a sub-score)."""
    b = stats.side_summary(base, o.level, o.ci_method, o.seed)
    c = stats.side_summary(cand, o.level, o.ci_method, o.seed)
    return {**extra, "items": int(len(base)),
            "baseline": {"mean": b["mean"], "ci95": b["ci95"], "se": b["se"]},
            "candidate": {"mean": c["mean"], "ci95": c["ci95"], "se": c["se"]},
            "delta": stats.paired_delta(base, cand, o.tie, o.level, o.seed, o.ci_method)}


def hardest_mask(base_means: np.ndarray) -> tuple[np.ndarray, float]:
    """Bottom quartile by baseline mean: the ceil(n/4) lowest, plus every item tied with the cutoff value."""
    import numpy as np

    n = base_means.size
    if n == 0:
        return np.zeros(0, dtype=bool), float("nan")
    cutoff = float(np.sort(base_means)[math.ceil(n / 4) - 1])
    return base_means <= cutoff + GATE_EPS, cutoff


def field_value(data: dict[str, Any], name: str) -> str:
    """An item's value for `--by NAME`: a top-level field, else metadata.NAME; dots walk into objects."""
    parts = name.split(".")
    if len(parts) == 1 and name not in data and isinstance(data.get("metadata"), dict):
        parts = ["metadata", name]
    value: Any = data
    for part in parts:
        if not isinstance(value, dict) or part not in value:
            return MISSING
        value = value[part]
    if value is None:
        return MISSING
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def dataset_fields(dataset: str | Path, names: Sequence[str]) -> dict[str, dict[str, str]]:
    """{field: {item_id: value}} for the items of a dataset."""
    from rfteval.dataset import load_dataset

    ds = load_dataset(dataset)
    return {name: {it.id: field_value(it.data, name) for it in ds.items} for name in names}


def compare_sides(base: Side, cand: Side, options: CompareOptions | None = None,
                  fields: dict[str, dict[str, str]] | None = None) -> CompareResult:
    """The whole comparison of two sides already loaded: statistics, slices, sub-scores and the gate."""
    import numpy as np

    o = options or CompareOptions()
    notes: list[str] = []
    used_b, st_b = _side_stats(base, o.exclude_errors)
    used_c, st_c = _side_stats(cand, o.exclude_errors)
    only_b = sorted(st_b.index.difference(st_c.index).tolist())
    only_c = sorted(st_c.index.difference(st_b.index).tolist())
    if o.strict and (only_b or only_c):
        which = (f"{len(only_b)} only in the baseline (e.g. {only_b[0]!r})" if only_b
                 else f"{len(only_c)} only in the candidate (e.g. {only_c[0]!r})")
        raise InputError(f"items do not pair: {which}", cand.path or cand.label, field="--strict")
    joined = st_b.join(st_c, how="inner", lsuffix="_b", rsuffix="_c")
    if joined.empty:
        raise InputError("no item_id appears on both sides: nothing to compare", cand.path or cand.label,
                         field="item_id")
    if only_b or only_c:
        notes.append(f"{len(only_b)} item(s) only in the baseline and {len(only_c)} only in the candidate "
                     "were left out")
    bm = joined["mean_b"].to_numpy()
    cm = joined["mean_c"].to_numpy()
    d = cm - bm
    lo, hi = stats.per_item_delta_interval(d, joined["sd_b"].to_numpy(), joined["n_b"].to_numpy(),
                                           joined["sd_c"].to_numpy(), joined["n_c"].to_numpy(), o.level)
    import pandas as pd

    items = pd.DataFrame({
        "item_id": joined.index.to_numpy(), "baseline": bm, "candidate": cm, "delta": d, "delta_lo": lo,
        "delta_hi": hi, "baseline_sd": joined["sd_b"].to_numpy(), "candidate_sd": joined["sd_c"].to_numpy(),
        "baseline_n": joined["n_b"].to_numpy(), "candidate_n": joined["n_c"].to_numpy(),
        "baseline_errors": joined["errors_b"].to_numpy(), "candidate_errors": joined["errors_c"].to_numpy(),
        "baseline_error": joined["first_error_b"].to_numpy(), "candidate_error": joined["first_error_c"].to_numpy(),
    })
    baseline = _summary(base, used_b, bm, o)
    candidate = _summary(cand, used_c, cm, o)
    baseline["items_unpaired"], candidate["items_unpaired"] = len(only_b), len(only_c)
    delta = stats.paired_delta(bm, cm, o.tie, o.level, o.seed, o.ci_method)

    slices: dict[str, dict[str, Any]] = {}
    mask, cutoff = hardest_mask(bm)
    slices[HARDEST] = paired_row(bm[mask], cm[mask], o, field=None, value=None, cutoff=cutoff,
                                 rule=f"bottom quartile by baseline mean (<= {cutoff:.4g}, ties at the cutoff "
                                      "included)")
    for name in o.by:
        values = fields.get(name, {}) if fields else {}
        if fields is not None and not any(i in values for i in items["item_id"]):
            raise InputError("none of the compared items is in the dataset (does it belong to these records?)",
                             field=f"--by {name}")
        col = np.array([values.get(i, NOT_IN_DATASET) for i in items["item_id"]], dtype=object)
        for value in sorted(set(col.tolist())):
            sel = col == value
            slices[f"{name}={value}"] = paired_row(bm[sel], cm[sel], o, field=name, value=value)
    sub_scores = _sub_scores(used_b, used_c, joined[[]], o, notes)
    items = items.sort_values(["delta", "item_id"], kind="stable").reset_index(drop=True)
    result = CompareResult(baseline, candidate, delta, items, slices, sub_scores,
                           {"baseline_only": only_b, "candidate_only": only_c}, {}, o, notes,
                           used_b["score"].to_numpy(), used_c["score"].to_numpy())
    result.gate = evaluate_gate(result, o.gate)
    return result


def _sub_scores(used_b: pd.DataFrame, used_c: pd.DataFrame, paired: pd.DataFrame, o: CompareOptions,
                notes: list[str]) -> dict[str, dict[str, Any]]:
    """Each multi-grader sub-score compared like the score: error records count 0 unless excluded."""
    import numpy as np

    keys_b = {c[len(SUB):] for c in used_b.columns if c.startswith(SUB)}
    keys_c = {c[len(SUB):] for c in used_c.columns if c.startswith(SUB)}
    if keys_b ^ keys_c:
        notes.append(f"sub-scores on one side only, not compared: {', '.join(sorted(keys_b ^ keys_c))}")
    out: dict[str, dict[str, Any]] = {}
    for key in sorted(keys_b & keys_c):
        per_side = []
        for used in (used_b, used_c):
            vals = used[SUB + key].to_numpy(dtype=np.float64).copy()
            vals[used["is_error"].to_numpy()] = 0.0
            ok = ~np.isnan(vals)
            frame = used.loc[ok, ["item_id"]].assign(score=vals[ok])
            per_side.append(stats.item_stats(frame).set_index("item_id")["mean"])
        j = per_side[0].to_frame("b").join(per_side[1].to_frame("c"), how="inner").join(paired, how="inner")
        if len(j):
            out[key] = paired_row(j["b"].to_numpy(), j["c"].to_numpy(), o)
    return out


# ---------------------------------------------------------------------------------------------- gate


def evaluate_gate(result: CompareResult, gate: Gate) -> dict[str, Any]:
    """Each active check, and one line per failure. Equal to a threshold passes."""
    checks: list[dict[str, Any]] = []

    def check(name: str, ok: bool, detail: str) -> None:
        checks.append({"name": name, "passed": ok, "detail": detail})

    cand_mean, delta = result.candidate["mean"], result.delta
    if gate.fail_under is not None:
        ok = cand_mean >= gate.fail_under - GATE_EPS
        check("fail-under", ok, f"candidate mean {cand_mean:.4f} {'>=' if ok else '<'} {gate.fail_under:g}")
    if gate.max_drop is not None:
        ok = delta["mean"] >= -gate.max_drop - GATE_EPS
        check("max-drop", ok, f"delta {delta['mean']:+.4f} {'>=' if ok else '<'} -{gate.max_drop:g}")
    if gate.require_improvement:
        lo, hi = delta["ci95"]
        ok = math.isfinite(lo) and lo > 0
        detail = (f"delta interval [{lo:+.4f}, {hi:+.4f}] {'lies above' if ok else 'does not lie above'} 0"
                  if math.isfinite(lo) else "delta interval undefined (fewer than 2 paired items)")
        check("require-improvement", ok, detail)
    if gate.max_item_drop is not None:
        items = result.items
        dropped = items[items["delta"] < -gate.max_item_drop - GATE_EPS]
        ok = dropped.empty
        worst = ", ".join(f"{r.item_id} ({r.delta:+.3f})" for r in dropped.head(5).itertuples())
        more = f" and {len(dropped) - 5} more" if len(dropped) > 5 else ""
        check("max-item-drop", ok, f"no item dropped by more than {gate.max_item_drop:g}" if ok else
              f"{len(dropped)} item(s) dropped by more than {gate.max_item_drop:g}: {worst}{more}")
    failures = [f"{c['name']}: {c['detail']}" for c in checks if not c["passed"]]
    return {"passed": not failures, "failures": failures, "checks": checks}


# ---------------------------------------------------------------------------------------------- entry


def compare_paths(baseline: str | Path, candidate: str | Path, labels: Sequence[str] = (),
                  options: CompareOptions | None = None, dataset: str | Path | None = None) -> CompareResult:
    """`rfteval compare`: labels are () , (both,) or (baseline, candidate)."""
    o = options or CompareOptions()
    if len(labels) > 2:
        raise InputError("give --label once (both sides) or twice (baseline, then candidate)", field="--label")
    label_b = labels[0] if labels else None
    label_c = labels[-1] if labels else None
    if o.by and dataset is None:
        raise InputError("--by needs --dataset (the items' fields live in the dataset)", field="--by")
    fields = dataset_fields(dataset, o.by) if dataset is not None and o.by else None
    base, cand = load_sides((baseline, label_b), (candidate, label_c))
    return compare_sides(base, cand, o, fields)


def load_sides(*sides: tuple[str | Path, str | None]) -> list[Side]:
    """Several sides read on threads: one side's single-threaded steps (regex, pandas) overlap the other's
    multi-threaded JSON parse. The first side's error wins, as if they were read in order."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=len(sides)) as pool:
        futures = [pool.submit(load_side, path, label) for path, label in sides]
        return [f.result() for f in futures]
