"""The RFT example (examples/rft_on_cpu/, `make example-rft`; issue 38): a smoke run of the whole loop, and the checks
it makes of itself.

The smoke run is the example's own command at its smallest: 2 GRPO steps (1 prompt x 4 completions of at most 16
tokens) with datasets/sums' grader as TRL's reward, 1 checkpoint, served by `transformers serve` beside the base, 4
held-out items x 2 epochs, the series compared. What it asserts is derived here, not read from what the example
prints: each reward TRL logged (TRL's own parquet logs) is the grader's rule applied to that completion, the base's
answers are asked once, the checkpoint samples by default.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from examples.rft_on_cpu import reward_check
from examples.rft_on_cpu.curve import curve_svg
from examples.rft_on_cpu.pipeline import Findings, conclusion, elsewhere
from tests.support import REPO
from tests.support.optional import missing, require

SUMS = REPO / "datasets" / "sums"


def rule(text: str, reference: str) -> float:
    """datasets/sums/grader.json in words: half for a bare integer, half for holding the sum."""
    return 0.5 * bool(re.fullmatch(r"-?[0-9]+", text.strip())) + 0.5 * (reference.lower() in text.lower())


@pytest.mark.slow
@pytest.mark.real_server
def test_the_example_trains_serves_evaluates_and_every_reward_is_the_grade(tmp_path: Path) -> None:
    """[38, done when] 2 steps, 1 checkpoint, served, 4 held-out items x 2 epochs: the example exits 0; TRL's logged
    rewards are the grader's scores of its logged completions, and the example found each equal to `rfteval grade`'s;
    the checkpoint samples by default; the base's held-out answers of the readiness phase are reused, not asked again;
    the series, the readiness verdict and each phase's time are printed."""
    for module in ("torch", "trl", "transformers"):
        require(module, "trainers")
    from examples.rft_on_cpu.serve import INSTALL_HINT, unavailable

    if (reason := unavailable()) is not None:
        missing(reason.removesuffix(f"; {INSTALL_HINT}"), "realserver" if "GGUF" in reason else "trainers")
    import pandas as pd

    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    res = subprocess.run([sys.executable, "-m", "examples.rft_on_cpu", "--out", str(out), "--steps", "2",
                          "--save-every", "2", "--limit", "4", "--epochs", "2", "--num-generations", "4",
                          "--prompts-per-step", "1", "--max-tokens", "16"],
                         capture_output=True, text=True, cwd=REPO, env=env, timeout=1800)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]

    references = {json.dumps(json.loads(line)["messages"], sort_keys=True): json.loads(line)["reference_answer"]
                  for line in (SUMS / "train.jsonl").read_text().splitlines()}
    logs = sorted((out / "trl" / "completions").glob("completions_*.parquet"))
    assert [p.name for p in logs] == ["completions_00001.parquet", "completions_00002.parquet"]
    rows = [row for p in logs for row in pd.read_parquet(p).to_dict("records")]
    assert len(rows) == 2 * 4
    for row in rows:  # TRL's own log: the prompt it sent, the completion it sampled, the reward it trained on
        prompt = json.dumps([{"role": m["role"], "content": m["content"]} for m in row["prompt"]], sort_keys=True)
        text = "".join(m["content"] for m in row["completion"] if m["role"] == "assistant")
        assert np.float32(rule(text, references[prompt])) == np.float32(row["rfteval_just_the_number"]), (text, row)
    assert "reward = grade: 8 of 8 completions logged by TRL over 2 steps (0 mismatches)" in res.stdout
    graded = [json.loads(x) for x in (out / "reward-check" / "graded.jsonl").read_text().splitlines()]
    assert len(graded) == 8 and all(r["error"] is None for r in graded)

    assert json.loads((out / "trl" / "checkpoint-2" / "generation_config.json").read_text())["do_sample"] is True
    for label in ("base", "step-2"):
        recs = [json.loads(x) for x in (out / "heldout" / f"{label}.jsonl").read_text().splitlines()]
        assert len(recs) == 4 * 2 and all(r["error"] is None for r in recs), recs
    assert len((out / "heldout" / "store" / "responses.jsonl").read_text().splitlines()) == 2 * 4 * 2
    assert "series: base (baseline) -> 1 candidate(s)" in res.stdout
    assert re.search(r"^readiness of the base before training: (READY|RISKY|NOT READY|INCONCLUSIVE)", res.stdout, re.M)
    phases = json.loads((out / "phases.json").read_text())["phases"]
    assert [name[:2] for name in phases] == ["1.", "2.", "3.", "4.", "5.", "6."] and "wall time per phase" in res.stdout
    assert (out / "training-curve.svg").read_text().count("<circle") == 2
    assert (out / "view" / "index.html").is_file()


