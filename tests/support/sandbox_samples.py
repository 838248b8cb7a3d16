"""Samples built by make_sample for the sandbox tests: texts that do and do not parse as JSON, with and without
tool calls, which the sandbox sends as their text and the worker rebuilds."""

from __future__ import annotations

import json
import os
from pathlib import Path

from rfteval.data.sample import make_sample

TEXTS = [
    '{"predicted": [{"name": "clk", "value": "1\'b0"}, {"name": "clk", "value": "1\'b0"}]}',
    '  [1, 2.5, true, null, "x", {"a": {}}]\n',  # padded: output_text keeps the padding, the parse ignores it
    "plain words",
    "",
    "{not json",
    '{"a": 1} trailing',
    '{"big": 1e400, "u": "\\u00e9\\ud83d\\ude00", "n": -0}',
]


TOOLS = [{"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{\"x\": 1}"}}]


def compact_pairs() -> list[tuple[dict, dict]]:
    samples = [make_sample(t) for t in TEXTS] + [make_sample(t, [dict(TOOLS[0])]) for t in TEXTS[:3]]
    samples.append(make_sample('{"a": 1}', output_json=None))  # parses, but the caller says no JSON
    samples.append(make_sample(None, []))
    return [(s, {"id": n}) for n, s in enumerate(samples)]


def python_grader_case(directory: Path) -> tuple[Path, Path, dict[str, str]]:
    """A python grader file, a one-item dataset beside it, and this process's environment without
    RFTEVAL_UNSAFE_PYTHON_GRADERS: what the command-line refusal tests run `rfteval` with."""
    grader = directory / "g.json"
    grader.write_text(json.dumps({"type": "python", "name": "p", "source": "def grade(s, i):\n    return float(bool(s))\n"}))
    data = directory / "d.jsonl"
    data.write_text(json.dumps({"id": "a", "messages": [{"role": "user", "content": "q"}],
                                "reference_answer": "x"}) + "\n")
    env = {k: v for k, v in os.environ.items() if k != "RFTEVAL_UNSAFE_PYTHON_GRADERS"}
    return grader, data, env
