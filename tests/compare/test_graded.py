"""compare/graded.py: records normalised into one side of `rfteval agree` (a later record of a sample supersedes
an earlier one, errors stay and are counted by type), and a side with no grade is one line of bad input."""

from __future__ import annotations

import math

import pytest

from rfteval.compare.graded import graded_side
from rfteval.data.records import Record, make_record, records_frame
from rfteval.errors import InputError
from rfteval.graders.base import GradeResult
from rfteval.graders.grading import apply_grade


def graded(item: str, epoch: int, score: float, label: str = "base") -> Record:
    record = make_record(run_id="r", model_label=label, model="m-" + label, item_id=item, epoch=epoch,
                         output_text=f"answer {item}")
    return apply_grade(record, GradeResult(score))


def test_a_side_keeps_the_last_grade_of_each_sample_and_counts_its_errors() -> None:
    failed = apply_grade(make_record(run_id="r", model_label="base", model="m-base", item_id="q3", epoch=0,
                                     output_text="x"), GradeResult.failed("python_grader_runtime_error", "boom"))
    frame = records_frame([graded("q1", 0, 0.0), graded("q2", 0, 1.0), graded("q1", 0, 0.5), failed,
                           graded("q1", 0, 1.0, label="tuned")])
    side = graded_side(frame, "A", "a.jsonl")
    rows = {(r.model_label, r.item_id): r for r in side.frame.itertuples()}
    assert len(side.frame) == 4 and rows["base", "q1"].score == 0.5 and rows["tuned", "q1"].model == "m-tuned"
    assert rows["base", "q3"].is_error and not rows["base", "q2"].is_error
    assert math.isnan(rows["base", "q2"].passed)  # no verdict written: none invented
    assert side.errors() == {"records": 4, "errors": 1, "share": 0.25,
                             "by_kind": {"python_grader_runtime_error": 1}, "generation_failures": 0}


def test_a_side_without_grades_is_bad_input() -> None:
    with pytest.raises(InputError, match="no records"):
        graded_side(records_frame([]), "A", "a.jsonl")
    ungraded = records_frame([graded("q1", 0, 1.0)]).assign(score=None)
    with pytest.raises(InputError, match="no grades") as exc:
        graded_side(ungraded, "B", "b.jsonl")
    assert exc.value.field == "score"
