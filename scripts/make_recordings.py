#!/usr/bin/env python3
"""Write illustrative base/tuned model outputs for the example datasets (chipstack, harvey, milo).

These are NOT outputs of a real model. Each output is derived from the item's reference answer with
realistic mistakes (dropped, wrong, invented or badly formatted answers); the "base" model makes more of
them than the "tuned" one. They exist so `rfteval grade` and `rfteval compare` can be tried without an
API key. Deterministic: every output comes from a random generator seeded by (case, model, item, epoch).

    python scripts/make_recordings.py            write datasets/<case>/recordings/{base,tuned}.jsonl
    python scripts/make_recordings.py --check    exit 1 when a committed recording differs from what this writes
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1] / "datasets"
EPOCHS = (1, 2, 3)
# Per-decision mistake probability by item difficulty; the tuned model makes fewer mistakes.
RATES = {
    "base": {"easy": 0.10, "medium": 0.20, "hard": 0.32},
    "tuned": {"easy": 0.05, "medium": 0.11, "hard": 0.20},
}
# How much of the base model's gap the tuned model closes differs by task; this scales the tuned rates.
TUNED_SCALE = {"chipstack": 1.15, "harvey": 1.6, "milo": 0.7}
# Share of outputs that are not parseable JSON at all (prose around the JSON): scores 0.
BROKEN = {"base": 0.04, "tuned": 0.01}

Item = dict[str, Any]
Mistaker = Callable[[Item, random.Random, float], Any]

# ------------------------------------------------------------------ chipstack

SWAPS = {
    "MASTER": "SLAVE", "SLAVE": "MASTER", "REQUESTER": "COMPLETER", "COMPLETER": "REQUESTER",
    "MANAGER": "SUBORDINATE", "SUBORDINATE": "MANAGER", "ROOT_PORT": "ENDPOINT", "ENDPOINT": "ROOT_PORT",
    "HOST": "DEVICE", "DEVICE": "HOST", "CONTROLLER": "TARGET", "TARGET": "CONTROLLER", "PERIPHERAL": "CONTROLLER",
    "AXI4": "AXI3", "AXI3": "AXI4", "AXI4LITE": "AXI4", "APB3": "APB4", "APB4": "APB3", "AHB_LITE": "AHB5",
    "AHB5": "AHB_LITE", "ALL": "INCR_ONLY", "INCR_ONLY": "ALL", "GEN3": "GEN4", "GEN4": "GEN3", "GEN5": "GEN4",
    "X4": "X8", "X8": "X16", "X16": "X8", "PIPE": "SERIAL", "SERIAL": "PIPE", "FULL": "HIGH", "HIGH": "FULL",
    "SUPER": "SUPER_PLUS", "UTMI": "ULPI", "ULPI": "UTMI", "PIPE3": "UTMI", "STANDARD": "FAST", "FAST": "FAST_PLUS",
    "FAST_PLUS": "FAST", "7BIT": "10BIT", "MSB_FIRST": "LSB_FIRST", "LSB_FIRST": "MSB_FIRST",
}
INVENTED = [("CLK_FREQ_MHZ", "100"), ("BURST_LEN", "16"), ("ENDIANNESS", "LITTLE"), ("RESET_ACTIVE_LOW", "1"),
            ("TIMEOUT_CYCLES", "1000"), ("HAS_CACHE", "0")]


def wrong_value(value: str, rng: random.Random) -> str:
    """A plausible wrong value: the opposite role or version, a doubled or halved width, an 8-bit address."""
    if value in SWAPS:
        return SWAPS[value]
    if value.startswith("0x"):
        return hex(int(value, 16) << 1).upper().replace("0X", "0x")
    if value.isdigit():
        n = int(value)
        if n <= 1:
            return str(1 - n)  # a flag read the wrong way
        return str(rng.choice([n * 2, n // 2, n + 1] if n <= 16 else [n * 2, n // 2]))
    return value.lower()


def wrong_format(value: str, rng: random.Random) -> str:
    if value in ("0", "1"):
        return rng.choice([f"1'b{value}", "true" if value == "1" else "false"])  # Verilog literal or a boolean
    if value.isdigit():
        return rng.choice([f"{value} bits", f"32'd{value}", f"{value}-bit"])
    if value.startswith("0x"):
        return str(int(value, 16))
    return rng.choice([value.lower(), value.replace("_", "-"), value.title()])


def chipstack_answer(item: Item, rng: random.Random, rate: float) -> Any:
    pairs = []
    for pair in item["reference_answer"]:
        name, value = pair["name"], pair["value"]
        roll = rng.random()
        if roll < rate * 0.35:
            continue  # dropped
        if roll < rate * 0.8:
            value = wrong_value(value, rng)
        elif roll < rate:
            value = wrong_format(value, rng)
        pairs.append({"name": name, "value": value})
    if rng.random() < rate * 0.6:
        name, value = rng.choice(INVENTED)
        pairs.insert(rng.randrange(len(pairs) + 1), {"name": name, "value": value})
    if pairs and rng.random() < rate * 0.15:
        pairs.append(dict(rng.choice(pairs)))  # listed twice
    return {"predicted": pairs}


# ------------------------------------------------------------------ harvey

def paraphrase(sentence: str, rng: random.Random) -> str:
    """A quote that is not verbatim: truncated, abbreviated with an ellipsis, or reworded."""
    words = sentence.split()
    kind = rng.choice(["truncate", "ellipsis", "reword"])
    if kind == "truncate" and len(words) > 8:
        return " ".join(words[: len(words) * 2 // 3]) + "."
    if kind == "ellipsis" and len(words) > 10:
        return " ".join(words[:4] + ["..."] + words[-5:])
    swaps = {"shall": "must", "may": "can", "is": "was", "the": "a", "not": "never", "because": "since"}
    return " ".join(swaps.get(w, w) if rng.random() < 0.5 else w for w in words)


def harvey_answer(item: Item, rng: random.Random, rate: float) -> Any:
    reference = item["reference_answer"]["passages"]
    source = item["messages"][-1]["content"].split("\n\n")[1]
    others = [s for s in split_sentences(source) if s not in reference]
    quoted = []
    for passage in reference:
        roll = rng.random()
        if roll < rate * 0.45:
            continue  # missed
        quoted.append(paraphrase(passage, rng) if roll < rate else passage)
    if others and rng.random() < rate * 1.2:
        quoted.insert(rng.randrange(len(quoted) + 1), rng.choice(others))  # a passage that does not support it
    if len(quoted) > 1 and rng.random() < rate * 0.3:
        i = rng.randrange(len(quoted) - 1)
        quoted[i : i + 2] = [quoted[i] + " " + quoted[i + 1]]  # two passages merged into one
    return {"passages": quoted}


def split_sentences(text: str) -> list[str]:
    out, start = [], 0
    for i, ch in enumerate(text):
        abbreviation = text[max(0, i - 3) : i + 1].endswith(("v.", "Inc.", "Co.", "Ct.", "No."))
        if ch in ".!?" and (i + 1 == len(text) or text[i + 1] == " ") and not abbreviation:
            out.append(text[start : i + 1].strip())
            start = i + 1
    tail = text[start:].strip()
    return out + ([tail] if tail else [])


# ------------------------------------------------------------------ milo

TYPE_SWAPS = {"school": "other", "medical": "other", "sports": "social", "arts": "school", "social": "other",
              "household": "other", "travel": "other", "other": "social", "work": "other"}


def shift_date(date: str, days: int) -> str:
    import datetime as dt

    return (dt.date.fromisoformat(date) + dt.timedelta(days=days)).isoformat()


def milo_answer(item: Item, rng: random.Random, rate: float) -> Any:
    out = []
    for ref in item["reference_answer"]["events"]:
        e = dict(ref)
        if rng.random() < rate * 0.4:
            continue  # missed
        if rng.random() < rate * 0.5:
            e["date"] = shift_date(e["date"], rng.choice([-1, 1, 7]))  # "next Tuesday" read as a week later
        if e["start_time"] and rng.random() < rate * 0.5:
            h, m = e["start_time"].split(":")
            e["start_time"] = f"{int(h) % 12:02d}:{m}"  # pm read as am
        if rng.random() < rate * 0.6:
            e["type"] = TYPE_SWAPS[e["type"]]
        if rng.random() < rate * 0.6:
            e["conflict"] = not e["conflict"]
        out.append(e)
        if rng.random() < rate * 0.35:
            out.append(dict(e, title=e["title"].split(" (")[0]))  # the same event listed twice
    return {"events": out}


# ------------------------------------------------------------------ writing

CASES: dict[str, Mistaker] = {"chipstack": chipstack_answer, "harvey": harvey_answer, "milo": milo_answer}


def broken(answer: Any, rng: random.Random) -> str:
    body = json.dumps(answer, indent=2)
    return rng.choice([f"Here is the answer:\n```json\n{body}\n```", f"{body}\n\nLet me know if you need anything else."])


def output_text(case: str, item: Item, model: str, epoch: int) -> str:
    rng = random.Random(f"{case}/{model}/{item['id']}/{epoch}")
    rate = RATES[model][item["difficulty"]] * (TUNED_SCALE[case] if model == "tuned" else 1.0)
    answer = CASES[case](item, rng, rate)
    if rng.random() < BROKEN[model]:
        return broken(answer, rng)
    return json.dumps(answer, ensure_ascii=False)


def recordings(case: str) -> dict[str, str]:
    """File name -> JSONL text, for both models."""
    path = ROOT / case / "items.jsonl"
    items = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    files = {}
    for model in RATES:
        lines = [json.dumps({"item_id": it["id"], "epoch": epoch, "output_text": output_text(case, it, model, epoch)},
                            ensure_ascii=False)
                 for epoch in EPOCHS for it in items]
        files[f"{model}.jsonl"] = "\n".join(lines) + "\n"
    return files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when a committed recording is out of date")
    parser.add_argument("cases", nargs="*", default=list(CASES), help="cases to write (default: all)")
    args = parser.parse_args(argv)
    from generated_files import write_or_check

    files = {ROOT / case / "recordings" / name: text for case in args.cases for name, text in recordings(case).items()}
    return write_or_check(files, args.check, "scripts/make_recordings.py")


if __name__ == "__main__":
    sys.exit(main())
