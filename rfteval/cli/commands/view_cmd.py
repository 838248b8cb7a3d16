"""`rfteval view PATH...`: look at the samples behind a comparison in a browser (rfteval.view)."""

from __future__ import annotations

from pathlib import Path

import typer

from rfteval.cli.commands.common import AGREE_MAX_BIAS, AGREE_MIN_KAPPA, AGREE_PASS_THRESHOLD, command

EPILOG = """\b
  rfteval view runs/demo-chipstack                      # Runs, Compare, Item pages on 127.0.0.1
  rfteval view runs/exp1 --dataset data.jsonl --by difficulty
  rfteval view --agree runs/a runs/b                    # where two graders disagree
  rfteval view --agree runs/a runs/b --pass-threshold 0.5 --min-kappa 0.6   # kappa and agree's gate on the page
  rfteval view runs/exp1 --bundle view/                 # static copy: open view/index.html, no server
Needs the view extra: pip install 'rfteval[view]' (not for --bundle)."""


@command("view", epilog=EPILOG, no_args_is_help=True)
def view(
    paths: list[Path] = typer.Argument(None, help="Run directories or record files (JSONL or Parquet), as compare "
                                       "takes them.", show_default=False, metavar="PATH..."),
    dataset: Path | None = typer.Option(None, "--dataset", metavar="FILE", help="The dataset JSONL [default: the "
                                        "run's spec names it]."),
    by: list[str] = typer.Option([], "--by", metavar="FIELD", help="Slice by a dataset field (as compare --by); "
                                 "repeatable."),
    agree: tuple[Path, Path] | None = typer.Option(None, "--agree", metavar="PATH", help="Two graders' records of "
                                                    "the same samples: the Agree page."),
    pass_threshold: float | None = AGREE_PASS_THRESHOLD,
    min_kappa: float | None = AGREE_MIN_KAPPA,
    max_bias: float | None = AGREE_MAX_BIAS,
    host: str = typer.Option("127.0.0.1", "--host", metavar="HOST", help="Address to bind; other than loopback "
                             "prints a warning (no authentication)."),
    port: int = typer.Option(0, "--port", metavar="N", help="Port [default: a free one]."),
    no_open: bool = typer.Option(False, "--no-open", help="Do not open a browser."),
    bundle: Path | None = typer.Option(None, "--bundle", metavar="DIR", help="Write the pages as static files "
                                       "into DIR (opens from disk) instead of serving."),
    bundle_items: int = typer.Option(500, "--bundle-items", metavar="N", help="Items a bundle carries with "
                                     "their samples, lowest delta first."),
) -> None:
    """Look at samples: Runs, Compare (items by paired delta, filters, search), Item (both models' samples side
    by side, grader details, word diff), Series, Agree and Readiness pages, served on 127.0.0.1."""
    from rfteval.compare.agree import AgreeOptions
    from rfteval.compare.gate_types import AgreeGate
    from rfteval.view.paths import ViewRequest, view_request

    # the Agree page's numbers are `rfteval agree`'s, so it takes agree's threshold and gate, checked as agree checks
    agree_options = AgreeOptions(pass_threshold, gate=AgreeGate(min_kappa, max_bias))
    request = ViewRequest(list(paths or []), dataset, by, agree, host, port, not no_open, bundle, bundle_items,
                          agree_options)
    typer.echo(view_request(request), err=True)
