#!/usr/bin/env python3
"""Embed graders/src/<case>.py into graders/<case>.json, so the JSON can be uploaded as it is.

The python stays readable in graders/src/; the JSON is what OpenAI (and rfteval) load. Conventions:
- a top-level python grader in graders/<case>.json takes its source from graders/src/<case>.py;
- a python sub-grader under key K of a multi grader takes graders/src/<case>.py plus a `grade` that
  returns K(sample, item), so one readable file serves every sub-grader.
Everything else in the JSON (names, formulas, prompts) is edited in the JSON itself.

    python scripts/sync_graders.py           rewrite the JSON files that are out of date
    python scripts/sync_graders.py --check   exit 1, naming them, when any is out of date
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1] / "graders"


def sub_grader_source(module: str, key: str) -> str:
    return f"{module.rstrip()}\n\n\ndef grade(sample, item):\n    return {key}(sample, item)\n"


def synced(config: dict[str, Any], module: str | None) -> dict[str, Any]:
    """The config with every python source replaced by the current text of its src module."""
    out = dict(config)
    if module is None:
        return out
    if out.get("type") == "python":
        out["source"] = module
    elif out.get("type") == "multi":
        graders = {}
        for key, sub in out.get("graders", {}).items():
            sub = dict(sub)
            if sub.get("type") == "python":
                sub["source"] = sub_grader_source(module, key)
            graders[key] = sub
        out["graders"] = graders
    return out


def render(config: dict[str, Any]) -> str:
    return json.dumps(config, indent=2, ensure_ascii=False) + "\n"


def plan(root: Path = ROOT) -> list[tuple[Path, str, str]]:
    """(json path, current text, wanted text) for every ready-made grader."""
    out = []
    for path in sorted(root.glob("*.json")):
        text = path.read_text(encoding="utf-8")
        src = root / "src" / f"{path.stem}.py"
        module = src.read_text(encoding="utf-8") if src.exists() else None
        out.append((path, text, render(synced(json.loads(text), module))))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report; exit 1 when a JSON is out of date")
    parser.add_argument("--root", type=Path, default=ROOT, help="the graders folder (default: %(default)s)")
    args = parser.parse_args(argv)
    from generated_files import write_or_check

    return write_or_check({path: want for path, _, want in plan(args.root)}, args.check, "scripts/sync_graders.py")


if __name__ == "__main__":
    sys.exit(main())
