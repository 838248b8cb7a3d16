"""The run directory: its file names, which file holds which model's records, and what its spec names.

One place for what `rfteval run` writes and every other command reads (DIR/<label>.jsonl, results.parquet,
summary.json, spec.resolved.toml, store/...), so the commands and the library agree on it.
"""

from __future__ import annotations

import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rfteval.errors import InputError

if TYPE_CHECKING:
    import pandas as pd

    from rfteval.data.records import RecordRows

STORE = "store"  # the append-only logs, the index and the lock
RESPONSES = "responses.jsonl"  # in store/
GRADES = "grades.jsonl"  # in store/
ROLLOUTS = "rollouts.jsonl"  # in store/: an agent run's finished rollouts (rfteval.run.rollout)
TOOL_TURNS = "tools.jsonl"  # in store/: an agent run's executed tool turns
INDEX = "index.sqlite"  # in store/
JOURNAL = "batches.jsonl"  # in store/: the Batch API journal (rfteval.run.batch.phase writes and reads it)
CHUNK_DIR = "batch"  # in store/: batch input files until they are collected
RUN_FILE = "run.json"
RESULTS = "results.parquet"
SUMMARY = "summary.json"
RESOLVED_SPEC = "spec.resolved.toml"
BASELINE = "base"  # the label the others are compared against, when there is one
JUDGE_CACHE = "judge_cache.jsonl"  # model-grader answers: run's in its directory, grade's beside its records
NOT_RECORDS = frozenset({"judge_cache"})  # JSONL files of a run directory that are not a model's records


def baseline_label(labels: Sequence[str]) -> str:
    """The model the others are compared against: the one labelled `base`, else the first."""
    return BASELINE if BASELINE in labels else labels[0]


def choose_label(labels: Sequence[str], asked: str | None, field: str, guess_first: bool = True) -> str | None:
    """The one label rule: the label asked for (it must be there), else the only one, else `base`, else the first
    (`baseline_label`, as `rfteval run` and a series choose), or, with guess_first=False (readiness assesses one
    model: the first of several is no better a guess than any other), an InputError asking for one."""
    if asked is not None:
        if asked not in labels:
            raise InputError(f"no records for label {asked!r} (labels: {', '.join(labels) or 'none'})", field=field)
        return asked
    if len(labels) <= 1:
        return labels[0] if labels else None
    if BASELINE in labels or guess_first:
        return baseline_label(labels)
    raise InputError(f"records hold several labels ({', '.join(sorted(labels))}); choose one", field=field)


def pick_label(records_df: pd.DataFrame, label: str | None) -> str | None:
    """The model label to assess (readiness, one label) among a frame's records: `choose_label` without a guess."""
    if "model_label" not in records_df or records_df.empty:
        return label
    labels = [str(x) for x in records_df["model_label"].dropna().unique()]
    return choose_label(labels, label, "--label", guess_first=False)


def run_labels(run_dir: Path) -> list[str]:
    """The model labels of a run directory in the spec's order (spec.resolved.toml, else summary.json), keeping
    those with a DIR/<label>.jsonl; without either file, the record files' names, sorted."""
    import json

    order: list[str] = []
    try:
        models = tomllib.loads((run_dir / RESOLVED_SPEC).read_text(encoding="utf-8")).get("models")
        if isinstance(models, dict):
            order = [str(k) for k in models]
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        pass
    if not order:
        try:
            models = json.loads((run_dir / SUMMARY).read_text(encoding="utf-8")).get("models")
            if isinstance(models, dict):
                order = [str(k) for k in models]
        except (OSError, UnicodeDecodeError, ValueError, AttributeError):
            pass
    present = {p.stem for p in run_dir.glob("*.jsonl")} - NOT_RECORDS
    if order:
        return [label for label in order if label in present]
    return sorted(present)


@dataclass(frozen=True)
class RecordFiles:
    """Where a path's records are: the files to read, the label that chose DIR/<label>.jsonl (None for a file given,
    a sole record file or results.parquet), and the directory whose spec.resolved.toml describes them."""

    files: list[Path]
    label: str | None
    directory: Path


PICKS = ("one", "base", "all")


