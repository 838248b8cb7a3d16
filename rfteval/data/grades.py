"""What a grade is: the (sample, item) pair graded, its score, and its error with OpenAI's name for it.

Part of the record (score, error type and message): below every grader, and below the python sandbox, which
returns these results from its worker processes without importing anything that grades. rfteval.graders.base
re-exports every name here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeAlias

if TYPE_CHECKING:
    from rfteval.data.json_types import JSONObject
    from rfteval.data.sample import Sample

Pair: TypeAlias = "tuple[Sample, JSONObject]"  # (sample, item): an item is a dataset line, JSON

# OpenAI's names for grading failures (RFT guide, /graders/run metadata.errors), reused as error types.
INVALID_VARIABLE = "invalid_variable_error"
FORMULA_PARSE = "formula_parse_error"
FORMULA_EVAL = "formula_eval_error"  # not an OpenAI name: rfteval reports parse errors at load time
PYTHON_RUNTIME = "python_grader_runtime_error"
PYTHON_TIMEOUT = "python_grader_timeout_error"
PYTHON_MEMORY = "python_grader_memory_error"
PYTHON_SERVER = "python_grader_server_error"
MODEL_PARSE = "model_grader_parse_error"
MODEL_REFUSAL = "model_grader_refusal_error"
MODEL_SERVER = "model_grader_server_error"
# not an OpenAI name: a judge answer cut off by its output limit or the server's context, told apart from a parse
# error because the fix is a limit to raise, not a judge to replace
MODEL_TRUNCATED = "model_grader_truncated_error"
OTHER = "other_error"


@dataclass(frozen=True, slots=True)
class GradeError:
    type: str
    message: str


@dataclass(slots=True)
class GradeResult:
    """One grade. On error the score is 0 (OpenAI's rule) and `error` says why; it is never silent."""

    score: float
    sub_scores: dict[str, float] | None = None
    error: GradeError | None = None
    passed: bool | None = None
    stdout: str | None = None
    details: JSONObject | None = None

    @classmethod
    def failed(cls, type: str, message: str, details: JSONObject | None = None,
               stdout: str | None = None) -> GradeResult:
        return cls(0.0, error=GradeError(type, message), stdout=stdout, details=details)


def message_line(message: str, limit: int = 200) -> str:
    """A grading error's message as one line, for a table or a summary: its first non-empty line (a python grader's
    goes on with its traceback), whitespace collapsed, cut to `limit` characters."""
    line = next((ln for ln in message.splitlines() if ln.strip()), "")
    line = " ".join(line.split())
    return line if len(line) <= limit else line[: limit - 1].rstrip() + "…"


def checked_score(value: object) -> float | GradeError:
    """A grader's raw return value as a finite float, or the error that it is not one."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        try:
            import numpy as np  # numpy scalars are fine; only import when a non-float shows up

            if isinstance(value, np.generic) and np.issubdtype(type(value), np.number):
                value = float(value)
            else:
                raise TypeError
        except (ImportError, TypeError):
            return GradeError(PYTHON_RUNTIME, f"grade() returned {type(value).__name__} {value!r:.80}, not a number")
    value = float(value)
    if not math.isfinite(value):
        return GradeError(PYTHON_RUNTIME, f"grade() returned {value}, not a finite number")
    return value
