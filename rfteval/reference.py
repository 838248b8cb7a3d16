"""A grader's reference answers as outputs: does the grader give the ideal answer its maximum?"""

from __future__ import annotations

import json
import re
from typing import Any

from rfteval.dataset import Dataset
from rfteval.graders.base import GradeOptions, GraderConfig
from rfteval.graders.engine import GradingEngine
from rfteval.graders.template import TemplateError, compile_template
from rfteval.sample import make_sample

# `sample["output_json"]["key"]`, `sample.get('output_json')['key']`, `(sample.get('output_json') or {}).get('key')`
_PY_OUTPUT_JSON_KEY = re.compile(
    r"""output_json['"]\s*\]?\s*\)?\s*(?:or\s*\{\}\s*\)?)?\s*(?:\[\s*['"](\w+)['"]|\.get\(\s*['"](\w+)['"])""")
_TEMPLATE_OUTPUT_JSON_KEY = re.compile(r"\{\{\s*sample\.output_json\.(\w+)")


def _configs(config: GraderConfig) -> list[GraderConfig]:
    subs = getattr(config, "graders", None)
    return [config] if not isinstance(subs, dict) else [config, *subs.values()]


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, (list, tuple)):
        return [s for v in value for s in _strings(v)]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if hasattr(value, "model_dump"):
        return _strings(value.model_dump())
    return []


def output_json_keys(config: GraderConfig) -> set[str]:
    """Top-level keys of sample.output_json that the grader reads (python source or templates)."""
    keys: set[str] = set()
    for cfg in _configs(config):
        source = getattr(cfg, "source", None)
        if isinstance(source, str):
            keys |= {a or b for a, b in _PY_OUTPUT_JSON_KEY.findall(source)}
        for text in _strings(cfg.model_dump(exclude={"source"})):
            keys |= set(_TEMPLATE_OUTPUT_JSON_KEY.findall(text))
    return keys


def reads_output_json(config: GraderConfig) -> bool:
    return any("output_json" in s for cfg in _configs(config) for s in _strings(cfg.model_dump()))


def max_score(config: GraderConfig) -> float:
    rng = getattr(config, "range", None)
    return float(rng[1]) if rng else 1.0


def reference_output(item: dict[str, Any], config: GraderConfig, template: str | None = None) -> str | None:
    """The item's ideal output as text, or None when its reference cannot stand for an output.

    Order: an explicit template; the item's own `reference_output` field; the reference answer shaped as the grader
    reads it (wrapped in the one output_json key the grader reads, when it is not already that shape).
    """
    if template is not None:
        try:
            return compile_template(template).render(item, {})
        except TemplateError:
            return None
    if isinstance(item.get("reference_output"), str):
        return item["reference_output"]
    if "reference_answer" not in item:
        return None
    ref = item["reference_answer"]
    if not reads_output_json(config):
        return ref if isinstance(ref, str) else None
    keys = output_json_keys(config)
    if len(keys) == 1:
        (key,) = keys
        if not (isinstance(ref, dict) and key in ref):
            ref = {key: ref}
    return ref if isinstance(ref, str) else json.dumps(ref, ensure_ascii=False)


def reference_check(dataset: Dataset, config: GraderConfig, options: GradeOptions | None = None,
                    template: str | None = None) -> dict[str, Any]:
    """Grade every item's reference as its output; the share at the grader's maximum, and the ones below."""
    top = max_score(config)
    pairs, ids = [], []
    for item in dataset:
        text = reference_output(item.data, config, template)
        if text is not None:
            pairs.append((make_sample(text), item.data))
            ids.append(item.id)
    with GradingEngine(config, options) as engine:
        results = engine.grade_batch(pairs)
    below = [(i, r) for i, r in zip(ids, results) if r.error or r.score < top - 1e-9]
    at_max = len(ids) - len(below)
    summary = {"items": len(dataset), "checked": len(ids), "at_max": at_max, "max": top,
               "share_at_max": at_max / len(ids) if ids else None,
               "below_max": [{"item_id": i, "score": r.score, "error": r.error.message if r.error else None}
                             for i, r in below]}
    lines = [f"reference answers graded as outputs: {len(ids)} of {len(dataset)} items "
             f"({len(dataset) - len(ids)} have no reference that can stand for an output)"]
    if ids:
        lines.append(f"at the maximum ({top:g}): {at_max}/{len(ids)} = {at_max / len(ids):.1%}")
    for i, r in below[:10]:
        why = f"error {r.error.type}: {r.error.message[:120]}" if r.error else f"score {r.score:.4f}"
        lines.append(f"  below the maximum: item {i}: {why}")
    if len(below) > 10:
        lines.append(f"  ... and {len(below) - 10} more")
    return {"summary": summary, "text": "\n".join(lines)}


def describe_grader(config: GraderConfig) -> list[str]:
    """A few lines saying what a grader is, for `validate grader`."""
    lines = [f"grader {config.name!r}: type {config.type}, valid"]
    subs = getattr(config, "graders", None)
    if isinstance(subs, dict):
        for key, sub in subs.items():
            lines.append(f"  {key}: {sub.type} {sub.name!r}")
        lines.append(f"  calculate_output: {getattr(config, 'calculate_output', '')}")
    keys = output_json_keys(config)
    if keys:
        lines.append(f"reads sample.output_json keys: {', '.join(sorted(keys))}")
    return lines
