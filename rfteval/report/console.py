"""The rich consoles commands print to: made here so that nothing outside report/ imports rich."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console

PIPED_WIDTH = 120  # logs and CI: wide enough that the tables do not wrap


def _piped_width() -> int:
    columns = os.environ.get("COLUMNS", "")
    return int(columns) if columns.isdigit() and int(columns) > 0 else PIPED_WIDTH


def stdout_console() -> Console:
    """The console for a command's tables: the terminal's width, or when piped COLUMNS if set, else 120."""
    from rich.console import Console

    console = Console()
    if console.is_terminal:
        return console
    return Console(width=_piped_width())


def stderr_console() -> Console:
    """The console for progress and one-line notes, so stdout stays the result alone. Piped (a log, CI), a note
    stays one line however long (soft wrap: a grep finds it whole), and tables take the stdout console's width."""
    from rich.console import Console

    console = Console(stderr=True)
    if console.is_terminal:
        return console
    return Console(stderr=True, width=_piped_width(), soft_wrap=True)


def plain_console(highlight: bool = True) -> Console:
    """A console with rich's own width detection (the terminal's, else 80), for commands that always used it."""
    from rich.console import Console

    return Console(highlight=highlight)
