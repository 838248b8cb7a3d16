import json

import pytest

from rfteval.errors import InputError
from rfteval.graders.base import GradeError, GradeResult
from rfteval.records import (
    CORE_FIELDS,
    apply_grade,
    dumps_record,
    error_dict,
    make_record,
    read_records,
    write_jsonl,
    write_parquet,
)


def rec(**kw):
    base = dict(run_id="r", model_label="base", model="m", item_id="1", epoch=1, output_text='{"a": 1}',
                output_json={"a": 1})
    return make_record(**{**base, **kw})


def test_record_has_the_contract_fields_in_order():
    line = json.loads(dumps_record(rec()))
    assert list(line)[: len(CORE_FIELDS)] == list(CORE_FIELDS)


def test_apply_grade_success_and_error():
    r = apply_grade(rec(), GradeResult(0.5, sub_scores={"a": 1.0}, passed=False, stdout="hi"))
    assert (r["score"], r["sub_scores"], r["error"], r["grader_stdout"]) == (0.5, {"a": 1.0}, None, "hi")
    r = apply_grade(rec(), GradeResult(0.0, error=GradeError("python_grader_runtime_error", "boom")))
    assert r["error"] == {"stage": "grade", "type": "python_grader_runtime_error", "message": "boom"}
    assert r["score"] == 0.0


def test_generation_error_is_kept_and_scores_zero():
    r = rec(output_text=None, error=error_dict("generate", "server", "500"))
    r = apply_grade(r, GradeResult(1.0))
    assert r["error"]["stage"] == "generate" and r["score"] == 0.0


def test_jsonl_and_parquet_round_trip(tmp_path):
    rows = [apply_grade(rec(item_id=str(i), epoch=e), GradeResult(i / 10, sub_scores={"x": 0.5}))
            for i in range(3) for e in (1, 2)]
    rows[1] = apply_grade(rows[1], GradeResult(0.0, error=GradeError("t", "m")))
    write_jsonl(rows, tmp_path / "r.jsonl")
    write_parquet(rows, tmp_path / "r.parquet")
    a = read_records(tmp_path / "r.jsonl")
    b = read_records(tmp_path / "r.parquet")
    assert list(a["score"]) == list(b["score"]) == [r["score"] for r in rows]
    assert list(a["item_id"]) == list(b["item_id"]) == ["0", "0", "1", "1", "2", "2"]
    assert b["error"][1]["type"] == "t" and b["error"][0] is None
    assert json.loads(b["output_json"][0]) == {"a": 1}
    assert dict(b["sub_scores"][0]) == {"x": 0.5}


def test_write_is_atomic(tmp_path):
    def gen():
        yield rec()
        raise RuntimeError("crash mid-write")

    with pytest.raises(RuntimeError):
        write_jsonl(gen(), tmp_path / "r.jsonl")
    assert not (tmp_path / "r.jsonl").exists()


def test_not_a_record_file(tmp_path):
    p = tmp_path / "x.jsonl"
    p.write_text('{"item_id": "1"}\n')
    with pytest.raises(InputError, match=r"x.jsonl:1: score: missing"):
        read_records(p)
