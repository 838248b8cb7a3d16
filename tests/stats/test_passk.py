"""pass@k and pass^k: the estimators by hand and against the truth, and `compare --metric` end to end.

Simulations draw item pass rates with a known truth and check the estimators and intervals with library calls
(fixed seeds, vectorised: seconds).
"""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from rfteval.cli.app import app
from rfteval.compare.comparison import compare_sides
from rfteval.compare.passing import run_pass_curves
from rfteval.compare.paths import compare_paths
from rfteval.compare.result import CompareOptions
from rfteval.compare.sides import side_from_records
from rfteval.compare.simulation import side_from_matrix
from rfteval.data.records import make_record, write_jsonl
from rfteval.errors import InputError
from rfteval.stats import paired as stats
from rfteval.stats import passk
from tests.support.cli_run_files import write_run_files

runner = CliRunner()


# ---------------------------------------------------------------------------------------------- by hand


@pytest.mark.parametrize("n, c, k, want", [
    (3, 1, 1, 1 / 3), (3, 1, 2, 2 / 3), (3, 1, 3, 1.0), (3, 0, 2, 0.0), (3, 3, 1, 1.0),
    (5, 2, 3, 1 - 1 / 10),  # 1 − C(3,3)/C(5,3)
    (10, 1, 5, 0.5),  # one passing sample among 10: a random half holds it half the time
])
def test_pass_at_k_by_hand(n, c, k, want):
    assert passk.pass_at_k(n, c, k) == pytest.approx(want)


@pytest.mark.parametrize("n, c, k, want", [
    (3, 2, 2, 1 / 3), (3, 3, 3, 1.0), (3, 2, 3, 0.0), (5, 4, 3, 4 / 10), (4, 2, 1, 0.5),
])
def test_pass_all_k_by_hand(n, c, k, want):
    assert passk.pass_all_k(n, c, k) == pytest.approx(want)


def test_k_above_n_is_undefined_and_bad_counts_are_refused():
    assert math.isnan(passk.pass_at_k(3, 1, 4)) and math.isnan(passk.pass_all_k(3, 1, 4))
    with pytest.raises(ValueError):
        passk.pass_at_k(3, 4, 1)
    with pytest.raises(ValueError):
        passk.per_item([3, 3], [1, 5], 1)


def test_equals_chen_et_al_numpy_form_and_the_average_over_subsets():
    # Chen et al. (2021), Figure 3: 1 - prod(1 - k / arange(n - c + 1, n + 1)); and the definition itself:
    # the share of k-subsets of the n samples holding at least one pass (pass^k: holding only passes)
    for n in range(1, 9):
        for c in range(n + 1):
            outcomes = [1] * c + [0] * (n - c)
            for k in range(1, n + 1):
                chen = 1.0 if n - c < k else 1.0 - float(np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))
                subsets = list(itertools.combinations(outcomes, k))
                assert passk.pass_at_k(n, c, k) == pytest.approx(chen, abs=1e-12)
                assert passk.pass_at_k(n, c, k) == pytest.approx(np.mean([any(s) for s in subsets]), abs=1e-12)
                assert passk.pass_all_k(n, c, k) == pytest.approx(np.mean([all(s) for s in subsets]), abs=1e-12)


def test_per_item_and_curve_skip_items_short_of_k():
    n, c = np.array([3, 3, 2]), np.array([1, 3, 0])
    assert passk.per_item(n, c, 1).tolist() == pytest.approx([1 / 3, 1.0, 0.0])
    assert np.isnan(passk.per_item(n, c, 3)[2])
    curve = passk.curve(n, c)
    assert curve[1] == pytest.approx((1 / 3 + 1 + 0) / 3)
    assert curve[3] == pytest.approx((1 + 1) / 2)  # the 2-sample item drops out of k = 3 only
    assert passk.curve(n, c, "pass^")[2] == pytest.approx((0 + 1 + 0) / 3)


def test_metric_names():
    assert passk.parse_metric("mean") == passk.MEAN
    assert passk.parse_metric("pass@5") == passk.Metric("pass@", 5)
    assert passk.parse_metric("pass^2").name == "pass^2"
    for bad in ("pass@0", "pass@", "pass@x", "maj@3", "pass@-1", "Pass@1"):
        with pytest.raises(InputError, match="--metric"):
            passk.parse_metric(bad)


