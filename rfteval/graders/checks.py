"""Static checks of a grader against a dataset, before any money is spent.

A template naming a field that no item has (`{{ item.answer }}` where the items hold `reference_answer`) would
otherwise validate, then grade every record as an `invalid_variable_error` scoring 0: a silently failed run.
These checks read every template of a grader config (any string field holding `{{ }}`, sub-graders included)
and resolve each `item.*` path on every item, and each `sample.*` path against the fields a sample has.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel

from rfteval.errors import InputError
from rfteval.graders.template import TemplateError, compile_template, lookup, parse_path
from rfteval.typos import closest

if TYPE_CHECKING:
    from rfteval.data.dataset import Dataset, Item
    from rfteval.data.json_types import JSONInput, JSONMapping
    from rfteval.graders.base import GraderConfig

# What OpenAI's sample namespace holds (graders guide, "Templating"). `output_json` is there only when the job
# sets a response_format; `choices` and `output_audio` are what the API would send and rfteval fills when it can.
SAMPLE_FIELDS = ("output_text", "output_json", "output_tools", "choices", "output_audio")
# rfteval's one extension of the sample: an agent run's trajectory (rfteval.data.rollout.rollout_sample), there only
# in a run with --tools; OpenAI's graders have no such field
ROLLOUT_FIELD = "rollout"
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


def check_sample_paths(config: GraderConfig, source: str | Path | None = None,
                       rollout: bool = False) -> list[InputError]:
    """Every `sample.*` path must start with a field a sample has: `sample.rollout` only in an agent run's samples
    (`rollout`)."""
    errors = []
    for field, path, namespace, keys in template_paths(config):
        if namespace != "sample":
            continue
        if keys and keys[0] == ROLLOUT_FIELD:
            if not rollout:
                errors.append(InputError(f"{{{{ {path} }}}}: sample.rollout is an agent run's trajectory, there only "
                                         "in `rfteval run --tools` (and `grade --outputs` of transcripts)", source,
                                         field=field))
            continue
        if not keys:
            errors.append(InputError(f"{{{{ {path} }}}} names the whole sample; name a field "
                                     f"({', '.join(SAMPLE_FIELDS)})", source, field=field))
        elif keys[0] not in SAMPLE_FIELDS:
            errors.append(InputError(f"{{{{ {path} }}}}: a sample has no field {keys[0]!r} (it has "
                                     f"{', '.join(SAMPLE_FIELDS)})", source, field=field))
    return errors


def reads_rollout(config: GraderConfig) -> bool:
    """Whether the grader reads `sample.rollout` (rfteval's extension): a template path, or python source that reads
    sample["rollout"] (or names it where its reads cannot be followed)."""
    if any(ns == "sample" and keys[:1] == (ROLLOUT_FIELD,) for _, _, ns, keys in template_paths(config)):
        return True
    for c in _configs(config):
        source = c.python_source() if c.type == "python" else None
        if not source:
            continue
        try:
            if any(p[:1] == (ROLLOUT_FIELD,) for p in python_access_paths(source)[0]):
                return True
        except SyntaxError:
            pass
        if f'"{ROLLOUT_FIELD}"' in source or f"'{ROLLOUT_FIELD}'" in source:
            return True
    return False


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


@dataclass
class NoItemHasField(InputError):
    """check_item_paths' one line for a template naming a top-level item field that no item has (a typo:
    `{{ item.anser }}`). The field is kept so that reference_fields leaves it out: the dataset's "no field the grader
    reads as a reference" warning would only say the same thing again."""

    item_field: str = ""


@dataclass
class _PathTally:
    """One `item.*` path over the items: how many it resolved on, its first failures, and the keys found where
    it broke (what a misspelt field is matched against)."""

    field: str
    path: str
    keys: tuple[str | int, ...]
    resolved: int = 0
    failed: int = 0
    first: list[tuple[int, int | None, str, str]] = dataclass_field(default_factory=list)  # (order, line, id, why)
    missing: str | int | None = None  # the key the first failure lacks, when it broke on a missing key
    depth: int = 0  # how many keys of the path led there
    near: dict[str, None] = dataclass_field(default_factory=dict)  # the keys beside it, in order, deduplicated

    def add(self, order: int, data: JSONMapping, line: int | None, item_id: str, limit: int) -> None:
        try:
            lookup(data, self.path, self.keys)
            self.resolved += 1
            return
        except TemplateError as exc:
            why = str(exc).split(": ", 1)[-1]
        self.failed += 1
        if len(self.first) < limit:
            self.first.append((order, line, item_id, why))
        broke = _missing_key(data, self.keys)
        if broke is not None and (self.missing is None or broke[:2] == (self.missing, self.depth)):
            self.missing, self.depth = broke[0], broke[1]
            if len(self.near) < _NEAR_KEYS:
                self.near.update(dict.fromkeys(broke[2]))

    def summary(self, items: int, dataset: str | Path | None, grader: str | Path | None) -> InputError:
        """The one line for a path no item fills: a typo of a field name fails on every item alike."""
        where = f" in {Path(dataset).name}" if dataset is not None else ""
        if self.missing is not None:
            head = ".".join(str(k) for k in self.keys[: self.depth])
            name = f"{head}.{self.missing}" if head else str(self.missing)
            match = closest(str(self.missing), self.near)
            hint = f"; did you mean `{head + '.' if head else ''}{match}`?" if match is not None else ""
            message = f"no item has field `{name}` (0 of {items} items{where}{hint})"
        elif self.first:
            _, line, item_id, why = self.first[0]
            message = f"fails on every item (0 of {items} items{where}; first, line {line}, item {item_id}: {why})"
        else:  # limit 0: no failure kept to quote
            message = f"fails on every item (0 of {items} items{where})"
        file = grader if grader is not None else dataset
        if self.depth == 0 and isinstance(self.missing, str):
            return NoItemHasField(f"{{{{ {self.path} }}}}: {message}", file, field=self.field or None,
                                  item_field=self.missing)
        return InputError(f"{{{{ {self.path} }}}}: {message}", file, field=self.field or None)


