"""`rfteval validate dataset|grader`: check inputs without running any model."""

from __future__ import annotations

from pathlib import Path

import typer

from rfteval.cli import validate_app
from rfteval.status import ExitStatus


@validate_app.command("dataset")
def validate_dataset(path: Path = typer.Argument(..., help="Dataset JSONL.")) -> None:
    """List every problem in a dataset (file:line: field: what is wrong); exit 2 when there is one."""
    from rfteval.dataset import check_dataset

    count, errors = check_dataset(path)
    for e in errors:
        typer.echo(str(e), err=True)
    if errors:
        typer.echo(f"{path}: {count} valid items, {len(errors)} problems", err=True)
        raise typer.Exit(ExitStatus.BAD_INPUT)
    if count == 0:
        typer.echo(f"{path}: the dataset has no items", err=True)
        raise typer.Exit(ExitStatus.BAD_INPUT)
    typer.echo(f"{path}: {count} items, no problems")


@validate_app.command("grader")
def validate_grader(
    path: Path = typer.Argument(..., help="Grader JSON: a grader, {\"grader\": ...} or a fine-tuning job."),
    dataset: Path | None = typer.Option(None, "--dataset", "-d",
                                        help="Also grade each item's reference answer as if it were the output."),
    reference_template: str | None = typer.Option(
        None, "--reference-template",
        help="How a reference becomes an output, e.g. '{\"predicted\": {{item.reference_answer}}}'."),
    grader_timeout: float = typer.Option(120.0, "--grader-timeout"),
) -> None:
    """Check a grader config; with --dataset, report the share of reference answers that score the maximum."""
    from rfteval.graders import GradeOptions, load_grader
    from rfteval.reference import describe_grader, reference_check

    config = load_grader(path)
    for line in describe_grader(config):
        typer.echo(line)
    if dataset is None:
        return
    from rfteval.dataset import load_dataset

    report = reference_check(load_dataset(dataset), config, GradeOptions(python_timeout_s=grader_timeout),
                             reference_template)
    typer.echo(report["text"])
