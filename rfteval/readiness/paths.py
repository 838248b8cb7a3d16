"""`rfteval readiness` as one library call: a run directory or record file in, its readiness report out; the edge
where readiness touches files (the records found and read, the GRPO advantages written back into them)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from rfteval.data.outfile import replace_atomically
from rfteval.errors import InputError
from rfteval.limits import GROUP_SIZE
from rfteval.readiness.advantages import grpo_advantages

if TYPE_CHECKING:
    import pandas as pd

    from rfteval.graders.base import GradeOptions
    from rfteval.readiness.report import ReadinessReport, Thresholds


@dataclass(frozen=True)
class ReadinessRequest:
    """What `rfteval readiness` was asked for; grader and dataset default to those the run's spec names."""

    run: Path
    label: str | None = None
    grader: Path | None = None
    dataset: Path | None = None
    thresholds: Thresholds | None = None
    group_size: int = GROUP_SIZE
    regrade: int = 0
    seed: int = 0
    options: GradeOptions | None = None
    errors: str = "exclude"
    write_advantages: bool = False
    unsafe_python_graders: bool = False
    columns: tuple[str, ...] | None = None  # read only these record fields (None: all); see SIGNAL_COLUMNS


# What the assessment reads of each record apart from the outputs: the viewer's Readiness page reads only these
# (about a third of the memory of every field on large runs, bench/README.md), leaving out the answer-skew check,
# the one check that reads output texts (`assess` skips it when the records have no output field)
SIGNAL_COLUMNS = ("model_label", "item_id", "epoch", "score", "error", "truncated_in_reasoning")


@dataclass(frozen=True)
class AssessedPath:
    """The report, and the files it came from (the grader and dataset found in the spec when not given)."""

    report: ReadinessReport
    grader: Path | None
    dataset: Path | None
    advantages_written: list[Path] = field(default_factory=list)


def assess_path(request: ReadinessRequest) -> AssessedPath:
    """Find the records (rundir.locate_records), the grader and dataset (flags, else the run's spec), check that a
    re-grade has what it needs, assess, and write the GRPO advantages when asked. An InputError the assessment
    raises without a file names the records file."""
    from rfteval.data import rundir
    from rfteval.readiness.assessment import assess, coverage
    from rfteval.readiness.report import Thresholds

    r = request
    if r.regrade and r.columns is not None:
        raise InputError("a re-grade reads the outputs: give no column selection", field="--regrade")
    directory = r.run if r.run.is_dir() else r.run.parent
    spec_dataset, spec_grader = (rundir.spec_paths(directory) if r.run.exists() and (r.grader is None or
                                                                                     r.dataset is None)
                                 else (None, None))
    grader = r.grader or spec_grader
    columns = r.columns
    if columns is not None and grader is None:  # no grader file: the range comes from the records' grade_details
        columns = (*columns, "grade_details")
    rows = None
    if columns is None:  # every field: the records as read stay at hand for the sampling check below
        rows, df, chosen, files, directory = rundir.locate_record_rows(r.run, r.label)
    else:
        df, chosen, files, directory = rundir.locate_records(r.run, r.label, columns)
    dataset = r.dataset or spec_dataset
    if r.regrade and (grader is None or dataset is None):
        raise InputError(f"needs --grader and --dataset (or a {rundir.RESOLVED_SPEC} naming them)", field="--regrade")
    config = items = None
    options = r.options
    if grader is not None:
        from rfteval.graders.loader import load_grader

        config = load_grader(grader)
        if r.regrade:  # the grader runs only to re-grade, in a sandbox as --unsafe-python-graders says
            from rfteval.graders.base import GradeOptions
            from rfteval.graders.paths import require_sandbox

            options = options or GradeOptions()
            options = replace(options, sandbox=replace(options.sandbox, unsafe=r.unsafe_python_graders))
            require_sandbox(config, options.sandbox)
    if dataset is not None:
        from rfteval.readiness.assessment import items_map

        items = items_map(dataset)
    if r.regrade and items is not None:
        missing = sorted({str(i) for i in df["item_id"]} - set(items))
        if missing:
            raise InputError(f"item {missing[0]!r} of the records is not in the dataset", dataset, field="id")
    # every epoch one answer although sampling was asked for: from the records read above when they hold every
    # field, else from the file (the viewer's columns hold no texts); records with no label cannot be matched to the
    # spec's temperature
    flat = None
    if chosen is not None:
        from rfteval.data.sampling_check import asked_temperature, check_file, check_records

        asked = asked_temperature(directory, chosen)
        flat = (check_records(rows.dicts(), chosen, asked) if rows is not None and asked is not None
                else check_file(files[0], chosen, asked))
    try:
        thresholds = r.thresholds if r.thresholds is not None else Thresholds()
        report = assess(df, config, items, thresholds, group_size=r.group_size, label=chosen,
                        regrade_n=r.regrade, seed=r.seed, options=options, errors=r.errors, not_sampling=flat)
    except InputError as exc:  # name the records file when the library could not
        if exc.file is None and not (exc.field or "").startswith("--"):
            exc.file = files[0]
        raise
    report.coverage = coverage(df, chosen, *_asked(directory, items))
    written = write_advantages(files, chosen, r.errors) if r.write_advantages else []
    return AssessedPath(report, grader, dataset, written)


