"""ChipStack: bind verification-IP parameters. Reward = F1 over the multiset of {name, value} pairs.

Written for rfteval; scores exactly as ChipStack's published grader wherever that one returns a number.
Where it would raise on a malformed *answer* (no "predicted", entries without name/value), this one
returns a low score instead: a model mistake is a low reward, not a grader error. A malformed *item*
still raises, because that is a bug in the dataset.
"""

from collections import Counter


def _pairs(entries, strict, where):
    """(name, value) keys of the entries; malformed ones become None (a wrong prediction) or raise."""
    keys = []
    for i, entry in enumerate(entries):
        key = None
        if isinstance(entry, dict) and "name" in entry and "value" in entry:
            key = (entry["name"], entry["value"])
            try:
                hash(key)
            except TypeError:
                key = None
        if key is None and strict:
            raise ValueError(f"{where}[{i}] must be an object with a name and a scalar value, got {entry!r:.80}")
        keys.append(key)
    return keys


def f1_score(predicted, expected):
    """Multiset F1: a pair predicted twice counts once unless the reference also lists it twice."""
    pred = Counter(predicted)
    exp = Counter(expected)
    hits = sum(min(n, exp[key]) for key, n in pred.items() if key is not None)
    precision = hits / len(predicted) if predicted else 0.0
    recall = hits / len(expected) if expected else 0.0
    if precision + recall == 0.0:
        return 0.0
    return 2 * precision * recall / (precision + recall)


def grade(sample, item):
    reference = item["reference_answer"]
    if not isinstance(reference, list):
        raise ValueError("item reference_answer must be a list of {name, value} objects")
    expected = _pairs(reference, True, "reference_answer")
    parsed = isinstance(sample.get("output_json"), dict)
    predicted = sample["output_json"].get("predicted") if parsed else None
    if not isinstance(predicted, list):
        return 0.0  # no parseable answer: nothing predicted
    return f1_score(_pairs(predicted, False, "predicted"), expected)
