"""`rfteval agree` end to end: identical grades, gates, bad input, --regrade through a local judge, reports."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rfteval.cli.app import app
from tests.support import REPO
from tests.support.fake_openai import Reply
from tests.support.optional import missing, require

runner = CliRunner()
ROOT = REPO


def _records(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _rows(shift: float = 0.0, items: int = 8, epochs: int = 2, gain: float = 0.4, threshold: float = 0.5,
          label_flip: bool = False) -> list[dict]:
    """base and tuned records over `items` items: tuned scores `gain` higher; B's grader adds `shift`."""
    rows = []
    for label, plus in (("base", 0.0), ("tuned", gain)):
        for i in range(items):
            for e in range(1, epochs + 1):
                score = min(1.0, max(0.0, round(0.1 + 0.05 * i + 0.02 * e + plus + shift, 4)))
                rows.append({"run_id": "r", "model_label": label, "model": label, "item_id": f"q{i}", "epoch": e,
                             "output_text": f"{label} answer to q{i}, epoch {e}", "score": score,
                             "passed": score >= threshold})
    return rows


def _json(args: list[str]) -> tuple[int, dict]:
    res = runner.invoke(app, ["agree", *args, "--format", "json"])
    assert res.exit_code in (0, 1), res.output
    return res.exit_code, json.loads(res.stdout)


def test_identical_grades_agree_under_every_gate(tmp_path):
    a = _records(tmp_path / "a.jsonl", _rows())
    b = _records(tmp_path / "b.jsonl", _rows())
    code, out = _json([str(a), str(b), "--min-kappa", "0.99", "--max-bias", "0", "--require-same-verdict"])
    assert code == 0
    assert out["n_samples"] == 32 and out["n_items"] == 8
    assert out["unmatched"]["a_only"] == out["unmatched"]["b_only"] == 0
    assert out["pass"]["kappa"]["value"] == 1.0
    assert out["bias"]["mean"] == 0.0 and out["bias"]["ci95"] == [0.0, 0.0]
    assert out["pearson"] == pytest.approx(1.0) and out["mae"] == 0.0
    assert out["pass"]["precision"] == out["pass"]["recall"] == 1.0
    assert set(out["pass"]["table"]) == {"both", "a_only", "b_only", "neither"}
    (v,) = out["verdict"]
    assert v["word_a"] == v["word_b"] == "better" and v["same"]
    assert v["answer"] == "the tuned model's gain holds under both graders"
    assert v["difference"]["mean"] == 0.0
    assert out["gate"]["passed"]
    assert [c["name"] for c in out["gate"]["checks"]] == ["min-kappa", "max-bias", "require-same-verdict",
                                                          "error-rate"]
    assert out["errors"]["policy"] == "exclude" and out["errors"]["pairs_left_out"] == 0
    assert out["errors"]["b"] == {"records": 32, "errors": 0, "share": 0.0, "by_kind": {}, "generation_failures": 0}


def _noisy_pairs(items: int = 30, epochs: int = 3, seed: int = 11) -> tuple[list[dict], list[dict]]:
    """A's and B's grades of the same samples: B reads A's score with a per-item offset and per-sample noise, so the
    two disagree on some verdicts and the bias varies by item."""
    import numpy as np

    rng = np.random.default_rng(seed)
    rows_a, rows_b = [], []
    for i in range(items):
        offset = 0.04 + rng.normal(0.0, 0.05)
        for e in range(1, epochs + 1):
            a = round(float(rng.uniform(0.0, 1.0)), 3)
            b = round(min(1.0, max(0.0, a + offset + float(rng.normal(0.0, 0.08)))), 3)
            for rows, score in ((rows_a, a), (rows_b, b)):
                rows.append({"run_id": "r", "model_label": "m", "model": "m", "item_id": f"q{i}", "epoch": e,
                             "output_text": f"answer {i}.{e}", "score": score, "passed": score >= 0.5})
    return rows_a, rows_b


