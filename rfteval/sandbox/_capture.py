"""A unit's output: the child's sys.stdout and sys.stderr write straight to the unit's output file, capped per
call; the supervisor (and the child, after each call) read it back, capped and marked. The standard library only.
"""

from __future__ import annotations

import os
from collections.abc import Iterable


class Capture:
    """sys.stdout and sys.stderr of a child: writes straight to fd 1, the unit's output file (so prints and C-level
    output stay in order, and what a dying call printed is already in the file for the supervisor), dropping
    what one call prints past the cap."""

    encoding = "utf-8"
    errors = "replace"

    def __init__(self, cap: int):
        self.cap = cap
        self.written = 0
        self.truncated = False
        self.buffer = _BytesCapture(self)

    def write(self, text: str) -> int:
        if type(text) is not str:
            if not isinstance(text, str):
                raise TypeError(f"write() argument must be str, not {type(text).__name__}")
            text = str.__str__(text)
        if not text:
            return 0
        data = text.encode("utf-8", "replace")
        room = self.cap - self.written
        if len(data) > room:
            self.truncated = True
            data = data[:max(room, 0)]
        if data:
            self.written += len(data)
            view = memoryview(data)
            try:
                while view:
                    view = view[os.write(1, view):]
            except OSError:  # the disk or file size limit: what fits is kept
                self.truncated = True
        return len(text)

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        pass

    def fileno(self) -> int:
        return 1

    def isatty(self) -> bool:
        return False

    def writable(self) -> bool:
        return True

    def readable(self) -> bool:
        return False


class _BytesCapture:
    """sys.stdout.buffer for graders that write bytes."""

    def __init__(self, text: Capture):
        self.text = text

    def write(self, data: bytes) -> int:
        self.text.write(bytes(data).decode("utf-8", "replace"))
        return len(data)

    def flush(self) -> None:
        pass


def truncation_marker(cap: int) -> str:
    return f"\n[rfteval: output truncated at {cap // 1024} KB]"


def read_output(fd: int, cap: int, truncated: bool = False) -> str | None:
    """What the output file holds (one call's output), capped and marked; None when empty."""
    try:
        size = os.fstat(fd).st_size
        data = os.pread(fd, min(size, cap), 0) if size else b""
    except OSError:
        return None
    truncated = truncated or size > cap
    if not data and not truncated:
        return None
    text = data.decode("utf-8", "replace")
    return text + truncation_marker(cap) if truncated else text