def test_passes_prefers_the_graders_verdict():
    score = np.array([0.2, 1.0, 0.3 + 0.6, 1.0])
    passed = np.array([1.0, np.nan, np.nan, 0.0])  # the grader passed a 0.2 and failed a 1.0
    assert passk.passes(score, passed, 0.9).tolist() == [True, True, True, False]
    assert passk.passes(score, None, 1.0).tolist() == [False, True, False, True]


# ---------------------------------------------------------------------------------------------- simulation


def beta_truth(a: float, b: float, k: int) -> tuple[float, float]:
    """E[1 − (1 − p)^k] and E[p^k] for p ~ Beta(a, b): 1 − B(a, b + k)/B(a, b) and B(a + k, b)/B(a, b)."""
    def lbeta(x: float, y: float) -> float:
        return math.lgamma(x) + math.lgamma(y) - math.lgamma(x + y)

    return 1 - math.exp(lbeta(a, b + k) - lbeta(a, b)), math.exp(lbeta(a + k, b) - lbeta(a, b))


@pytest.mark.parametrize("n, k", [(5, 1), (5, 3), (5, 5), (8, 4)])
def test_unbiased_against_the_truth_where_the_plug_in_is_not(n, k):
    rng = np.random.default_rng(n * 10 + k)
    p = rng.beta(0.5, 1.5, 400_000)  # hard items, the case pass@k is for
    c = rng.binomial(n, p)
    truth_at, truth_all = beta_truth(0.5, 1.5, k)
    est_at, est_all = passk.per_item(np.full(p.size, n), c, k), passk.per_item(np.full(p.size, n), c, k, "pass^")
    for est, truth in ((est_at, truth_at), (est_all, truth_all)):
        se = est.std(ddof=1) / math.sqrt(est.size)
        assert abs(est.mean() - truth) < 4 * se + 1e-12
    if 1 < k < n:  # the plug-in 1 − (1 − c/n)^k understates pass@k
        plug = 1 - (1 - c / n) ** k
        assert truth_at - plug.mean() > 10 * plug.std(ddof=1) / math.sqrt(plug.size)


def test_the_interval_of_a_models_pass_at_k_covers_the_truth():
    # 4,000 replicates of 60 items x 5 samples: the t interval over items covers E[pass@3] about 95% of the time
    rng = np.random.default_rng(1)
    reps, items, n, k = 4000, 60, 5, 3
    p = rng.beta(2.0, 2.0, (reps, items))
    c = rng.binomial(n, p)
    values = passk.per_item(np.full(c.size, n), c.ravel(), k).reshape(reps, items)
    _, _, lo, hi = stats.t_interval(values, 0.95, axis=1)
    truth, _ = beta_truth(2.0, 2.0, k)
    coverage = float(np.mean((lo <= truth) & (truth <= hi)))
    assert 0.93 <= coverage <= 0.97, coverage


def draw_pair(rng: np.random.Generator, base_p: np.ndarray, cand_p: np.ndarray, epochs: int):
    base = (rng.random((base_p.size, epochs)) < base_p[:, None]).astype(float)
    cand = (rng.random((cand_p.size, epochs)) < cand_p[:, None]).astype(float)
    return side_from_matrix("base", base), side_from_matrix("candidate", cand)


@pytest.mark.slow
def test_pass_metric_comparison_of_identical_models_rarely_claims_a_difference():
    rng = np.random.default_rng(3)
    claims = 0
    for _ in range(200):
        p = rng.beta(1.0, 2.0, 40)
        r = compare_sides(*draw_pair(rng, p, p, 4), CompareOptions(metric="pass@2"))
        claims += stats.direction(r.delta) in ("better", "worse")
    assert claims / 200 <= 0.07


@pytest.mark.slow
def test_the_hardest_slice_under_pass_at_2_is_unbiased_on_identical_models():
    # 4 epochs: halves of 2 let pass@2 be measured on the half that did not choose
    rng = np.random.default_rng(5)
    means, excluded = [], 0
    for _ in range(200):
        p = rng.beta(2.0, 2.0, 40)
        h = compare_sides(*draw_pair(rng, p, p, 4), CompareOptions(metric="pass@2")).slices["hardest"]
        assert h["method"] == "cross-fit"
        means.append(h["delta"]["mean"])
        lo, hi = h["delta"]["ci95"]
        excluded += lo > 0 or hi < 0
    assert abs(np.mean(means)) <= 0.03
    assert excluded / 200 <= 0.07