@pytest.mark.slow
def test_kappa_bias_and_their_intervals_match_an_independent_computation(tmp_path):
    """The numbers `agree` prints, computed here another way from the same grades: Cohen's kappa from the 2x2 table by
    its formula; the bias as the mean over items of each item's mean B − A; the limits of agreement from the
    per-sample differences. Each interval is a bootstrap of items whose SE is scaled by C/(C−1), with a t quantile
    of C−1 df (statistics.md §2.2, inspect's ci()): recomputed from the same draws (seed 0: one 2000 × C matrix of
    item indices), with scipy's quantile; and, free of any draw, against what the method tends to: for the bias the
    t interval of the item means, for kappa a bootstrap drawn here with its own generator and ten times the draws."""
    import numpy as np

    st = require("scipy.stats", "setup")
    rows_a, rows_b = _noisy_pairs()
    a, b = _records(tmp_path / "a.jsonl", rows_a), _records(tmp_path / "b.jsonl", rows_b)
    code, out = _json([str(a), str(b)])
    assert code == 0 and out["n_samples"] == len(rows_a) == 90 and out["n_items"] == 30

    # the table, per item and in all (columns: both, A only, B only, neither)
    items = sorted({r["item_id"] for r in rows_a})  # as agree orders its samples: by label, item id, epoch
    kinds = ((True, True), (True, False), (False, True), (False, False))
    cells = np.array([[sum(1 for ra, rb in zip(rows_a, rows_b) if ra["item_id"] == i and (ra["passed"], rb["passed"]) == k)
                       for k in kinds] for i in items], float)
    total = cells.sum(axis=0)
    assert out["pass"]["table"] == dict(zip(("both", "a_only", "b_only", "neither"), total.astype(int).tolist()))
    assert total.min() > 0  # the graders disagree both ways

    def kappa(t: np.ndarray) -> np.ndarray:
        """Cohen's kappa of tables (..., 4): po the share with the same verdict, pe what the margins give by chance."""
        n = t.sum(axis=-1)
        both, a_only, b_only, neither = (t[..., j] / n for j in range(4))
        po, pe = both + neither, (both + a_only) * (both + b_only) + (neither + b_only) * (neither + a_only)
        return (po - pe) / (1 - pe)

    k = float(kappa(total))
    assert out["pass"]["kappa"]["value"] == pytest.approx(k, rel=1e-12)
    assert out["pass"]["agreement"] == pytest.approx((total[0] + total[3]) / 90, rel=1e-12)

    # the bias: per-item means first; the limits of agreement: one sample's difference
    d = {i: [rb["score"] - ra["score"] for ra, rb in zip(rows_a, rows_b) if ra["item_id"] == i] for i in items}
    item_d = np.array([np.mean(d[i]) for i in items])
    c = len(items)
    assert out["bias"]["mean"] == pytest.approx(item_d.mean(), abs=1e-12)
    sd = np.array([x for i in items for x in d[i]]).std(ddof=1)
    assert out["loa"]["lower"] == pytest.approx(item_d.mean() - 1.96 * sd, abs=1e-12)
    assert out["loa"]["upper"] == pytest.approx(item_d.mean() + 1.96 * sd, abs=1e-12)

    q = st.t.ppf(0.975, c - 1)
    draws = np.random.default_rng(0).integers(0, c, (2000, c))  # the same draws as agree's

    def interval(estimate: float, boot: np.ndarray) -> list[float]:
        half = q * boot[np.isfinite(boot)].std(ddof=1) * np.sqrt(c / (c - 1))
        return [estimate - half, estimate + half]

    assert out["bias"]["ci95"] == pytest.approx(interval(item_d.mean(), item_d[draws].mean(axis=1)), rel=1e-9)
    assert out["pass"]["kappa"]["ci95"] == pytest.approx(interval(k, kappa(cells[draws].sum(axis=1))), rel=1e-9)
    assert -1 < out["pass"]["kappa"]["ci95"][0] < k < out["pass"]["kappa"]["ci95"][1] < 1  # not cut at ±1

    # free of agree's draws: the bootstrap's variance of a mean of C item means tends to sd²(ddof=0)/C, which the
    # C/(C−1) factor makes sd²(ddof=1)/C: the t interval; kappa's, to what 20,000 draws of this generator give
    lo, hi = out["bias"]["ci95"]
    assert (hi - lo) / 2 == pytest.approx(q * item_d.std(ddof=1) / np.sqrt(c), rel=0.06)  # 2,000 draws: ±1.6% a sd
    k_lo, k_hi = out["pass"]["kappa"]["ci95"]
    mine = interval(k, kappa(cells[np.random.default_rng(2024).integers(0, c, (20_000, c))].sum(axis=1)))
    assert (k_hi - k_lo) / 2 == pytest.approx((mine[1] - mine[0]) / 2, rel=0.08)  # 2,000 draws: ±1.6% a sd


@pytest.mark.slow
def test_a_shown_bias_fails_the_gate(tmp_path):
    a = _records(tmp_path / "a.jsonl", _rows())
    b = _records(tmp_path / "b.jsonl", _rows(shift=0.1))
    code, out = _json([str(a), str(b), "--max-bias", "0.05"])
    assert code == 1
    assert out["bias"]["mean"] > 0.05 and out["bias"]["ci95"][0] > 0.05
    res = runner.invoke(app, ["agree", str(a), str(b), "--max-bias", "0.05"])
    assert res.exit_code == 1 and "gate failed: max-bias" in res.stderr
    # a bias the data cannot tell from the threshold passes (evidence semantics), with a warning
    code, out = _json([str(a), str(b), "--max-bias", "0.12"])
    assert code == 0


@pytest.mark.slow
def test_a_lost_gain_fails_require_same_verdict(tmp_path):
    a = _records(tmp_path / "a.jsonl", _rows())
    b = _records(tmp_path / "b.jsonl", _rows(gain=0.0))
    code, out = _json([str(a), str(b), "--require-same-verdict"])
    assert code == 1
    (v,) = out["verdict"]
    assert v["word_a"] == "better" and v["word_b"] != "better"
    assert v["answer"].startswith("the gain under A is not seen under B")


@pytest.mark.slow
def test_graders_on_different_ranges_are_compared_in_a_units_with_a_note(tmp_path):
    """Azure's Sample18 judge scores 0..10, OpenAI's default is [0, 1]: a judge migration between them used to read
    bias -0.9 and |B − A| 0.9 (the scales' gap), failing --max-bias on two graders that agree perfectly."""
    def ranged(rows: list[dict], factor: float, score_range: list[float]) -> list[dict]:
        return [{**{k: v for k, v in r.items() if k != "passed"}, "score": round(r["score"] * factor, 4),
                 "grade_details": {"score_range": score_range}} for r in rows]  # no verdict: --pass-threshold

    a = _records(tmp_path / "a.jsonl", ranged(_rows(), 10.0, [0, 10]))
    b = _records(tmp_path / "b.jsonl", ranged(_rows(), 1.0, [0, 1]))
    code, out = _json([str(a), str(b), "--max-bias", "0.5"])
    assert code == 0, out["gate"]
    assert out["bias"]["mean"] == pytest.approx(0.0, abs=1e-9) and out["mae"] == pytest.approx(0.0, abs=1e-9)
    assert out["scale_note"].startswith("B's range [0, 1] differs from A's [0, 10]")
    (v,) = out["verdict"]
    assert v["difference"]["mean"] == pytest.approx(0.0, abs=1e-9)  # the gain under B, in A's units
    res = runner.invoke(app, ["agree", str(a), str(b)])
    assert res.exit_code == 0 and "mapped linearly onto A's range" in res.output
    # --pass-threshold in A's units: 5 of 10 is 0.5 of 1, so the two pass tables agree sample for sample
    code, out = _json([str(a), str(b), "--pass-threshold", "5"])
    assert out["pass"]["thresholds"] == {"a": 5.0, "b": 0.5}
    assert out["pass"]["table"]["a_only"] == out["pass"]["table"]["b_only"] == 0 and out["pass"]["kappa"]["value"] == 1.0


