"""`rfteval init DIR`: write a starter eval (dataset, grader, spec, CI gate) that `rfteval validate` passes."""

from __future__ import annotations

from pathlib import Path

import typer

from rfteval.cli.commands.common import command


@command("init")
def init(directory: Path = typer.Argument(..., help="Folder to write the starter into (made when missing; "
                                          "nothing in it is overwritten).")) -> None:
    """Write a starter eval into DIR: dataset.jsonl, grader.json, spec.toml (a placeholder local endpoint), a GitHub
    Actions gate (ci-gate.yml) and a README saying what to change; exit 2, writing nothing, when any of them exists."""
    from rfteval.data.starter import write_starter

    starter = write_starter(directory)
    for path in starter.files:
        typer.echo(f"wrote {path}")
    spec = directory / "spec.toml"
    typer.echo(f"next: set your server and models in {spec}, then `rfteval validate spec {spec}` and "
               f"`rfteval run {spec}`")
