"""Every file a command writes goes through here: checked up front, written whole or not at all.

A bad output path (a directory, a path under a regular file, one of the command's own inputs) is one line
naming it and exit 2, raised before any work is done; a write that fails halfway leaves no temp file and no
half-written result, and never an overwritten input.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

from rfteval.errors import InputError


def _same(a: Path, b: Path) -> bool:
    try:
        return a.exists() and b.exists() and os.path.samefile(a, b)
    except OSError:
        return False


def check_output(path: str | Path, inputs: Iterable[str | Path | None] = (), flag: str | None = None) -> Path:
    """The path, once it is known to be writable as a file and not one of `inputs`; else InputError."""
    path = Path(path)
    for given in inputs:
        if given is None:
            continue
        if path.resolve() == Path(given).resolve() or _same(path, Path(given)):
            raise InputError(f"is also an input of this command ({given}): refusing to overwrite it", path, field=flag)
    if path.is_dir():
        raise InputError("is a directory; give a file name", path, field=flag)
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise InputError(f"cannot write under {parent}: it is a file, not a directory", path, field=flag)
            if not os.access(parent, os.W_OK):
                raise InputError(f"cannot write in {parent}: permission denied", path, field=flag)
            break
    return path


def write_output(path: str | Path, write: Callable[[Path], object], inputs: Iterable[str | Path | None] = (),
                 flag: str | None = None) -> Path:
    """A command's output file: checked first (check_output), then written whole (replace_atomically).

    An OSError becomes one InputError naming the path.
    """
    path = check_output(path, inputs, flag)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        return replace_atomically(path, write)
    except OSError as exc:
        raise InputError(f"cannot write ({exc.strerror})", path, field=flag) from None


def replace_atomically(path: str | Path, write: Callable[[Path], object]) -> Path:
    """Call `write(tmp)` on a temporary file beside `path`, then rename it into place (atomic on one filesystem).

    The one place rfteval writes a file whole or not at all: any failure removes the temporary file, and a reader
    never sees half of it. The file gets the usual mode (0644 less the umask), not mkstemp's 0600.
    """
    path = Path(path)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        write(tmp)
        os.chmod(tmp, 0o666 & ~_UMASK)
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def write_text_atomic(path: str | Path, text: str) -> Path:
    return replace_atomically(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def write_bytes_atomic(path: str | Path, data: bytes) -> Path:
    return replace_atomically(path, lambda tmp: tmp.write_bytes(data))


def write_json_atomic(path: str | Path, obj: object) -> Path:
    """Indented JSON, as summary.json and run.json are: for people as much as for programs (a value JSON has no
    word for is written as its text)."""
    return write_text_atomic(path, json.dumps(obj, indent=2, ensure_ascii=False, default=str) + "\n")


def _read_umask() -> int:
    """The process's umask, read once: os.umask can only be read by setting it, which races other threads."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


_UMASK = _read_umask()