def test_a_range_the_scores_pass_is_neither_mapped_onto_nor_cut_to(tmp_path):
    """A side whose records say [0, 1] but score up to 10 (a python grader's range is only assumed): B's 0..10
    grades used to be mapped onto [0, 1] and the bias cut to [-1, 10], so two identical graders read bias -8."""
    rows = [{**{k: v for k, v in r.items() if k != "passed"}, "score": round(r["score"] * 10, 4)} for r in _rows()]
    a = _records(tmp_path / "a.jsonl", [{**r, "grade_details": {"score_range": [0, 1]}} for r in rows])
    b = _records(tmp_path / "b.jsonl", [{**r, "grade_details": {"score_range": [0, 10]}} for r in rows])
    code, out = _json([str(a), str(b)])
    assert out["scale_note"] is None
    assert out["bias"]["mean"] == pytest.approx(0.0, abs=1e-9) and out["mae"] == pytest.approx(0.0, abs=1e-9)


def test_unmatched_samples_are_counted_and_named(tmp_path):
    rows = _rows()
    a = _records(tmp_path / "a.jsonl", rows)
    b = _records(tmp_path / "b.jsonl", [r for r in rows if not (r["item_id"] == "q3" and r["model_label"] == "base")])
    code, out = _json([str(a), str(b)])
    assert out["unmatched"]["a_only"] == 2 and out["unmatched"]["b_only"] == 0
    assert out["unmatched"]["a_only_first"] == ["base/q3#1", "base/q3#2"]
    assert out["n_samples"] == 30


@pytest.mark.slow
def test_pass_threshold_for_graders_without_a_verdict(tmp_path):
    rows = [{k: v for k, v in r.items() if k != "passed"} for r in _rows()]
    a = _records(tmp_path / "a.jsonl", rows)
    b = _records(tmp_path / "b.jsonl", rows)
    code, out = _json([str(a), str(b)])
    assert out["pass"] is None and "--pass-threshold" in out["pass_note"]
    code, out = _json([str(a), str(b), "--pass-threshold", "0.5"])
    assert out["pass"]["threshold"] == 0.5 and out["pass"]["kappa"]["value"] == 1.0
    res = runner.invoke(app, ["agree", str(a), str(b), "--min-kappa", "0.5"])
    assert res.exit_code == 2 and "--pass-threshold" in res.stderr


@pytest.mark.slow
def test_label_graders_get_a_confusion_matrix(tmp_path):
    labels = ["good", "fair", "bad"]
    rows_a, rows_b = [], []
    for i in range(9):
        la, lb = labels[i % 3], labels[(i + (i == 4)) % 3]
        for side, label in ((rows_a, la), (rows_b, lb)):
            side.append({"model_label": "m", "item_id": f"q{i}", "epoch": 1, "output_text": "x",
                         "score": float(label == "good"), "passed": label == "good",
                         "grade_details": {"label": label}})
    code, out = _json([str(_records(tmp_path / "a.jsonl", rows_a)), str(_records(tmp_path / "b.jsonl", rows_b))])
    assert out["labels"]["labels"] == ["bad", "fair", "good"]
    assert sum(map(sum, out["labels"]["confusion"])) == 9
    assert out["labels"]["confusion"][1][0] == 1  # q4: A said fair, B said bad
    assert out["verdict"] is None


@pytest.mark.parametrize("case, expected", [
    ("no-match", "no sample is graded on both sides"),
    ("no-grades", "no grades"),
    ("bad-grader", "g.json: model"),
    ("no-dataset", "--dataset"),
    ("both", "not both"),
    ("verdict-one-label", "--require-same-verdict"),
    ("cache-is-an-input", "--judge-cache: is also an input"),
])
@pytest.mark.slow
def test_bad_input_is_one_line_exit_2(tmp_path, case, expected):
    a = _records(tmp_path / "a.jsonl", _rows())
    good = tmp_path / "grader.json"
    good.write_text(json.dumps(GRADER))
    args = [str(a)]
    if case == "no-match":
        other = [dict(r, item_id="other-" + r["item_id"]) for r in _rows()]
        args.append(str(_records(tmp_path / "b.jsonl", other)))
    elif case == "no-grades":
        ungraded = [dict(r, score=None, passed=None) for r in _rows()]
        args.append(str(_records(tmp_path / "b.jsonl", ungraded)))
    elif case == "bad-grader":
        (tmp_path / "g.json").write_text('{"type": "score_model", "name": "x"}')
        args += ["--regrade", str(tmp_path / "g.json"), "--dataset", str(tmp_path / "a.jsonl")]
    elif case == "no-dataset":
        args += ["--regrade", str(good)]
    elif case == "both":
        args += [str(a), "--regrade", str(good)]
    elif case == "cache-is-an-input":  # the cache is appended to: never the dataset or A
        args += ["--regrade", str(good), "--dataset", str(a), "--judge-cache", str(a)]
    elif case == "verdict-one-label":
        one = _records(tmp_path / "one.jsonl", [r for r in _rows() if r["model_label"] == "base"])
        args = [str(one), str(one), "--require-same-verdict"]
    res = runner.invoke(app, ["agree", *args])
    assert res.exit_code == 2, res.output
    # GRADER's judge is o3-mini: the grader lint's retired-model warning may precede the one error line
    lines = [ln for ln in res.stderr.strip().splitlines() if not ln.startswith("warning: ")]
    assert len(lines) == 1 and expected in lines[0] and "Traceback" not in res.output


