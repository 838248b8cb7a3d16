"""Every file a command writes goes through here: checked up front, written whole or not at all.

A bad output path (a directory, a path under a regular file, one of the command's own inputs) is one line
naming it and exit 2, raised before any work is done; a write that fails halfway leaves no temp file and no
half-written result, and never an overwritten input.
"""

from __future__ import annotations

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
    """Call `write(tmp)` on a temporary file beside `path`, then rename it into place (atomic on one filesystem).

    Any failure removes the temporary file; an OSError becomes one InputError naming the path.
    """
    path = check_output(path, inputs, flag)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise InputError(f"cannot write ({exc.strerror})", path, field=flag) from None
    os.close(fd)
    tmp = Path(name)
    try:
        write(tmp)
        os.chmod(tmp, 0o644 & ~_umask())
        tmp.replace(path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise InputError(f"cannot write ({exc.strerror})", path, field=flag) from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
