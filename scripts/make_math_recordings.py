#!/usr/bin/env python3
"""Write the math example (datasets/math/): the problems, base/tuned solutions, and two graders' grades of them.

NOTHING HERE IS A MODEL'S OUTPUT OR A REAL JUDGE'S GRADE. Each solution is a short worked line ending in a final
answer, chosen by a generator seeded by (model, item, epoch): correct or wrong (tuned is right more often), and a
correct answer written the canonical way, another way the rule grader accepts (0.5 for 1/2), or another way it
does not (50%, "x = 3", "1,000", a unit, no \\boxed{}). A few wrong solutions hedge two boxed answers, the last
one right. Two sets of grades of the same solutions are written as records:
- judge-grades.jsonl: a stand-in for a model judge's verdicts: the generator's known correctness (an equivalent
  answer however written is right; a hedge is wrong). Synthetic and labelled as such;
- rule-grades.jsonl: graders/math.json's own python source (the sympy rule), run here in-process on each
  solution: the same function `rfteval agree --regrade graders/math.json` runs in the sandbox.

    python scripts/make_math_recordings.py            write datasets/math/
    python scripts/make_math_recordings.py --check    exit 1 when a committed file differs
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "datasets" / "math"
GRADER = ROOT / "graders" / "math.json"
EPOCHS = (1, 2)
RIGHT = {"base": {"easy": 0.7, "medium": 0.5, "hard": 0.3}, "tuned": {"easy": 0.9, "medium": 0.8, "hard": 0.6}}
FORM = (("canonical", 0.5), ("accepted", 0.25), ("missed", 0.25))  # how a correct answer is written
HEDGE = 0.05  # of wrong solutions: "\boxed{wrong} or \boxed{right}"
FINISHED = "2026-11-01T00:00:00.000Z"

# (problem, reference answer (sympy syntax), canonical LaTeX, accepted other forms, forms the rule misses, wrong)
PROBLEMS: list[tuple[str, str, str, list[str], list[str], list[str], str]] = [
    ("What is 3/4 + 1/8?", "7/8", r"\frac{7}{8}", ["0.875"], [r"\frac78", "87.5\\%"], [r"\frac{4}{12}", r"\frac{1}{2}"], "easy"),
    ("Solve 2x + 5 = 11 for x.", "3", "3", ["3.0"], ["x = 3", "x=3"], ["8", "-3"], "easy"),
    ("What is 15% of 80?", "12", "12", ["12.00"], ["12 \\text{ (fifteen percent of 80)}", "twelve"], ["5.33", "1200"], "easy"),
    ("Simplify sqrt(50).",
     "5*sqrt(2)", r"5\sqrt{2}", [r"\sqrt{50}", r"\sqrt{2} \cdot 5"],
     [r"5 \sqrt 2", r"7.07 \approx 5\sqrt{2}"], [r"25\sqrt{2}", r"2\sqrt{5}"], "easy"),
    ("A rectangle is 7 cm by 12 cm. What is its area in square centimetres?",
     "84", "84", ["84.0"], [r"84 \text{ cm}^2", r"84\,\mathrm{cm^2}"], ["38", "19"], "easy"),
    ("What is 2^10?", "1024", "1024", [r"2^{10}"], ["1,024", "1{,}024"], ["20", "512"], "easy"),
    ("Expand (x + 1)^2.",
     "(x+1)**2", r"x^2 + 2x + 1", [r"(x+1)^2", r"1 + 2x + x^2"],
     [r"x^2+2x+1 \text{ (expanded)}", r"x² + 2x + 1"], [r"x^2 + 1", r"x^2 + x + 1"], "easy"),
    ("What is the probability of two heads in two fair coin tosses?",
     "1/4", r"\frac{1}{4}", ["0.25"], ["25\\%", "1:4"], [r"\frac{1}{2}", r"\frac{1}{3}"], "easy"),
    ("Convert 0.375 to a fraction in lowest terms.",
     "3/8", r"\frac{3}{8}", [r"\dfrac{3}{8}", "0.375"],
     [r"3/8 \text{ (lowest terms)}", r"\frac38"], [r"\frac{375}{100}", r"\frac{3}{4}"], "easy"),
    ("What is the sum of the interior angles of a hexagon, in degrees?",
     "720", "720", ["720.0"], [r"720^\circ", r"720°"], ["360", "1080"], "medium"),
    ("Solve x^2 - 5x + 6 = 0 and give the larger root.", "3", "3", [r"\frac{6}{2}"], ["x = 3", r"x_2 = 3"], ["2", "6"], "medium"),
    ("What is log base 2 of 64?", "6", "6", [r"\frac{12}{2}"], [r"\log_2 64 = 6", "six"], ["8", "32"], "medium"),
    ("A car travels 150 km in 2.5 hours. What is its average speed in km/h?",
     "60", "60", ["60.0"], [r"60 \text{ km/h}", r"60\,\mathrm{km/h}"], ["375", "50"], "medium"),
    ("What is the derivative of x^3 at x = 2?",
     "12", "12", [r"3 \cdot 2^2"], [r"f'(2) = 12", "12 (since 3x^2 = 12)"], ["8", "6"], "medium"),
    ("How many ways can 5 books be arranged on a shelf?",
     "120", "120", ["5!"], ["120 \\text{ ways}", "5! = 120"], ["25", "60"], "medium"),
    ("What is the area of a circle of radius 3?",
     "9*pi", r"9\pi", [r"\pi \cdot 9", r"9 \cdot \pi"], [r"28.27", r"9\pi \approx 28.27"], [r"6\pi", r"3\pi"], "medium"),
    ("Evaluate the sum 1 + 2 + ... + 100.",
     "5050", "5050", [r"\frac{100 \cdot 101}{2}"], ["5,050", r"5\,050"], ["5000", "10100"], "medium"),
    ("Simplify (x^2 - 9)/(x - 3) for x != 3.",
     "x+3", "x + 3", ["3 + x"], [r"x+3 \quad (x \neq 3)", r"(x+3), x \ne 3"], ["x - 3", "x^2 + 3"], "medium"),
    ("What is 7 choose 3?",
     "35", "35", [r"\frac{7 \cdot 6 \cdot 5}{6}"], [r"\binom{7}{3} = 35", "C(7,3)=35"], ["21", "210"], "medium"),
    ("Find the remainder when 2^20 is divided by 7.",
     "4", "4", [r"\frac{8}{2}"], [r"2^{20} \equiv 4 \pmod 7", "r = 4"], ["1", "2"], "hard"),
    ("What is the integral of 2x from 0 to 3?", "9", "9", ["9.0"], [r"[x^2]_0^3 = 9", "9 square units"], ["6", "18"], "hard"),
    ("A geometric series has first term 1 and ratio 1/3. What is its sum?",
     "3/2", r"\frac{3}{2}", ["1.5"], [r"1\tfrac{1}{2}", "3:2"], [r"\frac{4}{3}", "3"], "hard"),
    ("Solve for x: 3^(x+1) = 81.", "3", "3", [r"\frac{9}{3}"], ["x = 3", r"x=3 \text{ (since } 81 = 3^4)"], ["4", "27"], "hard"),
    ("What is the smallest positive integer n with n! > 1000?",
     "7", "7", ["7.0"], ["n = 7", "n=7 (7! = 5040)"], ["6", "10"], "hard"),
    ("What is the distance between (1, 2) and (4, 6)?",
     "5", "5", [r"\sqrt{25}"], ["d = 5", "5 units"], ["7", r"\sqrt{7}"], "hard"),
    ("Find the sum of the roots of 2x^2 - 8x + 3 = 0.",
     "4", "4", [r"\frac{8}{2}"], [r"x_1 + x_2 = 4", "four"], ["-4", r"\frac{3}{2}"], "hard"),
    ("What is cos(pi/3)?",
     "1/2", r"\frac{1}{2}", ["0.5", r"\dfrac{1}{2}"], [r"\cos(\pi/3) = 1/2", "50\\%"], [r"\frac{\sqrt{3}}{2}", "1"], "hard"),
    ("How many positive divisors does 360 have?",
     "24", "24", ["24.0"], ["24 \\text{ divisors}", "d(360) = 24"], ["12", "36"], "hard"),
    ("What is 12^2 - 8^2?", "80", "80", [r"(12-8)(12+8)"], ["80.", "eighty"], ["16", "4"], "hard"),
    ("Solve the system x + y = 10, x - y = 4 and give x.",
     "7", "7", [r"\frac{14}{2}"], ["x = 7", "(x, y) = (7, 3)"], ["3", "14"], "hard"),
]

STEPS = ("Working it through:", "Step by step:", "Computing:", "We have:")


def items() -> list[dict[str, Any]]:
    out = []
    for n, (problem, ref, *_rest, difficulty) in enumerate(PROBLEMS, start=1):
        out.append({"id": f"ma-{n:03d}", "messages": [{"role": "user", "content": f"{problem} Reason briefly, then "
                                                                                  "put the final answer in \\boxed{}."}],
                    "problem": problem, "reference_answer": ref, "difficulty": difficulty})
    return out


def solution(index: int, model: str, epoch: int) -> tuple[str, bool]:
    """(text, correct): the answer's form is drawn so that equivalent-but-differently-written answers occur."""
    problem, _ref, canonical, accepted, missed, wrong, difficulty = PROBLEMS[index]
    rng = random.Random(f"{model}:{index}:{epoch}")
    lead = f"{rng.choice(STEPS)} {problem.rstrip('?.').lower()}."
    if rng.random() < RIGHT[model][difficulty]:
        roll, acc = rng.random(), 0.0
        form = "canonical"
        for name, p in FORM:
            acc += p
            if roll < acc:
                form = name
                break
        answer = {"canonical": canonical, "accepted": rng.choice(accepted), "missed": rng.choice(missed)}[form]
        if form == "missed" and rng.random() < 0.25:
            return f"{lead} The answer is {answer}.", True  # right, but no \boxed{}: the rule cannot see it
        return f"{lead} \\boxed{{{answer}}}", True
    bad = rng.choice(wrong)
    if rng.random() < HEDGE:
        return f"{lead} It is either \\boxed{{{bad}}} or \\boxed{{{canonical}}}.", False
    return f"{lead} \\boxed{{{bad}}}", False