# ---------------------------------------------------------------------------------------------- --regrade

GRADER = {
    "type": "score_model", "name": "judge", "model": "o3-mini",
    "input": [{"role": "user", "content": "Question: {{ item.question }}\nModel answer: {{ sample.output_text }}"}],
    "range": [0, 1], "pass_threshold": 0.5,
}


def _judge(request):
    """Scripted judge: the number in the answer, so the regrade's scores are known in advance."""
    answer = request.last_user_text().split("Model answer: ", 1)[1]
    value = float(answer.split()[-1])
    return json.dumps({"steps": [{"description": "read", "conclusion": "ok"}], "result": value})


def _regrade_files(tmp_path: Path) -> tuple[Path, Path, Path]:
    ds = tmp_path / "items.jsonl"
    ds.write_text("".join(json.dumps({"id": f"q{i}", "messages": [{"role": "user", "content": f"q{i}?"}],
                                      "question": f"q{i}?"}) + "\n" for i in range(6)))
    rows = []
    for label, plus in (("base", 0.0), ("tuned", 0.3)):
        for i in range(6):
            for e in (1, 2):
                value = round(0.1 * i + 0.05 * e + plus, 2)
                rows.append({"model_label": label, "item_id": f"q{i}", "epoch": e, "output_text": f"answer {value}",
                             "score": value, "passed": value >= 0.5})
    grader = tmp_path / "grader.json"
    grader.write_text(json.dumps(GRADER))
    return ds, _records(tmp_path / "a.jsonl", rows), grader


@pytest.mark.slow
def test_regrade_with_a_new_judge_reuses_the_cache_and_counts_tokens(tmp_path, fake_openai):
    fake_openai.responder = _judge
    ds, a, grader = _regrade_files(tmp_path)
    cache = tmp_path / "cache.jsonl"
    args = [str(a), "--regrade", str(grader), "--dataset", str(ds), "--judge-base-url", fake_openai.base_url,
            "--judge-model", "new-judge", "--judge-cache", str(cache), "--out", str(tmp_path / "b.jsonl"),
            "--min-kappa", "0.9", "--require-same-verdict"]
    code, first = _json(args)
    assert code == 0
    assert len(fake_openai.requests) == 24
    assert {r.body["model"] for r in fake_openai.requests} == {"new-judge"}
    usage = first["judge"]["new-judge"]
    assert usage["calls"] == 24 and usage["cache_hits"] == 0 and usage["input_tokens"] > 0
    assert first["bias"]["mean"] == pytest.approx(0.0) and first["pass"]["kappa"]["value"] == 1.0
    assert (tmp_path / "b.jsonl").is_file()
    code, second = _json(args[:-5] + ["--min-kappa", "0.9"])  # the same, without --out
    assert len(fake_openai.requests) == 24  # nothing sent again: every answer came from the cache
    usage = second["judge"]["new-judge"]
    assert usage["calls"] == 0 and usage["cache_hits"] == 24 and usage["input_tokens"] == 0


@pytest.mark.slow
def test_regrade_counts_the_requests_an_identical_call_answered(tmp_path, fake_openai):
    """Issue 36: the judge usage table's `shared` column read a key the usage left out, so it said 0 while identical
    requests were answered by one call; calls + cached + shared is every sample re-graded."""
    fake_openai.responder = lambda req: Reply(text=_judge(req), delay_s=0.2)  # in flight together: shared
    ds, a, grader = _regrade_files(tmp_path)
    same = [dict(json.loads(line), output_text="answer 0.5") for line in a.read_text().splitlines()]
    a = _records(tmp_path / "same.jsonl", same)  # per item, its 4 samples (2 labels x 2 epochs) ask the same
    code, out = _json([str(a), "--regrade", str(grader), "--dataset", str(ds), "--judge-base-url",
                       fake_openai.base_url, "--judge-cache", str(tmp_path / "c.jsonl")])
    usage = out["judge"]["o3-mini"]
    assert usage["calls"] == len(fake_openai.requests) == 6  # one per item
    assert usage["shared"] > 0 and usage["calls"] + usage["cache_hits"] + usage["shared"] == 24


@pytest.mark.slow
def test_regrade_judge_errors_are_counted_not_fatal(tmp_path, fake_openai):
    ds, a, grader = _regrade_files(tmp_path)

    def flaky(request):
        if "q3" in request.last_user_text():
            return Reply(refusal="no")
        return _judge(request)

    fake_openai.responder = flaky
    args = [str(a), "--regrade", str(grader), "--dataset", str(ds), "--judge-base-url", fake_openai.base_url,
            "--judge-cache", str(tmp_path / "c.jsonl")]
    code, out = _json(args)
    # the 4 refused grades of q3 (2 labels × 2 epochs) are no grades: left out, and counted by type
    assert out["n_samples"] == 20 and out["errors"]["pairs_left_out"] == 4
    assert out["errors"]["b"]["by_kind"] == {"model_grader_refusal_error": 4} and out["errors"]["a"]["errors"] == 0
    assert "q3" not in [r["item_id"] for r in out["items"]]
    code, out = _json([*args, "--errors", "zero"])  # OpenAI's reward rule instead: they score 0
    assert out["n_samples"] == 24 and out["errors"]["pairs_left_out"] == 0
    assert out["items"][0]["item_id"] == "q3"  # the refused grades score 0: the largest disagreement


def _garbling_judge(request):
    """A judge that cannot always keep to the format: for outputs marked [garble] it answers prose, not JSON (the
    issue's regraded side: 22 "judge answer is not a JSON object" in 90 records); else A's score, made lower."""
    answer = request.last_user_text().split("Model answer: ", 1)[1]
    if "[garble]" in answer:
        return "The answer looks mostly right to me, I would give it a good score."
    value = float(answer.split()[-1])
    return json.dumps({"steps": [{"description": "read", "conclusion": "ok"}], "result": round(0.8 * value, 4)})


