"""The result files rebuilt from the store: records from responses and grades, streamed in dataset order."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from rfteval.graders.base import GradeError, GradeResult
from rfteval.run.results import Cell, add_judge_calls, build_record, write_results
from rfteval.run.store import RunStore, new_grade_entry
from tests.support.store_entries import failed, ok


def test_build_record_from_response_and_grade() -> None:
    resp = ok("k", "hello", session="old")
    assert build_record("r", "base", "m", "1", 1, None, None) is None
    assert build_record("r", "base", "m", "1", 1, resp, None) is None  # generated, not graded: not a result yet
    g = new_grade_entry("k", "g", GradeResult(0.75, sub_scores={"a": 1.0}, passed=True, details={"x": 1}))
    rec = build_record("r", "base", "m", "1", 1, resp, g, cached=True)
    assert (rec.score, rec.sub_scores, rec.passed, rec.error, rec.cached) == (0.75, {"a": 1.0}, True, None, True)
    assert rec.usage == {"input_tokens": 3, "output_tokens": 5, "reasoning_tokens": 1}
    bad = new_grade_entry("k", "g", GradeResult.failed("python_grader_runtime_error", "KeyError: 'x'"))
    rec = build_record("r", "base", "m", "1", 1, resp, bad)
    assert rec.score == 0.0
    assert rec.error == {"stage": "grade", "type": "python_grader_runtime_error", "message": "KeyError: 'x'"}
    rec = build_record("r", "base", "m", "1", 1, failed("k", "timeout"), None)
    assert rec.score == 0.0 and rec.output_text is None
    assert rec.error == {"stage": "generate", "type": "timeout", "message": "HTTP 500: boom"}


def test_write_results_streams_records_in_dataset_order(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    scores = {("base", "1"): [1.0, 0.0], ("base", "2"): [1.0, 1.0], ("tuned", "1"): [1.0, 1.0],
              ("tuned", "2"): [0.5, None]}  # tuned item 2 epoch 2: a generation error
    cells = []
    with RunStore(tmp_path) as store:
        for (label, item), per_epoch in scores.items():
            for epoch, score in enumerate(per_epoch, 1):
                key = f"{label}-{item}-{epoch}"
                cells.append(Cell(label, "m-" + label, item, epoch, key))
                if score is None:
                    store.put_response(failed(key, "timeout", item, epoch))
                    continue
                store.put_response(ok(key, f"{label}{item}{epoch}", label, item, epoch, session=store.session))
                err = GradeError("python_grader_runtime_error", "x") if (label, item, epoch) == ("base", "1", 2) else None
                store.put_grade(new_grade_entry(key, "g", GradeResult(score, error=err)))
        cells.append(Cell("base", "m-base", "3", 1, "never-run"))  # a cell with nothing stored yet
        order = sorted(cells, key=lambda c: (c.item_id, c.label, c.epoch))
        reader = store.reader()
        totals = write_results(tmp_path, order, reader, "g", store.run_id, ["base", "tuned"], session=store.session)
        reader.close()
    base = [json.loads(x) for x in (tmp_path / "base.jsonl").read_text().splitlines()]
    tuned = [json.loads(x) for x in (tmp_path / "tuned.jsonl").read_text().splitlines()]
    assert [(r["item_id"], r["epoch"]) for r in base] == [("1", 1), ("1", 2), ("2", 1), ("2", 2)]
    assert [r["score"] for r in tuned] == [1.0, 1.0, 0.5, 0.0]
    assert tuned[3]["error"]["type"] == "timeout" and not any(r["cached"] for r in base)
    b, t = totals["base"], totals["tuned"]
    assert (b.cells, b.records, t.cells, t.records) == (5, 4, 4, 4)
    assert len(b.item_means) == 3 and list(b.item_means[:2]) == [0.5, 1.0] and math.isnan(b.item_means[2])
    assert list(t.item_means) == [1.0, 0.5]  # the generation error is not an answer: left out (records policy)
    assert dict(b.errors) == {"grade:python_grader_runtime_error": 1} and dict(t.errors) == {"generate:timeout": 1}
    assert (b.input_tokens, b.output_tokens, b.reasoning_tokens) == (12, 20, 4)
    table = pq.read_table(tmp_path / "results.parquet")
    assert table.num_rows == 8 and sorted(set(table.column("model_label").to_pylist())) == ["base", "tuned"]
    assert not list(tmp_path.glob("*.tmp"))


def test_write_results_scores_a_refusal_zero_but_leaves_a_failed_generation_out(tmp_path: Path) -> None:
    with RunStore(tmp_path) as store:
        store.put_response(ok("k1", item="1", epoch=1, session=store.session))
        store.put_grade(new_grade_entry("k1", "g", GradeResult(1.0)))
        store.put_response(failed("k2", "refusal", "1", 2))
        store.put_response(failed("k3", "server", "1", 3))
        reader = store.reader()
        cells = [Cell("base", "m", "1", e, f"k{e}") for e in (1, 2, 3)]
        totals = write_results(tmp_path, cells, reader, "g", store.run_id, ["base"], session=store.session)
        reader.close()
    assert list(totals["base"].item_means) == [0.5]  # (1 + 0) / 2: the refusal counts, the server error does not


def test_write_results_leaves_no_half_written_file(tmp_path: Path) -> None:
    (tmp_path / "base.jsonl").write_text("previous\n")

    class Boom:
        def get_response(self, key: str) -> dict:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_results(tmp_path, [Cell("base", "m", "1", 1, "k")], Boom(), "g", "r", ["base"])
    assert (tmp_path / "base.jsonl").read_text() == "previous\n"
    assert not list(tmp_path.glob("*.tmp"))


def test_judge_calls_behind_grades_are_counted_once_however_nested() -> None:
    def call(name: str | None, tokens: int, cached: bool = False) -> dict:
        return {"judge_model": "j", "judge_cached": cached, "judge_call": name,
                "judge_usage": {"input_tokens": tokens, "output_tokens": 1}}

    calls: dict = {}
    add_judge_calls(calls, call("a", 10))
    add_judge_calls(calls, {**call("a", 10, cached=True), "position": 2})  # a group call's other sample
    add_judge_calls(calls, {"graders": {"tone": {"score": 1.0, "details": call("b", 20)},  # a multi grader's
                                        "fmt": {"score": 0.0}}})
    add_judge_calls(calls, call(None, 5))  # stored before calls were named: one per grade
    add_judge_calls(calls, call(None, 5))
    add_judge_calls(calls, None)
    add_judge_calls(calls, {"steps": [{"description": "x"}]})
    assert sorted(usage["input_tokens"] for _, usage in calls.values()) == [5, 5, 10, 20]