def sharpened(rng: np.random.Generator, items: int) -> tuple[np.ndarray, np.ndarray]:
    """Half the items: base p 0.5 → 0.95; a quarter: 0.3 → 0 (coverage lost); a quarter: unsolved by both.
    pass@1 rises (0.325 → 0.475), pass@3 falls (0.60 → 0.50)."""
    kind = rng.permutation(np.repeat([0, 1, 2], [items // 2, items // 4, items - items // 2 - items // 4]))
    base = np.select([kind == 0, kind == 1], [0.5, 0.3], 0.0)
    cand = np.select([kind == 0, kind == 1], [0.95, 0.0], 0.0)
    return base, cand


@pytest.mark.slow
def test_sharpening_is_flagged_when_pass_at_1_rises_and_pass_at_n_does_not():
    rng = np.random.default_rng(8)
    flagged = 0
    for _ in range(40):
        b, c = sharpened(rng, 200)
        r = compare_sides(*draw_pair(rng, b, c, 3))
        flagged += any(n.startswith("pass@1 shown better, pass@3 ") for n in r.notes)
        assert r.pass_k is not None and r.pass_k["n"] == 3
    assert flagged / 40 >= 0.9


@pytest.mark.slow
def test_a_real_gain_is_not_called_sharpening():
    rng = np.random.default_rng(9)
    flagged = 0
    for _ in range(40):
        p = rng.beta(1.0, 3.0, 200)
        r = compare_sides(*draw_pair(rng, p, np.minimum(1.0, p + 0.2), 3))
        assert stats.direction(r.pass_k["pass_at_1"]["delta"]) == "better"
        flagged += r.pass_k["sharpening"]
    assert flagged / 40 <= 0.1


# ---------------------------------------------------------------------------------------------- compare --metric

BASE = {"a": [0, 0, 1], "b": [1, 1, 1], "c": [0, 0, 0], "d": [1, 0, 1]}
TUNED = {"a": [1, 1, 1], "b": [1, 1, 0], "c": [0, 1, 0], "d": [1, 1, 1]}


def records(label: str, scores: dict[str, list[float]], **extra) -> list[dict]:
    out = []
    for item, ss in scores.items():
        for e, s in enumerate(ss):
            r = make_record(run_id="t", model_label=label, model="m", item_id=item, epoch=e + 1, output_text="o")
            r.score = s
            for name, value in extra.items():
                setattr(r, name, value)
            out.append(r)
    return out


@pytest.fixture
def pair(tmp_path: Path) -> tuple[Path, Path]:
    b, t = tmp_path / "base.jsonl", tmp_path / "tuned.jsonl"
    write_jsonl(records("base", BASE), b)
    write_jsonl(records("tuned", TUNED), t)
    return b, t


def test_metric_values_by_hand(pair):
    one = compare_paths(*pair, options=CompareOptions(metric="pass@1"))
    mean = compare_paths(*pair)
    assert one.delta["mean"] == pytest.approx(mean.delta["mean"])  # binary scores: pass@1 is the mean
    three = compare_paths(*pair, options=CompareOptions(metric="pass@3"))
    assert (three.baseline["mean"], three.candidate["mean"]) == pytest.approx((0.75, 1.0))
    allk = compare_paths(*pair, options=CompareOptions(metric="pass^3"))
    assert (allk.baseline["mean"], allk.candidate["mean"]) == pytest.approx((0.25, 0.5))
    two = compare_paths(*pair, options=CompareOptions(metric="pass@2"))
    by_item = dict(zip(two.items["item_id"], two.items["baseline"]))
    assert by_item == pytest.approx({"a": 2 / 3, "b": 1.0, "c": 0.0, "d": 1.0})
    assert three.to_json()["options"]["metric"] == "pass@3" and mean.to_json()["options"]["metric"] == "mean"


def test_error_policy_under_a_pass_metric(tmp_path):
    def err(stage, type_):
        return {"stage": stage, "type": type_, "message": "x"}

    base = records("base", {"a": [1, 1, 1], "b": [1, 1, 1]})
    base[0].error, base[0].score = err("generate", "timeout"), None  # left out: a, 2 samples
    base[3].error, base[3].score = err("grade", "python_grader_runtime_error"), 0.0  # b: fails
    cand = records("tuned", {"a": [1, 1, 1], "b": [1, 1, 1]})
    r = compare_sides(side_from_records(base, "base"), side_from_records(cand, "tuned"),
                      CompareOptions(metric="pass^2"))
    vals = dict(zip(r.items["item_id"], r.items["baseline"]))
    assert vals == pytest.approx({"a": 1.0, "b": 1 / 3})  # a: C(2,2)/C(2,2); b: C(2,2)/C(3,2)
    r3 = compare_sides(side_from_records(base, "base"), side_from_records(cand, "tuned"),
                       CompareOptions(metric="pass^3"))
    assert r3.items["item_id"].tolist() == ["b"]
    assert any("fewer than 3 usable samples" in n for n in r3.notes)
    zero = compare_sides(side_from_records(base, "base"), side_from_records(cand, "tuned"),
                         CompareOptions(metric="pass^3", errors="zero"))
    assert sorted(zero.items["item_id"]) == ["a", "b"]


def test_passed_field_wins_over_the_threshold(tmp_path):
    base = records("base", {"a": [0.2, 0.2], "b": [0.2, 0.2]}, passed=True)
    cand = records("tuned", {"a": [1.0, 1.0], "b": [1.0, 1.0]}, passed=False)
    r = compare_sides(side_from_records(base, "base"), side_from_records(cand, "tuned"),
                      CompareOptions(metric="pass@1"))
    assert (r.baseline["mean"], r.candidate["mean"]) == (1.0, 0.0)
    r = compare_sides(side_from_records(records("base", {"a": [0.2, 0.6]}), "base"),
                      side_from_records(records("tuned", {"a": [0.6, 0.6]}), "tuned"),
                      CompareOptions(metric="pass@1", pass_threshold=0.5))
    assert (r.baseline["mean"], r.candidate["mean"]) == (0.5, 1.0)


def test_threshold_is_the_run_graders_maximum(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    grader = tmp_path / "judge.json"
    grader.write_text(json.dumps({"type": "score_model", "name": "j", "model": "gpt-4.1-mini", "range": [0, 10],
                                  "input": [{"role": "user", "content": "{{ sample.output_text }}"}]}))
    (run / "spec.resolved.toml").write_text(f'grader = "{grader}"\n')
    write_jsonl(records("base", {"a": [10, 4], "b": [7, 10]}), run / "base.jsonl")
    write_jsonl(records("tuned", {"a": [10, 10], "b": [10, 3]}), run / "tuned.jsonl")
    r = compare_paths(run, run, ["base", "tuned"], CompareOptions(metric="pass@1"))
    assert (r.baseline["mean"], r.candidate["mean"]) == (0.5, 0.75)
    assert "score_model range" in r.pass_k["thresholds"]["baseline"]["source"]
    (run / "spec.resolved.toml").unlink()  # no grader info and scores above 1: the rule must be given
    with pytest.raises(InputError, match="--pass-threshold"):
        compare_paths(run, run, ["base", "tuned"], CompareOptions(metric="pass@1"))
    assert compare_paths(run, run, ["base", "tuned"]).pass_k is None  # mean: no pass rule, no note, no error
    r = compare_paths(run, run, ["base", "tuned"], CompareOptions(metric="pass@1", pass_threshold=7))
    assert (r.baseline["mean"], r.candidate["mean"]) == (0.75, 0.75)


def test_hardest_slice_under_pass_metrics():
    rng = np.random.default_rng(0)
    p = rng.beta(2, 2, 30)
    three = draw_pair(rng, p, p, 3)
    assert compare_sides(*three, CompareOptions(metric="pass@1")).slices["hardest"]["method"] == "cross-fit"
    h = compare_sides(*three, CompareOptions(metric="pass@2")).slices["hardest"]
    assert h["method"] == "descriptive" and "needs 2 samples in each half" in h["rule"]
    h = compare_sides(*draw_pair(rng, p, p, 4), CompareOptions(metric="pass^2")).slices["hardest"]
    assert h["method"] == "cross-fit" and "pass^2 measured on the other half" in h["rule"]


@pytest.mark.slow
def test_cli_metric_json_and_bad_values(pair):
    res = runner.invoke(app, ["compare", *map(str, pair), "--metric", "pass@3", "--format", "json"])
    assert res.exit_code == 0, res.output
    j = json.loads(res.stdout)
    assert j["options"]["metric"] == "pass@3" and j["candidate"]["mean"] == pytest.approx(1.0)
    assert j["pass_k"]["n"] == 3 and "pass_at_1" in j["pass_k"]
    res = runner.invoke(app, ["compare", *map(str, pair), "--metric", "pass@4"])
    assert res.exit_code == 2 and "--metric: pass@4 needs 4 samples per item" in res.output
    res = runner.invoke(app, ["compare", *map(str, pair), "--metric", "best@3"])
    assert res.exit_code == 2 and "--metric: must be mean, pass@K or pass^K" in res.output
    assert "Traceback" not in res.output
    res = runner.invoke(app, ["compare", *map(str, pair), "--metric", "pass@2", "--top", "0"])
    assert res.exit_code == 0 and "base -> tuned (pass@2)" in res.stdout


@pytest.mark.slow
def test_gate_runs_on_the_metric(pair):
    # the candidate's mean is 0.75, its pass@3 is 1 on every item: a strict floor of 0.95 fails one, not the other
    gate = ["--fail-under", "0.95", "--gate", "strict"]
    res = runner.invoke(app, ["compare", *map(str, pair), *gate])
    assert res.exit_code == 1 and "fail-under" in res.output
    res = runner.invoke(app, ["compare", *map(str, pair), "--metric", "pass@3", *gate])
    assert res.exit_code == 0, res.output


# ---------------------------------------------------------------------------------------------- summary.json


@pytest.mark.slow
def test_summary_json_has_pass_curves_and_the_run_table_shows_them(tmp_path):
    files = write_run_files(tmp_path, 4, reference="yes", operation="eq", name="yes")
    ds, grader = files["dataset"], files["grader"]
    answers = {"base": {"q0": "yyn", "q1": "nnn", "q2": "yyy", "q3": "nny"},
               "tuned": {"q0": "yyy", "q1": "nny", "q2": "yyy", "q3": "yyy"}}
    flags = []
    for label, by_item in answers.items():
        rec = tmp_path / f"{label}.rec.jsonl"
        rec.write_text("".join(json.dumps({"item_id": i, "epoch": e + 1, "output_text": "yes" if ch == "y" else "no"})
                               + "\n" for i, s in by_item.items() for e, ch in enumerate(s)))
        flags += ["--model", f"{label}=replay:{rec}"]
    out = tmp_path / "run"
    res = runner.invoke(app, ["run", "--dataset", str(ds), "--grader", str(grader), *flags, "--epochs", "3",
                              "--out", str(out), "-q", "--no-readiness"])
    assert res.exit_code == 0, res.output
    s = json.loads((out / "summary.json").read_text())
    base = s["models"]["base"]
    assert base["pass_at_k"] == pytest.approx({"1": 6 / 12, "2": (1 + 0 + 1 + 2 / 3) / 4, "3": 3 / 4})
    assert base["pass_all_k"]["3"] == pytest.approx(1 / 4) and base["pass_all_k"]["2"] == pytest.approx((1 / 3 + 1) / 4)
    assert s["models"]["tuned"]["pass_at_k"]["3"] == pytest.approx(1.0)
    assert {"mean", "ci95", "items"} <= set(base)  # existing keys kept
    assert s["pass_rule"]["threshold"] == 1.0
    assert "pass@1/@3" in res.output and "0.500/0.750" in res.output
    # compare --metric reproduces summary.json
    r = compare_paths(out, out, ["base", "tuned"], CompareOptions(metric="pass@2"))
    assert r.baseline["mean"] == pytest.approx(base["pass_at_k"]["2"])
    # from the sides the run reads once: the same curves
    from rfteval.data.frame import load_run_frames
    from rfteval.graders.loader import load_grader

    curves, rule = run_pass_curves(load_run_frames(out, ["base", "tuned", "absent"]), load_grader(grader))
    assert set(curves) == {"base", "tuned"} and rule["threshold"] == 1.0
    assert curves["base"]["pass_at_k"] == pytest.approx(base["pass_at_k"])


def test_run_directory_names_have_one_home():
    from rfteval.data import rundir
    from rfteval.run import store

    assert (store.RESOLVED_SPEC, store.RESULTS, store.JOURNAL) == (rundir.RESOLVED_SPEC, rundir.RESULTS,
                                                                    rundir.JOURNAL)