def _parse_error_files(tmp_path: Path) -> tuple[Path, Path, Path, set[tuple[str, str, int]]]:
    """90 samples (base and tuned, 15 items, 3 epochs) graded by A, 22 of them marked for the judge to garble."""
    ds = tmp_path / "items.jsonl"
    ds.write_text("".join(json.dumps({"id": f"q{i}", "messages": [{"role": "user", "content": f"q{i}?"}],
                                      "question": f"q{i}?"}) + "\n" for i in range(15)))
    keys = [(label, f"q{i}", e) for label in ("base", "tuned") for i in range(15) for e in (1, 2, 3)]
    garbled = set(keys[3::4][:22])
    rows = []
    for label, item, e in keys:
        i = int(item[1:])
        value = round(0.05 * i + 0.03 * e + (0.2 if label == "tuned" else 0.0), 4)
        mark = " [garble]" if (label, item, e) in garbled else ""
        rows.append({"model_label": label, "model": f"{label}-model", "item_id": item, "epoch": e,
                     "output_text": f"answer{mark} {value}", "score": value, "passed": value >= 0.5})
    grader = tmp_path / "grader.json"
    grader.write_text(json.dumps(GRADER))
    return ds, _records(tmp_path / "a.jsonl", rows), grader, garbled


@pytest.mark.slow
def test_a_regraded_side_with_parse_errors_is_measured_on_the_error_free_pairs(tmp_path, fake_openai):
    """Issue 27 item 6: 22 parse errors in 90 regraded records are counted by type and left out, so every
    statistic equals the one computed on the 68 error-free pairs alone; the gate fails on the error share."""
    import numpy as np

    fake_openai.responder = _garbling_judge
    ds, a, grader, garbled = _parse_error_files(tmp_path)
    b_out = tmp_path / "b.jsonl"
    args = [str(a), "--regrade", str(grader), "--dataset", str(ds), "--judge-base-url", fake_openai.base_url,
            "--judge-cache", str(tmp_path / "cache.jsonl"), "--pass-threshold", "0.5"]
    code, out = _json([*args, "--out", str(b_out)])
    assert code == 0  # no gate asked for: the error share is a warning, not a failure
    b_rows = [json.loads(line) for line in b_out.read_text().splitlines()]
    errors = [r for r in b_rows if r["error"]]
    assert len(b_rows) == 90 and len(errors) == 22
    assert {(r["model_label"], r["model"]) for r in b_rows} == {("base", "base-model"), ("tuned", "tuned-model")}
    assert {(r["model_label"], r["item_id"], r["epoch"]) for r in errors} == garbled
    assert out["errors"]["b"] == {"records": 90, "errors": 22, "share": pytest.approx(22 / 90),
                                  "by_kind": {"model_grader_parse_error": 22}, "generation_failures": 0}
    assert out["errors"]["a"]["errors"] == 0 and out["errors"]["pairs_left_out"] == 22
    assert out["n_samples"] == 68

    # the same statistics from the error-free pairs alone, written as two plain record files
    a_rows = [json.loads(line) for line in a.read_text().splitlines()]
    clean_a = _records(tmp_path / "clean_a.jsonl",
                       [r for r in a_rows if (r["model_label"], r["item_id"], r["epoch"]) not in garbled])
    clean_b = _records(tmp_path / "clean_b.jsonl", [r for r in b_rows if not r["error"]])
    _, clean = _json([str(clean_a), str(clean_b), "--pass-threshold", "0.5"])
    for key in ("n_samples", "n_items", "pearson", "spearman", "bias", "mae", "loa", "pass", "verdict", "items"):
        assert out[key] == clean[key], key
    # and Pearson by hand over those pairs: per sample, A's score against 0.8 × it
    sa = np.array([r["score"] for r in a_rows if (r["model_label"], r["item_id"], r["epoch"]) not in garbled])
    assert out["pearson"] == pytest.approx(float(np.corrcoef(sa, np.round(0.8 * sa, 4))[0, 1]))
    assert out["bias"]["mean"] < 0

    # --errors zero: the old reading, the 22 zeros in every statistic
    _, zero = _json([*args, "--errors", "zero"])
    assert zero["n_samples"] == 90 and zero["errors"]["pairs_left_out"] == 0
    assert zero["bias"]["mean"] < out["bias"]["mean"] and zero["pearson"] < out["pearson"]

    # the gate: any check fails on B's 24% of errors (compare's --max-error-rate, default 0.05); a laxer limit passes
    res = runner.invoke(app, ["agree", *args, "--min-kappa", "0"])
    assert res.exit_code == 1
    assert ("gate failed: error-rate: B: 22 of 90 records are errors (24.4% > 0.05; model_grader_parse_error 22)"
            in res.stderr)
    assert "errors in B: 22 of 90 records (24.4%): model_grader_parse_error 22" in res.stdout
    assert "22 paired samples with an error are left out (--errors zero scores them 0)" in res.stdout
    page = tmp_path / "agree.html"
    res = runner.invoke(app, ["agree", *args, "--min-kappa", "0", "--max-error-rate", "0.3", "--html", str(page)])
    assert res.exit_code == 0 and "gate error-rate: pass" in res.stdout
    html = page.read_text()
    assert "errors in B: 22 of 90 records (24.4%): model_grader_parse_error 22" in html
    assert "<td>error records A / B</td><td>0 / 22</td>" in html
    res = runner.invoke(app, ["agree", *args])
    assert res.exit_code == 0 and "gate warning: error-rate: B: 22 of 90" in res.stderr
    assert len(fake_openai.requests) == 90  # every later run came from the judge cache


