"""data/grades.py: a grader's raw value checked into a score or an error, and the result types the graders and the
python sandbox share (rfteval.graders.base re-exports them)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rfteval.data import grades
from rfteval.data.grades import PYTHON_RUNTIME, GradeError, GradeResult, checked_score


@pytest.mark.parametrize("value, expected", [(1, 1.0), (0.25, 0.25), (np.float32(0.5), 0.5), (np.int64(3), 3.0)])
def test_numbers_and_numpy_scalars_are_scores(value: object, expected: float) -> None:
    score = checked_score(value)
    assert type(score) is float and score == expected


@pytest.mark.parametrize("value, words", [(True, "bool True"), ("0.5", "str '0.5'"), (None, "NoneType None"),
                                          (np.array([1.0]), "ndarray"), (math.nan, "nan, not a finite"),
                                          (-math.inf, "-inf, not a finite"), (np.float64("inf"), "inf, not a finite")])
def test_anything_else_is_a_runtime_error_saying_what_came_back(value: object, words: str) -> None:
    error = checked_score(value)
    assert isinstance(error, GradeError) and error.type == PYTHON_RUNTIME and words in error.message


def test_a_failed_result_scores_zero_with_its_error() -> None:
    result = GradeResult.failed("python_grader_timeout_error", "too slow", stdout="out")
    assert (result.score, result.error, result.stdout, result.passed) == (
        0.0, GradeError("python_grader_timeout_error", "too slow"), "out", None)


def test_the_graders_import_the_very_same_names() -> None:
    from rfteval.graders import base

    shared = ["INVALID_VARIABLE", "FORMULA_PARSE", "FORMULA_EVAL", "PYTHON_RUNTIME", "PYTHON_TIMEOUT", "PYTHON_MEMORY",
              "PYTHON_SERVER", "MODEL_PARSE", "MODEL_REFUSAL", "MODEL_SERVER", "MODEL_TRUNCATED", "OTHER", "GradeError",
              "GradeResult", "Pair", "checked_score"]
    assert [name for name in shared if getattr(base, name) is not getattr(grades, name)] == []
    assert {getattr(grades, name) for name in shared[:12]} == {
        "invalid_variable_error", "formula_parse_error", "formula_eval_error", "python_grader_runtime_error",
        "python_grader_timeout_error", "python_grader_memory_error", "python_grader_server_error",
        "model_grader_parse_error", "model_grader_refusal_error", "model_grader_server_error",
        "model_grader_truncated_error", "other_error"}


def test_a_message_line_is_the_first_line_of_a_message_cut_to_its_limit() -> None:
    traceback = "\n  grade() raised KeyError: 'answer_num'\nTraceback (most recent call last):\n  File ..."
    assert grades.message_line(traceback) == "grade() raised KeyError: 'answer_num'"
    long = "ValueError: " + "x" * 300
    assert grades.message_line(long, 40) == long[:39] + "…" and len(grades.message_line(long)) == 200
    assert grades.message_line("a\tb   c") == "a b c" and grades.message_line("") == ""