def logged(rewards: list[float | None]) -> list[reward_check.Logged]:
    return [reward_check.Logged("t-1-2", i + 1, 1, "3", r) for i, r in enumerate(rewards)]


def graded(tmp_path: Path, scores: list[tuple[float, str | None]]) -> Path:
    path = tmp_path / "graded.jsonl"
    path.write_text("".join(json.dumps({"item_id": "t-1-2", "epoch": i + 1, "score": s,
                                        "error": None if e is None else {"type": e}}) + "\n"
                            for i, (s, e) in enumerate(scores)))
    return path


def test_reward_check_compares_after_float32_rounding_and_names_each_mismatch(tmp_path: Path) -> None:
    """A reward TRL stored as float32 equals the grade it was rounded from; a different one, a missing grade, and a
    None reward against a plain grade are each a mismatch; a None reward against a grading error is not."""
    as_trl = float(np.float32(0.1))  # what TRL logs for a grade of 0.1
    ok = reward_check.check(logged([as_trl, None]), graded(tmp_path, [(0.1, None), (0.0, "python_grader_error")]))
    assert ok.checked == 2 and ok.mismatches == []
    bad = reward_check.check(logged([0.5, None, 1.0]), graded(tmp_path, [(0.0, None), (1.0, None)]))
    assert bad.checked == 3 and len(bad.mismatches) == 3
    assert "reward 0.5 != grade 0.0" in bad.mismatches[0] and "no grade" in bad.mismatches[2]


def findings(verdict: str, curve_rewards: list[float], sub_ci: dict[str, list[float]]) -> Findings:
    ready = {"verdict": "risky", "checks": [
        {"name": "base_mean", "status": "ok", "message": "fine"},
        {"name": "constant_answer", "status": "risky", "message": "always answering '13' scores 0.562"}]}
    row = {"label": "step-6", "mean": 0.5, "p_adjusted": 0.001, "verdict": verdict,
           "delta": {"mean": 0.3, "ci95": [0.2, 0.4]}}
    held = {"label": "step-6", "choose_items": 20, "measure_items": 20,
            "delta": {"mean": 0.25, "ci95": [0.1, 0.4], "p_value": 0.002}}
    series = {"baseline": {"mean": 0.2}, "candidates": [row], "best": {"label": "step-6", "held_out": held}}
    subs = {name: {"baseline": {"mean": 0.1}, "candidate": {"mean": 0.6}, "delta": {"mean": 0.5, "ci95": ci}}
            for name, ci in sub_ci.items()}
    curve = [{"step": s, "reward": r, "frac_reward_zero_std": [0.5, 0.0, 0.5, 0.5, 1.0, 1.0][s - 1]}
             for s, r in enumerate(curve_rewards, 1)]
    return Findings(ready, series, {"step-6": {"sub_scores": subs}}, curve, reward_check.RewardCheck(checked=32, steps=2))


