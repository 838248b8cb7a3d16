"""What the end-to-end run tests share: the rfteval command as a subprocess, and a small dataset and grader.

A plain module beside fake_openai.py (not a conftest fixture) so each test module keeps its own item count.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

BIN = Path(sys.executable).parent / "rfteval"
RFTEVAL = [str(BIN)] if BIN.exists() else [sys.executable, "-c", "from rfteval.cli import main; main()"]


def write_run_files(tmp_path: Path, n_items: int) -> dict[str, Path]:
    """`n_items` items whose reference is what the fake server's "tuned" model says, and a grader looking for it."""
    ds = tmp_path / "items.jsonl"
    ds.write_text("".join(json.dumps({"id": f"q{i}", "messages": [{"role": "user", "content": f"question {i}"}],
                                      "reference_answer": "fake-tuned"}) + "\n" for i in range(n_items)))
    grader = tmp_path / "grader.json"
    grader.write_text(json.dumps({"type": "string_check", "name": "g", "input": "{{ sample.output_text }}",
                                  "reference": "{{ item.reference_answer }}", "operation": "like"}))
    return {"dataset": ds, "grader": grader, "out": tmp_path / "run"}