def rule_grade() -> Any:
    """graders/math.json's source, run in-process: trusted code of this repository, the same text the sandbox runs."""
    namespace: dict[str, Any] = {"__name__": "math_rule"}
    exec(compile(json.loads(GRADER.read_text(encoding="utf-8"))["source"], str(GRADER), "exec"), namespace)
    return namespace["grade"]


def record(model: str, item: dict[str, Any], epoch: int, text: str, score: float, run_id: str,
           details: dict[str, Any]) -> str:
    return json.dumps({"run_id": run_id, "model_label": model, "model": model, "item_id": item["id"], "epoch": epoch,
                       "output_text": text, "score": score, "error": None, "finished_at": FINISHED,
                       "grade_details": details}, ensure_ascii=False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args(argv)
    data = items()
    grade = rule_grade()
    outs: dict[str, list[str]] = {"base": [], "tuned": []}
    judge, rule = [], []
    for model in outs:
        for index, item in enumerate(data):
            for epoch in EPOCHS:
                text, correct = solution(index, model, epoch)
                outs[model].append(json.dumps({"item_id": item["id"], "epoch": epoch, "output_text": text},
                                              ensure_ascii=False))
                judge.append(record(model, item, epoch, text, 1.0 if correct else 0.0, "math-judge-stand-in",
                                    {"note": "synthetic stand-in for a model judge: the generator's known truth"}))
                score = float(grade({"output_text": text, "output_json": None, "output_tools": []}, item))
                rule.append(record(model, item, epoch, text, score, "math-rule-grader", {"grader": "graders/math.json"}))
    files = {DATA / "items.jsonl": "".join(json.dumps(it, ensure_ascii=False) + "\n" for it in data),
             DATA / "recordings" / "judge-grades.jsonl": "".join(line + "\n" for line in judge),
             DATA / "recordings" / "rule-grades.jsonl": "".join(line + "\n" for line in rule)}
    for model, lines in outs.items():
        files[DATA / "recordings" / f"{model}.jsonl"] = "".join(line + "\n" for line in lines)
    from generated_files import write_or_check

    return write_or_check(files, args.check, "scripts/make_math_recordings.py")


if __name__ == "__main__":
    sys.exit(main())