def test_conclusion_says_what_the_figures_show() -> None:
    """The closing lines come from rfteval's JSON and TRL's curve: readiness's verdict with its concerns, the curve's
    first and last steps, the best checkpoint with its Holm-adjusted p and its held-out estimate, the sub-scores;
    better is said with where the gain is; otherwise why, from the curve."""
    rising = [0.1, 0.1, 0.1, 0.5, 0.6, 0.6]
    lines = conclusion(findings("better", rising, {"format": [0.3, 0.7], "value": [-0.1, 0.2]}))
    assert len(lines) == 8
    assert lines[0] == "readiness of the base before training: RISKY (always answering '13' scores 0.562)"
    assert lines[1] == ("the training reward went from 0.100 (mean of steps 1-2) to 0.600 (steps 5-6); groups with "
                        "no signal (every completion scored alike): 25%, then 100%")
    assert lines[2] == "reward = grade on 32 logged completions, 0 mismatches"
    assert "p adj. 0.001 (Holm across 1): better" in lines[3]
    assert lines[4] == "chosen on 20 items, measured on the other 20: step-6 +0.250 [+0.100, +0.400], p 0.002"
    assert lines[5].startswith("sub-scores, base -> step-6: format 0.100 -> 0.600 (+0.500 [+0.300, +0.700])")
    assert lines[6] == ("training improved the held-out score (the best checkpoint is shown better than the base): "
                        "the gain is in format; value not shown to move")
    assert lines[7] == ("that gain is the part of the reward a shortcut earns, as readiness warned before training "
                        "(always answering '13' scores 0.562): value did not improve")
    both = conclusion(findings("better", rising, {"format": [0.3, 0.7], "value": [0.1, 0.2]}))
    assert both[-1].endswith("the gain is in format and value")  # nothing left behind: no shortcut line
    fell = conclusion(findings("better", rising, {"format": [0.3, 0.7], "value": [-0.3, -0.1]}))
    assert fell[-2].endswith("the gain is in format; value fell") and fell[-1].endswith("value did not improve")
    flat = [0.2] * 6
    assert "the training reward rose but the held-out score did not follow" in conclusion(
        findings("no clear difference", rising, {}))[-1]
    assert "the training reward did not rise either" in conclusion(findings("no clear difference", flat, {}))[-1]
    assert conclusion(findings("worse", flat, {}))[-1].startswith("training made the held-out score worse")


def test_a_sub_score_that_peaks_at_another_checkpoint_is_named() -> None:
    """The best checkpoint overall is not the best on every sub-score: the one where a sub-score peaks (shown better
    than the base there) is named with its figures; a peak not shown better than the base is not."""
    def sub(base: float, cand: float, lo: float) -> dict[str, Any]:
        return {"baseline": {"mean": base}, "candidate": {"mean": cand}, "delta": {"mean": cand - base,
                                                                                   "ci95": [lo, lo + 0.2]}}

    pairs = {"step-10": {"sub_scores": {"format": sub(0.1, 0.05, -0.2), "value": sub(0.2, 0.7, 0.3)}},
             "step-30": {"sub_scores": {"format": sub(0.1, 0.98, 0.8), "value": sub(0.2, 0.17, -0.2)}}}
    assert elsewhere(pairs, "step-30") == ["value peaked at step-10: 0.700 against the base's 0.200 (+0.500 [+0.300, "
                                           "+0.500]) and step-30's 0.170; the overall score ranks step-10 below step-30"]
    pairs["step-10"]["sub_scores"]["value"] = sub(0.2, 0.7, -0.1)
    assert elsewhere(pairs, "step-30") == []


def test_the_curve_draws_one_point_per_step_and_a_line_per_checkpoint() -> None:
    svg = curve_svg([{"step": 1, "reward": 0.1, "reward_std": 0.2}, {"step": 2, "reward": 0.4, "reward_std": 0.1}],
                    [2], "t")
    assert svg.count("<circle") == 2 and svg.count("<title>checkpoint-2</title>") == 1 and "<polygon" in svg
