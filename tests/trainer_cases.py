"""What the trainer tests share: the bundled datasets with their outputs and `rfteval grade`'s scores for them, and
each trainer's dataset as that trainer's own loader reads it (HF datasets, parquet)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from rfteval.cli.app import app
from rfteval.data.records import read_records

REPO = Path(__file__).resolve().parents[1]
GRADERS = REPO / "graders"
DATASETS = REPO / "datasets"
LOCAL_CASES = ("chipstack", "runloop", "harvey", "ambience", "safetykit", "milo")  # accordance needs a judge
RECORDED = ("chipstack", "harvey", "milo")
ANSWER_KEY = {"chipstack": "predicted", "harvey": "passages", "ambience": "codes", "safetykit": "labels",
              "milo": "events"}
runner = CliRunner()
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # HF datasets reads local files only: nothing from the hub
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")


def items(case: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (DATASETS / case / "items.jsonl").read_text().splitlines() if line.strip()]


def outputs(case: str) -> list[dict[str, Any]]:
    """Outputs to grade: the demo recordings (both models), else each item's reference answer as the model would
    write it and two wrong answers (so scores vary)."""
    if case in RECORDED:
        out = []
        for model in ("base", "tuned"):
            for line in (DATASETS / case / "recordings" / f"{model}.jsonl").read_text().splitlines():
                if line.strip():
                    out.append({**json.loads(line), "model": model})
        return out
    out = []
    for it in items(case):
        if case == "runloop":
            right = it["reference_output"]
        else:
            ref = it["reference_answer"]
            right = json.dumps(ref if isinstance(ref, dict) else {ANSWER_KEY[case]: ref})
        half = right[: len(right) // 2]
        for epoch, text in enumerate((right, half, "I cannot answer that."), start=1):
            out.append({"item_id": it["id"], "epoch": epoch, "output_text": text, "model": "m"})
    return out


def grade_cli(tmp_path: Path, dataset: Path, grader: str, outs: list[dict[str, Any]]) -> dict[tuple, float]:
    """`rfteval grade` on the outputs: score per (model, item, epoch)."""
    path = tmp_path / "outputs.jsonl"
    path.write_text("".join(json.dumps(o) + "\n" for o in outs))
    records = tmp_path / "records.jsonl"
    res = runner.invoke(app, ["grade", "-d", str(dataset), "-g", grader, "--outputs", str(path), "--out", str(records)])
    assert res.exit_code in (0, 3), res.output  # 3: more grading errors than allowed, records written all the same
    df = read_records(records)
    return {(r.model_label, r.item_id, int(r.epoch)): float(r.score) for r in df.itertuples()}


def expected_scores(tmp_path: Path, case: str) -> tuple[list[dict[str, Any]], list[float]]:
    """The case's outputs and `rfteval grade`'s score for each, in the same order."""
    outs = outputs(case)
    graded = grade_cli(tmp_path, DATASETS / case / "items.jsonl", str(GRADERS / f"{case}.json"), outs)
    return outs, [graded[o["model"], o["item_id"], o["epoch"]] for o in outs]


def export(case: str, target: str, out: Path) -> Path:
    """`rfteval export-dataset` for the case; the written file."""
    res = runner.invoke(app, ["export-dataset", str(DATASETS / case / "items.jsonl"), "--target", target,
                              "--out", str(out)])
    assert res.exit_code == 0, res.output
    return out / ("train.parquet" if target == "verl" else "train.jsonl")


def hf_json(path: Path, tmp_path: Path) -> Any:
    """The dataset as every TRL example loads it: datasets.load_dataset("json") (Arrow's JSON reader), its cache
    under the test's folder (never beside the bundled datasets)."""
    import datasets

    return datasets.load_dataset("json", data_files=str(path), split="train", cache_dir=str(tmp_path / ".hf-cache"))


# ------------------------------------------------------------------ recorded completions in each shape a trainer sees

# The bundled recordings (every model's outputs; the grade files beside them are not outputs): 66 milo, 288 chipstack,
# 120 math completions, which the trainer tests send in every shape below.
RECORDING_CASES = ("milo", "chipstack", "math")
THOUGHT = "Reading the request again before answering."
FIRST_TURN = "Let me draft it first."  # a two-turn rollout's first reply, which is not graded
FOLLOW_UP = "Now give your final answer."  # the environment's turn between the two replies
# What a reasoning model's server sends (data/reasoning.py): the answer after a leading think block; after a lone
# close tag (the chat template opened the block); inside a block never closed (cut off while thinking: no answer);
# after </think> with the thinking in a field of its own (a server's reasoning parser leaves the "\n\n" in the
# content); and the last reply of two.
SHAPES = ("plain", "think", "template_think", "unclosed_think", "reasoning_field", "two_turns")


def recorded_outputs(case: str) -> list[dict[str, Any]]:
    out = []
    for path in sorted((DATASETS / case / "recordings").glob("*.jsonl")):
        if "grades" in path.stem:
            continue
        out.extend({**json.loads(line), "model": path.stem} for line in path.read_text().splitlines() if line.strip())
    return out


def reply(text: str, shape: str) -> dict[str, str]:
    """The model's last reply in `shape`: its content, and its reasoning field when the server sends one."""
    if shape == "think":
        return {"content": f"<think>{THOUGHT}</think>\n\n{text}"}
    if shape == "template_think":
        return {"content": f"{THOUGHT}\n</think>\n\n{text}"}
    if shape == "unclosed_think":
        return {"content": f"<think>{THOUGHT} {text}"}
    if shape == "reasoning_field":
        return {"content": f"\n\n{text}", "reasoning_content": THOUGHT}
    return {"content": text}


def shaped_scores(tmp_path: Path, case: str, shapes: tuple[str, ...] = SHAPES
                  ) -> list[tuple[str, dict[str, Any], dict[str, str], float]]:
    """(shape, output, reply, `rfteval grade`'s score) for every recorded output of the case in every shape: the
    reply as an outputs line (its content as output_text, the reasoning field beside it), graded in one run."""
    outs = recorded_outputs(case)
    lines, keyed = [], []
    for shape in shapes:
        for o in outs:
            r = reply(o["output_text"], shape)
            lines.append({"item_id": o["item_id"], "epoch": o["epoch"], "model": f"{o['model']}|{shape}",
                          "output_text": r["content"], **({"reasoning_content": r["reasoning_content"]}
                                                          if "reasoning_content" in r else {})})
            keyed.append((shape, o, r))
    graded = grade_cli(tmp_path, DATASETS / case / "items.jsonl", str(GRADERS / f"{case}.json"), lines)
    return [(shape, o, r, graded[line["model"], o["item_id"], o["epoch"]]) for (shape, o, r), line in zip(keyed, lines)]
