"""rfteval.compare: loading sides, pairing, errors, slices, sub-scores and the gate."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rfteval import stats
from rfteval.compare import (
    CompareOptions,
    Gate,
    compare_paths,
    compare_sides,
    evaluate_gate,
    field_value,
    load_side,
    read_record_frame,
    side_from_records,
)
from rfteval.errors import InputError
from rfteval.records import Record, make_record, read_records, write_jsonl, write_parquet


def rec(label: str, item: str, epoch: int, score: float | None, *, error: dict[str, str] | None = None,
        sub: dict[str, float] | None = None, **extra: Any) -> Record:
    r = make_record(run_id="t", model_label=label, model=f"m-{label}", item_id=item, epoch=epoch, output_text="out",
                    error=error)
    r.score = score
    r.sub_scores = sub
    for name, value in extra.items():
        setattr(r, name, value)
    return r


def side_records(label: str, scores: dict[str, list[float]], **kw: Any) -> list[Record]:
    return [rec(label, item, e, s, **kw) for item, ss in scores.items() for e, s in enumerate(ss)]


BASE = {"a": [0, 0, 1], "b": [1, 1, 1], "c": [0, 0, 0], "d": [1, 0, 1]}
TUNED = {"a": [1, 1, 1], "b": [1, 1, 0], "c": [0, 1, 0], "d": [1, 1, 1]}


@pytest.fixture
def pair(tmp_path: Path) -> tuple[Path, Path]:
    b, t = tmp_path / "base.jsonl", tmp_path / "tuned.jsonl"
    write_jsonl(side_records("base", BASE), b)
    write_jsonl(side_records("tuned", TUNED), t)
    return b, t


def item_means(scores: dict[str, list[float]]) -> dict[str, float]:
    return {k: sum(v) / len(v) for k, v in scores.items()}


# ---------------------------------------------------------------------------------------------- basics


def test_means_per_item_then_overall(pair):
    r = compare_paths(*pair)
    mb, mt = item_means(BASE), item_means(TUNED)
    assert r.baseline["mean"] == pytest.approx(np.mean(list(mb.values())))
    assert r.candidate["mean"] == pytest.approx(np.mean(list(mt.values())))
    d = [mt[k] - mb[k] for k in "abcd"]
    assert r.delta["mean"] == pytest.approx(np.mean(d))
    assert r.delta["se"] == pytest.approx(np.std(d, ddof=1) / 2)
    assert (r.delta["wins"], r.delta["ties"], r.delta["losses"]) == (3, 0, 1)
    assert r.baseline["records"] == 12 and r.baseline["items"] == 4 and r.baseline["errors"] == 0
    rows = r.items.set_index("item_id")
    assert rows.loc["b", "delta"] == pytest.approx(-1 / 3) and rows.loc["a", "delta"] == pytest.approx(2 / 3)
    assert list(r.items["item_id"])[0] == "b"  # sorted by delta, largest drop first
    assert r.baseline["label"] == "base" and r.candidate["label"] == "tuned"


def test_unequal_epochs_average_per_item_first(tmp_path):
    b, t = tmp_path / "b.jsonl", tmp_path / "t.jsonl"
    write_jsonl(side_records("b", {"x": [1.0], "y": [0.0, 0.0, 0.0, 0.0, 0.0, 0.0]}), b)
    write_jsonl(side_records("t", {"x": [1.0, 1.0], "y": [0.5]}), t)
    r = compare_paths(b, t)
    assert r.baseline["mean"] == pytest.approx(0.5)  # not 1/7: each item weighs the same
    assert r.candidate["mean"] == pytest.approx(0.75)


def test_missing_items_are_listed_and_left_out(tmp_path):
    b, t = tmp_path / "b.jsonl", tmp_path / "t.jsonl"
    write_jsonl(side_records("b", {f"q{i}": [i / 10] for i in range(10)}), b)
    write_jsonl(side_records("t", {f"q{i}": [i / 10 + 0.05] for i in range(2, 12)}), t)
    r = compare_paths(b, t)
    assert r.unpaired == {"baseline_only": ["q0", "q1"], "candidate_only": ["q10", "q11"]}
    assert r.delta["n"] == 8 and r.delta["mean"] == pytest.approx(0.05)
    assert r.baseline["mean"] == pytest.approx(np.mean([i / 10 for i in range(2, 10)]))
    assert r.baseline["items_unpaired"] == 2
    assert any("only in the baseline" in n for n in r.notes)
    with pytest.raises(InputError, match="only in the baseline") as exc:
        compare_paths(b, t, options=CompareOptions(strict=True))
    assert exc.value.field == "--strict"


def test_no_common_items_is_bad_input(tmp_path):
    b, t = tmp_path / "b.jsonl", tmp_path / "t.jsonl"
    write_jsonl(side_records("b", {"x": [1.0]}), b)
    write_jsonl(side_records("t", {"y": [1.0]}), t)
    with pytest.raises(InputError, match="no item_id appears on both sides"):
        compare_paths(b, t)


def test_errors_score_zero_or_are_excluded(tmp_path):
    b, t = tmp_path / "b.jsonl", tmp_path / "t.jsonl"
    write_jsonl(side_records("b", {"x": [1.0, 1.0], "y": [0.5, 0.5]}), b)
    err = {"stage": "grade", "type": "python_error", "message": "ZeroDivisionError"}
    write_jsonl([rec("t", "x", 0, 1.0), rec("t", "x", 1, None, error=err), rec("t", "y", 0, 1.0),
                 rec("t", "y", 1, 0.9, error=err)], t)
    r = compare_paths(b, t)
    assert r.candidate["errors"] == 2 and r.candidate["records"] == 4
    assert r.candidate["mean"] == pytest.approx((0.5 + 0.5) / 2)  # each error scored 0, even with a score
    rows = r.items.set_index("item_id")
    assert rows.loc["x", "candidate_errors"] == 1
    assert rows.loc["x", "candidate_error"] == "grade/python_error: ZeroDivisionError"
    ex = compare_paths(b, t, options=CompareOptions(exclude_errors=True))
    assert ex.candidate["mean"] == pytest.approx(1.0) and ex.candidate["errors"] == 2
    assert ex.candidate["records_used"] == 2


def test_item_with_only_errors_unpaired_when_excluded(tmp_path):
    b, t = tmp_path / "b.jsonl", tmp_path / "t.jsonl"
    write_jsonl(side_records("b", {"x": [1.0], "y": [0.0]}), b)
    err = {"stage": "generate", "type": "timeout", "message": "t"}
    write_jsonl([rec("t", "x", 0, None, error=err), rec("t", "y", 0, 1.0)], t)
    assert compare_paths(b, t, options=CompareOptions(errors="zero")).delta["n"] == 2
    ex = compare_paths(b, t, options=CompareOptions(exclude_errors=True))
    assert ex.delta["n"] == 1 and ex.unpaired["baseline_only"] == ["x"]


def test_one_error_policy_generation_failures_left_out_grading_errors_and_refusals_zero(tmp_path):
    b, t = tmp_path / "b.jsonl", tmp_path / "t.jsonl"
    write_jsonl(side_records("b", {i: [1.0, 1.0] for i in "wxyz"}), b)
    gen = {"stage": "generate", "type": "server_error", "message": "HTTP 500 after 5 tries"}
    refusal = {"stage": "generate", "type": "refusal", "message": "I can't help with that"}
    grade = {"stage": "grade", "type": "python_error", "message": "ZeroDivisionError"}
    write_jsonl([rec("t", "w", 0, None, error=gen), rec("t", "w", 1, 1.0),
                 rec("t", "x", 0, None, error=refusal), rec("t", "x", 1, 1.0),
                 rec("t", "y", 0, None, error=grade), rec("t", "y", 1, 1.0),
                 rec("t", "z", 0, 1.0), rec("t", "z", 1, 1.0)], t)
    r = compare_paths(b, t)  # default: the endpoint's failure is not the model's 0
    means = r.items.set_index("item_id")["candidate"]
    assert means["w"] == 1.0 and means["x"] == 0.5 and means["y"] == 0.5 and means["z"] == 1.0
    assert r.candidate["generation_errors"] == 1 and r.candidate["scored_zero_errors"] == 2
    assert r.candidate["generation_error_share"] == pytest.approx(1 / 8)
    z = compare_paths(b, t, options=CompareOptions(errors="zero"))
    assert z.items.set_index("item_id")["candidate"]["w"] == 0.5
    with pytest.raises(InputError, match="--errors"):
        compare_paths(b, t, options=CompareOptions(errors="nope"))


def test_gate_fails_on_a_broken_run_whatever_the_scores(tmp_path):
    b, t = tmp_path / "b.jsonl", tmp_path / "t.jsonl"
    write_jsonl(side_records("b", {f"q{i}": [0.5, 0.5] for i in range(20)}), b)
    gen = {"stage": "generate", "type": "connection", "message": "cannot reach"}
    write_jsonl([rec("t", f"q{i}", e, 0.5) if i >= 2 else rec("t", f"q{i}", e, None, error=gen)
                 for i in range(20) for e in range(2)], t)
    r = compare_paths(b, t, options=CompareOptions(gate=Gate(max_drop=0.05)))
    assert not r.gate["passed"]
    assert r.gate["failures"] == ["error-rate: t: 10.0% of records failed to generate (> 0.05): a broken run is "
                                  "not a verdict"]
    ok = compare_paths(b, t, options=CompareOptions(gate=Gate(max_drop=0.05, max_error_rate=0.2)))
    assert ok.gate["passed"]
    assert compare_paths(b, t).gate["passed"]  # no gate asked for: nothing fails


def test_duplicate_cells_keep_the_last_record(tmp_path):
    b, t = tmp_path / "b.jsonl", tmp_path / "t.jsonl"
    write_jsonl([rec("b", "x", 0, 0.0), rec("b", "x", 0, 1.0), rec("b", "y", 0, 0.5)], b)
    write_jsonl(side_records("t", {"x": [1.0], "y": [0.5]}), t)
    r = compare_paths(b, t)
    assert r.baseline["duplicates_dropped"] == 1 and r.baseline["records"] == 2
    assert r.items.set_index("item_id").loc["x", "baseline"] == 1.0


# ---------------------------------------------------------------------------------------------- reading


def test_fast_and_slow_readers_agree(tmp_path):
    rows = [rec("m", f"i{i}", e, (i * 7 + e) % 3 / 2, sub={"acc": float(e % 2), "fmt": 1.0} if i % 4 else None,
                output_json=[{"a": i}] if i % 2 else {"k": "v"}, grade_details={"why": [1, "x", None]})
            for i in range(30) for e in range(2)]
    rows[5].error = {"stage": "grade", "type": "t", "message": "m", "extra": {"nested": True}}
    path = tmp_path / "r.jsonl"
    write_jsonl(rows, path)
    from rfteval import compare as cmp

    fast = cmp._read_jsonl_fast(path)
    slow = cmp._read_jsonl_slow(path)
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


def test_parquet_and_jsonl_give_the_same_comparison(tmp_path, pair):
    recs = side_records("base", BASE, sub={"k": 0.5}) + side_records("tuned", TUNED, sub={"k": 1.0})
    write_parquet(recs, tmp_path / "results.parquet")
    write_jsonl(side_records("base", BASE, sub={"k": 0.5}), tmp_path / "base.jsonl")
    write_jsonl(side_records("tuned", TUNED, sub={"k": 1.0}), tmp_path / "tuned.jsonl")
    a = compare_paths(tmp_path / "results.parquet", tmp_path / "results.parquet", ["base", "tuned"]).to_json()
    b = compare_paths(tmp_path / "base.jsonl", tmp_path / "tuned.jsonl").to_json()
    for key in ("delta", "items", "slices", "sub_scores"):
        assert a[key] == b[key]
    assert a["sub_scores"]["k"]["delta"]["mean"] == pytest.approx(0.5)


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


# ---------------------------------------------------------------------------------------------- slices


def test_select_lowest_breaks_ties_at_random_never_taking_most_of_the_data():
    mask = stats.select_lowest(np.array([0.9, 0.1, 0.5, 0.3, 0.2, 0.7, 0.8, 0.6]), 0.25, seed=0)
    assert mask.tolist() == [False, True, False, False, True, False, False, False]
    binary = np.array([0.0] * 278 + [1.0] * 222)
    picks = [stats.select_lowest(binary, 0.25, seed) for seed in range(3)]
    assert all(m.sum() == 125 and not binary[m].any() for m in picks)  # a quarter, all at the floor
    assert not np.array_equal(picks[0], picks[1])  # which tied items: chosen at random, seeded


def test_hardest_slice_is_cross_fitted_on_halves_of_the_baseline_epochs(pair):
    r = compare_paths(*pair)
    h = r.slices["hardest"]
    assert h["method"] == "cross-fit" and "chosen on half of each item's baseline epochs" in h["rule"]
    assert {"mean", "ci95"} <= set(h["delta"]) and h["delta"]["p_method"] == "t, cross-fitted halves"
    # by hand: halves A = epochs 0, 2 and B = epoch 1; 4 items, so one chosen per half
    a = {k: (v[0] + v[2]) / 2 for k, v in BASE.items()}
    b = {k: v[1] for k, v in BASE.items()}
    c = item_means(TUNED)
    ids = sorted(BASE)
    sel_a = stats.select_lowest(np.array([a[i] for i in ids]), 0.25, 0)
    sel_b = stats.select_lowest(np.array([b[i] for i in ids]), 0.25, 1)
    ia, ib = ids[int(np.flatnonzero(sel_a)[0])], ids[int(np.flatnonzero(sel_b)[0])]
    expected = 0.5 * ((c[ia] - b[ia]) + (c[ib] - a[ib]))
    assert h["delta"]["mean"] == pytest.approx(expected)


def test_hardest_slice_with_one_epoch_is_descriptive_only(tmp_path):
    b, t = tmp_path / "b.jsonl", tmp_path / "t.jsonl"
    write_jsonl(side_records("b", {f"q{i}": [i / 10] for i in range(8)}), b)
    write_jsonl(side_records("t", {f"q{i}": [0.5] for i in range(8)}), t)
    r = compare_paths(b, t)
    h = r.slices["hardest"]
    assert h["method"] == "descriptive" and h["rule"].startswith("selected on the same data, descriptive")
    assert h["items"] == 2 and h["delta"]["mean"] == pytest.approx(0.5 - 0.05)
    assert h["delta"]["descriptive"] and all(math.isnan(x) for x in h["delta"]["ci95"])
    assert math.isnan(h["delta"]["p_value"]) and stats.direction(h["delta"]) == "descriptive"
    assert r.to_json()["slices"]["hardest"]["delta"]["ci95"] == [None, None]


def test_field_value_lookup():
    data = {"difficulty": "hard", "metadata": {"topic": "algebra", "level": 3, "tags": ["a"], "deep": {"x": 1}}}
    assert field_value(data, "difficulty") == "hard"
    assert field_value(data, "topic") == "algebra"  # falls back to metadata.KEY
    assert field_value(data, "metadata.level") == "3"
    assert field_value(data, "metadata.deep.x") == "1"
    assert field_value(data, "tags") == '["a"]'
    assert field_value(data, "nope") == "(missing)"


def test_by_slices_from_the_dataset(tmp_path, pair):
    ds = tmp_path / "data.jsonl"
    rows = [{"id": "a", "difficulty": "easy"}, {"id": "b", "difficulty": "easy"},
            {"id": "c", "metadata": {"difficulty": "hard"}}, {"id": "zzz", "difficulty": "hard"}]
    ds.write_text("\n".join(json.dumps({**r, "messages": [{"role": "user", "content": "q"}]}) for r in rows))
    r = compare_paths(*pair, options=CompareOptions(by=("difficulty",)), dataset=ds)
    easy, hard, absent = r.slices["difficulty=easy"], r.slices["difficulty=hard"], r.slices["difficulty=(not in dataset)"]
    mb, mt = item_means(BASE), item_means(TUNED)
    assert easy["items"] == 2 and easy["delta"]["mean"] == pytest.approx((mt["a"] - mb["a"] + mt["b"] - mb["b"]) / 2)
    assert hard["items"] == 1 and hard["delta"]["mean"] == pytest.approx(mt["c"] - mb["c"])
    assert absent["items"] == 1 and easy["field"] == "difficulty" and easy["value"] == "easy"
    with pytest.raises(InputError, match="needs --dataset"):
        compare_paths(*pair, options=CompareOptions(by=("difficulty",)))
    other = tmp_path / "other.jsonl"
    other.write_text(json.dumps({"id": "q", "difficulty": "x", "messages": [{"role": "user", "content": "q"}]}))
    with pytest.raises(InputError, match="none of the compared items"):
        compare_paths(*pair, options=CompareOptions(by=("difficulty",)), dataset=other)


def test_sub_scores_compared_one_row_each(tmp_path):
    b, t = tmp_path / "b.jsonl", tmp_path / "t.jsonl"
    write_jsonl([rec("b", i, e, 0.5, sub={"acc": 0.0, "fmt": 1.0}) for i in "xyz" for e in range(2)], b)
    err = {"stage": "grade", "type": "t", "message": "m"}
    write_jsonl([rec("t", i, e, 0.5, sub={"acc": 1.0, "fmt": 1.0, "new": 1.0}) for i in "xy" for e in range(2)]
                + [rec("t", "z", 0, None, error=err), rec("t", "z", 1, 0.5, sub={"acc": 1.0, "fmt": 0.0})], t)
    r = compare_paths(b, t)
    assert set(r.sub_scores) == {"acc", "fmt"}
    acc, fmt = r.sub_scores["acc"], r.sub_scores["fmt"]
    # z: one error record (counts 0 for every sub-score) and one with acc 1, fmt 0
    assert acc["candidate"]["mean"] == pytest.approx((1 + 1 + 0.5) / 3)
    assert fmt["candidate"]["mean"] == pytest.approx((1 + 1 + 0) / 3)
    assert acc["delta"]["wins"] == 3 and fmt["delta"]["losses"] == 1
    assert any("new" in n for n in r.notes)


# ---------------------------------------------------------------------------------------------- gate


@pytest.mark.parametrize("gate, passed, name", [
    (Gate(fail_under=0.5), True, "fail-under"),
    (Gate(fail_under=0.9), True, "fail-under"),  # 0.75 over 4 items: its interval reaches 1, no evidence below 0.9
    (Gate(fail_under=0.9, mode="strict"), False, "fail-under"),  # nor proof of being above it
    (Gate(max_drop=0.0), True, "max-drop"),
    (Gate(max_drop=0.0, mode="strict"), False, "max-drop"),
    (Gate(require_improvement=True), False, "require-improvement"),  # 4 items: too few to tell
    (Gate(max_item_drop=0.5), True, "max-item-drop"),
    (Gate(max_item_drop=0.2), True, "max-item-drop"),  # b drops 1/3, but 3+3 epochs cannot show it
])
def test_each_gate_flag(pair, gate, passed, name):
    r = compare_paths(*pair, options=CompareOptions(gate=gate))
    # candidate mean 0.75, delta +0.25 with a wide interval over 4 items, item b drops by 1/3
    assert r.gate["passed"] is passed
    assert [c["name"] for c in r.gate["checks"]] == [name, "error-rate"]
    assert len(r.gate["failures"]) == (0 if passed else 1)
    if not passed:
        assert r.gate["failures"][0].startswith(name + ": ")


def test_gate_thresholds_and_messages(pair):
    r = compare_paths(*pair)
    assert r.gate == {"passed": True, "failures": [], "checks": [], "warnings": [], "mode": "evidence",
                      "flagged_items": []}
    g = evaluate_gate(r, Gate(fail_under=1.0, max_drop=0.0, max_item_drop=1 / 3))  # equal passes
    assert g["passed"], g
    g = evaluate_gate(r, Gate(fail_under=0.76, max_item_drop=0.3, max_drop=0.3, mode="strict"))
    assert g["failures"][0].startswith("fail-under: candidate mean 0.7500, interval lower bound ")
    assert g["failures"][0].endswith(" < 0.76")
    assert g["failures"][1].startswith("max-drop: delta interval lower bound ")
    assert any("cannot show any single item's drop among 4 items" in w for w in g["warnings"])
    r.delta.update(mean=-0.4, ci95=[-0.6, -0.2], p_value=0.001, p_adjusted=0.001, n=40, p_method="sign-flip")
    assert evaluate_gate(r, Gate(max_drop=0.3))["failures"] == [
        "max-drop: delta -0.4000 [-0.6000, -0.2000] lies below 0 and below -0.3"]
    assert evaluate_gate(r, Gate(max_drop=0.5))["passed"]  # a real drop, but not past the threshold


def test_require_improvement_passes_on_a_clear_gain(tmp_path):
    b, t = tmp_path / "b.jsonl", tmp_path / "t.jsonl"
    write_jsonl(side_records("b", {f"q{i}": [0.2 + i / 100, 0.3] for i in range(20)}), b)
    write_jsonl(side_records("t", {f"q{i}": [0.6 + i / 100, 0.7 - i / 200] for i in range(20)}), t)
    r = compare_paths(b, t, options=CompareOptions(gate=Gate(require_improvement=True)))
    assert r.gate["passed"] and r.delta["ci95"][0] > 0
    assert "an improvement" in r.gate["checks"][0]["detail"]


def test_too_few_items_to_tell_even_when_the_interval_excludes_zero(tmp_path):
    b, t = tmp_path / "b.jsonl", tmp_path / "t.jsonl"
    write_jsonl(side_records("b", {f"q{i}": [0.2, 0.2] for i in range(5)}), b)
    write_jsonl(side_records("t", {f"q{i}": [0.8 + i / 100, 0.8] for i in range(5)}), t)
    r = compare_paths(b, t, options=CompareOptions(gate=Gate(require_improvement=True)))
    assert r.delta["ci95"][0] > 0 and r.delta["p_value"] == pytest.approx(0.0625)
    assert stats.direction(r.delta) == "too few items to tell"
    assert not r.gate["passed"] and "too few items to tell" in r.gate["failures"][0]
    assert not any("too few for a reliable interval" in n for n in r.notes)
    write_jsonl(side_records("t", {f"q{i}": [0.8 + i / 100, 0.8] for i in range(4)}), t)
    four = compare_paths(b, t)
    assert any("only 4 paired item(s): too few for a reliable interval" in n for n in four.notes)


def test_max_item_drop_flags_only_significant_drops_after_holm(tmp_path):
    b, t = tmp_path / "b.jsonl", tmp_path / "t.jsonl"
    base = {f"q{i}": [1.0] * 10 for i in range(10)}
    tuned = dict(base, q0=[0.0] * 10, q1=[1.0] * 6 + [0.0] * 4)  # q0 collapses; q1 drops 0.4 on 10 epochs
    write_jsonl(side_records("b", base), b)
    write_jsonl(side_records("t", tuned), t)
    r = compare_paths(b, t, options=CompareOptions(gate=Gate(max_item_drop=0.3)))
    assert r.gate["flagged_items"] == ["q0"] and not r.gate["passed"]
    check = r.gate["checks"][0]
    assert check["p_adjusted"]["q0"] < 0.05 <= check["p_adjusted"]["q1"]
    assert r.gate["warnings"] == []


def test_gate_warns_when_the_threshold_is_below_what_the_eval_can_see(tmp_path):
    rng = np.random.default_rng(3)
    b, t = tmp_path / "b.jsonl", tmp_path / "t.jsonl"
    p = rng.beta(2, 2, 20)
    write_jsonl(side_records("b", {f"q{i}": (rng.random(3) < p[i]).astype(float).tolist() for i in range(20)}), b)
    write_jsonl(side_records("t", {f"q{i}": (rng.random(3) < p[i]).astype(float).tolist() for i in range(20)}), t)
    r = compare_paths(b, t, options=CompareOptions(gate=Gate(max_drop=0.02)))
    check = r.gate["checks"][0]
    assert check["mde"] > 0.1
    assert r.gate["warnings"] == [f"max-drop: this eval cannot reliably see a drop of 0.02; it sees drops >= "
                                  f"{check['mde']:.2f} (80% power): add items or epochs"]


def test_json_shape(pair):
    j = compare_paths(*pair, options=CompareOptions(gate=Gate(fail_under=0.9, mode="strict"))).to_json()
    for side in ("baseline", "candidate"):
        assert {"label", "mean", "ci95", "items", "records", "errors"} <= set(j[side])
        assert len(j[side]["ci95"]) == 2
    assert {"mean", "ci95", "p_value", "mde", "wins", "ties", "losses"} <= set(j["delta"])
    assert set(j["items"][0]) >= {"item_id", "baseline", "candidate", "delta"}
    assert j["gate"]["passed"] is False and j["gate"]["failures"][0].startswith("fail-under: candidate mean 0.7500")
    assert j["options"]["gate"] == "strict" and j["options"]["errors"] == "exclude"
    assert j["options"]["score_range"] == [0.0, 1.0]
    assert {"p_adjusted"} <= set(j["delta"])
    assert isinstance(j["slices"], dict) and "hardest" in j["slices"]
    json.dumps(j, allow_nan=False)  # strict JSON: no NaN anywhere


def test_text_sub_score_is_named(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text('{"item_id": "a", "score": 1, "sub_scores": {"k": 0.5}}\n'
                    '{"item_id": "b", "score": 1, "sub_scores": {"k": "high"}}\n')
    with pytest.raises(InputError, match="finite number") as exc:
        read_record_frame(path)
    assert exc.value.line == 2 and exc.value.field == "sub_scores.k"
