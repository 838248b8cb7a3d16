import json
import re
from pathlib import Path

import pytest

from rfteval.data.records import (
    AGENT_FIELDS,
    CORE_FIELDS,
    ERROR_POLICIES,
    FIELDS,
    JSON_TEXT_FIELDS,
    REFUSAL,
    Record,
    arrow_schema,
    check_error_policy,
    decode_records,
    dumps_record,
    effective_scores,
    error_dict,
    error_kinds,
    generation_failures,
    is_generation_failure,
    json_safe,
    make_record,
    read_parquet_records,
    read_records,
    records_frame,
    write_jsonl,
    write_parquet,
)
from rfteval.errors import InputError
from rfteval.graders.base import GradeError, GradeResult
from rfteval.graders.grading import apply_grade
from tests.support import REPO


def rec(**kw):
    base = dict(run_id="r", model_label="base", model="m", item_id="1", epoch=1, output_text='{"a": 1}',
                output_json={"a": 1})
    return make_record(**{**base, **kw})


def test_record_has_the_contract_fields_in_order():
    line = json.loads(dumps_record(rec()))
    assert list(line)[: len(CORE_FIELDS)] == list(CORE_FIELDS)
    assert list(line) == list(FIELDS)


def test_the_readme_lists_the_record_fields_in_their_order():
    readme = (REPO / "docs" / "running.md").read_text(encoding="utf-8")
    paragraph = readme.split("A record (one JSON line) holds ")[1].split("\n\n")[0]
    named = re.findall(r"[a-z_]+", " ".join(paragraph.split("`")[1::2]))  # the names inside backticks
    assert [n for n in named if n in FIELDS] == list(FIELDS)


def test_the_arrow_schema_is_the_record_in_the_same_order_and_types():
    schema = arrow_schema()
    assert tuple(schema.names) == FIELDS and FIELDS + AGENT_FIELDS == Record.__struct_fields__  # agent runs' last
    assert str(schema.field("epoch").type) == "int64" and str(schema.field("score").type) == "double"
    assert str(schema.field("sub_scores").type) == "map<string, double>"
    assert [f.name for f in schema.field("error").type] == ["stage", "type", "message"]
    assert [f.name for f in schema.field("usage").type] == ["input_tokens", "output_tokens", "reasoning_tokens"]
    assert JSON_TEXT_FIELDS == ("output_json", "output_tools", "grade_details")
    assert all(str(schema.field(name).type) == "string" for name in JSON_TEXT_FIELDS)


def test_a_non_finite_score_and_numpy_values_are_strict_json():
    import numpy as np

    r = apply_grade(rec(), GradeResult(0.5, details={"x": np.float64(0.25), "n": np.int64(3), "nan": float("nan")}))
    r.score = float("nan")
    line = json.loads(dumps_record(r))
    assert line["score"] is None and line["grade_details"] == {"x": 0.25, "n": 3, "nan": None}


def test_decode_records_round_trips_and_names_the_bad_field(tmp_path):
    rows = [apply_grade(rec(item_id=str(i)), GradeResult(i / 4, sub_scores={"a": 1.0})) for i in range(3)]
    write_jsonl(rows, tmp_path / "r.jsonl")
    assert list(decode_records(tmp_path / "r.jsonl")) == rows
    bad = tmp_path / "bad.jsonl"
    bad.write_text(dumps_record(rows[0]) + "\n" + dumps_record(rows[1]).replace('"epoch":1', '"epoch":"one"') + "\n")
    with pytest.raises(InputError, match=r"bad.jsonl:2: epoch: Expected `int`, got `str`"):
        list(decode_records(bad))


def test_records_frame_is_what_read_records_gives(tmp_path):
    rows = [apply_grade(rec(item_id=str(i)), GradeResult(i / 4)) for i in range(3)]
    write_jsonl(rows, tmp_path / "r.jsonl")
    mem, disk = records_frame(rows), read_records(tmp_path / "r.jsonl")
    assert list(mem.columns) == list(disk.columns) == list(FIELDS)
    assert mem["score"].tolist() == disk["score"].tolist() and mem["item_id"].tolist() == disk["item_id"].tolist()


