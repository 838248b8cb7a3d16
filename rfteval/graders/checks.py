"""Static checks of a grader against a dataset, before any money is spent.

A template naming a field that no item has (`{{ item.answer }}` where the items hold `reference_answer`) would
otherwise validate, then grade every record as an `invalid_variable_error` scoring 0: a silently failed run.
These checks read every template of a grader config (any string field holding `{{ }}`, sub-graders included)
and resolve each `item.*` path on every item, and each `sample.*` path against the fields a sample has.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel

from rfteval.errors import InputError
from rfteval.graders.template import TemplateError, compile_template, lookup, parse_path

if TYPE_CHECKING:
    from rfteval.data.dataset import Dataset, Item
    from rfteval.data.json_types import JSONInput, JSONMapping
    from rfteval.graders.base import GraderConfig

# What OpenAI's sample namespace holds (graders guide, "Templating"). `output_json` is there only when the job
# sets a response_format; `choices` and `output_audio` are what the API would send and rfteval fills when it can.
SAMPLE_FIELDS = ("output_text", "output_json", "output_tools", "choices", "output_audio")
NOT_TEMPLATES = frozenset({"source", "calculate_output"})  # python code and the multi formula are not templates


def template_strings(config: GraderConfig | JSONInput, where: str = "") -> Iterator[tuple[str, str]]:
    """(field path, template text) for every templated string in a grader config, sub-graders included; or in
    JSON holding templates (readiness probes pass a judge prompt's messages)."""
    data = config.model_dump() if isinstance(config, BaseModel) else config
    yield from _walk(data, where)


def _walk(value: JSONInput, where: str) -> Iterator[tuple[str, str]]:
    if isinstance(value, str):
        if "{{" in value:
            yield where, value
    elif isinstance(value, dict):
        for key, sub in value.items():
            if key in NOT_TEMPLATES:
                continue
            yield from _walk(sub, f"{where}.{key}" if where else str(key))
    elif isinstance(value, list):
        for i, sub in enumerate(value):
            yield from _walk(sub, f"{where}[{i}]")


def template_paths(config: GraderConfig | JSONInput) -> list[tuple[str, str, str, tuple[str | int, ...]]]:
    """(field, path text, namespace, keys) of every placeholder in the config, in order."""
    out = []
    for field, text in template_strings(config):
        for path in compile_template(text).paths:
            namespace, keys = parse_path(path)
            out.append((field, path, namespace, keys))
    return out


def check_sample_paths(config: GraderConfig, source: str | Path | None = None) -> list[InputError]:
    """Every `sample.*` path must start with a field a sample has."""
    errors = []
    for field, path, namespace, keys in template_paths(config):
        if namespace != "sample":
            continue
        if not keys:
            errors.append(InputError(f"{{{{ {path} }}}} names the whole sample; name a field "
                                     f"({', '.join(SAMPLE_FIELDS)})", source, field=field))
        elif keys[0] not in SAMPLE_FIELDS:
            errors.append(InputError(f"{{{{ {path} }}}}: a sample has no field {keys[0]!r} (it has "
                                     f"{', '.join(SAMPLE_FIELDS)})", source, field=field))
    return errors


def reads_output_json(config: GraderConfig) -> bool:
    """Whether the grader reads `sample.output_json`: a template path, or python source that names it."""
    if any(ns == "sample" and keys[:1] == ("output_json",) for _, _, ns, keys in template_paths(config)):
        return True
    return any("output_json" in str(getattr(c, "source", "") or "") for c in _configs(config))


def _configs(config: GraderConfig) -> Iterator[GraderConfig]:
    yield config
    for sub in (getattr(config, "graders", None) or {}).values():
        yield from _configs(sub)


def output_json_warning(config: GraderConfig, has_response_format: bool) -> str | None:
    """The one-line warning when a job without response_format has a grader reading output_json: OpenAI fills
    output_json only when the job sets one, so rfteval grades it as OpenAI would, with output_json null."""
    if has_response_format or not reads_output_json(config):
        return None
    return ("the grader reads sample.output_json, but this fine-tuning job sets no response_format: OpenAI then "
            "leaves output_json empty, and so does rfteval (every such read fails as it would when uploaded)")


def check_item_paths(config: GraderConfig, items: Iterable[Item | JSONMapping], dataset: str | Path | None = None,
                     limit: int = 50) -> list[InputError]:
    """Every `item.*` path resolved on every item: one error per failing (item, path), `FILE:LINE: field: why`.

    Stops after `limit` errors (the count of the rest is in the last message), so a dataset where every item
    lacks the field gives a readable list, not thousands of lines.
    """
    paths = [(field, path, keys) for field, path, namespace, keys in template_paths(config) if namespace == "item"]
    errors: list[InputError] = []
    more = 0
    for item in items:
        data = item if isinstance(item, Mapping) else item.data  # an Item, or an item's data itself
        line = None if isinstance(item, Mapping) else item.line
        for field, path, keys in paths:
            if not keys:
                problem = "names the whole item; name a field"
            else:
                try:
                    lookup(data, path, keys)
                    continue
                except TemplateError as exc:
                    problem = str(exc).split(": ", 1)[-1]
            if len(errors) < limit:
                errors.append(InputError(f"{{{{ {path} }}}} (grader {field}): {problem}", dataset, line,
                                         f"item {getattr(item, 'id', '?')}"))
            else:
                more += 1
    if more:
        last = errors[-1]
        errors[-1] = InputError(f"{last.message} (and {more} more)", last.file, last.line, last.field)
    return errors


def preflight(config: GraderConfig, dataset: Dataset, grader_source: str | Path | None = None,
              limit: int = 50) -> list[InputError]:
    """Every static problem of `config` against `dataset` (its items' paths and the sample's fields), before any
    model call: what `validate grader --dataset`, `grade` and `run` check first."""
    return check_sample_paths(config, grader_source) + check_item_paths(config, dataset.items, dataset.path, limit)


def preflight_stream(config: GraderConfig, dataset_path: str | Path, grader_source: str | Path | None = None,
                     limit: int = 50) -> list[InputError]:
    """preflight over a dataset file read one item at a time (a run's dataset may be large)."""
    from rfteval.data.dataset import iter_items

    items = iter_items(dataset_path, skip_invalid=True, check_duplicates=False)
    return check_sample_paths(config, grader_source) + check_item_paths(config, items, dataset_path, limit)


def python_access_paths(source: str) -> tuple[list[tuple[str, ...]], list[tuple[str, ...]]]:
    """The key paths a python grader reads from sample and from item, e.g. ("output_json", "predicted").

    Follows `x["k"]`, `x.get("k")`, `(x or {})` and simple aliases (`p = sample["output_json"]`); maximal paths only.
    """
    tree = ast.parse(source)
    names = {"sample": "sample", "item": "item"}
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == "grade" and len(node.args.args) >= 2:
            names = {node.args.args[0].arg: "sample", node.args.args[1].arg: "item"}
    aliases: dict[str, tuple[str, ...]] = {}

    def chain(node: ast.AST) -> tuple[str, ...] | None:
        if isinstance(node, ast.Name):
            return (names[node.id],) if node.id in names else aliases.get(node.id)
        if isinstance(node, ast.Subscript):
            base = chain(node.value)
            key = node.slice
            if base and isinstance(key, ast.Constant) and isinstance(key.value, str):
                return base + (key.value,)
            return None
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
                and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            base = chain(node.func.value)
            return base + (node.args[0].value,) if base else None
        if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or):
            return chain(node.values[0])
        return None

    assigns = sorted((n for n in ast.walk(tree) if isinstance(n, ast.Assign)), key=lambda n: n.lineno)
    for _ in range(2):  # aliases of aliases
        for a in assigns:
            if len(a.targets) == 1 and isinstance(a.targets[0], ast.Name) and a.targets[0].id not in names:
                c = chain(a.value)
                if c and len(c) > 1:
                    aliases[a.targets[0].id] = c
    found = {c for n in ast.walk(tree) if (c := chain(n)) and len(c) > 1}
    maximal = sorted(p for p in found if not any(q != p and q[: len(p)] == p for q in found))
    return [p[1:] for p in maximal if p[0] == "sample"], [p[1:] for p in maximal if p[0] == "item"]


