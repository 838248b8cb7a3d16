"""rfteval.compare.comparison: pairing, error policies, slices and sub-scores (the sides: test_sides; the gate: test_gate)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from rfteval.compare.comparison import field_value
from rfteval.compare.gate import Gate
from rfteval.compare.paths import compare_paths
from rfteval.compare.result import CompareOptions
from rfteval.data.records import write_jsonl, write_parquet
from rfteval.errors import InputError
from rfteval.stats import paired as stats
from tests.support.record_sides import BASE, TUNED, item_means, rec, side_records, write_pair


@pytest.fixture
def pair(tmp_path: Path) -> tuple[Path, Path]:
    return write_pair(tmp_path)


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


@pytest.mark.slow
def test_a_hardest_slice_larger_than_a_quarter_says_why(tmp_path):
    """Issue 27: 15 items, the "bottom quartile" held 7 without a word. Each half of the epochs chooses its own
    quarter (4 of 15) and the slice is the union; binary epochs tie many items at a half's cut, and which are taken
    is a seeded draw. The rule (terminal and JSON) says so."""
    b, t = tmp_path / "b.jsonl", tmp_path / "t.jsonl"
    rng = np.random.default_rng(3)
    write_jsonl(side_records("b", {f"q{i}": [float(x) for x in rng.integers(0, 2, 4)] for i in range(15)}), b)
    write_jsonl(side_records("t", {f"q{i}": [1.0, 1.0, 0.0, 1.0] for i in range(15)}), t)
    r = compare_paths(b, t)
    h = r.slices["hardest"]
    assert h["method"] == "cross-fit" and h["items"] > 4
    why = (f"({h['items']} items chosen: each half of the epochs chooses its own quarter, 4 of 15 items, and the two "
           "choices differ; ties at the cut: up to")
    assert why in h["rule"] and "drawn among them (seeded)" in h["rule"]
    assert why in json.loads(json.dumps(r.to_json()))["slices"]["hardest"]["rule"]
    pass3 = compare_paths(b, t, options=CompareOptions(metric="pass@3")).slices["hardest"]  # 2 samples a half: descriptive
    assert pass3["method"] == "descriptive" and pass3["items"] == 4
    assert "items tie at the cut, and the" in pass3["rule"] and "taken are drawn among them (seeded)" in pass3["rule"]
    even = tmp_path / "even.jsonl"  # distinct half means, no ties: the union of two quarters is still explained
    write_jsonl(side_records("b", {f"q{i}": [i / 20, i / 20, i / 20, i / 20] for i in range(15)}), even)
    h2 = compare_paths(even, t).slices["hardest"]
    assert h2["items"] == 4 and "(4 items chosen)" in h2["rule"]


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




def test_bounds_come_from_the_graders_declared_range_when_the_scores_lie_in_it() -> None:
    from rfteval.compare.measure import infer_bounds

    o = CompareOptions()
    ten = np.array([0.0, 7.0, 10.0])
    assert infer_bounds(o, ten, declared=[(0.0, 10.0, "score_model range"), None]) == (0.0, 10.0)
    assert infer_bounds(o, ten) is None  # nothing known, scores past 1: unbounded (and compare says so)
    # both sides' graders together (a 0..5 and a 0..10 grader compared)
    assert infer_bounds(o, ten, declared=[(0.0, 5.0, "a"), (0.0, 10.0, "b")]) == (0.0, 10.0)
    # a python grader's assumed [0, 1] that its scores leave is not a bound
    assert infer_bounds(o, np.array([0.0, 1.5]), declared=[(0.0, 1.0, "assumed")]) is None
    assert infer_bounds(CompareOptions(score_range=(0.0, 20.0)), ten, declared=[(0.0, 10.0, "x")]) == (0.0, 20.0)
    assert infer_bounds(o, np.array([0.0, 0.5])) == (0.0, 1.0)


@pytest.mark.slow
def test_a_sub_scores_interval_is_cut_to_its_own_range_not_the_multis(tmp_path):
    """A multi scoring 0..1 from a 0..10 judge (`0.1 * judge`): the judge's sub-score row was cut to [0, 1]."""
    import json as json_

    b, t = tmp_path / "run" / "base.jsonl", tmp_path / "run" / "tuned.jsonl"
    b.parent.mkdir()
    judge_b, judge_t = {"x": [2, 3], "y": [9, 8], "z": [1, 5]}, {"x": [9, 9], "y": [4, 6], "z": [10, 7]}
    for path, label, js in ((b, "base", judge_b), (t, "tuned", judge_t)):
        write_jsonl([rec(label, i, e, s / 10, sub={"judge": float(s)}) for i, ss in js.items()
                     for e, s in enumerate(ss)], path)
    r = compare_paths(b, t)
    row = r.sub_scores["judge"]
    assert row["baseline"]["ci95"][1] > 1 and row["baseline"]["mean"] == pytest.approx(14 / 3)  # uncut: unknown
    # the run's grader declares the judge's range: cut to [0, 10] (and the multi's own rows to [0, 1])
    judge = {"type": "score_model", "name": "judge", "model": "m", "range": [0, 10],
             "input": [{"role": "user", "content": "{{ sample.output_text }}"}]}
    multi = {"type": "multi", "name": "m", "graders": {"judge": judge}, "calculate_output": "0.1 * judge"}
    (tmp_path / "run" / "grader.json").write_text(json_.dumps(multi))
    (tmp_path / "run" / "spec.resolved.toml").write_text('grader = "grader.json"\n')
    r = compare_paths(b, t)
    row = r.sub_scores["judge"]
    assert 0 <= row["baseline"]["ci95"][0] and row["baseline"]["ci95"][1] <= 10
    assert r.bounds == (0.0, 1.0) and r.baseline["ci95"][0] >= 0


