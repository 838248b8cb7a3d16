"""The one exception type for bad input, rendered as a single `FILE:LINE: field: message` line."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass
class InputError(Exception):
    """Bad input from a user's file or flag; the CLI prints `str(self)` and exits 2."""

    message: str
    file: str | Path | None = None
    line: int | None = None
    field: str | None = None

    def __str__(self) -> str:
        where = ""
        if self.file is not None:
            where = str(self.file)
            if self.line is not None:
                where += f":{self.line}"
            where += ": "
        field = f"{self.field}: " if self.field else ""
        return f"{where}{field}{self.message}"


class InputErrors(InputError):
    """Several problems found in one pass; the first is the message, the rest are counted."""

    def __init__(self, errors: list[InputError]):
        self.errors = errors
        first = errors[0]
        super().__init__(first.message, first.file, first.line, first.field)

    def __str__(self) -> str:
        first = InputError.__str__(self.errors[0])
        more = len(self.errors) - 1
        return first if not more else f"{first} (and {more} more problem{'s' if more > 1 else ''})"


def read_input_text(path: str | Path, expected: str) -> str:
    """A user's text file, or one InputError saying why it cannot be read (`expected`: e.g. "a JSON file")."""
    path = Path(path)
    try:
        return path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise InputError("no such file", path) from None
    except IsADirectoryError:
        raise InputError(f"is a directory, expected {expected}", path) from None
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8 text ({exc.reason})", path) from None
