"""cli/commands/targets.py: a --target option built before the registry is read gets the registry's names as its
metavar and their summaries in its help when its command runs, and refuses a value that is none of them."""

from __future__ import annotations

import typer
from typer.testing import CliRunner

from rfteval.cli.commands.targets import TARGETS, TargetCommand, target_option
from rfteval.reward.targets import Export, summaries, targets


def one_command_app(export: Export = "environment") -> typer.Typer:
    app = typer.Typer()

    @app.command(cls=TargetCommand.for_export(export))
    def run(target: str = target_option(export, help="Where to: " + TARGETS + ".")) -> None:
        print(f"target={target}")

    return app


def test_the_option_lists_the_registrys_targets_and_takes_only_them() -> None:
    runner = CliRunner()
    names = targets("environment")
    assert names == ["prime-rl"]
    help_text = runner.invoke(one_command_app(), ["--help"]).output
    assert "TARGET" in help_text and TARGETS not in help_text  # one target: the metavar stays TARGET
    assert " ".join(summaries("environment").split()) in " ".join(help_text.replace("│", " ").split())
    assert runner.invoke(one_command_app(), ["--target", "prime-rl"]).output == "target=prime-rl\n"
    bad = runner.invoke(one_command_app(), ["--target", "trl"])
    assert bad.exit_code == 2 and "'trl' is not one of 'prime-rl'." in bad.output
    assert "trl|verl|openrlhf" in runner.invoke(one_command_app("reward"), ["--help"]).output
