"""`rfteval graders`: the grader types and the ready-made configs."""

from __future__ import annotations

from pathlib import Path

from rfteval.cli.commands.common import command


def ready_made_dirs() -> list[Path]:
    """graders/ of the working directory, then of the source tree when it differs (an editable install)."""
    here = Path(__file__).resolve().parents[3] / "graders"
    cwd = Path.cwd() / "graders"
    dirs = [cwd] if cwd.is_dir() else []
    if here.is_dir() and (not dirs or cwd.resolve() != here):
        dirs.append(here)
    return dirs


def ready_made_files() -> list[tuple[Path, str]]:
    """Each ready-made grader once (the same file in two checkouts is one), as a path usable from here."""
    seen: set[tuple[str, bytes]] = set()
    out = []
    for folder in ready_made_dirs():
        for path in sorted(folder.glob("*.json")):
            try:
                key = (path.name, path.read_bytes())
            except OSError:
                continue
            if key in seen:
                continue
            seen.add(key)
            try:
                shown = str(path.resolve().relative_to(Path.cwd().resolve()))
            except ValueError:
                shown = str(path.resolve())
            out.append((path, shown))
    return out


@command("graders")
def graders() -> None:
    """List the grader types and the ready-made grader configs."""
    import rfteval.graders  # noqa: F401  (every built-in type registers itself)
    from rfteval.graders.base import REGISTRY
    from rfteval.report.graders_table import print_graders

    types = [(name, entry.summary, "rfteval extension" if entry.extension else "OpenAI")
             for name, entry in REGISTRY.items()]
    print_graders(types, list(_ready_rows()))


def _ready_rows() -> list[tuple[str, str, str]]:
    """(file, type, name) of each ready-made grader that parses; one that does not is left out of the list."""
    import json

    rows = []
    for path, shown in ready_made_files():
        try:
            obj = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        rows.append((shown, str(obj.get("type", "?")), str(obj.get("name", "?"))))
    return rows
