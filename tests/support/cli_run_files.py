"""What the end-to-end run tests share: the rfteval command as a subprocess, and a small dataset and grader (an
agent run's too).

A plain module beside fake_openai.py (not a conftest fixture) so each test module keeps its own item count.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from tests.support.toolboxes import TOOLS_SCHEMA

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


IN_PROCESS_TOOLS = "# the tools run in process here (tests/support/toolboxes.py)\n"  # a tools.py no sandbox runs


def write_agent_files(tmp: Path, n_items: int = 1, reference: str = "sum: 5", tools_py: str = IN_PROCESS_TOOLS,
                      **item: Any) -> dict[str, Path]:
    """An agent run's files: `n_items` items q0, q1, ... asking to add 2 and 3, with the calculator's tools declared
    (toolboxes.TOOLS_SCHEMA) and `item`'s keys, an exact-match grader against `reference`, and a tools.py holding
    `tools_py` (by default a stand-in: the test runs its tools in process, tests/support/toolboxes.py)."""
    (tmp / "items.jsonl").write_text("".join(
        json.dumps({"id": f"q{i}", "messages": [{"role": "user", "content": f"add 2 and 3 ({i})"}],
                    "tools": TOOLS_SCHEMA, "reference_answer": reference, **item}) + "\n" for i in range(n_items)))
    (tmp / "grader.json").write_text(json.dumps({"type": "string_check", "name": "exact",
                                                 "input": "{{ sample.output_text }}",
                                                 "reference": "{{ item.reference_answer }}", "operation": "eq"}))
    (tmp / "tools.py").write_text(tools_py)
    return {"dataset": tmp / "items.jsonl", "grader": tmp / "grader.json", "tools": tmp / "tools.py",
            "out": tmp / "run"}
