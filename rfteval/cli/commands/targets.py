"""The export commands' --target option, whose choices are the trainer registry's (rfteval.reward.targets).

The registry fills as rfteval.reward imports the trainers' modules, which would slow every command's start-up: so
the option is built with a placeholder metavar and help, and `TargetCommand` writes the registry's names into them
when its command is run (or asked for --help), before any parsing. A value is checked against the same names."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, cast

import typer
import typer.core

if TYPE_CHECKING:
    from typer._click.core import Context  # typer carries its own click: the Context its methods take

    from rfteval.reward.targets import Export

TARGETS = "{targets}"  # where a --target option's help lists the targets (their summaries)


def _checker(export: Export) -> Callable[[str], str]:
    def check(value: str) -> str:
        from rfteval.reward.targets import targets

        names = targets(export)
        if value not in names:
            raise ValueError(f"{value!r} is not one of {', '.join(map(repr, names))}.")
        return value

    return check


def target_option(export: Export, help: str = TARGETS + ".") -> str:
    """A required --target option over one export's targets; `help` holds TARGETS where they are to be listed."""
    option: str = typer.Option(..., "--target", metavar="TARGET", parser=_checker(export), help=help)
    return option


class TargetCommand(typer.core.TyperCommand):
    """A command with a --target option over the registry's targets of `export` (set by `for_export`)."""

    export: Export

    @classmethod
    def for_export(cls, export: Export) -> type[TargetCommand]:
        return cast("type[TargetCommand]", type(f"{export.title()}TargetCommand", (cls,), {"export": export}))

    def make_context(self, info_name: str | None, args: list[str], parent: Context | None = None,
                     **extra: object) -> Context:
        from rfteval.reward.targets import summaries, targets

        for param in self.params:
            if isinstance(param, typer.core.TyperOption) and param.name == "target" and param.metavar == "TARGET":
                names = targets(self.export)
                param.metavar = "|".join(names) if len(names) > 1 else "TARGET"
                if param.help is not None:
                    param.help = param.help.replace(TARGETS, summaries(self.export))
        return super().make_context(info_name, args, parent, **extra)