def find_records(path: Path, label: str | None = None, pick: str = "one") -> RecordFiles:
    """The one lookup of a path's record files (a record file, or a run directory's DIR/<label>.jsonl, else its
    results.parquet), for every command that reads records. `pick` says what a directory without a label gives:
    "one" (compare) its only record file, several being bad input; "base" (readiness assesses one model) `base`,
    else its only record file; "all" (agree) every label's file, in the spec's order (`run_labels`)."""
    if pick not in PICKS:
        raise ValueError(f"pick must be one of {PICKS}, got {pick!r}")
    if not path.exists():
        raise InputError("no such file or directory", path)
    if path.is_file():
        return RecordFiles([path], None, path.parent)
    parquet = path / RESULTS
    present = sorted(p.stem for p in path.glob("*.jsonl") if p.stem not in NOT_RECORDS)
    if pick == "all":
        labels = run_labels(path)
        if labels:
            return RecordFiles([path / f"{name}.jsonl" for name in labels], None, path)
    elif label is None and (pick == "base" and BASELINE in present or len(present) == 1):
        chosen = BASELINE if pick == "base" and BASELINE in present else present[0]
        return RecordFiles([path / f"{chosen}.jsonl"], chosen if pick == "base" else None, path)
    elif label is not None and label in present:
        return RecordFiles([path / f"{label}.jsonl"], label, path)
    if parquet.is_file() and (label is not None or pick != "one" or not present):
        return RecordFiles([parquet], None, path)
    if label is not None:
        if pick == "base":
            raise InputError(f"no records for label {label!r} (no {label}.jsonl, no {RESULTS})", path, field="--label")
        raise InputError(f"no records for label {label!r} (labels here: {', '.join(present) or 'none'})", path,
                         field="--label")
    if pick == "base":
        raise InputError(f"cannot tell which records to assess (record files: {', '.join(present) or 'none'}); use "
                         "--label", path)
    if not present:
        raise InputError("no record files (*.jsonl or results.parquet) in this directory", path)
    raise InputError(f"holds several models ({', '.join(present)}); name one with --label", path, field="--label")


def _pick(df: pd.DataFrame, label: str | None, source: Path) -> str | None:
    try:
        return pick_label(df, label)
    except ValueError as exc:
        raise InputError(f"{exc} (use --label)", source, field="--label") from None


def locate_records(run: Path, label: str | None, columns: Sequence[str] | None = None,
                   ) -> tuple[pd.DataFrame, str | None, list[Path], Path]:
    """The records of one label (readiness), its label, the files holding them (with results.parquet beside a
    DIR/<label>.jsonl), and the directory to look for a spec in. `columns` keeps only those (a Parquet file reads
    only them: the viewer's readiness leaves the texts unread)."""
    from rfteval.data.records import read_records

    found = find_records(run, label, "base")
    (file,) = found.files
    df = read_records(file, columns)
    files = [file] + ([run / RESULTS] if found.label is not None and (run / RESULTS).exists() else [])
    return df, _pick(df, found.label or label, file), files, found.directory


def locate_record_rows(run: Path, label: str | None) -> tuple[RecordRows, pd.DataFrame, str | None, list[Path], Path]:
    """locate_records with every field, and the records as read (rfteval.data.records.RecordRows) beside their
    frame: what reads more of them (readiness's sampling check) takes them from there, not from the file again."""
    from rfteval.data.records import read_record_rows

    found = find_records(run, label, "base")
    (file,) = found.files
    rows = read_record_rows(file)
    df = rows.frame()
    files = [file] + ([run / RESULTS] if found.label is not None and (run / RESULTS).exists() else [])
    return rows, df, _pick(df, found.label or label, file), files, found.directory


def spec_paths(directory: Path) -> tuple[Path | None, Path | None]:
    """The dataset and grader named by DIR/spec.resolved.toml (top-level `dataset` and `grader`), if any."""
    import tomllib

    spec = directory / RESOLVED_SPEC
    if not spec.is_file():
        return None, None
    try:
        data = tomllib.loads(spec.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"invalid TOML ({exc})", spec) from None

    def resolve(key: str) -> Path | None:
        value = data.get(key)
        if not isinstance(value, str) or not value:
            return None
        p = Path(value).expanduser()
        for cand in (p, directory / p, spec.parent / p):
            if cand.exists():
                return cand
        return None

    return resolve("dataset"), resolve("grader")


def grader_path(directory: Path) -> str | None:
    """The grader file named by a run directory's spec.resolved.toml, when the records live in one: found where
    spec_paths finds it (as given, else relative to the directory), else the name as written."""
    import tomllib

    spec = directory / RESOLVED_SPEC
    try:
        grader = tomllib.loads(spec.read_text(encoding="utf-8")).get("grader")
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return None
    if not isinstance(grader, str) or not grader:
        return None
    for cand in (Path(grader).expanduser(), directory / grader):  # found as spec_paths finds it (readiness)
        if cand.exists():
            return str(cand)
    return grader


def spec_pricing(directory: Path) -> dict[str, dict[str, float]] | None:
    """The [pricing] table of a run directory's spec.resolved.toml (USD per million tokens, by model: what its
    rollouts cost, rfteval.providers.pricing.price_table's overrides); None without a spec or a table. An entry
    that is not {input, output, ...} numbers is left out: the price table falls back to its default for it."""
    spec = directory / RESOLVED_SPEC
    try:
        table = tomllib.loads(spec.read_text(encoding="utf-8")).get("pricing")
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return None
    if not isinstance(table, dict):
        return None
    out = {}
    for model, price in table.items():
        if isinstance(price, dict) and all(isinstance(price.get(k), (int, float)) for k in ("input", "output")):
            out[str(model)] = {k: float(v) for k, v in price.items() if isinstance(v, (int, float))}
    return out or None
