"""Synthetic run records with known scores, answers and errors, for the readiness tests: built through the real
record contract (make_record, apply_grade), with a label-like dataset and a grader to grade it again."""

from __future__ import annotations

import pandas as pd

from rfteval.data.records import make_record, records_frame
from rfteval.graders.base import GradeResult
from rfteval.graders.grading import apply_grade
from rfteval.graders.loader import parse_config


def records(pattern: dict[str, list[float]], label: str = "base", answers: dict[str, list[str]] | None = None,
            errors: dict[tuple[str, int], str] | None = None) -> pd.DataFrame:
    """Records through the real record contract: one per (item, epoch) with the given scores."""
    rows = []
    for iid, scores in pattern.items():
        for epoch, s in enumerate(scores):
            text = answers[iid][epoch] if answers else f"answer {iid} {epoch}"
            stage = (errors or {}).get((iid, epoch))
            err = ({"stage": "generate", "type": "timeout", "message": "x"} if stage == "generate"
                   else {"stage": "generate", "type": "refusal", "message": "no"} if stage == "refusal" else None)
            rec = make_record(run_id="r", model_label=label, model="m", item_id=iid, epoch=epoch, output_text=text,
                              error=err)
            if stage == "grade":
                rec = apply_grade(rec, GradeResult.failed("python_grader_runtime_error", "boom"))
            else:
                rec = apply_grade(rec, GradeResult(float(s)))
            rows.append(rec)
    return records_frame(rows)


KNOWN = {"floor": [0, 0, 0, 0], "ceiling": [1, 1, 1, 1], "half": [0, 1, 0, 1], "three": [1, 1, 0, 1]}


SENTIMENT = parse_config({"type": "string_check", "name": "eq", "input": "{{sample.output_text}}",
                          "reference": "{{item.reference_answer}}", "operation": "eq"})


def label_items(refs: list[str]) -> dict[str, dict]:
    return {f"s{i}": {"messages": [{"role": "user", "content": "Sentiment?"}], "reference_answer": r}
            for i, r in enumerate(refs)}


class CountingEngine:
    """A grader that returns scores from a function, counting what it graded (a nondeterministic one too)."""

    def __init__(self, fn):
        self.fn = fn
        self.calls = 0

    def grade_batch(self, pairs):
        self.calls += len(pairs)
        return [GradeResult(self.fn(s, i)) for s, i in pairs]
