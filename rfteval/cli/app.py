"""The `rfteval` command: a thin Typer layer. Commands live in rfteval/cli/commands/, a few lines each."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import typer
from typer.core import TyperGroup

from rfteval.errors import InputError
from rfteval.status import ExitStatus

if TYPE_CHECKING:
    from typer._click.core import Context  # typer carries its own click: the Context its methods take


class _Group(TyperGroup):
    """Turns bad input anywhere below a command into one line on stderr and exit 2: the library's InputError, and
    the command line's own (an unknown option, a value of the wrong type), which click would print as four."""

    def invoke(self, ctx: Context) -> object:
        from typer._click.exceptions import NoArgsIsHelpError, UsageError

        try:
            return super().invoke(ctx)
        except InputError as exc:
            typer.echo(f"rfteval: {exc}", err=True)
            raise typer.Exit(ExitStatus.BAD_INPUT) from None
        except NoArgsIsHelpError:
            raise  # a bare command asks for its help: click prints it
        except UsageError as exc:
            typer.echo(usage_line(exc), err=True)
            raise typer.Exit(ExitStatus.BAD_INPUT) from None

    def list_commands(self, ctx: Context) -> list[str]:
        return list(self.commands)  # the order they were added: the order of the tour in the README


def usage_line(exc: Exception) -> str:
    """A command-line error as one line: the command, what is wrong, where the help is."""
    from typer._click.exceptions import UsageError

    assert isinstance(exc, UsageError)
    path = exc.ctx.command_path if exc.ctx is not None else "rfteval"
    message = " ".join(exc.format_message().split())
    return f"{path}: {message} (see '{path} --help')"


app = typer.Typer(
    cls=_Group,
    help="Eval harness for reinforcement fine-tuning: OpenAI graders run locally, base vs tuned over N epochs, "
    "paired statistics and a CI gate.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
validate_app = typer.Typer(cls=_Group, help="Check a dataset, grader or spec without running any model.",
                           no_args_is_help=True)
app.add_typer(validate_app, name="validate")


def version_callback(value: bool) -> None:
    if value:
        from rfteval import __version__

        typer.echo(f"rfteval {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=version_callback, is_eager=True,
                                 help="Print the version and exit."),
) -> None:
    pass


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:  # a command that handles Ctrl-C itself never gets here
        print("rfteval: interrupted", file=sys.stderr)
        sys.exit(ExitStatus.INTERRUPTED)


TOUR = ("init", "run", "compare", "view", "readiness", "probe-grader", "grade", "validate", "graders", "batches", "export-reward")


def _attach_commands() -> None:
    """Attach every command (rfteval.cli.commands.common.COMMANDS) to the app, listed in the README's order (TOUR)."""
    from rfteval.cli.commands import (  # noqa: F401  (importing a command module lists its commands)
        agree_cmd,
        batches_cmd,
        compare_cmd,
        export_dataset_cmd,
        export_environment_cmd,
        export_reward_cmd,
        grade_cmd,
        graders_cmd,
        init_cmd,
        readiness_cmd,
        run_cmd,
        validate_cmd,
        view_cmd,
    )
    from rfteval.cli.commands.common import COMMANDS

    order = {name: i for i, name in enumerate(TOUR)}
    for group, name, function, options in sorted(COMMANDS, key=lambda c: order.get(c[1], len(order))):
        (validate_app if group == "validate" else app).command(name, **options)(function)


_attach_commands()

if __name__ == "__main__":  # python -m rfteval.cli.app
    main()