_NEAR_KEYS = 200  # keys kept to match a misspelt field against: an item's own fields, a few items' worth


def _missing_key(root: JSONMapping, keys: tuple[str | int, ...]) -> tuple[str | int, int, list[str]] | None:
    """(the key, its depth, the keys beside it) where `keys` break on a dict lacking one; None when they break
    otherwise (an index out of range, a lookup into a string)."""
    value: object = root
    for depth, key in enumerate(keys):
        if isinstance(value, dict):
            if key in value or (isinstance(key, int) and str(key) in value):
                value = value[key] if key in value else value[str(key)]
                continue
            return key, depth, [k for k in value if isinstance(k, str)]
        if isinstance(value, list) and isinstance(key, int) and -len(value) <= key < len(value):
            value = value[key]
            continue
        return None
    return None


def check_item_paths(config: GraderConfig, items: Iterable[Item | JSONMapping], dataset: str | Path | None = None,
                     limit: int = 50, grader: str | Path | None = None) -> list[InputError]:
    """Every `item.*` path resolved on every item. A path no item fills (`{{ item.anser }}`: a typo) is one line,
    naming the grader file, the count and the field it is most likely a typo of; a path only some items lack gives
    one error per failing (item, path), `FILE:LINE: field: why`.

    Stops after `limit` per-item errors (the count of the rest is in the last message), so a dataset where most
    items lack the field gives a readable list, not thousands of lines.
    """
    tallies = [_PathTally(field, path, keys)
               for field, path, namespace, keys in template_paths(config) if namespace == "item"]
    count = 0
    for order, item in enumerate(items):
        count += 1
        data = item if isinstance(item, Mapping) else item.data  # an Item, or an item's data itself
        line = None if isinstance(item, Mapping) else item.line
        for tally in tallies:
            tally.add(order, data, line, str(getattr(item, "id", "?")), limit)
    nowhere = [t for t in tallies if count and not t.resolved]
    errors = [t.summary(count, dataset, grader) for t in nowhere]
    some = [t for t in tallies if t.failed and t.resolved]
    failures = sorted((order, i, line, item_id, why) for i, t in enumerate(some)
                      for order, line, item_id, why in t.first)
    for _, i, line, item_id, why in failures[:limit]:
        errors.append(InputError(f"{{{{ {some[i].path} }}}} (grader {some[i].field}): {why}", dataset, line,
                                 f"item {item_id}"))
    more = sum(t.failed for t in some) - min(limit, len(failures))
    if more:
        last = errors[-1]
        errors[-1] = InputError(f"{last.message} (and {more} more)", last.file, last.line, last.field)
    return errors


def preflight(config: GraderConfig, dataset: Dataset, grader_source: str | Path | None = None,
              limit: int = 50, rollout: bool = False) -> list[InputError]:
    """Every static problem of `config` against `dataset` (its items' paths and the sample's fields), before any
    model call: what `validate grader --dataset`, `grade` and `run` check first; `rollout`: samples built from
    trajectories (`grade --outputs` of transcripts), which hold sample.rollout."""
    return check_sample_paths(config, grader_source, rollout) + check_item_paths(config, dataset.items, dataset.path,
                                                                                 limit, grader_source)


def preflight_stream(config: GraderConfig, dataset_path: str | Path, grader_source: str | Path | None = None,
                     limit: int = 50, rollout: bool = False) -> list[InputError]:
    """preflight over a dataset file read one item at a time (a run's dataset may be large); `rollout`: an agent
    run's, whose samples hold sample.rollout."""
    from rfteval.data.dataset import iter_items

    items = iter_items(dataset_path, skip_invalid=True, check_duplicates=False)
    return check_sample_paths(config, grader_source, rollout) + check_item_paths(config, items, dataset_path, limit,
                                                                                 grader_source)


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


def reference_fields(config: GraderConfig, template_problems: Iterable[InputError] = ()) -> frozenset[str] | None:
    """The top-level item fields a grader reads (its templates' `item.*` paths and its python source's
    `item[...]` / `item.get(...)` reads, sub-graders included), but the line's own prompt (messages, tools):
    where a grader finds its reference. None (not known) when a python grader in which no read is followed hands
    `item` on whole (to a helper whose parameter has another name, a loop) or reads it with a computed key:
    naming its lines as holding no reference would be a false alarm on a sound grader.

    A field `template_problems` (check_item_paths') already names as one no item has is left out: the lines lacking
    it are that one error's cause, not a second finding."""
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
    unfilled = {p.item_field for p in template_problems if isinstance(p, NoItemHasField)}
    return frozenset(found - RESERVED_KEYS - unfilled)


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
