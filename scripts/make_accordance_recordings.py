#!/usr/bin/env python3
"""Write illustrative base/tuned tax analyses for the Accordance example (datasets/accordance/recordings/).

These are NOT outputs of a real model. Each analysis is assembled from the item's reference analysis, with
the kinds of mistakes a junior associate (or a weak model) makes: a wrong limit or year's figure, a rule
misapplied and the conclusion that follows from it, a step left out, padding, an invented assumption, no note
on the missing fact. The "base" model makes them more often than the "tuned" one. They exist so the
score_model example (graders/accordance.json) runs without an API key. Deterministic: every choice comes from
a random generator seeded by (model, item, epoch).

    python scripts/make_accordance_recordings.py            write datasets/accordance/recordings/{base,tuned}.jsonl
    python scripts/make_accordance_recordings.py --check    exit 1 when a committed recording differs
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parents[1] / "datasets" / "accordance"
EPOCHS = (1, 2, 3)
# Chance that each known mistake of an item is made, by difficulty; the tuned model makes fewer.
RATES = {
    "base": {"easy": 0.25, "medium": 0.35, "hard": 0.5},
    "tuned": {"easy": 0.06, "medium": 0.1, "hard": 0.18},
}
STYLE = {  # chance of: a sentence silently left out, padding, an invented assumption, the missing-fact note
    "base": {"omit": 0.12, "pad": 0.4, "invent": 0.2, "missing_fact": 0.3},
    "tuned": {"omit": 0.03, "pad": 0.05, "invent": 0.02, "missing_fact": 0.8},
}

# Known mistakes per item: {sentence index of the reference analysis: replacement, or None to leave it out}.
# One mistake can change several sentences, because a wrong rule carries into the amounts and the conclusion.
MISTAKES: dict[str, list[dict[int, str | None]]] = {
    "ac-001": [
        {2: "The exclusion is limited to $250,000 for the sale of a residence.",
         3: "Taxable gain is $590,000 - $250,000 = $340,000, long-term capital gain because the home was held more "
            "than one year."},
        {0: "Amount realized is $1,050,000; adjusted basis is $400,000 + $30,000 improvements = $430,000; realized "
            "gain $620,000.",
         3: "Taxable gain is $620,000 - $500,000 = $120,000, long-term capital gain."},
        {4: "Because the home was their principal residence, the sale does not need to be reported."},
    ],
    "ac-002": [
        {1: None,
         2: "The $8,000 loss is a short-term capital loss that she can deduct in 2025, subject to the $3,000 limit "
            "against ordinary income.",
         3: "Her basis in the new shares is their cost, $12,500."},
        {1: "Under IRC 1091 a loss is disallowed when substantially identical stock is bought within 60 days after "
            "the sale."},
        {3: "The disallowed loss is added to the basis of the replacement shares, giving a basis of $12,500 + "
            "$8,000 = $20,500."},
    ],
    "ac-003": [
        {1: "Daniel deducts the full $20,000 net capital loss against his wages in 2025.", 2: None},
        {2: "The remaining $17,000 carries forward for up to five years."},
        {3: "Crypto losses are ordinary losses, so they are reported on Schedule 1."},
    ],
    "ac-004": [
        {0: "The annual gift tax exclusion is $18,000 per donee.",
         1: "The $60,000 gift to the daughter exceeds it by $42,000, which is a taxable gift."},
        {4: "Gift tax of 40% is due on the $41,000 taxable gift, or $16,400, payable with Form 709."},
        {2: "The $15,000 to the grandson is excluded as tuition under IRC 2503(e)."},
    ],
    "ac-005": [
        {2: None, 3: "Kevin actively participates, so he deducts the full $22,000 loss against his wages in 2025."},
        {1: None, 2: None,
         3: "Because Kevin has no passive income, the entire $22,000 loss is suspended and carried forward."},
        {4: None},
    ],
    "ac-006": [
        {0: "Aisha uses her room regularly and exclusively, so she can deduct a home office as well, at $5 x 200 = "
            "$1,000."},
        {2: "Under the simplified method he deducts $3 per square foot: 150 x $3 = $450, on Schedule C."},
        {3: None},
    ],
    "ac-007": [
        {3: "Because she received cash, the exchange fails and Carla recognizes the full $300,000 gain.",
         4: "Her basis in the warehouse is its $650,000 value."},
        {1: "Identification within 30 days met the deadline, but acquisition must follow within 90 days, so the "
            "120-day acquisition is late and the exchange is taxable."},
        {4: "Her basis in the warehouse is the old basis of $400,000 plus the $50,000 gain recognized, or $450,000."},
    ],
    "ac-008": [
        {0: "For 2025 the HSA contribution limit is $4,300 (IRC 223), plus a $1,000 catch-up at 55, so Luis's limit "
            "is $5,300.",
         1: "He contributed $7,000 + $3,000 = $10,000, which is $4,700 too much."},
        {0: "For 2025 the HSA contribution limit for family HDHP coverage is $8,550 (IRC 223).",
         1: "He contributed $7,000 + $3,000 = $10,000, which is $1,450 too much."},
        {2: "The excess is subject to a 10% additional tax when it is withdrawn.",
         3: "He should leave the excess in the account and apply it to next year's limit."},
    ],
    "ac-009": [
        {0: "An S corporation owner may choose to take profits as distributions, which are not subject to payroll "
            "taxes.",
         1: None,
         2: "Jordan's approach is generally acceptable, although a modest salary could reduce audit risk."},
        {2: "Jordan should pay some salary, for example $40,000, and take the rest as distributions."},
        {3: None},
    ],
    "ac-010": [
        {1: None, 2: "Her MAGI is below the limit, so the full $7,000 is deductible.", 3: None},
        {1: "Because Sophie is an active participant in her employer's 401(k), her deduction phases out between "
            "$73,000 and $83,000 of MAGI in 2024.",
         2: "Her MAGI of $82,000 is near the top of the range, so her deduction limit is $7,000 x ($83,000 - "
            "$82,000) / $10,000 = $700."},
        {3: "The remaining $3,500 is simply not deductible."},
    ],
    "ac-011": [
        {1: "Walter's $20,000 counts toward his $30,000 required minimum distribution but is included in his income.",
         3: "He can deduct the $20,000 as a charitable contribution if he itemizes."},
        {2: "The $20,000 does not count toward his RMD, so he must still withdraw $20,000 more; the $10,000 is "
            "taxable."},
        {0: "A qualified charitable distribution is a distribution from a traditional IRA paid directly to a charity "
            "by an owner who is at least 73."},
    ],
}

# The developer message asks for the missing fact that would change the answer.
MISSING_FACT = {
    "ac-001": "whether either spouse rented the home out or used part of it for business, which could make part of "
              "the gain ineligible or subject to depreciation recapture",
    "ac-002": "whether she bought XYZ shares in an IRA within the window, which would make the loss permanently "
              "disallowed",
    "ac-003": "whether the crypto trading rises to a business, which could change the character of the loss",
    "ac-004": "whether Helen made taxable gifts in earlier years, which would reduce the exemption she has left",
    "ac-005": "whether Kevin owns at least 10% of the property, which active participation requires",
    "ac-006": "Ben's gross income from the photography business, which caps the deduction",
    "ac-007": "the depreciation taken on the apartment building, which affects recapture on the boot",
    "ac-008": "whether part of the payroll contributions came from his employer, which count toward the same limit",
    "ac-009": "how distributions were treated in earlier years, which may also be open to recharacterization",
    "ac-010": "whether she has pre-tax balances in other traditional IRAs, which matters for a later conversion",
    "ac-011": "whether the custodian actually paid the church directly in 2025, which the exclusion requires",
}

PADDING = [
    "Tax rules are complex and change often, so this analysis should be reviewed before it is relied on.",
    "As always, the client should consult a qualified tax professional before filing.",
    "There are many factors to consider in any tax question, and each situation is unique.",
]
INVENTED = [
    "I assume the taxpayer lives in California, so state tax will also apply at 9.3%.",
    "Assuming the taxpayer also has $5,000 of capital loss carryovers from earlier years, these reduce the result.",
    "I assume the taxpayer is subject to the alternative minimum tax this year.",
]
_ABBREVIATIONS = ("Rev.", "Proc.", "Rul.", "v.", "Cir.", "No.", "e.g.", "i.e.")


def sentences(text: str) -> list[str]:
    """The reference analysis split into sentences (not after 'Rev.', 'v.', 'Cir.' and the like)."""
    out, start = [], 0
    for m in re.finditer(r"[.!?](?=\s+[A-Z($])", text):
        if text[: m.end()].endswith(_ABBREVIATIONS):
            continue
        out.append(text[start : m.end()].strip())
        start = m.end()
    tail = text[start:].strip()
    return out + ([tail] if tail else [])


def analysis(item: dict[str, Any], model: str, epoch: int) -> str:
    """One illustrative analysis of `item` by `model` (base or tuned), epoch `epoch`."""
    rng = random.Random(f"accordance/{model}/{item['id']}/{epoch}")
    rate = RATES[model][item["difficulty"]]
    style = STYLE[model]
    body: list[str | None] = list(sentences(item["reference_answer"]))
    for mistake in MISTAKES[item["id"]]:
        if rng.random() < rate:
            for index, replacement in mistake.items():
                body[index] = replacement
    kept = [s for s in body if s is not None and rng.random() >= style["omit"]]
    if rng.random() < style["invent"]:
        kept.insert(rng.randrange(1, len(kept) + 1) if kept else 0, rng.choice(INVENTED))
    if not kept:
        kept = ["I cannot tell from these facts."]
    if rng.random() < style["missing_fact"]:
        kept.append(f"The missing fact that would change this answer: {MISSING_FACT[item['id']]}.")
    layout = rng.choice(["paragraph", "paragraphs", "conclusion"])
    if layout == "paragraph" or len(kept) < 3:
        text = " ".join(kept)
    elif layout == "paragraphs":
        cut = rng.randrange(1, len(kept))
        text = " ".join(kept[:cut]) + "\n\n" + " ".join(kept[cut:])
    else:
        text = "Analysis: " + " ".join(kept[:-1]) + "\n\nConclusion: " + kept[-1]
    if rng.random() < style["pad"]:
        pad = rng.choice(PADDING)
        text = f"{pad} {text}" if rng.random() < 0.5 else f"{text}\n\n{pad}"
    return text


def recordings() -> dict[str, str]:
    """File name -> JSONL text, for both models (no `model` key: any replay model label reads them)."""
    items = [json.loads(line) for line in (DATA / "items.jsonl").read_text(encoding="utf-8").splitlines()
             if line.strip()]
    for it in items:
        n = len(sentences(it["reference_answer"]))
        bad = [i for m in MISTAKES[it["id"]] for i in m if not 0 <= i < n]
        if bad:
            raise SystemExit(f"{it['id']}: mistakes name sentences {bad}, the reference has {n}")
    files = {}
    for model in RATES:
        rows = [{"item_id": it["id"], "epoch": epoch, "output_text": analysis(it, model, epoch)}
                for epoch in EPOCHS for it in items]
        files[f"{model}.jsonl"] = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    return files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when a committed recording is out of date")
    args = parser.parse_args(argv)
    from generated_files import write_or_check

    files = {DATA / "recordings" / name: text for name, text in recordings().items()}
    return write_or_check(files, args.check, "scripts/make_accordance_recordings.py")


if __name__ == "__main__":
    sys.exit(main())
