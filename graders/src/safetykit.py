"""SafetyKit: label user content with the policies it violates. Reward = F1 over label sets.

Written for rfteval as an illustration. "none" is a label like any other: content that violates
nothing has the reference ["none"], and an empty answer counts as ["none"]. Labels are compared
case-insensitively; a label outside the policy list is simply a wrong label.
"""

LABELS = ("none", "spam", "harassment", "hate", "self_harm", "sexual", "violence", "fraud", "illegal_goods")


def label_set(labels):
    out = {x.strip().lower().replace(" ", "_").replace("-", "_") for x in labels if isinstance(x, str)}
    out.discard("")
    return out or {"none"}


def set_f1(predicted, reference):
    hits = len(predicted & reference)
    if hits == 0:
        return 0.0
    precision, recall = hits / len(predicted), hits / len(reference)
    return 2 * precision * recall / (precision + recall)


def grade(sample, item):
    ref = item["reference_answer"]["labels"]
    if not isinstance(ref, list) or not ref or not label_set(ref) <= set(LABELS):
        raise ValueError(f"item reference_answer.labels must be a non-empty list drawn from {LABELS}")
    parsed = isinstance(sample.get("output_json"), dict)
    labels = sample["output_json"].get("labels") if parsed else None
    if not isinstance(labels, list):
        return 0.0
    return set_f1(label_set(labels), label_set(ref))
