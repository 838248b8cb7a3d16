"""`rfteval batches DIR`: the batches of a run directory, from its journal; `--cancel` cancels the open ones."""

from __future__ import annotations

from pathlib import Path

import typer

from rfteval.cli.commands.common import command
from rfteval.status import ExitStatus

_HELP = """List the Batch API batches of a run directory (`rfteval run --batch`), from DIR/store/batches.jsonl:
chunk, model, batch id, status and request counts as last seen. --cancel cancels every open one at the provider
(what already finished is still collected by the next `rfteval run`)."""


@command("batches", help=_HELP, no_args_is_help=True)
def batches_command(
    run_dir: Path = typer.Argument(..., metavar="DIR", help="A run directory (--out of rfteval run)."),
    cancel: bool = typer.Option(False, "--cancel", help="Cancel every open batch of this run at the provider."),
) -> None:
    from rfteval.errors import InputError
    from rfteval.run.batch.journal import read_journal
    from rfteval.run.batch.phase import cancel_open_batches

    if not (run_dir / "store").is_dir():
        raise InputError("not a run directory (no store/ in it)", run_dir)
    chunks = read_journal(run_dir)
    if not chunks:
        typer.echo(f"{run_dir}: no batches")
        raise typer.Exit(ExitStatus.SUCCESS)
    if cancel:
        for line in cancel_open_batches(run_dir):
            typer.echo(line)
        chunks = read_journal(run_dir)
    header = ("chunk", "model", "batch", "status", "done/total", "failed", "lines")
    rows = []
    for c in chunks:
        total = c.counts.get("total") or c.lines
        done: object = c.counts.get("completed", 0)  # only shown
        status = c.status + (" (cancel requested)" if c.cancel_requested and c.live else "")
        if c.done and c.result.get("stored") is not None:
            done = c.result.get("stored", 0)
            status += f", collected: {c.result.get('stored', 0)} stored, {c.result.get('requeued', 0)} re-queued"
        rows.append((c.chunk_id, c.model, c.batch_id or ("uploaded " + c.file_id if c.file_id else "-"), status,
                     f"{done}/{total}", str(c.counts.get("failed", 0)), str(c.lines)))
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for r in [header, *rows]:
        typer.echo("  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip())
    open_n = sum(1 for c in chunks if c.live and (c.batch_id or c.file_id))
    typer.echo(f"{len(chunks)} batch(es), {open_n} open" + (f": re-run the same `rfteval run ... --batch --out "
                                                           f"{run_dir}` to collect them" if open_n else ""))
