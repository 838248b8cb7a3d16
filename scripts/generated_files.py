"""The one write-or-check step of the scripts that generate committed files (recordings, graders' JSON).

Without --check a script writes each file whose committed text differs from what it generates; with --check it
writes nothing and names each stale file, exiting 1, which is what the tests run to keep the committed files true
to their generator.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path


def write_or_check(files: Mapping[Path, str], check: bool, script: str) -> int:
    """Write (or with `check`, only name) the files among `files` whose text on disk differs; the exit status."""
    stale = {path: text for path, text in files.items()
             if not path.is_file() or path.read_text(encoding="utf-8") != text}
    for path, text in stale.items():
        if check:
            print(f"out of date: {path} (run {script})", file=sys.stderr)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path}")
    return 1 if stale and check else 0
