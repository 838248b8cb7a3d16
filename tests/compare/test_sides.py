"""rfteval.compare.sides: reading records (JSONL fast and slow, Parquet, run directories) into one normalised side."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from rfteval.compare.comparison import compare_sides
from rfteval.compare.paths import compare_paths
from rfteval.compare.sides import load_side, side_from_records
from rfteval.data.frame import read_frame as read_record_frame
from rfteval.data.records import read_records, write_jsonl
from rfteval.errors import InputError
from tests.support.record_sides import BASE, TUNED, rec, side_records, write_pair


@pytest.fixture
def pair(tmp_path: Path) -> tuple[Path, Path]:
    return write_pair(tmp_path)


def test_duplicate_cells_keep_the_last_record(tmp_path):
    b, t = tmp_path / "b.jsonl", tmp_path / "t.jsonl"
    write_jsonl([rec("b", "x", 0, 0.0), rec("b", "x", 0, 1.0), rec("b", "y", 0, 0.5)], b)
    write_jsonl(side_records("t", {"x": [1.0], "y": [0.5]}), t)
    r = compare_paths(b, t)
    assert r.baseline["duplicates_dropped"] == 1 and r.baseline["records"] == 2
    assert r.items.set_index("item_id").loc["x", "baseline"] == 1.0


def test_fast_and_slow_readers_agree(tmp_path):
    rows = [rec("m", f"i{i}", e, (i * 7 + e) % 3 / 2, sub={"acc": float(e % 2), "fmt": 1.0} if i % 4 else None,
                output_json=[{"a": i}] if i % 2 else {"k": "v"}, grade_details={"why": [1, "x", None]})
            for i in range(30) for e in range(2)]
    rows[5].error = {"stage": "grade", "type": "t", "message": "m", "extra": {"nested": True}}
    path = tmp_path / "r.jsonl"
    write_jsonl(rows, path)
    from rfteval.data import frame as sides

    fast = sides._read_jsonl_fast(path)
    slow = sides._read_jsonl_slow(path)
    assert fast is not None
    cols = ["item_id", "epoch", "score", "error_type", "error_message", "error_present", "sub:acc", "sub:fmt"]
    fast_rows = fast[cols].astype(object).where(fast[cols].notna(), None).to_dict("records")
    slow_rows = slow[cols].astype(object).where(slow[cols].notna(), None).to_dict("records")
    assert fast_rows == slow_rows
    assert fast["sub:acc"].notna().sum() == sum(1 for r in rows if r.sub_scores)


def test_integer_ids_and_nested_sub_scores_fall_back(tmp_path):
    path = tmp_path / "r.jsonl"
    lines = [{"item_id": 1, "epoch": 0, "score": 1, "sub_scores": {"a": 1}},
             {"item_id": 2, "epoch": 0, "score": 0.5, "sub_scores": None,
              "grade_details": {"sub_scores": {"z": 9}}}]
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    frame = read_record_frame(path)
    assert frame["item_id"].tolist() == ["1", "2"]
    assert frame["sub:a"].tolist()[0] == 1.0 and math.isnan(frame["sub:a"].tolist()[1])
    assert "sub:z" not in frame  # a nested key in grade_details is not a sub-score


@pytest.mark.parametrize("line, field, message", [
    ('{"item_id": "a", "score": null}', "score", "never graded"),
    ('{"item_id": "a", "score": "high"}', "score", "finite number"),
    ('{"item_id": "a", "score": NaN}', "score", "finite number"),
    ('{"item_id": "", "score": 1}', "item_id", "non-empty"),
    ('{"score": 1}', "item_id", "missing"),
    ('{"item_id": "a", "score": 1, "error": "oops"}', "error", "must be null or an object"),
    ('{"item_id": "a", "score": 1, "sub_scores": [1]}', "sub_scores", "must be null"),
    ('{"item_id": "a", "score": 1, "epoch": "one"}', "epoch", "integer"),
    ('{"item_id": "a", "score": 1', None, "invalid JSON"),
])
def test_bad_records_name_file_line_and_field(tmp_path, line, field, message):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"item_id": "ok", "epoch": 0, "score": 1.0}\n\n' + line + "\n")
    with pytest.raises(InputError, match=message) as exc:
        read_record_frame(path)
    assert exc.value.line == 3 and exc.value.field == field and Path(exc.value.file) == path


def test_run_directory_and_labels(tmp_path):
    write_jsonl(side_records("base", BASE), tmp_path / "base.jsonl")
    write_jsonl(side_records("tuned", TUNED), tmp_path / "tuned.jsonl")
    r = compare_paths(tmp_path, tmp_path, ["base", "tuned"])
    assert r.baseline["path"].endswith("base.jsonl") and r.candidate["label"] == "tuned"
    with pytest.raises(InputError, match="several models") as exc:
        compare_paths(tmp_path, tmp_path)
    assert exc.value.field == "--label"
    with pytest.raises(InputError, match="no records for label 'nope'"):
        compare_paths(tmp_path, tmp_path, ["nope", "tuned"])
    with pytest.raises(InputError, match="once"):
        compare_paths(tmp_path, tmp_path, ["a", "b", "c"])
    single = tmp_path / "single"
    single.mkdir()
    write_jsonl(side_records("tuned", TUNED), single / "tuned.jsonl")
    assert load_side(single).label == "tuned"  # one model: no label needed


def test_mixed_labels_in_one_file_need_a_label(tmp_path):
    path = tmp_path / "all.jsonl"
    write_jsonl(side_records("base", BASE) + side_records("tuned", TUNED), path)
    with pytest.raises(InputError, match=r"several models \(base, tuned\)"):
        load_side(path)
    assert len(load_side(path, "tuned").frame) == 12
    with pytest.raises(InputError, match="no records with model_label 'x'"):
        load_side(path, "x")


def test_missing_path(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        load_side(tmp_path / "nope.jsonl")


def test_side_from_records_matches_files(pair):
    b, t = pair
    via_files = compare_paths(b, t).to_json()
    via_memory = compare_sides(side_from_records(read_records(b), "base"),
                               side_from_records(side_records("tuned", TUNED), "tuned")).to_json()
    for key in ("delta", "items", "slices"):
        assert via_files[key] == via_memory[key]


def test_text_sub_score_is_named(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text('{"item_id": "a", "score": 1, "sub_scores": {"k": 0.5}}\n'
                    '{"item_id": "b", "score": 1, "sub_scores": {"k": "high"}}\n')
    with pytest.raises(InputError, match="finite number") as exc:
        read_record_frame(path)
    assert exc.value.line == 2 and exc.value.field == "sub_scores.k"


def test_the_range_a_grader_wrote_on_the_records_is_found_in_jsonl_parquet_and_memory(tmp_path: Path) -> None:
    """A score_model writes its `range` into grade_details (score_model.parse_answer): record files copied out of
    their run directory keep it. The first records may lack it (a judge error has no answer to read)."""
    from rfteval.data.frame import recorded_range
    from rfteval.data.records import write_parquet

    scores = {"a": [7, 9], "b": [2, 3]}
    records = side_records("base", scores)
    records[0].grade_details = None  # a failed judge call: no details
    for r in records[1:]:
        r.grade_details = {"judge_model": "j", "score_range": [0.0, 10.0], "result": r.score}
    write_jsonl(records, tmp_path / "base.jsonl")
    write_parquet(records, tmp_path / "base.parquet")
    assert recorded_range(tmp_path / "base.jsonl") == (0.0, 10.0)
    assert recorded_range(tmp_path / "base.parquet") == (0.0, 10.0)
    assert load_side(tmp_path / "base.jsonl").recorded_range == (0.0, 10.0)
    assert side_from_records(records, "base").recorded_range == (0.0, 10.0)
    # a key of that name in the model's own output is not the grader's
    other = side_records("base", scores)
    for r in other:
        r.output_json = {"score_range": [0, 99]}
    write_jsonl(other, tmp_path / "other.jsonl")
    assert recorded_range(tmp_path / "other.jsonl") is None
    # scores within [0, 1]: the default range already holds them, nothing is looked up
    write_jsonl(side_records("base", BASE), tmp_path / "unit.jsonl")
    assert load_side(tmp_path / "unit.jsonl").recorded_range is None