@pytest.mark.slow
def test_regrade_carries_generation_errors_over_instead_of_grading_them(tmp_path, fake_openai):
    """A sample the model never answered (or refused) is not graded again, as `run` grades neither: B holds the same
    generation error, so the policy treats both sides alike, and no judge call is paid for it."""
    fake_openai.responder = _judge
    ds, a, grader = _regrade_files(tmp_path)
    rows = [json.loads(line) for line in a.read_text().splitlines()]
    rows[0].update(score=None, passed=None, output_text=None,
                   error={"stage": "generate", "type": "timeout", "message": "no answer after 10 retries"})
    rows[1].update(score=0.0, passed=None, output_text="I can't help with that.",
                   error={"stage": "generate", "type": "refusal", "message": "refused"})
    _records(a, rows)
    args = [str(a), "--regrade", str(grader), "--dataset", str(ds), "--judge-base-url", fake_openai.base_url,
            "--judge-cache", str(tmp_path / "c.jsonl"), "--out", str(tmp_path / "b.jsonl")]
    code, out = _json(args)
    assert len(fake_openai.requests) == 22  # 24 samples, 2 without an answer to grade
    b = [json.loads(line) for line in (tmp_path / "b.jsonl").read_text().splitlines()]
    assert sorted(r["error"]["type"] for r in b if r["error"]) == ["refusal", "timeout"]
    assert out["errors"]["a"]["by_kind"] == out["errors"]["b"]["by_kind"] == {"timeout": 1, "refusal": 1}
    assert out["errors"]["a"]["generation_failures"] == 1 and out["errors"]["pairs_left_out"] == 2
    assert out["n_samples"] == 22 and out["mae"] == pytest.approx(0.0)
    code, zero = _json([*args[:-2], "--errors", "zero"])
    assert zero["n_samples"] == 24 and zero["mae"] == pytest.approx(0.0)  # both sides score them 0


@pytest.mark.parametrize("flag, value, expected", [("--errors", "ignore", "must be exclude or zero"),
                                                   ("--max-error-rate", "-1", "must be >= 0")])
def test_bad_error_policy_is_one_line_before_any_judge_call(tmp_path, flag, value, expected):
    a = _records(tmp_path / "a.jsonl", _rows())
    res = runner.invoke(app, ["agree", str(a), str(a), flag, value])
    assert res.exit_code == 2 and expected in res.stderr and len(res.stderr.strip().splitlines()) == 1


def test_every_pair_with_an_error_is_refused_not_measured(tmp_path):
    rows = _rows(items=3, epochs=1)
    broken = [dict(r, score=None, passed=None, error={"stage": "grade", "type": "model_grader_parse_error",
                                                      "message": "judge answer is not a JSON object"}) for r in rows]
    res = runner.invoke(app, ["agree", str(_records(tmp_path / "a.jsonl", rows)),
                              str(_records(tmp_path / "b.jsonl", broken))])
    assert res.exit_code == 2 and "every paired sample has an error record on A or B" in res.stderr
    assert "B: model_grader_parse_error 6" in res.stderr


# ---------------------------------------------------------------------------------------------- reports


@pytest.mark.slow
def test_terminal_fits_80_columns(tmp_path):
    a = _records(tmp_path / "a.jsonl", _rows())
    b = _records(tmp_path / "b.jsonl", _rows(shift=0.05))
    res = runner.invoke(app, ["agree", str(a), str(b), "--min-kappa", "0.1"], env={"COLUMNS": "80"})
    assert res.exit_code == 0, res.output
    text = res.stdout
    assert "Cohen's kappa" in text and "verdict:" in text and "gate min-kappa: pass" in text
    too_wide = [line for line in text.splitlines() if len(line) > 80 and not line.startswith(("A: ", "B: "))]
    assert not too_wide, too_wide


def _chromium() -> str | None:
    return next((found for name in ("chromium", "chromium-browser", "google-chrome")
                 if (found := shutil.which(name))), None)


