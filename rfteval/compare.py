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
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rfteval import passk, rundir, stats
from rfteval.errors import InputError
from rfteval.records import json_safe  # noqa: F401  (series and reports take it from here too)

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd
    import pyarrow as pa

    from rfteval.records import Record

SUB = "sub:"  # prefix of per-record sub-score columns in a side's frame
HARDEST = "hardest"
MISSING = "(missing)"
NOT_IN_DATASET = "(not in dataset)"
GATE_EPS = 1e-12  # a value equal to a threshold (up to float rounding) passes
NAN = float("nan")
# File names of a run directory, as rfteval.store writes them. Not imported from there: store sits in the runner's
# import graph, which imports this module (tests/test_passk.py checks the names agree).



# ---------------------------------------------------------------------------------------------- options


GATE_MODES = ("evidence", "strict")
ERROR_POLICIES = ("exclude", "zero")


@dataclass(frozen=True)
class Gate:
    """The CI gate; None / False leaves a check off.

    mode "evidence" (the default) fails only on evidence: a drop whose interval lies below 0 and whose size
    passes the threshold, a candidate whose whole interval lies under --fail-under. Noise alone then fails
    about 2.5% of runs per check. mode "strict" asks for proof of no regression instead (non-inferiority): the
    interval's lower bound must clear each threshold, which fails on noise whenever the eval is too small.
    """

    fail_under: float | None = None
    max_drop: float | None = None
    require_improvement: bool = False
    max_item_drop: float | None = None
    mode: str = "evidence"
    max_error_rate: float = 0.05

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
    exclude_errors: bool = False  # leave every error record out (overrides `errors`)
    strict: bool = False
    by: tuple[str, ...] = ()
    gate: Gate = field(default_factory=Gate)
    # "exclude": generation failures (the endpoint never answered) are left out of the means and counted;
    # grading errors and refusals score 0 (OpenAI's rule). "zero": every error record scores 0.
    errors: str = "exclude"
    score_range: tuple[float, float] | None = None  # None: [0, 1] when every score lies in it, else unbounded
    # What is compared per item: "mean" (the mean score over its epochs), "pass@K" or "pass^K" (rfteval.passk).
    metric: str = "mean"
    # A sample passes when its record's `passed` says so, else when its score reaches this; None: the grader's
    # maximum (found through the run directory's spec.resolved.toml), else --score-range's top, else 1.0.
    pass_threshold: float | None = None


# ---------------------------------------------------------------------------------------------- sides


@dataclass
class Side:
    """One model's records, normalised: item_id, epoch, score, error_* and sub:<key> columns."""

    label: str
    path: str
    frame: pd.DataFrame
    duplicates: int = 0
    grader: str | None = None  # the grader file of the run that wrote the records (spec.resolved.toml), if known


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
    return side


def side_from_records(records: pd.DataFrame | Sequence[Record], label: str, path: str = "") -> Side:
    """A side from records in memory (`Record`s, or a frame from rfteval.records.read_records)."""
    import pandas as pd

    from rfteval.records import records_frame

    frame = records if isinstance(records, pd.DataFrame) else records_frame(records)
    rows = frame.to_dict("records")
    return normalise_frame(_frame_from_dicts(rows, Path(path or label), validate=False), label, path)


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
    frame["is_generation_failure"] = is_generation_failure(frame["error_stage"], frame["error_type"])
    frame["score"] = np.where(frame["is_error"], 0.0, frame["score"].to_numpy(dtype=np.float64))
    return Side(label, path, frame, before - len(frame))


def is_generation_failure(stage: pd.Series, type_: pd.Series) -> pd.Series:
    """Records whose model never answered (the endpoint failed after every retry): not an answer, so not a 0.

    A refusal is an answer (the model chose not to), so it scores 0 like a grading error.
    """
    from rfteval.records import REFUSAL

    return (stage == "generate") & (type_ != REFUSAL)  # records.is_generation_failure, column-wise


# ---------------------------------------------------------------------------------------------- reading

