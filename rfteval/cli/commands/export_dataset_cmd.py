"""`rfteval export-dataset`: RFT JSONL in a trainer's dataset shape, every field kept exactly through its loader."""

from __future__ import annotations

from enum import Enum
from pathlib import Path

import typer

from rfteval.cli.commands.common import command
from rfteval.cli.commands.targets import TargetCommand, target_option


class DeveloperRole(str, Enum):
    system = "system"
    keep = "keep"


@command("export-dataset", cls=TargetCommand.for_export("dataset"))
def export_dataset(
    items: Path = typer.Argument(..., help="The RFT dataset (JSONL, OpenAI's format)."),
    target: str = target_option("dataset"),
    out: Path = typer.Option(..., "--out", help="The folder to write (DIR/train.jsonl, or train.parquet for verl)."),
    reference_field: str = typer.Option("reference_answer", "--reference-field",
                                        help="verl's reward_model.ground_truth and verifiers' answer: this field."),
    data_source: str | None = typer.Option(None, "--data-source",
                                           help="verl's data_source column (default rfteval/<dataset name>)."),
    developer_role: DeveloperRole = typer.Option(DeveloperRole.system, "--developer-role",
                                                 help="system: a `developer` message goes to the trainer's chat "
                                                      "template as `system` (most open models' templates do not know "
                                                      "`developer`); keep: as it is. The item keeps it."),
) -> None:
    """Write the dataset as the trainer loads it: TRL's prompt column, verl's parquet, verifiers' prompt/answer/info,
    OpenRLHF's prompt/label JSONL. A field the trainer's loader would change is kept as JSON text, and rfteval's
    rewards read the original line back exactly."""
    from rfteval.reward.export_dataset import export_dataset as write

    done = write(items, target, out, data_source=data_source, reference_field=reference_field,
                 developer_role=developer_role.value)
    kept = f"; as JSON text (the loader would change them): {', '.join(done.as_json)}" if done.as_json else ""
    added = "; id added (rfteval's content hash)" if done.added_id else ""
    typer.echo(f"wrote {done.path} ({done.rows} rows{kept}{added})")
