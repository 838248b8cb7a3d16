"""What the end-to-end run tests share: the rfteval command as a subprocess, and a small dataset and grader.

A plain module beside fake_openai.py (not a conftest fixture) so each test module keeps its own item count.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

BIN = Path(sys.executable).parent / "rfteval"
RFTEVAL = [str(BIN)] if BIN.exists() else [sys.executable, "-c", "from rfteval.cli.app import main; main()"]


def write_run_files(tmp_path: Path, n_items: int, reference: str = "fake-tuned", operation: str = "like",
                    name: str = "g") -> dict[str, Path]:
    """`n_items` items q0, q1, ... whose reference is `reference` (by default what the fake server's "tuned"
    model says), and a string_check grader comparing the output with it (`like`: contains, `eq`: equals)."""
    ds = tmp_path / "items.jsonl"
    ds.write_text("".join(json.dumps({"id": f"q{i}", "messages": [{"role": "user", "content": f"question {i}"}],
                                      "reference_answer": reference}) + "\n" for i in range(n_items)))
    grader = tmp_path / "grader.json"
    grader.write_text(json.dumps({"type": "string_check", "name": name, "input": "{{ sample.output_text }}",
                                  "reference": "{{ item.reference_answer }}", "operation": operation}))
    return {"dataset": ds, "grader": grader, "out": tmp_path / "run"}
