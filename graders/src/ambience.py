"""Ambience: code a clinical note in ICD-10-CM. Reward = set F1 with partial credit for the right category.

Written for rfteval as an illustration. Codes are compared after normalising case, spaces and dots
("e11.65" == "E1165"). A predicted code that matches no reference code exactly, but shares its
3-character category with a reference code left unmatched, earns PARTIAL credit (a right diagnosis
at the wrong specificity); each reference code gives credit once.
"""

import re
from collections import Counter

PARTIAL = 0.5
_NOISE = re.compile(r"[\s.]")


def normalise(code):
    return _NOISE.sub("", code).upper() if isinstance(code, str) else ""


def credit(predicted, reference):
    """Exact matches count 1, same-category matches PARTIAL, one-to-one; inputs are sets of normalised codes."""
    exact = predicted & reference
    left_pred = Counter(c[:3] for c in predicted - exact if len(c) >= 3)
    left_ref = Counter(c[:3] for c in reference - exact if len(c) >= 3)
    partial = sum(min(n, left_ref[cat]) for cat, n in left_pred.items())
    return len(exact) + PARTIAL * partial


def set_f1(predicted, reference):
    if not predicted or not reference:
        return 1.0 if predicted == reference else 0.0
    hits = credit(predicted, reference)
    precision, recall = hits / len(predicted), hits / len(reference)
    return 0.0 if hits == 0 else 2 * precision * recall / (precision + recall)


def grade(sample, item):
    ref = item["reference_answer"]["codes"]
    if not isinstance(ref, list) or not all(isinstance(c, str) and normalise(c) for c in ref):
        raise ValueError("item reference_answer.codes must be a list of ICD-10-CM code strings")
    parsed = isinstance(sample.get("output_json"), dict)
    codes = sample["output_json"].get("codes") if parsed else None
    if not isinstance(codes, list):
        return 0.0
    predicted = {normalise(c) for c in codes} - {""}
    return set_f1(predicted, {normalise(c) for c in ref})