def test_apply_grade_success_and_error():
    r = apply_grade(rec(), GradeResult(0.5, sub_scores={"a": 1.0}, passed=False, stdout="hi"))
    assert (r.score, r.sub_scores, r.error, r.grader_stdout) == (0.5, {"a": 1.0}, None, "hi")
    r = apply_grade(rec(), GradeResult(0.0, error=GradeError("python_grader_runtime_error", "boom")))
    assert r.error == {"stage": "grade", "type": "python_grader_runtime_error", "message": "boom"}
    assert r.score == 0.0


def test_generation_error_is_kept_and_scores_zero():
    r = rec(output_text=None, error=error_dict("generate", "server", "500"))
    r = apply_grade(r, GradeResult(1.0))
    assert r.error is not None and r.error["stage"] == "generate" and r.score == 0.0


def test_jsonl_and_parquet_round_trip(tmp_path):
    rows = [apply_grade(rec(item_id=str(i), epoch=e), GradeResult(i / 10, sub_scores={"x": 0.5}))
            for i in range(3) for e in (1, 2)]
    rows[1] = apply_grade(rows[1], GradeResult(0.0, error=GradeError("t", "m")))
    write_jsonl(rows, tmp_path / "r.jsonl")
    write_parquet(rows, tmp_path / "r.parquet")
    a = read_records(tmp_path / "r.jsonl")
    b = read_records(tmp_path / "r.parquet")
    assert list(a["score"]) == list(b["score"]) == [r.score for r in rows]
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


def test_one_error_policy_dict_and_column_wise_agree():
    import pandas as pd

    errors = [None, error_dict("generate", "timeout", "t"), error_dict("generate", REFUSAL, "no"),
              error_dict("grade", "python_grader_runtime_error", "boom"), {"type": "x", "message": "no stage"}]
    stage = pd.Series([e.get("stage") if e else None for e in errors])
    type_ = pd.Series([e.get("type") if e else None for e in errors])
    assert generation_failures(stage, type_).tolist() == [is_generation_failure(e) for e in errors]
    assert [is_generation_failure(e) for e in errors] == [False, True, False, False, False]


def test_the_error_policy_is_checked_once():
    assert [check_error_policy(p) for p in ERROR_POLICIES] == list(ERROR_POLICIES)
    with pytest.raises(InputError, match="must be exclude or zero, got 'ignore'") as exc:
        check_error_policy("ignore")
    assert exc.value.field == "--errors"


def test_the_column_wise_policy_excludes_generation_failures_and_zeroes_the_rest():
    import pandas as pd

    errors = [None, error_dict("generate", "timeout", "t"), error_dict("generate", REFUSAL, "no"),
              error_dict("grade", "python_grader_runtime_error", "boom"), {"type": "x", "message": "no stage"}, None]
    df = pd.DataFrame({"score": [0.7, 0.9, 0.9, 0.9, 0.9, None], "error": errors})
    kinds = [k if isinstance(k, str) else None for k in error_kinds(df)]  # no error: missing (None or NaN)
    assert kinds == [None, "generate", "refusal", "grade", "grade", None]
    got = effective_scores(df).tolist()
    assert got[0] == 0.7 and got[2:5] == [0.0, 0.0, 0.0]  # a refusal and grading errors score 0
    assert pd.isna(got[1]) and pd.isna(got[5])  # a generation failure is left out; never graded: left out
    assert effective_scores(df, "zero").tolist()[1] == 0.0
    # every error record left out (agree's default, compare's --exclude-errors): only the real grade is left
    kept = effective_scores(df, exclude_errors=True)
    assert kept.iloc[0] == 0.7 and kept.iloc[1:].isna().all()


