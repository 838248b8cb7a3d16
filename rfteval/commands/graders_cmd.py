"""`rfteval graders`: the grader types and the ready-made configs."""

from __future__ import annotations

from pathlib import Path


from rfteval.cli import app


def ready_made_dirs() -> list[Path]:
    """graders/ of the source tree, and of the working directory when it differs."""
    here = Path(__file__).resolve().parents[2] / "graders"
    dirs = [here]
    cwd = Path.cwd() / "graders"
    if cwd.resolve() != here:
        dirs.append(cwd)
    return [d for d in dirs if d.is_dir()]


@app.command("graders")
def graders() -> None:
    """List the grader types and the ready-made grader configs."""
    import json

    from rich.console import Console
    from rich.table import Table

    from rfteval.graders.registry import REGISTRY

    console = Console()
    types = Table(title="Grader types", title_justify="left")
    types.add_column("type")
    types.add_column("what it does")
    types.add_column("origin")
    for name, entry in REGISTRY.items():
        types.add_row(name, entry.summary, "rfteval extension" if entry.extension else "OpenAI")
    console.print(types)
    ready = Table(title="Ready-made graders", title_justify="left")
    for col in ("file", "type", "name"):
        ready.add_column(col)
    for folder in ready_made_dirs():
        for path in sorted(folder.glob("*.json")):
            try:
                obj = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            ready.add_row(str(path.relative_to(folder.parent)), str(obj.get("type", "?")), str(obj.get("name", "?")))
    console.print(ready)