def reference_fields(config: GraderConfig) -> frozenset[str] | None:
    """The top-level item fields a grader reads (its templates' `item.*` paths and its python source's
    `item[...]` / `item.get(...)` reads, sub-graders included), but the line's own prompt (messages, tools):
    where a grader finds its reference. None (not known) when a python grader in which no read is followed hands
    `item` on whole (to a helper whose parameter has another name, a loop) or reads it with a computed key:
    naming its lines as holding no reference would be a false alarm on a sound grader."""
    from rfteval.data.dataset import RESERVED_KEYS

    found = {str(keys[0]) for _, _, ns, keys in template_paths(config) if ns == "item" and keys}
    for c in _configs(config):
        source = c.python_source() if c.type == "python" else None
        if source:
            try:
                reads = {p[0] for p in python_access_paths(source)[1] if p}
                if not reads and item_escapes(source):
                    return None
            except SyntaxError:
                return None
            found |= reads
    return frozenset(found - RESERVED_KEYS)


def item_escapes(source: str) -> bool:
    """Whether `grade`'s item parameter is used other than as `item["k"]` or `item.get("k")` (passed to a helper,
    iterated, indexed by a variable, aliased): then which fields it reads is not known."""
    tree = ast.parse(source)
    defs = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "grade"]
    if not defs:
        return True
    params = defs[-1].args.posonlyargs + defs[-1].args.args
    if len(params) < 2:
        return True
    name = params[1].arg
    followed: set[int] = set()
    for node in ast.walk(defs[-1]):
        if (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == name
                and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str)):
            followed.add(id(node.value))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
              and isinstance(node.func.value, ast.Name) and node.func.value.id == name and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            followed.add(id(node.func.value))
    return any(isinstance(n, ast.Name) and n.id == name and id(n) not in followed for n in ast.walk(defs[-1])
               if not (isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)))