def test_json_safe_gives_what_strict_json_takes():
    import numpy as np

    value = {1: (np.float64(0.5), float("nan")), "x": [np.int64(3), float("inf"), None, True], "p": Path("a/b")}
    out = json_safe(value)
    assert out == {"1": [0.5, None], "x": [3, None, None, True], "p": "a/b"}
    assert type(out["x"][0]) is int and json.dumps(out, allow_nan=False)


def test_one_parquet_reader_reads_the_columns_the_file_has(tmp_path):
    path = tmp_path / "r.parquet"
    graded = [rec(), rec(item_id="2")]
    for r in graded:
        r.score = 1.0
    write_parquet(graded, path)
    table = read_parquet_records(path, columns=["item_id", "score", "not_a_field"])
    assert table.column_names == ["item_id", "score"] and table.num_rows == 2
    assert read_parquet_records(path).column_names == list(FIELDS)
    (tmp_path / "bad.parquet").write_text("not parquet")
    with pytest.raises(InputError, match="not a readable Parquet file"):
        read_parquet_records(tmp_path / "bad.parquet")


# ---- an agent run's fields: written only for agent runs ---------------------------------------------------------


def agent_rec(**kw) -> Record:
    r = rec(**kw)
    r.turns, r.stop_reason, r.tool_calls, r.tool_errors = 3, "max_turns", 4, {"ValueError": 1}
    r.transcript = '[{"role":"assistant","content":"x"}]'
    return r


def test_a_record_without_tools_has_none_of_the_agent_keys_and_an_agent_record_has_them_last():
    plain = json.loads(dumps_record(rec()))
    assert list(plain) == list(FIELDS) and not set(AGENT_FIELDS) & set(plain)
    agent = json.loads(dumps_record(agent_rec()))
    assert list(agent) == [*FIELDS, *AGENT_FIELDS]
    assert (agent["turns"], agent["stop_reason"], agent["tool_calls"], agent["tool_errors"]) == (
        3, "max_turns", 4, {"ValueError": 1})
    assert isinstance(agent["transcript"], str)  # JSON text, never decoded by compare
    cleared = agent_rec()
    cleared.stop_reason = None  # a failed rollout: no stop reason, the key still there
    assert json.loads(dumps_record(cleared))["stop_reason"] is None


def test_the_agent_fields_round_trip_through_both_files(tmp_path):
    rows = [agent_rec(item_id="1"), agent_rec(item_id="2")]
    write_jsonl(rows, tmp_path / "r.jsonl")
    assert list(decode_records(tmp_path / "r.jsonl")) == rows  # a rewrite (readiness's advantages) keeps them
    write_parquet(rows, tmp_path / "r.parquet")
    table = read_parquet_records(tmp_path / "r.parquet")
    assert table.column_names == [*FIELDS, *AGENT_FIELDS]
    assert str(table.schema.field("transcript").type) == "string"
    assert str(table.schema.field("tool_errors").type).startswith("map<string, int64")
    assert table.column("turns").to_pylist() == [3, 3]
    frame = records_frame(rows)
    assert list(frame.columns) == [*FIELDS, *AGENT_FIELDS] and frame["stop_reason"].tolist() == ["max_turns"] * 2
    write_parquet([rec()], tmp_path / "plain.parquet")
    assert read_parquet_records(tmp_path / "plain.parquet").column_names == list(FIELDS)
    assert list(records_frame([rec()]).columns) == list(FIELDS)


def test_the_readme_lists_the_agent_fields():
    readme = (REPO / "docs" / "running.md").read_text(encoding="utf-8")
    paragraph = readme.split("A record (one JSON line) holds ")[1].split("\n\n")[0]
    named = re.findall(r"[a-z_]+", " ".join(paragraph.split("`")[1::2]))
    assert [n for n in named if n in AGENT_FIELDS] == list(AGENT_FIELDS)
