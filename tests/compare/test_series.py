"""`rfteval compare RUNDIR`: a checkpoint series. Order, baseline, Holm across candidates, the best candidate and its
held-out estimate, gates per candidate, the reports; and by simulation, the winner's curse the held-out estimate
removes and the family-wise error Holm keeps."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from rfteval.cli.app import app
from rfteval.compare.gate import Gate
from rfteval.compare.result import CompareOptions
from rfteval.compare.series import compare_series, held_out_best, series_from_sides
from rfteval.compare.simulation import side_from_matrix
from rfteval.data.records import make_record, write_jsonl
from rfteval.data.rundir import run_labels
from rfteval.errors import InputError
from rfteval.stats import paired as stats
from tests.support.cli_run_files import write_run_files

runner = CliRunner()


def write_label(run: Path, label: str, scores: np.ndarray) -> None:
    recs = []
    for i, row in enumerate(scores):
        for e, s in enumerate(row):
            r = make_record(run_id="t", model_label=label, model=f"m-{label}", item_id=f"q{i:02d}", epoch=e + 1,
                            output_text="o")
            r.score = float(s)
            recs.append(r)
    write_jsonl(recs, run / f"{label}.jsonl")


@pytest.fixture
def run(tmp_path: Path) -> Path:
    """base and three checkpoints over 24 items x 3 epochs; ckpt-b is a clear drop; spec order b, a, c."""
    rng = np.random.default_rng(0)
    p = rng.beta(2, 2, 24)
    d = tmp_path / "run"
    d.mkdir()
    draws = {"base": p, "ckpt-b": np.clip(p - 0.45, 0, 1), "ckpt-a": p, "ckpt-c": np.clip(p + 0.3, 0, 1)}
    for label, q in draws.items():
        write_label(d, label, (rng.random((24, 3)) < q[:, None]).astype(float))
    (d / "spec.resolved.toml").write_text('grader = "missing.json"\n\n[models.base]\nmodel = "b"\n\n'
                                          '[models.ckpt-b]\nmodel = "x"\n\n[models.ckpt-a]\nmodel = "y"\n\n'
                                          '[models.ckpt-c]\nmodel = "z"\n')
    (d / "judge_cache.jsonl").write_text("{}\n")  # not a model's records
    return d


def test_labels_follow_the_spec_and_skip_other_jsonl(run):
    assert run_labels(run) == ["base", "ckpt-b", "ckpt-a", "ckpt-c"]
    (run / "spec.resolved.toml").unlink()
    assert run_labels(run) == ["base", "ckpt-a", "ckpt-b", "ckpt-c"]  # no spec, no summary: sorted


def test_series_json_shape_and_holm(run):
    res = runner.invoke(app, ["compare", str(run), "--format", "json"])
    assert res.exit_code == 0, res.output
    j = json.loads(res.stdout)
    assert j["baseline"]["label"] == "base" and {"mean", "ci95", "items"} <= set(j["baseline"])
    assert [c["label"] for c in j["candidates"]] == ["ckpt-b", "ckpt-a", "ckpt-c"]
    for c in j["candidates"]:
        assert {"label", "mean", "ci95", "delta", "p_adjusted"} <= set(c)
        assert {"mean", "ci95", "p_value", "wins", "ties", "losses"} <= set(c["delta"])
    raw = [c["delta"]["p_value"] for c in j["candidates"]]
    assert [c["p_adjusted"] for c in j["candidates"]] == pytest.approx(stats.holm(raw).tolist())
    verdicts = {c["label"]: c["verdict"] for c in j["candidates"]}
    assert verdicts["ckpt-b"] == "worse" and verdicts["ckpt-c"] == "better"
    assert j["best"]["label"] == "ckpt-c" and "overstates" in j["best"]["note"]
    assert j["best"]["held_out"]["measure_items"] == 12 and j["options"]["baseline"] == "base"
    assert j["options"]["metric"] == "mean" and j["options"]["gated"] == ["ckpt-b", "ckpt-a", "ckpt-c"]


@pytest.mark.slow
def test_baseline_choice(run):
    assert compare_series(run, baseline="ckpt-a").baseline["label"] == "ckpt-a"
    (run / "base.jsonl").rename(run / "zeta.jsonl")  # no `base`: the first in the spec's order that has records
    assert compare_series(run).baseline["label"] == "ckpt-b"
    with pytest.raises(InputError, match="--baseline"):
        compare_series(run, baseline="nope")


@pytest.mark.slow
def test_gates_apply_to_every_candidate_or_to_the_named_one(run):
    res = runner.invoke(app, ["compare", str(run), "--max-drop", "0.05"])
    assert res.exit_code == 1 and "ckpt-b: max-drop" in res.output, res.output
    res = runner.invoke(app, ["compare", str(run), "--max-drop", "0.05", "--candidate", "ckpt-c"])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["compare", str(run), "--require-improvement", "--candidate", "ckpt-a",
                              "--candidate", "ckpt-c"])
    assert res.exit_code == 1 and "ckpt-a: require-improvement" in res.output
    assert "ckpt-c: require-improvement" not in res.output
    s = compare_series(run, CompareOptions(gate=Gate(max_drop=0.05)), gated=["ckpt-c"])
    assert s.gate["passed"] and list(s.gate["candidates"]) == ["ckpt-c"]
    # one candidate named up front: its gate uses its own p, the table's p adj. is Holm across all three
    c = s.candidates[2]
    assert s.gate["candidates"]["ckpt-c"]["p_adjusted"] == pytest.approx(c.result.delta["p_value"])
    assert c.p_adjusted >= c.result.delta["p_value"]


@pytest.mark.slow
def test_metric_applies_to_the_series(run):
    s = compare_series(run, CompareOptions(metric="pass@3"))
    assert s.metric == "pass@3" and all(c.result.metric == "pass@3" for c in s.candidates)


@pytest.mark.slow
def test_table_markdown_and_html(run, tmp_path):
    md, html = tmp_path / "s.md", tmp_path / "s.html"
    res = runner.invoke(app, ["compare", str(run), "--markdown", str(md), "--html", str(html)])
    assert res.exit_code == 0, res.output
    assert "series: base (baseline) -> 3 candidate(s)" in res.stdout and "Holm across the candidates" in res.stdout
    assert "held out: chosen on 12 random items" in res.stdout
    assert "| ckpt-c \\* |" in md.read_text()
    page = html.read_text()
    assert 'id="series"' in page and 'id="series-delta"' in page and "<polyline" in page and "<script" not in page


@pytest.mark.slow
def test_few_items_no_held_out(tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    rng = np.random.default_rng(1)
    for label in ("base", "c1", "c2"):
        write_label(d, label, (rng.random((10, 3)) < 0.5).astype(float))
    s = compare_series(d)
    assert "held_out" not in s.best and s.best["shared_items"] == 10
    res = runner.invoke(app, ["compare", str(d)])
    assert "held out: not estimated (10 shared items; 20 are needed" in res.stdout


def test_bad_input_is_one_line(run, tmp_path):
    cases = [
        (["compare", str(run), "--label", "base"], "--label"),
        (["compare", str(run / "base.jsonl"), str(run / "ckpt-a.jsonl"), "--baseline", "base"], "--baseline"),
        (["compare", str(run), "--candidate", "nope"], "--candidate: no candidate 'nope'"),
        (["compare", str(run / "base.jsonl")], "needs a run directory"),
        (["compare", str(run), "--junit", str(tmp_path / "x.xml")], "--junit"),
    ]
    for args, text in cases:
        res = runner.invoke(app, args)
        assert res.exit_code == 2 and text in res.output, (args, res.output)
        assert "Traceback" not in res.output
    single = tmp_path / "one"
    single.mkdir()
    write_label(single, "base", np.ones((3, 2)))
    res = runner.invoke(app, ["compare", str(single)])
    assert res.exit_code == 2 and "2 or more models" in res.output


# ---------------------------------------------------------------------------------------------- simulation


@pytest.mark.slow
def test_the_best_of_five_equal_candidates_is_overstated_and_the_held_out_estimate_is_not():
    # 5 candidates equal to the baseline, 40 items: the full-data best has a positive delta on average; the
    # held-out delta averages 0 and its interval covers 0 about 95% of the time
    rng = np.random.default_rng(2)
    picked, held, covered = [], [], 0
    reps, items, k = 2000, 40, 5
    for _ in range(reps):
        p = rng.beta(2, 2, items)
        sides = (rng.random((k + 1, items, 3)) < p[None, :, None]).mean(axis=2)
        deltas = sides[1:] - sides[0]
        picked.append(deltas.mean(axis=1).max())
        h = held_out_best([f"c{i}" for i in range(k)], deltas, seed=int(rng.integers(1 << 30)))
        held.append(h["delta"]["mean"])
        lo, hi = h["delta"]["ci95"]
        covered += lo <= 0 <= hi
    assert np.mean(picked) > 0.04  # the winner's curse
    assert abs(np.mean(held)) < 3 * np.std(held) / np.sqrt(reps)
    assert 0.93 <= covered / reps <= 0.97


@pytest.mark.slow
def test_holm_keeps_the_family_wise_error_across_equal_candidates():
    rng = np.random.default_rng(4)
    any_claim = 0
    reps = 150
    for _ in range(reps):
        p = rng.beta(2, 2, 30)
        mats = [(rng.random((30, 3)) < p[:, None]).astype(float) for _ in range(5)]
        base, cands = side_from_matrix("base", mats[0]), [side_from_matrix(f"c{i}", m) for i, m in enumerate(mats[1:])]
        s = series_from_sides(base, cands)
        any_claim += any(stats.direction(c.result.delta) in ("better", "worse") for c in s.candidates)
    assert any_claim / reps <= 0.07


@pytest.mark.slow
def test_run_with_several_candidates_prints_the_series(tmp_path):
    files = write_run_files(tmp_path, 6, reference="yes", operation="eq", name="yes")
    ds, grader = files["dataset"], files["grader"]
    flags = []
    for label, rate in (("base", 0.3), ("step-1", 0.5), ("step-2", 0.8)):
        rng = np.random.default_rng(len(label))
        rec = tmp_path / f"{label}.rec.jsonl"
        rec.write_text("".join(json.dumps({"item_id": f"q{i}", "epoch": e, "output_text": "yes" if rng.random() < rate
                                           else "no"}) + "\n" for i in range(6) for e in (1, 2)))
        flags += ["--model", f"{label}=replay:{rec}"]
    res = runner.invoke(app, ["run", "--dataset", str(ds), "--grader", str(grader), *flags, "--epochs", "2",
                              "--out", str(tmp_path / "run"), "-q", "--no-readiness"])
    assert res.exit_code == 0, res.output
    assert "series: base (baseline) -> 2 candidate(s)" in res.output and "Holm across the candidates" in res.output