_NEEDED = ("model_label", "item_id", "epoch", "score", "error", "sub_scores", "passed")
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
    data: dict[str, Any] = {
        "model_label": col("model_label", pa.string()).to_pandas(),
        "item_id": col("item_id", pa.string()).to_pandas(),
        "epoch": pc.cast(col("epoch", pa.int64()), pa.float64()).to_numpy(zero_copy_only=False),  # null -> NaN
        "score": col("score", pa.float64()).to_numpy(zero_copy_only=False),
        # the grader's own verdict: 1.0 / 0.0, NaN where it gave none
        "passed": pc.cast(col("passed", pa.bool_()), pa.float64()).to_numpy(zero_copy_only=False),
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
                        ("score", pa.float64()), ("passed", pa.bool_()),
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
                                                 "error_type", "error_message", "error_present", "passed")}
    subs: list[dict[str, Any] | None] = []
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
    baseline_records: pd.DataFrame | None = None  # item_id and score of the records used, for per-item tests
    candidate_records: pd.DataFrame | None = None
    bounds: tuple[float, float] | None = None  # the score range intervals were cut to
    metric: str = "mean"  # what each item's value is: its mean score, or its pass@k / pass^k estimate
    pass_k: dict[str, Any] | None = None  # pass@1 and pass@N compared (2+ epochs), the pass rule (pass_k_check)

    def to_json(self) -> dict[str, Any]:
        """The documented `--format json` shape (extra keys allowed, none removed)."""
        o = self.options
        out = json_safe({
            "baseline": self.baseline, "candidate": self.candidate, "delta": self.delta, "items": [],
            "slices": self.slices, "sub_scores": self.sub_scores, "unpaired": self.unpaired, "gate": self.gate,
            "options": {"tie": o.tie, "level": o.level, "ci_method": o.ci_method, "seed": o.seed,
                        "exclude_errors": o.exclude_errors, "strict": o.strict, "by": list(o.by),
                        "errors": o.errors, "gate": o.gate.mode, "max_error_rate": o.gate.max_error_rate,
                        "score_range": list(self.bounds) if self.bounds else None,
                        "metric": self.metric, "pass_threshold": o.pass_threshold},
            "notes": self.notes,
            **({"pass_k": self.pass_k} if self.pass_k is not None else {}),
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


# ---------------------------------------------------------------------------------------------- pairing


def used_records(frame: pd.DataFrame, o: CompareOptions) -> pd.DataFrame:
    """The records that enter the means under the error policy (error records already score 0)."""
    if o.exclude_errors:
        return frame[~frame["is_error"]]
    if o.errors == "exclude":
        return frame[~frame["is_generation_failure"]]
    return frame


# ---------------------------------------------------------------------------------------------- passing


@lru_cache(maxsize=32)
def grader_maximum(grader: str) -> tuple[float, str] | None:
    """The top of a grader's range (rfteval.readiness.grader_score_range) and where that comes from; None when the
    file no longer loads (moved, edited into something invalid): the caller then falls back."""
    from rfteval.graders.loader import load_grader
    from rfteval.readiness import grader_score_range

    try:
        config = load_grader(grader)
    except Exception:  # noqa: BLE001 - a best-effort look-up: any grader that no longer loads means "unknown"
        return None
    _, high, source = grader_score_range(config)
    return float(high), f"the grader's maximum ({source}; {Path(grader).name})"


def resolve_threshold(side: Side, o: CompareOptions) -> tuple[float, str] | None:
    """The score a sample must reach to pass when its record has no `passed` verdict, and why that value.

    --pass-threshold, else --score-range's top, else the maximum of the grader that wrote the records, else 1.0
    for scores in [0, 1]. None when none of these applies (scores above 1 and nothing known about the grader):
    "reaches 1.0" would then be an arbitrary rule.
    """
    import numpy as np

    if o.pass_threshold is not None:
        return float(o.pass_threshold), "--pass-threshold"
    if o.score_range is not None:
        return float(o.score_range[1]), "the top of --score-range"
    if side.grader is not None:
        found = grader_maximum(side.grader)
        if found is not None:
            return found
    scores = side.frame["score"].to_numpy(dtype=np.float64)
    if scores.size and np.nanmax(scores) > 1.0:
        return None
    return 1.0, "1.0 (no grader information with the records)"


def pass_indicator(used: pd.DataFrame, threshold: float) -> np.ndarray:
    """Per record, whether it passed: the grader's `passed` verdict, else score ≥ threshold (rfteval.passk.passes).

    Error records left in by the error policy (grading errors, refusals; every error under --errors zero) fail,
    as they score 0: OpenAI's rule, the same as for the mean.
    """
    import numpy as np

    passed = used["passed"].to_numpy(dtype=np.float64) if "passed" in used else None
    ok = passk.passes(used["score"].to_numpy(dtype=np.float64), passed, threshold)
    return ok & ~used["is_error"].to_numpy(dtype=bool)


def side_thresholds(base: Side, cand: Side, o: CompareOptions, required: bool) -> tuple[float, float] | None:
    """Both sides' pass thresholds; None (or, when `required`, bad input) when either cannot be set."""
    tb, tc = resolve_threshold(base, o), resolve_threshold(cand, o)
    if tb is None or tc is None:
        if required:
            side = base if tb is None else cand
            raise InputError("scores above 1 and no grader maximum known: give --pass-threshold X (or "
                             "--score-range LO,HI)", side.path or side.label, field="--metric")
        return None
    return tb[0], tc[0]


def _threshold_info(base: Side, cand: Side, o: CompareOptions) -> dict[str, Any]:
    out = {}
    for role, side in (("baseline", base), ("candidate", cand)):
        found = resolve_threshold(side, o)
        out[role] = {"threshold": found[0], "source": found[1]} if found else None
    return out


def _num3(x: float | None, sign: str = "") -> str:
    return "n/a" if x is None or not math.isfinite(x) else f"{x:{sign}.3f}"


def pass_k_check(base: Side, cand: Side, o: CompareOptions, thresholds: tuple[float, float],
                 metric: passk.Metric) -> tuple[dict[str, Any] | None, str | None]:
    """pass@1 and pass@N of the paired items compared (N: the epochs both sides have), and the sharpening flag.

    RL fine-tuning often concentrates probability on answers the base model could already sample: pass@1 rises
    while pass@N, which credits an item when any of N samples passes, does not (Yue et al. 2025, "Does
    Reinforcement Learning Really Incentivize Reasoning Capacity in LLMs Beyond the Base Model?"). The note is
    raised only when both comparisons say so through stats.direction: pass@1 shown better (p < α and the
    interval above 0), pass@N not shown better. "Not shown better" is an absence of evidence, and the note says
    exactly that. No Holm across the two: the note makes no claim that either test alone would not.
    Returns (None, None) below 2 epochs a side.
    """
    import numpy as np

    _, st_b = _side_stats(base, o, thresholds[0])
    _, st_c = _side_stats(cand, o, thresholds[1])
    j = st_b[["mean", "n"]].join(st_c[["mean", "n"]], how="inner", lsuffix="_b", rsuffix="_c")
    if j.empty:
        return None, None
    n_b, n_c = j["n_b"].to_numpy(), j["n_c"].to_numpy()
    top = int(min(n_b.max(), n_c.max()))
    if top < 2:
        return None, None
    c_b = np.rint(j["mean_b"].to_numpy() * n_b).astype(np.int64)
    c_c = np.rint(j["mean_c"].to_numpy() * n_c).astype(np.int64)
    rows: dict[str, dict[str, Any]] = {}
    for name, k in (("pass_at_1", 1), ("pass_at_n", top)):
        vb, vc = passk.per_item(n_b, c_b, k), passk.per_item(n_c, c_c, k)
        ok = np.isfinite(vb) & np.isfinite(vc)
        row = paired_row(vb[ok], vc[ok], o, (0.0, 1.0), k=k)
        row["verdict"] = stats.direction(row["delta"], o.level)
        rows[name] = row
    one, top_row = rows["pass_at_1"], rows["pass_at_n"]
    sharpening = one["verdict"] == "better" and top_row["verdict"] != "better"
    out = {"n": top, **rows, "sharpening": sharpening, "thresholds": _threshold_info(base, cand, o),
           "metric": metric.name}
    note = None
    if sharpening:
        def span(row: dict[str, Any]) -> str:
            d = row["delta"]
            return (f"{_num3(row['baseline']['mean'])} -> {_num3(row['candidate']['mean'])}, delta "
                    f"{_num3(d['mean'], '+')} [{_num3(d['ci95'][0], '+')}, {_num3(d['ci95'][1], '+')}]")

        note = (f"pass@1 rose but pass@{top} did not (sharpening, not new capability): pass@1 {span(one)}, shown "
                f"better; pass@{top} {span(top_row)}, not shown better ({top_row['verdict']}; near the ceiling "
                "this can also mean no room to rise)")
    return out, note


def run_pass_curves(out_dir: Path, labels: Sequence[str], grader: Any) -> tuple[dict[str, dict[str, Any]],
                                                                                  dict[str, Any]]:
    """Per label of a run directory, {"pass_at_k": {"1": …, "N": …}, "pass_all_k": {…}}, and the pass rule.

    For summary.json: read back from DIR/results.parquet (its few needed columns; DIR/<label>.jsonl without it),
    under compare's default error policy (a generation error
    is left out, a grading error or refusal fails), so `compare --metric pass@K` reproduces these numbers. A
    sample passes by its record's `passed`, else when it reaches the grader's maximum. A label whose records
    cannot be read yet (no records) is left out.
    """
    from rfteval.readiness import grader_score_range

    _, high, source = grader_score_range(grader)
    o = CompareOptions()
    out: dict[str, dict[str, Any]] = {}
    parquet = Path(out_dir) / rundir.RESULTS
    frame = None
    if parquet.is_file():  # five columns of one file, not every output text of every model again
        try:
            frame = read_record_frame(parquet)
        except InputError:
            frame = None
    for label in labels:
        try:
            if frame is not None:
                rows = frame[frame["model_label"] == label].reset_index(drop=True)
                if rows.empty:
                    continue
                side = normalise_frame(rows, label, str(parquet))
            else:
                side = load_side(Path(out_dir) / f"{label}.jsonl")
        except InputError:
            continue
        _, st = _side_stats(side, o, float(high))
        n = st["n"].to_numpy()
        c = (st["mean"].to_numpy() * n).round().astype("int64")
        out[label] = {key: {str(k): v for k, v in passk.curve(n, c, kind).items()}
                      for key, kind in (("pass_at_k", "pass@"), ("pass_all_k", "pass^"))}
    return out, {"threshold": float(high), "source": f"the record's passed, else score >= the grader's maximum "
                                                     f"({source})"}


def _side_stats(side: Side, o: CompareOptions, threshold: float | None = None,
                metric: passk.Metric = passk.MEAN) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(records used, per-item stats with error counts and the first error message).

    With a threshold the records' scores become pass indicators (1 pass, 0 fail: pass_indicator) before
    anything else, so the per-item mean is the item's pass rate, the halves of the hardest slice are pass rates
    and the per-item drop test runs on passes. A pass metric then replaces each item's mean with its pass@k or
    pass^k estimate from (n, c), NaN when the item has fewer than k samples.
    """
    import numpy as np

    f = side.frame
    errors = f[f["is_error"]]
    used = used_records(f, o)
    if threshold is not None:
        used = used.assign(score=pass_indicator(used, threshold).astype(np.float64))
    st = stats.item_stats(used[["item_id", "score"]]).set_index("item_id")
    if metric.is_pass:
        n = st["n"].to_numpy()
        c = np.rint(st["mean"].to_numpy() * n).astype(np.int64)
        st["mean"] = metric.per_item(n, c)
        if metric.k > 1:  # the spread of one item's pass indicators says nothing about its pass@k's error
            st["sd"] = np.nan
    counts = errors.groupby("item_id").size()
    st["errors"] = counts.reindex(st.index, fill_value=0).to_numpy(dtype=np.int64) if len(counts) else 0
    first = errors.drop_duplicates("item_id").set_index("item_id")
    msg = (first["error_stage"].fillna("?") + "/" + first["error_type"].fillna("error") + ": "
           + first["error_message"].fillna("")) if len(first) else None
    st["first_error"] = msg.reindex(st.index) if msg is not None else None
    return used, st


def _summary(side: Side, used: pd.DataFrame, means: np.ndarray, o: CompareOptions,
             bounds: tuple[float, float] | None) -> dict[str, Any]:
    s = stats.side_summary(means, o.level, o.ci_method, o.seed)
    f = side.frame
    records = int(len(f))
    generation = int(f["is_generation_failure"].sum())
    return {"label": side.label, "mean": s["mean"], "ci95": _clip(s["ci95"], bounds),
            "items": s["items"], "records": records, "errors": int(f["is_error"].sum()), "se": s["se"],
            "sd": s["sd"], "records_used": int(len(used)), "duplicates_dropped": side.duplicates,
            "path": side.path, "generation_errors": generation,
            "generation_error_share": generation / records if records else 0.0,
            "scored_zero_errors": int((f["is_error"] & ~f["is_generation_failure"]).sum())}


def infer_bounds(o: CompareOptions, *scores: np.ndarray) -> tuple[float, float] | None:
    """The score range intervals are cut to: --score-range, else [0, 1] when every score lies in it."""
    import numpy as np

    if o.score_range is not None:
        return o.score_range
    if all(x.size == 0 or (np.nanmin(x) >= 0.0 and np.nanmax(x) <= 1.0) for x in scores):
        return 0.0, 1.0
    return None


def _clip(ci: Sequence[float], bounds: tuple[float, float] | None) -> list[float]:
    lo, hi = stats.clip_interval(float(ci[0]), float(ci[1]), bounds)
    return [lo, hi]


def _delta_bounds(bounds: tuple[float, float] | None) -> tuple[float, float] | None:
    return None if bounds is None else (bounds[0] - bounds[1], bounds[1] - bounds[0])


def paired_row(base: np.ndarray, cand: np.ndarray, o: CompareOptions, bounds: tuple[float, float] | None = None,
               **extra: Any) -> dict[str, Any]:
    """Both sides' means with intervals, and the paired delta, for one set of items (a slice, a sub-score)."""
    b = stats.side_summary(base, o.level, o.ci_method, o.seed)
    c = stats.side_summary(cand, o.level, o.ci_method, o.seed)
    delta = stats.paired_delta(base, cand, o.tie, o.level, o.seed, o.ci_method)
    delta["ci95"] = _clip(delta["ci95"], _delta_bounds(bounds))
    delta["p_adjusted"] = delta["p_value"]
    return {**extra, "items": int(len(base)),
            "baseline": {"mean": b["mean"], "ci95": _clip(b["ci95"], bounds), "se": b["se"]},
            "candidate": {"mean": c["mean"], "ci95": _clip(c["ci95"], bounds), "se": c["se"]},
            "delta": delta}


HARDEST_FRACTION = 0.25


def half_means(used: pd.DataFrame, item_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per item (in `item_ids` order), the mean of its alternate epochs: positions 1, 3, ... and 2, 4, ...

    Epochs are taken in epoch order (record order where epochs are missing); an item with one epoch has no
    second half (NaN).
    """
    import numpy as np
    import pandas as pd

    f = used[["item_id", "epoch", "score"]].sort_values(["item_id", "epoch"], kind="stable", na_position="last")
    pos = f.groupby("item_id", sort=False).cumcount().to_numpy()
    halves = f.assign(half=pos % 2).groupby(["item_id", "half"], sort=False)["score"].mean().unstack()
    halves = halves.reindex(columns=[0, 1]).reindex(pd.Index(item_ids))
    return halves[0].to_numpy(dtype=np.float64), halves[1].to_numpy(dtype=np.float64)


def half_counts(used: pd.DataFrame, item_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per item (in `item_ids` order): (n_a, c_a, n_b, c_b), the samples and passes of the two alternate-epoch
    halves half_means splits into, from records whose score is a pass indicator."""
    import numpy as np
    import pandas as pd

    f = used[["item_id", "epoch", "score"]].sort_values(["item_id", "epoch"], kind="stable", na_position="last")
    pos = f.groupby("item_id", sort=False).cumcount().to_numpy()
    g = f.assign(half=pos % 2).groupby(["item_id", "half"], sort=False)["score"].agg(["size", "sum"])
    n = g["size"].unstack().reindex(columns=[0, 1]).reindex(pd.Index(item_ids)).fillna(0)
    c = g["sum"].unstack().reindex(columns=[0, 1]).reindex(pd.Index(item_ids)).fillna(0)
    return (n[0].to_numpy(np.int64), np.rint(c[0].to_numpy()).astype(np.int64),
            n[1].to_numpy(np.int64), np.rint(c[1].to_numpy()).astype(np.int64))


def hardest_slice(used_b: pd.DataFrame, items: np.ndarray, bm: np.ndarray, cm: np.ndarray, o: CompareOptions,
                  bounds: tuple[float, float] | None, metric: passk.Metric = passk.MEAN) -> dict[str, Any]:
    """The bottom quartile by baseline mean, measured without selection bias (stats.crossfit_lowest_delta).

    Items whose baseline has one epoch cannot be split; when no item can, the slice is shown as descriptive:
    chosen and measured on the same data, so without interval or p-value, and never coloured.

    Under a pass metric the records' scores are pass indicators, so each half's mean is its pass rate. pass@1
    and pass^1 are that rate: the slice is the usual cross-fit on it. For k > 1 the items are still chosen on one
    half's pass rate (pass@k = 1 − (1 − p)^k and pass^k = p^k both rise with the pass rate p, so "lowest
    pass rate" and "lowest pass@k" name the same items in expectation), and the baseline is measured by the
    unbiased pass@k / pass^k estimator on the other half, which needs at least k samples in that half. Choice
    and measurement stay independent, so the estimate stays unbiased. With fewer than k samples per half (3
    epochs and pass@2 or pass@3) no independent measurement exists and the slice is descriptive.
    """
    import numpy as np

    measure_a = measure_b = None
    if metric.is_pass and metric.k > 1:
        n_a, c_a, n_b, c_b = half_counts(used_b, items)
        with np.errstate(invalid="ignore", divide="ignore"):
            a, b = c_a / n_a, c_b / n_b
        measure_a, measure_b = metric.per_item(n_a, c_a), metric.per_item(n_b, c_b)
        split = np.isfinite(measure_a) & np.isfinite(measure_b)
    else:
        a, b = half_means(used_b, items)
        split = np.isfinite(a) & np.isfinite(b)
    if split.sum() >= 2:
        d = stats.crossfit_lowest_delta(a[split], b[split], cm[split], HARDEST_FRACTION, o.level, o.seed,
                                        None if measure_a is None else measure_a[split],
                                        None if measure_b is None else measure_b[split])
        d["ci95"] = _clip(d["ci95"], _delta_bounds(bounds))
        d["p_adjusted"] = d["p_value"]
        left = int((~split).sum())
        if metric.is_pass:
            rule = (f"bottom quartile by baseline pass rate, chosen on half of each item's baseline epochs, its "
                    f"{metric.name} measured on the other half, both ways, averaged ({d['selected']} items chosen"
                    + (f"; {left} item(s) with fewer than {2 * metric.k} epochs left out" if left else "") + ")")
        else:
            rule = (f"bottom quartile by baseline mean, chosen on half of each item's baseline epochs and measured "
                    f"on the other half, both ways, averaged ({d['selected']} items chosen"
                    + (f"; {left} single-epoch item(s) left out" if left else "") + ")")
        row = {"items": d["selected"], "baseline": {"mean": d.pop("baseline_mean"), "ci95": [NAN, NAN], "se": NAN},
               "candidate": {"mean": d.pop("candidate_mean"), "ci95": [NAN, NAN], "se": NAN}, "delta": d}
        return {"field": None, "value": None, "cutoff": None, "rule": rule, "method": "cross-fit", **row}
    mask = stats.select_lowest(bm, HARDEST_FRACTION, o.seed)
    cutoff = float(bm[mask].max()) if mask.any() else NAN
    row = paired_row(bm[mask], cm[mask], o, bounds)
    delta = row["delta"]
    for key in ("se", "p_value", "p_adjusted", "mde", "se_unpaired"):
        delta[key] = NAN
    delta["ci95"] = [NAN, NAN]
    delta["descriptive"] = True
    delta["p_method"] = "none (descriptive)"
    row["baseline"]["ci95"] = row["candidate"]["ci95"] = [NAN, NAN]
    if metric.is_pass and metric.k > 1:
        rule = (f"selected on the same data, descriptive: the {int(mask.sum())} items lowest by baseline "
                f"{metric.name} (<= {cutoff:.4g}); {metric.name} needs {metric.k} samples in each half of an item's "
                f"baseline epochs ({2 * metric.k} epochs) to be measured apart from the choice, so no interval")
    else:
        rule = (f"selected on the same data, descriptive: the {int(mask.sum())} items lowest by baseline mean "
                f"(<= {cutoff:.4g}); one epoch per item leaves no independent half to measure on, so no interval")
    return {"field": None, "value": None, "cutoff": cutoff, "rule": rule, "method": "descriptive", **row}


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
    fields = {name: {it.id: field_value(it.data, name) for it in ds.items} for name in names}
    for name, values in fields.items():
        if values and all(v == MISSING for v in values.values()):  # a typo would make one silent "(missing)" slice
            raise InputError(f"no item of {ds.path} has this field (top-level, or under metadata)", field=f"--by {name}")
    return fields


def adjust_family(rows: Sequence[dict[str, Any]]) -> None:
    """Holm-adjust the p-values of rows that answer one question together (the slices of one --by, sub-scores)."""
    adjusted = stats.holm([r["delta"]["p_value"] for r in rows])
    for row, p in zip(rows, adjusted.tolist()):
        row["delta"]["p_adjusted"] = p


def compare_sides(base: Side, cand: Side, options: CompareOptions | None = None,
                  fields: dict[str, dict[str, str]] | None = None) -> CompareResult:
    """The whole comparison of two sides already loaded: statistics, slices, sub-scores and the gate.

    Under --metric pass@K / pass^K every item's value is its pass@K / pass^K estimate instead of its mean score,
    and everything downstream (intervals, p, verdict, slices, the gate) runs on it unchanged; the per-item drop
    test runs on the items' pass indicators (pass@K and pass^K both rise with the pass rate, so a drop in one is
    a drop in the other). Items with fewer than K usable samples on either side are left out, with a note.
    """
    import numpy as np
    import pandas as pd

    o = options or CompareOptions()
    if o.errors not in ERROR_POLICIES:
        raise InputError(f"must be one of {', '.join(ERROR_POLICIES)}, got {o.errors!r}", field="--errors")
    metric = passk.parse_metric(o.metric)
    if o.pass_threshold is not None and not math.isfinite(o.pass_threshold):
        raise InputError(f"must be a finite number, got {o.pass_threshold}", field="--pass-threshold")
    notes: list[str] = []
    thresholds = side_thresholds(base, cand, o, required=metric.is_pass)
    th_b, th_c = thresholds if metric.is_pass and thresholds else (None, None)
    used_b, st_b = _side_stats(base, o, th_b, metric)
    used_c, st_c = _side_stats(cand, o, th_c, metric)
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
    if metric.is_pass:
        short = ~(np.isfinite(joined["mean_b"].to_numpy()) & np.isfinite(joined["mean_c"].to_numpy()))
        if short.all():
            top = int(min(joined["n_b"].max(), joined["n_c"].max()))
            raise InputError(f"{metric.name} needs {metric.k} samples per item; these records have at most {top} "
                             "usable per item on one side", cand.path or cand.label, field="--metric")
        if short.any():
            notes.append(f"{int(short.sum())} item(s) with fewer than {metric.k} usable samples on a side were "
                         f"left out of {metric.name}")
            joined = joined[~short]
    bounds = (0.0, 1.0) if metric.is_pass else infer_bounds(o, used_b["score"].to_numpy(), used_c["score"].to_numpy())
    bm = joined["mean_b"].to_numpy()
    cm = joined["mean_c"].to_numpy()
    d = cm - bm
    n_b, n_c = joined["n_b"].to_numpy(), joined["n_c"].to_numpy()
    lo, hi = stats.per_item_delta_interval(d, joined["sd_b"].to_numpy(), n_b, joined["sd_c"].to_numpy(), n_c, o.level)
    few = (n_b < MIN_EPOCHS_FOR_ITEM_INTERVAL) | (n_c < MIN_EPOCHS_FOR_ITEM_INTERVAL)
    lo, hi = np.where(few, np.nan, lo), np.where(few, np.nan, hi)
    items = pd.DataFrame({
        "item_id": joined.index.to_numpy(), "baseline": bm, "candidate": cm, "delta": d, "delta_lo": lo,
        "delta_hi": hi, "baseline_sd": joined["sd_b"].to_numpy(), "candidate_sd": joined["sd_c"].to_numpy(),
        "baseline_n": n_b, "candidate_n": n_c,
        "baseline_errors": joined["errors_b"].to_numpy(), "candidate_errors": joined["errors_c"].to_numpy(),
        "baseline_error": joined["first_error_b"].to_numpy(), "candidate_error": joined["first_error_c"].to_numpy(),
    })
    baseline = _summary(base, used_b, bm, o, bounds)
    candidate = _summary(cand, used_c, cm, o, bounds)
    baseline["items_unpaired"], candidate["items_unpaired"] = len(only_b), len(only_c)
    delta = stats.paired_delta(bm, cm, o.tie, o.level, o.seed, o.ci_method)
    delta["ci95"] = _clip(delta["ci95"], _delta_bounds(bounds))
    delta["p_adjusted"] = delta["p_value"]
    if len(d) < MIN_ITEMS_FOR_INTERVAL:
        notes.append(f"only {len(d)} paired item(s): too few for a reliable interval (5 or more are needed, "
                     "and 6 or more before a permutation test can reach p < 0.05)")

    slices: dict[str, dict[str, Any]] = {}
    slices[HARDEST] = hardest_slice(used_b, joined.index.to_numpy(), bm, cm, o, bounds, metric)
    for name in o.by:
        values = fields.get(name, {}) if fields else {}
        if fields is not None and not any(i in values for i in items["item_id"]):
            raise InputError("none of the compared items is in the dataset (does it belong to these records?)",
                             field=f"--by {name}")
        col = np.array([values.get(i, NOT_IN_DATASET) for i in items["item_id"]], dtype=object)
        family = []
        for value in sorted(set(col.tolist())):
            sel = col == value
            slices[f"{name}={value}"] = row = paired_row(bm[sel], cm[sel], o, bounds, field=name, value=value)
            family.append(row)
        adjust_family(family)
    if metric.is_pass:
        sub_scores: dict[str, dict[str, Any]] = {}
        if any(c.startswith(SUB) for c in used_b.columns):
            notes.append(f"sub-scores are compared as means, not under {metric.name}: left out here")
    else:
        sub_scores = _sub_scores(used_b, used_c, joined[[]], o, notes, bounds)
    adjust_family(list(sub_scores.values()))
    pass_k = None
    if thresholds is not None:
        pass_k, note = pass_k_check(base, cand, o, thresholds, metric)
        if note:
            notes.append(note)
    items = items.sort_values(["delta", "item_id"], kind="stable").reset_index(drop=True)
    result = CompareResult(baseline, candidate, delta, items, slices, sub_scores,
                           {"baseline_only": only_b, "candidate_only": only_c}, {}, o, notes,
                           used_b["score"].to_numpy(), used_c["score"].to_numpy(),
                           used_b[["item_id", "score"]], used_c[["item_id", "score"]], bounds, metric.name, pass_k)
    result.gate = evaluate_gate(result, o.gate)
    return result


MIN_ITEMS_FOR_INTERVAL = 5
MIN_EPOCHS_FOR_ITEM_INTERVAL = 5  # an interval from 2-3 epochs (often all alike) is not one to show


def _sub_scores(used_b: pd.DataFrame, used_c: pd.DataFrame, paired: pd.DataFrame, o: CompareOptions,
                notes: list[str], bounds: tuple[float, float] | None) -> dict[str, dict[str, Any]]:
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
            out[key] = paired_row(j["b"].to_numpy(), j["c"].to_numpy(), o, bounds)
    return out


# ---------------------------------------------------------------------------------------------- gate


def _power_t(level: float, n: int) -> tuple[float, float]:
    """(t_{1−α/2}, t_{power}) on n − 1 degrees of freedom: the two quantiles an MDE is made of."""
    if n < 2:
        return NAN, NAN
    return stats.t_ppf(0.5 + level / 2, float(n - 1)), stats.t_ppf(stats.POWER, float(n - 1))


def _num(x: float | None) -> float:
    return NAN if x is None else float(x)


def _drop_check(result: CompareResult, gate: Gate) -> dict[str, Any]:
    """--max-drop: evidence mode fails on a drop the test sees (verdict "worse") that is larger than X."""
    d, x, level = result.delta, float(gate.max_drop or 0.0), result.options.level
    mean, (lo, hi) = _num(d["mean"]), (_num(v) for v in d["ci95"])
    t_hi, t_pow = _power_t(level, d["n"])
    se = _num(d["se"])
    word = stats.direction(d, level)
    if gate.mode == "strict":
        ok = math.isfinite(lo) and lo >= -x - GATE_EPS
        detail = (f"delta interval lower bound {lo:+.4f} {'>=' if ok else '<'} -{x:g} (non-inferiority)"
                  if math.isfinite(lo) else "delta interval undefined (fewer than 2 paired items): cannot show "
                  "non-inferiority")
        sees = t_hi * se
        warning = (f"the interval's half-width {sees:.3f} exceeds the margin {x:g}: even an unchanged model fails "
                   "this strict gate about half the time; add items or epochs" if math.isfinite(sees) and sees > x
                   else None)
        return {"name": "max-drop", "passed": ok, "detail": detail, "mde": _num(d["mde"]), "warning": warning}
    ok = not (word == "worse" and mean < -x - GATE_EPS)
    if ok:
        detail = (f"delta {mean:+.4f} [{lo:+.4f}, {hi:+.4f}]: no drop larger than {x:g} shown"
                  if math.isfinite(lo) else f"delta {mean:+.4f}: no drop shown ({word})")
    else:
        detail = f"delta {mean:+.4f} [{lo:+.4f}, {hi:+.4f}] lies below 0 and below -{x:g}"
    detectable = max(_num(d["mde"]), x + t_pow * se) if math.isfinite(se) else NAN
    warning = None
    if math.isfinite(detectable) and x < _num(d["mde"]):
        warning = (f"this eval cannot reliably see a drop of {x:g}; it sees drops >= {detectable:.2f} "
                   "(80% power): add items or epochs")
    return {"name": "max-drop", "passed": ok, "detail": detail, "mde": detectable, "warning": warning}


def _fail_under_check(result: CompareResult, gate: Gate) -> dict[str, Any]:
    c, x, level = result.candidate, float(gate.fail_under or 0.0), result.options.level
    mean, (lo, hi) = _num(c["mean"]), (_num(v) for v in c["ci95"])
    t_hi, t_pow = _power_t(level, c["items"])
    resolution = (t_hi + t_pow) * _num(c["se"])
    if gate.mode == "strict":
        bound, word = lo, "lower"
        ok = math.isfinite(lo) and lo >= x - GATE_EPS
    else:
        bound, word = (hi if math.isfinite(hi) else mean), "upper"
        ok = bound >= x - GATE_EPS
    detail = (f"candidate mean {mean:.4f}, interval {word} bound {bound:.4f} {'>=' if ok else '<'} {x:g}"
              if math.isfinite(bound) else f"candidate interval undefined (fewer than 2 items): cannot show >= {x:g}")
    return {"name": "fail-under", "passed": ok, "detail": detail, "mde": resolution, "warning": None}


def _improvement_check(result: CompareResult) -> dict[str, Any]:
    d, level = result.delta, result.options.level
    lo, hi = (_num(v) for v in d["ci95"])
    word = stats.direction(d, level)
    ok = word == "better"
    if word == "too few items to tell":
        detail = (f"too few items to tell: with {d['n']} paired items the permutation test cannot reach "
                  f"p < {1 - level:.2g}")
    elif math.isfinite(lo):
        detail = (f"delta interval [{lo:+.4f}, {hi:+.4f}], p {d['p_value']:.3g}: "
                  + ("an improvement" if ok else "no improvement shown"))
    else:
        detail = "delta interval undefined (fewer than 2 paired items)"
    return {"name": "require-improvement", "passed": ok, "detail": detail, "mde": _num(d["mde"]), "warning": None}


def item_drop_check(result: CompareResult, gate: Gate) -> dict[str, Any]:
    """--max-item-drop: an item fails when it dropped by more than X *and* its drop is significant after Holm.

    Each item is tested on its own epochs (stats.epoch_drop_p_values); the family is every paired item, so
    that picking the items to test on their observed drop cannot inflate the error rate. Items not past X are
    given p = 1 rather than tested, which can only make Holm stricter for the others.
    """
    import numpy as np

    x, alpha = float(gate.max_item_drop or 0.0), 1.0 - result.options.level
    items = result.items
    m = len(items)
    floors = np.array([stats.epoch_split_floor(int(b), int(c))
                       for b, c in zip(items["baseline_n"], items["candidate_n"])]) if m else np.zeros(0)
    big = (items["delta"] < -x - GATE_EPS).to_numpy()
    flagged: list[str] = []
    p = np.ones(m)
    reachable = bool(m) and floors.min() <= alpha / m  # Holm's first step asks p ≤ α/m of the smallest p
    if reachable and big.any() and result.baseline_records is not None and result.candidate_records is not None:
        ids = items["item_id"].to_numpy()[big]
        eb = _epochs_by_item(result.baseline_records, ids)
        ec = _epochs_by_item(result.candidate_records, ids)
        p[big] = stats.epoch_drop_p_values(eb, ec, result.options.seed)
    adjusted = np.minimum(1.0, stats.holm(p) if m else p)
    hit = big & (adjusted < alpha)
    flagged = items["item_id"][hit].tolist()
    warning = None
    if m and not reachable:
        kb, kc = int(items["baseline_n"].max()), int(items["candidate_n"].max())
        warning = (f"{kb}+{kc} epochs per item cannot show any single item's drop among {m} items (smallest "
                   f"possible p {floors.min():.3g} > {alpha:g}/{m}): --max-item-drop cannot fail; "
                   "add epochs to use it")
    ok = not flagged
    if ok:
        past = int(big.sum())
        detail = (f"no item dropped by more than {x:g} with significance (Holm across {m} items)" if not past else
                  f"{past} item(s) dropped by more than {x:g}, none significant after Holm across {m} items")
    else:
        shown = ", ".join(f"{i} ({dd:+.3f}, p_adj {pa:.3g})" for i, dd, pa in
                          zip(flagged[:5], items["delta"][hit].tolist()[:5], adjusted[hit].tolist()[:5]))
        more = f" and {len(flagged) - 5} more" if len(flagged) > 5 else ""
        detail = f"{len(flagged)} item(s) dropped by more than {x:g}, significant after Holm: {shown}{more}"
    return {"name": "max-item-drop", "passed": ok, "detail": detail, "mde": NAN, "warning": warning,
            "flagged": flagged, "p_adjusted": {i: pa for i, pa in zip(items["item_id"][big].tolist(),
                                                                      adjusted[big].tolist())}}


def _epochs_by_item(records: pd.DataFrame, ids: np.ndarray) -> list[np.ndarray]:
    import numpy as np

    sub = records[records["item_id"].isin(set(ids.tolist()))]
    groups = {k: v.to_numpy(dtype=np.float64) for k, v in sub.groupby("item_id", sort=False)["score"]}
    return [groups.get(i, np.zeros(0)) for i in ids]


def _error_rate_check(result: CompareResult, gate: Gate) -> dict[str, Any]:
    shares = [(side["label"], side.get("generation_error_share", 0.0)) for side in (result.baseline, result.candidate)]
    over = [(label, share) for label, share in shares if share > gate.max_error_rate + GATE_EPS]
    ok = not over
    detail = ("generation errors within " + f"{gate.max_error_rate:g} on both sides" if ok else
              "; ".join(f"{label}: {share:.1%} of records failed to generate (> {gate.max_error_rate:g})"
                        for label, share in over) + ": a broken run is not a verdict")
    return {"name": "error-rate", "passed": ok, "detail": detail, "mde": NAN, "warning": None}


def evaluate_gate(result: CompareResult, gate: Gate) -> dict[str, Any]:
    """Each active check with its power, one line per failure, one per warning. Equal to a threshold passes."""
    if gate.mode not in GATE_MODES:
        raise InputError(f"must be one of {', '.join(GATE_MODES)}, got {gate.mode!r}", field="--gate")
    checks: list[dict[str, Any]] = []
    if gate.fail_under is not None:
        checks.append(_fail_under_check(result, gate))
    if gate.max_drop is not None:
        checks.append(_drop_check(result, gate))
    if gate.require_improvement:
        checks.append(_improvement_check(result))
    flagged: list[str] = []
    if gate.max_item_drop is not None:
        item = item_drop_check(result, gate)
        flagged = item["flagged"]
        checks.append(item)
    if checks:
        checks.append(_error_rate_check(result, gate))
    failures = [f"{c['name']}: {c['detail']}" for c in checks if not c["passed"]]
    warnings = [f"{c['name']}: {c['warning']}" for c in checks if c.get("warning")]
    return {"passed": not failures, "failures": failures, "checks": checks, "warnings": warnings,
            "mode": gate.mode, "flagged_items": flagged}


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
    result = compare_sides(base, cand, o, fields)
    if Path(base.path).resolve() == Path(cand.path).resolve() and base.label == cand.label:
        result.notes.append("both sides are the same records: every delta is 0 by construction (give two files, "
                            "or --label twice)")
    return result


def load_sides(*sides: tuple[str | Path, str | None]) -> list[Side]:
    """Several sides read on threads: one side's single-threaded steps (regex, pandas) overlap the other's
    multi-threaded JSON parse. The first side's error wins, as if they were read in order."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=len(sides)) as pool:
        futures = [pool.submit(load_side, path, label) for path, label in sides]
        return [f.result() for f in futures]
