#!/usr/bin/env python3
"""Write ILLUSTRATIVE intermediate "checkpoints" for the ChipStack example, from its base and tuned recordings.

These are NOT outputs of any model or any training run. Each (item, epoch) of checkpoint step-N takes the tuned
recording's output with probability N / FINAL and the base recording's otherwise, decided by a hash of
(step, item, epoch): deterministic, and a later step never holds fewer tuned outputs than an earlier one. They
exist so that the checkpoint-series example (`rfteval compare RUNDIR`) runs offline with a series longer than two.

    python scripts/make_checkpoint_recordings.py            write datasets/chipstack/recordings/step-*.jsonl
    python scripts/make_checkpoint_recordings.py --check    exit 1 when a committed file differs from what this writes
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

RECORDINGS = Path(__file__).resolve().parents[1] / "datasets" / "chipstack" / "recordings"
FINAL = 300
STEPS = (100, 200)  # step-300 is the tuned recording itself


def _u(item_id: str, epoch: int) -> float:
    """A uniform draw in [0, 1) fixed by (item, epoch): the same draw for every step, so later steps nest earlier."""
    digest = hashlib.sha256(f"chipstack-checkpoint|{item_id}|{epoch}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2 ** 64


def _load(path: Path) -> dict[tuple[str, int], dict]:
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return {(r["item_id"], int(r["epoch"])): r for r in rows}


def build(step: int) -> str:
    base, tuned = _load(RECORDINGS / "base.jsonl"), _load(RECORDINGS / "tuned.jsonl")
    lines = []
    for key in base:  # the base recording's order
        source = tuned if _u(*key) < step / FINAL else base
        row = {"item_id": key[0], "epoch": key[1], "output_text": source[key]["output_text"]}
        lines.append(json.dumps(row, ensure_ascii=False))
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the committed files instead of writing")
    args = parser.parse_args()
    from generated_files import write_or_check

    files = {RECORDINGS / f"step-{step}.jsonl": build(step) for step in STEPS}
    return write_or_check(files, args.check, "scripts/make_checkpoint_recordings.py")


if __name__ == "__main__":
    sys.exit(main())
