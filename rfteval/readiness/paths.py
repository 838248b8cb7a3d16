"""`rfteval readiness` as one library call: a run directory or record file in, its readiness report out."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from rfteval.errors import InputError

if TYPE_CHECKING:
    from rfteval.graders.base import GradeOptions
    from rfteval.readiness.assessment import ReadinessReport, Thresholds


@dataclass(frozen=True)
class ReadinessRequest:
    """What `rfteval readiness` was asked for; grader and dataset default to those the run's spec names."""

    run: Path
    label: str | None = None
    grader: Path | None = None
    dataset: Path | None = None
    thresholds: Thresholds | None = None
    group_size: int = 8
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
    from rfteval.readiness.assessment import Thresholds, assess, write_advantages

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
    df, chosen, files, directory = rundir.locate_records(r.run, r.label, columns)
    dataset = r.dataset or spec_dataset
    if r.regrade and (grader is None or dataset is None):
        raise InputError(f"needs --grader and --dataset (or a {rundir.RESOLVED_SPEC} naming them)", field="--regrade")
    config = items = None
    if grader is not None:
        from rfteval.graders.loader import load_grader

        config = load_grader(grader)
        if r.regrade:  # the grader runs only to re-grade
            from rfteval.graders.paths import require_sandbox

            require_sandbox(config, r.unsafe_python_graders)
    if dataset is not None:
        from rfteval.readiness.assessment import items_map

        items = items_map(dataset)
    if r.regrade and items is not None:
        missing = sorted({str(i) for i in df["item_id"]} - set(items))
        if missing:
            raise InputError(f"item {missing[0]!r} of the records is not in the dataset", dataset, field="id")
    try:
        thresholds = r.thresholds if r.thresholds is not None else Thresholds()
        report = assess(df, config, items, thresholds, group_size=r.group_size, label=chosen,
                        regrade_n=r.regrade, seed=r.seed, options=r.options, errors=r.errors)
    except InputError as exc:  # name the records file when the library could not
        if exc.file is None and not (exc.field or "").startswith("--"):
            exc.file = files[0]
        raise
    written = write_advantages(files, chosen, r.errors) if r.write_advantages else []
    return AssessedPath(report, grader, dataset, written)
