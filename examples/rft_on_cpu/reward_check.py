"""Reward = grade, on the completions TRL generated: every completion TRL logged with its reward during training
(train.py's completions.jsonl, gathered from TRL's own completion logs) is written as an outputs file, graded again by
`rfteval grade` with the same grader and the same reasoning options, and each reward must equal its grade. TRL stores
rewards as float32, so a grade is compared after the same rounding; a grading error is a None reward (for_trl's
default `on_error="none"`) and must be an error record of `rfteval grade`."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np


@dataclass
class Logged:
    item_id: str
    epoch: int  # the how-many-th completion of this item TRL logged: `rfteval grade`'s epoch, so each is one record
    step: int
    completion: str
    reward: float | None


@dataclass
class RewardCheck:
    checked: int = 0
    steps: int = 0
    mismatches: list[str] = field(default_factory=list)


def read_jsonl(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def logged_completions(completions: Path, trl_data: Path) -> list[Logged]:
    """TRL's logged completions, each with the id of the dataset row whose prompt TRL logged beside it."""
    ids = {json.dumps(row["prompt"], sort_keys=True): str(row["id"]) for row in read_jsonl(trl_data)}
    if len(ids) != len(read_jsonl(trl_data)):
        raise RuntimeError(f"{trl_data}: two rows share a prompt, so a logged prompt names no one item")
    seen: Counter[str] = Counter()
    out = []
    for line in read_jsonl(completions):
        key = json.dumps(line["prompt"], sort_keys=True)
        if key not in ids:
            raise RuntimeError(f"{completions}: a logged prompt is in no row of {trl_data}: {key[:120]}")
        item = ids[key]
        seen[item] += 1
        reward = line["reward"]
        out.append(Logged(item, seen[item], int(str(line["step"])), str(line["completion"]),
                          None if reward is None else float(str(reward))))
    return out


def write_outputs(logged: list[Logged], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"item_id": x.item_id, "epoch": x.epoch, "output_text": x.completion}) + "\n"
                            for x in logged))


def check(logged: list[Logged], graded: Path) -> RewardCheck:
    """Each logged reward against the grade `rfteval grade` wrote for the same completion (its records file)."""
    records = {(str(r["item_id"]), int(str(r["epoch"]))): r for r in read_jsonl(graded)}
    result = RewardCheck(steps=len({x.step for x in logged}))
    for x in logged:
        rec = records.get((x.item_id, x.epoch))
        result.checked += 1
        if rec is None:
            result.mismatches.append(f"step {x.step} {x.item_id}: no grade for {x.completion!r}")
            continue
        error, score = rec.get("error"), rec.get("score")
        if x.reward is None or error is not None:
            if not (x.reward is None and error is not None):
                result.mismatches.append(f"step {x.step} {x.item_id}: reward {x.reward}, grade error {error}")
            continue
        if np.float32(float(str(score))) != np.float32(x.reward):
            result.mismatches.append(f"step {x.step} {x.item_id}: reward {x.reward!r} != grade {score!r} for "
                                     f"{x.completion!r}")
    return result
