#!/usr/bin/env python3
"""Write the legal-review example's recordings: base/tuned work products and the "old judge's" grades of them.

NOTHING HERE IS A MODEL'S OUTPUT OR A REAL o3-mini GRADE. The work products are assembled from each item's
reference points (datasets/legal-review/items.jsonl, `reference_points`) with the mistakes a junior makes: a
point left out, a wrong date, amount or period (the item's `mistakes`), padding. "base" makes them more often
than "tuned". The old judge's grades stand in for what o3-mini gave when graders/legal-review.json still ran on
it: the scripted local judge's rubric-coverage score (scripts/local_judge.py, graded through rfteval's own
grading path), plus seeded noise (sd 0.05), rounded to the rubric's 0.1 steps. Deterministic: every choice
comes from a generator seeded by (model, item, epoch).

    python scripts/make_legal_review_recordings.py            write datasets/legal-review/recordings/
    python scripts/make_legal_review_recordings.py --check    exit 1 when a committed recording differs
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "datasets" / "legal-review"
GRADER = ROOT / "graders" / "legal-review.json"
EPOCHS = (1, 2, 3)
OLD_JUDGE = "o3-mini"
NOISE_SD = 0.05
MISTAKE = {"base": {"easy": 0.2, "medium": 0.3, "hard": 0.45}, "tuned": {"easy": 0.04, "medium": 0.08, "hard": 0.15}}
OMIT = {"base": 0.15, "tuned": 0.04}
PAD = {"base": 0.5, "tuned": 0.1}
PADDING = ("This summary is provided for information only and does not constitute legal advice.",
           "Further review of the full agreement is recommended before relying on this analysis.",
           "The parties should consult counsel in the relevant jurisdiction.")


def work_product(item: dict[str, Any], model: str, epoch: int) -> str:
    rng = random.Random(f"{model}:{item['id']}:{epoch}")
    out = []
    for point, wrong in zip(item["reference_points"], item["mistakes"]):
        roll = rng.random()
        if wrong is not None and roll < MISTAKE[model][item["difficulty"]]:
            out.append(wrong)
        elif rng.random() < OMIT[model]:
            continue
        else:
            out.append(point)
    if rng.random() < PAD[model]:
        out.append(rng.choice(PADDING))
    return " ".join(out) or "I could not find the answer in the document."


def outputs(items: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    return {model: [{"item_id": it["id"], "epoch": e, "output_text": work_product(it, model, e)}
                    for it in items for e in EPOCHS] for model in ("base", "tuned")}


def old_judge_grades(items: list[dict[str, Any]], outs: dict[str, list[dict[str, Any]]]) -> list[str]:
    """Grade through rfteval with the scripted local judge, then add the seeded noise that makes it another judge."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import local_judge

    from rfteval.data.dataset import load_dataset
    from rfteval.data.outputs import Output
    from rfteval.data.records import dumps_record
    from rfteval.graders import load_grader
    from rfteval.graders.grading import grade_outputs
    from rfteval.providers.endpoint import JudgeEndpoint
    from rfteval.providers.judge import Judge

    server = local_judge.serve(0)
    base_url = server.base_url
    try:
        data = load_dataset(DATA / "items.jsonl")
        config = load_grader(GRADER)
        lines = []
        with Judge(JudgeEndpoint(base_url, "LEGAL_REVIEW_UNUSED_KEY").provider()) as judge:
            for model, rows in outs.items():
                batch = [Output(item_id=r["item_id"], epoch=r["epoch"], model=model, output_text=r["output_text"])
                         for r in rows]
                for rec in grade_outputs(data, config, batch, judge=judge, run_id="legal-review-recorded-o3-mini"):
                    rng = random.Random(f"noise:{model}:{rec.item_id}:{rec.epoch}")
                    assert rec.score is not None and rec.error is None, rec.error
                    rec.score = round(min(1.0, max(0.0, rec.score + rng.gauss(0.0, NOISE_SD))) * 10) / 10
                    rec.model = model
                    rec.finished_at = "2026-10-01T00:00:00.000Z"  # fixed, so the file is reproducible
                    rec.latency_s = None
                    rec.usage = {"input_tokens": None, "output_tokens": None, "reasoning_tokens": None}
                    rec.grade_details = {"judge": OLD_JUDGE, "note": "synthetic stand-in for a recorded o3-mini grade"}
                    lines.append(dumps_record(rec))
        return lines
    finally:
        server.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args(argv)
    items = [json.loads(line) for line in (DATA / "items.jsonl").read_text(encoding="utf-8").splitlines() if line]
    outs = outputs(items)
    files = {DATA / "recordings" / f"{m}.jsonl": "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
             for m, rows in outs.items()}
    files[DATA / "recordings" / f"{OLD_JUDGE}-grades.jsonl"] = "".join(line + "\n" for line in
                                                                     old_judge_grades(items, outs))
    from generated_files import write_or_check

    return write_or_check(files, args.check, "scripts/make_legal_review_recordings.py")


if __name__ == "__main__":
    sys.exit(main())