@pytest.mark.slow
def test_html_report_has_both_plots_and_renders(tmp_path):
    a = _records(tmp_path / "a.jsonl", _rows())
    b = _records(tmp_path / "b.jsonl", _rows(shift=0.05))
    page = tmp_path / "agree.html"
    res = runner.invoke(app, ["agree", str(a), str(b), "--html", str(page)])
    assert res.exit_code == 0, res.output
    html = page.read_text()
    assert html.count("<svg") == 2 and 'id="scatter"' in html and 'id="bland-altman"' in html
    body = html.split('id="bland-altman"')[1].split("</svg>")[0]
    assert body.count("<circle") >= 5 and 'class="loa"' in body and 'class="bias"' in body
    browser = _chromium()
    if browser is None:
        missing("chromium is not installed: the HTML screenshot check did not run", "browser")
    from tests.report.test_html import WINDOW, _png_info

    shot = tmp_path / "shot.png"
    flags = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={tmp_path / 'profile'}", f"--window-size={WINDOW[0]},{WINDOW[1]}"]
    dom = subprocess.run(flags + ["--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0 and dom.stdout.count("<svg") == 2, dom.stderr[-2000:]
    run = subprocess.run(flags + [f"--screenshot={shot}", page.as_uri()], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and shot.exists(), run.stderr[-2000:]
    width, height, distinct = _png_info(shot)
    assert (width, height) == WINDOW and shot.stat().st_size > 30_000 and distinct > 50


# ---------------------------------------------------------------------------------------------- bundled examples

LEGAL = ROOT / "datasets" / "legal-review"
MATH = ROOT / "datasets" / "math"


@pytest.mark.slow
@pytest.mark.parametrize("script", ["make_legal_review_recordings.py", "make_math_recordings.py"])
def test_bundled_recordings_are_up_to_date(script):
    import sys

    done = subprocess.run([sys.executable, str(ROOT / "scripts" / script), "--check"], capture_output=True,
                          text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr


@pytest.fixture
def lenient_judge():
    """scripts/lenient_judge.py in this process, on a free 127.0.0.1 port: the README's biased stand-in."""
    import importlib.util
    import sys

    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        spec = importlib.util.spec_from_file_location("lenient_judge", ROOT / "scripts" / "lenient_judge.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        import local_judge

        server = local_judge.serve(0)
        yield server.base_url
        server.stop()
        local_judge.answer_score, local_judge.MODEL_NAME = module._plain_score, module._plain_name  # as it was
    finally:
        sys.path.remove(str(ROOT / "scripts"))


@pytest.mark.slow
def test_readme_legal_review_example_finds_the_known_bias(tmp_path, lenient_judge):
    """The README's walk-through: the lenient stand-in's documented +0.15 (cut at 1) is found, and the gate fails."""
    args = [str(LEGAL / "recordings" / "o3-mini-grades.jsonl"), "--regrade", str(ROOT / "graders/legal-review.json"),
            "--dataset", str(LEGAL / "items.jsonl"), "--judge-base-url", lenient_judge, "--judge-model",
            "lenient-judge", "--judge-cache", str(tmp_path / "cache.jsonl"), "--pass-threshold", "0.7",
            "--max-bias", "0.05", "--require-same-verdict", "--html", str(tmp_path / "agree.html")]
    code, out = _json(args)
    assert code == 1
    names = {c["name"]: c["passed"] for c in out["gate"]["checks"]}
    assert names == {"max-bias": False, "require-same-verdict": True, "error-rate": True}
    a = [json.loads(line) for line in (LEGAL / "recordings" / "o3-mini-grades.jsonl").read_text().splitlines()]
    assert out["n_samples"] == len(a) == 72
    # B − A can only be the leniency minus A's noise, cut at 1: between 0 and 0.15 + noise, and clearly positive
    assert 0.05 < out["bias"]["mean"] < 0.2 and out["bias"]["ci95"][0] > 0.05
    assert out["pass"]["table"]["a_only"] == 0 and out["pass"]["recall"] == 1.0  # lenient: never fails an A pass
    assert out["verdict"][0]["word_a"] == out["verdict"][0]["word_b"] == "better"
    assert out["judge"]["lenient-judge"]["input_tokens"] > 0
    assert (tmp_path / "agree.html").read_text().count("<svg") == 2


@pytest.mark.slow
def test_math_rule_against_judge_is_precise_but_misses_rewritten_answers():
    code, out = _json([str(MATH / "recordings" / "judge-grades.jsonl"), str(MATH / "recordings" / "rule-grades.jsonl"),
                       "--pass-threshold", "1", "--top", "30"])
    p = out["pass"]
    assert p["precision"] > p["recall"]
    assert p["table"]["a_only"] > p["table"]["b_only"] > 0
    missed = [r["output"] for r in out["items"] if r["a_score"] > r["b_score"]]
    assert any("x = 3" in t or "\\%" in t or "\\text" in t for t in missed)


@pytest.mark.slow
def test_math_rule_grader_in_the_sandbox_gives_the_recorded_rule_grades():
    code, out = _json([str(MATH / "recordings" / "rule-grades.jsonl"), "--regrade", str(ROOT / "graders/math.json"),
                       "--dataset", str(MATH / "items.jsonl"), "--pass-threshold", "1"])
    assert out["mae"] == 0.0 and out["pass"]["kappa"]["value"] == 1.0


@pytest.mark.slow
def test_parquet_sides_and_grading_errors(tmp_path):
    """A results.parquet side reads like JSONL (labels from grade_details' JSON text); a grading error fails."""
    from rfteval.data.records import Record, write_parquet

    rows = []
    for i in range(6):
        label = ["good", "bad"][i % 2]
        rows.append(Record(run_id="r", model_label="m", model="m", item_id=f"q{i}", epoch=1, output_text="x",
                           score=float(label == "good"), passed=label == "good", grade_details={"label": label}))
    rows[5].error, rows[5].passed, rows[5].score = {"stage": "grade", "type": "x", "message": "y"}, None, None
    rows[5].grade_details = None
    write_parquet(rows, tmp_path / "a.parquet")
    code, out = _json([str(tmp_path / "a.parquet"), str(tmp_path / "a.parquet")])
    assert out["pass"]["kappa"]["value"] == 1.0 and out["pass"]["table"]["neither"] == 2  # the error: left out
    assert out["errors"]["a"]["by_kind"] == {"x": 1} and out["errors"]["pairs_left_out"] == 1
    assert out["labels"]["labels"] == ["bad", "good"]  # over the five real grades
    assert out["items"] == []  # identical grades: no item is listed as disputed
    code, out = _json([str(tmp_path / "a.parquet"), str(tmp_path / "a.parquet"), "--errors", "zero"])
    assert out["pass"]["table"]["neither"] == 3  # the grading error scores 0, so it fails
    assert out["labels"] is None  # the error record has no label: no label table rather than a wrong one


@pytest.mark.slow
def test_regrade_same_swaps_only_the_judge_of_a_run_directory(tmp_path, fake_openai):
    fake_openai.responder = _judge
    ds, a, grader = _regrade_files(tmp_path)
    run = tmp_path / "run"
    run.mkdir()
    rows = [json.loads(line) for line in a.read_text().splitlines()]
    for label in ("base", "tuned"):
        _records(run / f"{label}.jsonl", [r for r in rows if r["model_label"] == label])
    (run / "spec.resolved.toml").write_text(f'dataset = "{ds}"\ngrader = "{grader}"\n[models.base]\n[models.tuned]\n')
    code, out = _json([str(run), "--regrade", "same", "--judge-base-url", fake_openai.base_url, "--judge-model", "j2"])
    assert code == 0 and out["n_samples"] == 24 and out["b"]["grader"].endswith("judge j2")
    assert (run / "judge_cache.jsonl").is_file()  # the default cache: the run directory's own
    res = runner.invoke(app, ["agree", str(a), "--regrade", "same"])
    assert res.exit_code == 2 and "--regrade same needs A to be a run directory" in res.stderr


@pytest.mark.slow
def test_regrade_never_writes_over_a_run_directorys_records_or_the_dataset_its_spec_names(tmp_path, fake_openai):
    """Tried as a new user: `agree RUN --regrade G --out RUN/base.jsonl` paid every judge call and overwrote A's
    records, and `--judge-cache D` appended judge answers to the dataset RUN's spec names (no --dataset given):
    only the paths as typed were checked. Each is one line, exit 2, before any judge call, every file untouched;
    the run's own judge cache named explicitly is still fine."""
    fake_openai.responder = _judge
    ds, a, grader = _regrade_files(tmp_path)
    run = tmp_path / "run"
    run.mkdir()
    rows = [json.loads(line) for line in a.read_text().splitlines()]
    for label in ("base", "tuned"):
        _records(run / f"{label}.jsonl", [r for r in rows if r["model_label"] == label])
    (run / "spec.resolved.toml").write_text(f'dataset = "{ds}"\ngrader = "{grader}"\n[models.base]\n[models.tuned]\n')
    before = {p: p.read_bytes() for p in (run / "base.jsonl", run / "tuned.jsonl", ds, grader)}
    args = ["agree", str(run), "--regrade", str(grader), "--judge-base-url", fake_openai.base_url]
    for flag, path in (("--out", run / "base.jsonl"), ("--judge-cache", ds), ("--html", run / "tuned.jsonl"),
                       ("--out", grader)):
        res = runner.invoke(app, [*args, flag, str(path)])
        said = [line for line in res.stderr.splitlines() if line.startswith("rfteval: ")]
        assert res.exit_code == 2 and len(said) == 1, res.output
        assert f"{flag}: is also an input of this command" in said[0]
    assert fake_openai.requests == []
    assert {p: p.read_bytes() for p in before} == before
    res = runner.invoke(app, [*args, "--judge-cache", str(run / "judge_cache.jsonl"), "--out", str(tmp_path / "b.jsonl")])
    assert res.exit_code == 0, res.output
    assert len(fake_openai.requests) == 24 and (tmp_path / "b.jsonl").is_file()


@pytest.mark.slow
def test_regrade_with_a_judge_the_server_refuses_stops_in_one_line(tmp_path, fake_openai):
    """Issue 27: --regrade's judge fails fast like a model: a developer message llama-cpp-python refuses (its 500
    validation list) stops agree after a handful of requests, one line naming --developer-as system; nothing is
    compared on a side of refusals. With --developer-as system it regrades."""
    fake_openai.responder = _judge
    fake_openai.refused_roles = {"developer"}
    ds, a, grader = _regrade_files(tmp_path)
    grader.write_text(json.dumps({**GRADER, "input": [{"role": "developer", "content": "Grade the answer."},
                                                      *GRADER["input"]]}))
    args = ["agree", str(a), "--regrade", str(grader), "--dataset", str(ds), "--judge-base-url", fake_openai.base_url,
            "--judge-cache", str(tmp_path / "c.jsonl"), "--judge-concurrency", "2"]
    res = runner.invoke(app, args)
    lines = [x for x in res.stderr.splitlines() if x.strip() and not x.startswith("warning: ")]  # o3-mini is retired
    assert res.exit_code == 2 and len(lines) == 1 and "--developer-as system" in lines[0], res.output
    assert "nothing was compared (--regrade)" in lines[0] and fake_openai.stats["invalid"] <= 6
    res = runner.invoke(app, [*args, "--developer-as", "system", "--format", "json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["n_samples"] == 24


@pytest.mark.slow
def test_regrade_checks_the_judge_model_before_its_first_call(tmp_path, fake_openai):
    """Issue 36 leftover: `agree --regrade` sent its judge calls without checking the judge model against the
    endpoint's GET /models, as grade, validate and probe-grader do. A model the endpoint does not serve is one line,
    exit 2, zero chat requests and nothing written; --skip-model-check (the shared option) goes past the check."""
    fake_openai.responder = _judge
    fake_openai.models = ["judge-model", "other"]
    ds, a, grader = _regrade_files(tmp_path)
    cache, out = tmp_path / "c.jsonl", tmp_path / "b.jsonl"
    args = ["agree", str(a), "--regrade", str(grader), "--dataset", str(ds), "--judge-base-url", fake_openai.base_url,
            "--judge-cache", str(cache), "--out", str(out)]
    for extra, named in (([], "grader model: unknown model 'o3-mini'"),
                         (["--judge-model", "judge-modle"], "--judge-model: unknown model 'judge-modle'")):
        res = runner.invoke(app, [*args, *extra])
        said = [line for line in res.stderr.splitlines() if line.startswith("rfteval: ")]
        assert res.exit_code == 2 and len(said) == 1 and "Traceback" not in res.output, res.output
        assert named in said[0] and "serves judge-model, other" in said[0] and "--skip-model-check" in said[0]
    # no judge call paid for, no record written (the judge's cache file is opened, empty, before the check: as grade's)
    assert fake_openai.requests == [] and not out.exists() and (not cache.exists() or cache.read_text() == "")

    fake_openai.models, fake_openai.listed = None, ["other"]  # a gateway: routes o3-mini, does not list it
    res = runner.invoke(app, [*args, "--skip-model-check", "--format", "json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["n_samples"] == 24 and {r.model for r in fake_openai.requests} == {"o3-mini"}
