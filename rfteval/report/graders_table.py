"""`rfteval graders`' two tables: the grader types, then the ready-made configs."""

from __future__ import annotations

from collections.abc import Iterable


def print_graders(types: Iterable[tuple[str, str, str]], ready: Iterable[tuple[str, str, str]]) -> None:
    """Rows are (type, what it does, origin) and (file, type, name), already worded by the command."""
    from rich.table import Table

    from rfteval.report.console import plain_console

    console = plain_console()
    table = Table(title="Grader types", title_justify="left")
    table.add_column("type")
    table.add_column("what it does")
    table.add_column("origin")
    for row in types:
        table.add_row(*row)
    console.print(table)
    table = Table(title="Ready-made graders", title_justify="left")
    for col in ("file", "type", "name"):
        table.add_column(col)
    for row in ready:
        table.add_row(*row)
    console.print(table)
