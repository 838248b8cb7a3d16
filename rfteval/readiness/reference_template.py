"""How a reference becomes an output: the reference template (a JSON value with {{item.…}} placeholders) inferred
from what the grader compares, its judge prompt or its python source, and filled from an item. The probes grade the
reference and its variants through it (probes.py, probe_outputs.py); the reference checks (reference.py) read its
paths.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, TypeVar

from rfteval.data.json_types import JSONInput, JSONMapping, JSONObject, JSONValue
from rfteval.graders.base import walk
from rfteval.graders.checks import python_access_paths
from rfteval.graders.template import TemplateError, lookup, parse_path, to_text

if TYPE_CHECKING:
    from rfteval.graders.base import GraderConfig

T = TypeVar("T")

TEXT_REFERENCE_FIELDS = ("reference_output", "ideal_output", "expected_output", "reference_text")
_LABEL_NAME = re.compile(r"label|class|categor|polic", re.IGNORECASE)
_SINGLE = re.compile(r"\s*\{\{\s*([^{}]*?)\s*\}\}\s*")
_ANY = re.compile(r"\{\{\s*([^{}]*?)\s*\}\}")


def _placeholder(keys: Sequence[str | int]) -> str:
    path = "item"
    for k in keys:
        path += f"[{k}]" if isinstance(k, int) else f".{k}" if re.fullmatch(r"[A-Za-z_]\w*", k) else f'["{k}"]'
    return "{{" + path + "}}"


def _set_path(root: JSONObject, keys: Sequence[str], value: JSONValue) -> None:
    node = root
    for k in keys[:-1]:
        child = node.setdefault(k, {})
        if not isinstance(child, dict):  # a value sits where the path needs an object: fail, as assigning into it did
            raise TypeError(f"{k!r} holds a {type(child).__name__}, not an object")
        node = child
    node[keys[-1]] = value


def python_label_constants(source: str) -> list[str]:
    """Module-level tuples/lists of strings named like labels (LABELS, CATEGORIES, POLICIES): every valid label."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    out: list[str] = []
    for node in tree.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and _LABEL_NAME.search(node.targets[0].id) and isinstance(node.value, (ast.Tuple, ast.List, ast.Set))
                and len(node.value.elts) >= 2
                and all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.value.elts)):
            out += [e.value for e in node.value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    return distinct(out)


def grader_labels(config: GraderConfig) -> list[str]:
    """Every label a grader knows of: label constants in the python sources it runs (sub-graders too)."""
    return distinct(x for c in walk(config) for x in python_label_constants(c.python_source() or ""))


def _from_python(source: str, first: JSONMapping) -> tuple[JSONValue, str]:
    try:
        sample_paths, item_paths = python_access_paths(source)
    except SyntaxError as exc:
        return None, f"the python source does not parse ({exc.msg})"
    json_paths = [p[1:] for p in sample_paths if p[0] == "output_json"]
    if json_paths:
        pairs: list[tuple[tuple[str, ...], tuple[str, ...]]] = []
        left_s, left_i = list(json_paths), list(item_paths)
        for sp in json_paths:
            match = [ip for ip in left_i if sp and ip and ip[-1] == sp[-1]]
            if len(match) == 1:
                pairs.append((sp, match[0]))
                left_s.remove(sp)
                left_i.remove(match[0])
        if len(left_s) == 1 and len(left_i) == 1:
            pairs.append((left_s[0], left_i[0]))
        if not pairs:
            return None, "cannot pair what the python source reads from output_json with the item's fields"
        if len(pairs) == 1 and not pairs[0][0]:
            return _placeholder(pairs[0][1]), "inferred from the python source"
        template: JSONObject = {}
        for sp, ip in pairs:
            if sp:
                _set_path(template, sp, _placeholder(ip))
        return template, "inferred from the python source"
    if any(p and p[0] == "output_text" for p in sample_paths):
        refs = [ip for ip in item_paths if ip and ip[0] == "reference_answer"] or item_paths
        if len(refs) == 1 and isinstance(_lookup_keys(first, refs[0]), str):
            return _placeholder(refs[0]), "inferred from the python source"
        for key in TEXT_REFERENCE_FIELDS:
            if isinstance(first.get(key), str):
                return _placeholder([key]), f"the item's {key} (the grader reads output_text)"
        return None, "the grader reads output_text and the item holds no text reference (use --reference-template)"
    return None, "cannot tell from the python source how an answer is read"


def _lookup_keys(root: JSONInput, keys: Sequence[str]) -> JSONInput:
    for k in keys:
        if not isinstance(root, dict) or k not in root:
            return None
        root = root[k]
    return root


def infer_reference_template(config: GraderConfig, items: Sequence[JSONMapping]) -> tuple[JSONValue, str]:
    """A JSON template ({{item.…}} placeholders) that turns an item's reference into the output the grader wants,
    and how it was found; (None, why) when it cannot be told."""
    first: JSONMapping = items[0] if items else {}
    source = config.python_source()
    if source is not None:
        return _from_python(source, first)
    text_ref: str | None = None
    json_refs: dict[tuple[str, ...], JSONValue] = {}
    how = "inferred from the grader's templates"
    for g in walk(config):
        templates = g.compared_templates()
        source = g.python_source()
        if templates is not None:
            answer, reference = templates
            m = _SINGLE.fullmatch(answer)
            if not m:
                continue
            _, keys = parse_path(m.group(1)) if m.group(1).startswith(("sample", "item")) else ("", ())
            if m.group(1).startswith("sample.output_text") and text_ref is None:
                text_ref = reference
            elif keys and keys[0] == "output_json" and len(keys) > 1:
                json_refs[tuple(str(k) for k in keys[1:])] = reference
        elif source is not None:
            tpl, why = _from_python(source, first)
            how = why if tpl is not None else how
            if isinstance(tpl, dict):
                for k, v in tpl.items():
                    json_refs.setdefault((k,), v)
            elif isinstance(tpl, str) and text_ref is None:
                text_ref = tpl
        elif g.judge_prompt() and "reference_answer" in first:
            paths = template_paths(g.judge_prompt())
            if any(p.startswith("sample.output_json") for p in paths) and isinstance(first["reference_answer"],
                                                                                        (dict, list)):
                return "{{item.reference_answer}}", "inferred from the judge prompt"
            if any(p.startswith("sample.output_text") for p in paths) and text_ref is None:
                text_ref = "{{item.reference_answer}}"
    if json_refs:
        template: JSONObject = {}
        for keys, ref in json_refs.items():
            _set_path(template, list(keys), ref)
        return template, how
    if text_ref is not None:
        return text_ref, how
    return None, "cannot tell how the grader reads an answer (use --reference-template)"


def json_at(item: JSONMapping, path: str, keys: tuple[str | int, ...]) -> JSONValue:
    """`lookup` inside an item: what it finds there is JSON, which the one isinstance says to the checker."""
    v = lookup(item, path, keys)
    if v is None or isinstance(v, (str, int, float, bool, list, dict)):
        return v
    raise TemplateError(path, f"holds a {type(v).__name__}, not a JSON value")


Transform = Callable[[JSONValue, str], JSONValue]  # (an item's value, its placeholder path) -> what to put there


def render_reference(template: JSONValue, item: JSONMapping, transform: Transform | None = None) -> JSONValue:
    """Fill a JSON template from an item: a string that is one placeholder keeps the value's type."""

    def value(path: str) -> JSONValue:
        ns, keys = parse_path(path)
        if ns != "item":
            raise TemplateError(path, "a reference template reads item.… only")
        v = json_at(item, path, keys)
        return transform(v, path) if transform else v

    if isinstance(template, str):
        m = _SINGLE.fullmatch(template)
        if m:
            return value(m.group(1))
        return _ANY.sub(lambda mm: to_text(value(mm.group(1))), template)
    if isinstance(template, list):
        return [render_reference(t, item, transform) for t in template]
    if isinstance(template, dict):
        return {k: render_reference(t, item, transform) for k, t in template.items()}
    return template


def template_paths(template: JSONInput) -> list[str]:
    """Every placeholder path in a JSON template."""
    if isinstance(template, str):
        return [m.group(1) for m in _ANY.finditer(template)]
    if isinstance(template, list):
        return [p for t in template for p in template_paths(t)]
    if isinstance(template, dict):
        return [p for t in template.values() for p in template_paths(t)]
    return []


def json_key(v: object) -> str:
    """A value as text that tells JSON values apart whatever their keys' order (what distinct and the probes compare)."""
    return json.dumps(v, sort_keys=True, ensure_ascii=False, default=str)


def distinct(values: Iterable[T], cap: int | None = None) -> list[T]:
    """The values without repeats (by json_key), in their order; at most `cap` of them."""
    seen: set[str] = set()
    out: list[T] = []
    for v in values:
        k = json_key(v)
        if k not in seen:
            seen.add(k)
            out.append(v)
            if cap and len(out) >= cap:
                break
    return out
