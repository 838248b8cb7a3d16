"""Writes datasets/sums/: sums of two numbers from 1 to 12, "Answer with just the number.", split into training and
held-out items by the pair (3 + 4 and 4 + 3 go to the same side, so no held-out sum is ever trained on), and the
grader both are graded with. Drawn from a seeded generator, so the files are reproducible:

    python datasets/sums/make_sums.py            # rewrite the files
    python datasets/sums/make_sums.py --check    # exit 1 when a file differs from what this script writes

Why this task (issue 38): SmolLM2-135M-Instruct, sampled at temperature 1.0, sometimes answers with the number
alone and sometimes gets the sum right inside a paragraph, rarely both; so it scores between the grader's minimum
and maximum, and what it has to learn (the format, then the value) is in reach of a few dozen GRPO steps on CPU. Two-digit
numbers (10 to 49) were measured too: RISKY, 65% of items with no signal (readiness, 20 items x 4 samples).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

HERE = Path(__file__).parent
SEED = 38  # the number: fixed once, never searched
LOW, HIGH = 1, 12
HELD_OUT = 40  # items: from 20 on, `rfteval compare`'s series re-estimates its best checkpoint on held-out halves
TEMPLATES = ("What is {a} + {b}?", "What is {a} plus {b}?", "Add {a} and {b}.", "Compute {a} + {b}.")
INSTRUCTION = "Answer with just the number."

# 0.5 for an answer that is a bare integer (the format), 0.5 for one that holds the sum (the value): "7" for 3 + 4
# scores 1, "3 + 4 = 7" and "8" score 0.5
FORMAT_SOURCE = '''import re


def grade(sample, item) -> float:
    """1 when the answer is an integer and nothing else (surrounding whitespace aside)."""
    return 1.0 if re.fullmatch(r"-?[0-9]+", sample["output_text"].strip()) else 0.0
'''
GRADER = {
    "type": "multi", "name": "just_the_number",
    "graders": {
        "format": {"type": "python", "name": "bare_integer", "source": FORMAT_SOURCE},
        "value": {"type": "string_check", "name": "holds_the_sum", "input": "{{ sample.output_text }}",
                  "reference": "{{ item.reference_answer }}", "operation": "like"},
    },
    "calculate_output": "0.5 * format + 0.5 * value",
}


def difficulty(a: int, b: int) -> str:
    """For `compare --by difficulty`: a one-digit sum, a carry into a second digit, or a two-digit operand."""
    if a >= 10 or b >= 10:
        return "hard"
    return "easy" if a + b < 10 else "medium"


def items() -> tuple[list[dict[str, object]], list[dict[str, object]]]:
    rng = random.Random(SEED)
    pairs = sorted({(min(a, b), max(a, b)) for a in range(LOW, HIGH + 1) for b in range(LOW, HIGH + 1)})
    rng.shuffle(pairs)
    held = set(pairs[:HELD_OUT])
    out: dict[str, list[dict[str, object]]] = {"train": [], "heldout": []}
    for a in range(LOW, HIGH + 1):
        for b in range(LOW, HIGH + 1):
            pair = (min(a, b), max(a, b))
            if pair in held and a > b:  # a held-out pair once, in the order drawn
                continue
            question = f"{rng.choice(TEMPLATES).format(a=a, b=b)} {INSTRUCTION}"
            if str(a + b) in question:  # an echo of the question would earn the value's half
                continue
            split = "heldout" if pair in held else "train"
            out[split].append({"id": f"{'h' if split == 'heldout' else 't'}-{a}-{b}", "reference_answer": str(a + b),
                               "difficulty": difficulty(a, b), "messages": [{"role": "user", "content": question}]})
    for split in out.values():
        rng.shuffle(split)
    return out["train"], out["heldout"]


def files() -> dict[Path, str]:
    train, heldout = items()
    return {HERE / "train.jsonl": "".join(json.dumps(x) + "\n" for x in train),
            HERE / "heldout.jsonl": "".join(json.dumps(x) + "\n" for x in heldout),
            HERE / "grader.json": json.dumps(GRADER, indent=2) + "\n"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when a file differs from what this writes")
    stale = []
    check = parser.parse_args().check
    for path, text in files().items():
        if check:
            if not path.is_file() or path.read_text() != text:
                stale.append(path.name)
        else:
            path.write_text(text)
    if stale:
        print(f"stale: {', '.join(stale)} (run python datasets/sums/make_sums.py)", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