@pytest.mark.slow
def test_per_item_delta_intervals_stay_within_the_graders_span():
    """Five epochs a side give each item a delta interval; on a 0..10 judge it never passes ±10."""
    from rfteval.compare.comparison import compare_sides
    from rfteval.compare.sides import side_from_records

    def side(label, scores):
        records = side_records(label, scores)
        for r in records:
            r.grade_details = {"score_range": [0.0, 10.0]}  # what score_model writes on each record
        return side_from_records(records, label)

    base = {i: [0, 10, 0, 10, 0] for i in "abcdef"}
    tuned = {i: [10, 0, 10, 10, 10] for i in "abcdef"}
    r = compare_sides(side("base", base), side("tuned", tuned))
    assert r.bounds == (0.0, 10.0)
    hi = r.items["delta_hi"].to_numpy()
    assert np.isfinite(hi).all() and hi.max() == 10.0  # the uncut t interval reaches past 11


@pytest.mark.slow
def test_the_pass_at_k_note_says_not_shown_better_where_pass_at_n_rose_on_too_few_items():
    """Issue 36: the demo's note said "pass@1 rose but pass@3 did not" where pass@3 went 0.364 -> 0.727 on 11 items
    (4 items gained, none lost; not shown better). The words are stats.direction's: not shown better, never "did
    not rise"."""
    from rfteval.compare.comparison import compare_sides
    from rfteval.compare.simulation import side_from_matrix

    base, tuned = np.zeros((11, 3)), np.zeros((11, 3))
    for i, passes in enumerate([2, 2, 1, 1]):  # 6 of 33 samples pass, on 4 items
        base[i, :passes] = 1.0
    for i, passes in enumerate([3, 3, 3, 3, 2, 2, 2, 2]):  # 20 of 33, on 8 items (the base's 4 among them)
        tuned[i, :passes] = 1.0
    r = compare_sides(side_from_matrix("base", base), side_from_matrix("tuned", tuned))
    pk = r.pass_k
    assert pk is not None and pk["sharpening"]
    assert (pk["pass_at_n"]["baseline"]["mean"], pk["pass_at_n"]["candidate"]["mean"]) == (4 / 11, 8 / 11)
    word = stats.direction(pk["pass_at_n"]["delta"])
    assert stats.direction(pk["pass_at_1"]["delta"]) == "better" and word not in ("better", "worse")
    (note,) = [n for n in r.notes if n.startswith("pass@1")]
    assert note.startswith(f"pass@1 shown better, pass@3 not shown better ({word}): ")
    assert "pass@3 0.364 -> 0.727, delta +0.364" in note
    assert "did not" not in note and "rose but" not in note