def _asked(directory: Path, items: Mapping[str, object] | None) -> tuple[list[str] | int | None, int | None]:
    """What the run behind the records was asked for: (its items, or how many; its epochs). From its summary.json
    (the run's own count: a --limit run asks for the dataset's first N), else its spec's epochs and the dataset's
    items; None where neither says, and the records are then taken as the whole."""
    import json
    import tomllib

    from rfteval.data import rundir

    epochs = n = None
    try:
        summary = json.loads((directory / rundir.SUMMARY).read_text(encoding="utf-8"))
        n, epochs = int(summary["items"]), int(summary["epochs"])
    except (OSError, ValueError, KeyError, TypeError):
        try:
            epochs = int(tomllib.loads((directory / rundir.RESOLVED_SPEC).read_text(encoding="utf-8"))["epochs"])
        except (OSError, ValueError, KeyError, TypeError, tomllib.TOMLDecodeError):
            epochs = None
    if items is not None:
        return list(items)[:n] if n is not None else list(items), epochs
    return n, epochs


def write_advantages(files: list[Path], label: str | None, errors: str = "exclude") -> list[Path]:
    """Write GRPO advantages of one label into its record files, each replaced atomically (`errors`: the policy for
    generation errors, as in `readiness.effective_scores`)."""
    written = []
    for path in files:
        if path.suffix == ".parquet":
            _write_parquet_advantages(path, label, errors)
        else:
            _write_jsonl_advantages(path, label, errors)
        written.append(path)
    return written


def _label_rows(df: pd.DataFrame, label: str | None) -> pd.Series:
    import pandas as pd

    if label is None or "model_label" not in df:
        return pd.Series(True, index=df.index)
    return df["model_label"].astype(str) == label


def _write_jsonl_advantages(path: Path, label: str | None, errors: str) -> None:
    from rfteval.data.records import decode_records, records_frame, write_jsonl

    records = list(decode_records(path))
    df = records_frame(records)
    mine = _label_rows(df, label)
    adv = grpo_advantages(df[mine], errors)
    for pos, (idx, is_mine) in enumerate(mine.items()):
        if is_mine:
            value = float(adv.loc[idx])
            records[pos].advantage = value if math.isfinite(value) else None
    write_jsonl(records, path)


def _write_parquet_advantages(path: Path, label: str | None, errors: str) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from rfteval.data.records import read_parquet_records

    table = read_parquet_records(path)
    df = table.to_pandas()
    mine = _label_rows(df, label)
    adv = grpo_advantages(df[mine], errors)
    old = df["advantage"].tolist() if "advantage" in df else [None] * len(df)
    values = []
    for (idx, is_mine), before in zip(mine.items(), old):
        v = float(adv.loc[idx]) if is_mine else before
        values.append(v if v is not None and math.isfinite(v) else None)
    column = pa.array(values, pa.float64())
    i = table.schema.get_field_index("advantage")
    table = table.set_column(i, "advantage", column) if i >= 0 else table.append_column("advantage", column)
    replace_atomically(path, lambda tmp: pq.write_table(table, tmp))
