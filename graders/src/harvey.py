"""Harvey: quote the passages of a legal source that support a proposition. Reward = fuzzy-match F1.

Written for rfteval; scores exactly as Harvey's published grader wherever that one returns a number.
Recall averages, over reference passages, the best rapidfuzz `fuzz.ratio` against any quoted passage;
precision averages the same over quoted passages. Where the published grader would raise on a malformed
answer, this one gives that part no credit; a malformed item raises (a dataset bug).
"""

from rapidfuzz import fuzz


def similarity(reference, quoted):
    """fuzz.ratio scaled to [0, 1]; a quoted value that rapidfuzz cannot compare matches nothing."""
    if reference == "" and quoted == "":
        return 1.0
    try:
        return fuzz.ratio(reference, quoted) / 100.0
    except Exception:
        return 0.0


def mean_best(scores):
    """Average of each row's best score; a row with no candidates scores 0."""
    bests = [max([0.0] + row) for row in scores]
    return sum(bests) / len(bests) if bests else 0.0


def _quoted(sample):
    parsed = isinstance(sample.get("output_json"), dict)
    passages = sample["output_json"].get("passages", []) if parsed else []
    # The published grader iterates whatever `passages` holds; a string or object iterates too.
    return list(passages) if isinstance(passages, (list, str, dict)) else []


def grade(sample, item):
    answer = item.get("reference_answer")
    reference = answer.get("passages") if isinstance(answer, dict) else None
    if not isinstance(reference, list) or not reference or not all(isinstance(p, str) for p in reference):
        raise ValueError("item reference_answer.passages must be a non-empty list of strings")
    quoted = _quoted(sample)
    table = [[similarity(ref, out) for out in quoted] for ref in reference]
    recall = mean_best(table)
    precision = mean_best([list(column) for column in zip(*table)]) if quoted else 0.0
    if precision + recall == 0:
        return 0.0
    return 2 * precision * recall / (precision + recall)
