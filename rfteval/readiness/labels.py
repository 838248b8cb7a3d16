"""Label-like data (statistics.md §3.3(e)): how skewed the reference labels and the model's answers are, and what
always giving the majority label scores; and the grader-facing sample of a stored record, which both this and the
determinism check grade."""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from rfteval.graders.base import walk
from rfteval.readiness.report import LabelSkew

if TYPE_CHECKING:
    from rfteval.data.json_types import JSONInput, JSONObject, JSONValue
    from rfteval.data.sample import Sample
    from rfteval.graders.base import GraderConfig
    from rfteval.graders.engine import GradingEngine


def _single_path(template: str, namespace: str) -> str | None:
    """The path of a template that is exactly one `{{ namespace.… }}` placeholder."""
    import re

    m = re.fullmatch(r"\s*\{\{\s*(" + namespace + r"\.[^}]*?)\s*\}\}\s*", template or "")
    return m.group(1) if m else None


def label_paths(config: GraderConfig | None) -> tuple[str, str]:
    """Where answers and references are read: the first string_check/text_similarity pair, else the defaults."""
    for g in walk(config) if config is not None else ():
        templates = g.compared_templates()
        if templates is not None:
            answer, ref = _single_path(templates[0], "sample"), _single_path(templates[1], "item")
            if answer and ref:
                return answer, ref
    return "sample.output_text", "item.reference_answer"


def _read_path(root: JSONInput, path: str) -> object:
    """The value at a template path (`item.reference_answer`, `sample.output_json.label`), None when absent."""
    from rfteval.graders.template import TemplateError, lookup, parse_path

    _, keys = parse_path(path)
    try:
        return lookup(root, path, keys)
    except TemplateError:
        return None


def _as_label(value: object) -> str | None:
    if isinstance(value, bool) or value is None:
        return None if value is None else str(value).lower()
    if isinstance(value, (str, int, float)):
        text = str(value).strip()
        return text or None
    return None


def is_label_like(values: Sequence[str | None]) -> bool:
    """Short scalar values with few distinct ones: a classification answer rather than free text."""
    if len(values) < 2 or any(v is None or len(v) > 64 for v in values):
        return False
    distinct = len(set(values))
    return distinct <= min(20, max(2, len(values) // 2))


def sample_from_record(record: Mapping[str, object]) -> Sample:
    """The grader-facing sample of a stored record (Parquet keeps output_json and output_tools as JSON text)."""
    from rfteval.data.sample import make_sample

    def decoded(v: object) -> JSONValue:
        if isinstance(v, str):
            try:
                return json.loads(v)
            except ValueError:
                return None
        if isinstance(v, float) and math.isnan(v):
            return None
        if v is None or isinstance(v, (bool, int, float, list, dict)):
            return v
        item = getattr(v, "item", None)  # a numpy scalar (a frame's column of numbers): its Python value
        return decoded(item()) if callable(item) else None

    tools = decoded(record.get("output_tools"))
    text = record.get("output_text")
    text = text if isinstance(text, str) else ""
    out_json = decoded(record.get("output_json")) if "output_json" in record else ...
    if out_json is None:
        out_json = ...  # let make_sample parse the text, as the runner did
    return make_sample(text, tools if isinstance(tools, list) else None, output_json=out_json)


def label_skew(
    records: Sequence[Mapping[str, object]], items: Mapping[str, JSONObject] | None, config: GraderConfig | None,
    item_means: Mapping[str, float],
) -> LabelSkew | None:
    """Majority-label share, chance, per-label mean score, and how often the model gives one answer."""
    answer_path, ref_path = label_paths(config)
    skew = LabelSkew(reference_path=ref_path, answer_path=answer_path)
    found = False
    if items:
        refs = {iid: _as_label(_read_path(data, ref_path)) for iid, data in items.items()}
        values = [refs[i] for i in item_means if i in refs]
        if is_label_like(values):
            found = True
            counts = Counter(values)
            label, top = counts.most_common(1)[0]
            by_label: dict[str, list[float]] = {}
            for iid, mean in item_means.items():
                ref = refs.get(iid)
                if ref is not None:
                    by_label.setdefault(ref, []).append(mean)
            skew.reference_counts = {str(k): n for k, n in counts.most_common()}
            skew.majority_label, skew.majority_share = label, top / len(values)
            skew.chance = 1 / len(counts)
            skew.per_label_mean = {k: sum(v) / len(v) for k, v in sorted(by_label.items())}
            skew.constant_answer_score = skew.majority_share
            skew.constant_answer_method = "estimated (exact match)"
    answers = []
    for rec in records:
        sample = sample_from_record(rec)
        answers.append(_as_label(_read_path(sample, answer_path)))
    if is_label_like(answers):
        found = True
        counts = Counter(answers)
        label, top = counts.most_common(1)[0]
        skew.answer_counts = {str(k): n for k, n in counts.most_common(20)}
        skew.answer_majority_label, skew.answer_majority_share = label, top / len(answers)
    return skew if found else None


def constant_answer_sample(answer_path: str, label: str) -> Sample:
    """A sample that gives `label` where the grader reads the answer."""
    from rfteval.data.sample import make_sample

    keys = answer_path.split(".")[1:]
    if keys and keys[0] == "output_json" and len(keys) > 1:
        obj: JSONValue = label
        for key in reversed(keys[1:]):
            obj = {key: obj}
        return make_sample(json.dumps(obj, ensure_ascii=False), output_json=obj)
    return make_sample(label)


def constant_answer_score(engine: GradingEngine, items: Mapping[str, JSONObject], answer_path: str,
                          label: str) -> tuple[float | None, dict[str, int]]:
    """The mean score the grader gives the same answer on every item (each item once), and its grading errors by
    type. The errors are left out of the mean: their 0 would read as "a constant answer does not pay"; when every
    grade is one, the score is None (not known)."""
    pairs = [(constant_answer_sample(answer_path, label), data) for data in items.values()]
    results = engine.grade_batch(pairs)
    scores = [r.score for r in results if r.error is None]
    errors = Counter(r.error.type for r in results if r.error is not None)
    if not results:
        return float("nan"), {}
    return (sum(scores) / len(scores) if scores else None), dict(errors)
