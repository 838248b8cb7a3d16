"""OpenAI's `{{ item.x }}` / `{{ sample.y[0].z }}` templates, compiled once per grader."""

from __future__ import annotations

import json
import re
from functools import lru_cache
from typing import TYPE_CHECKING, overload

if TYPE_CHECKING:
    from rfteval.data.json_types import JSONMapping, JSONObject, JSONValue
    from rfteval.data.sample import Sample

_PLACEHOLDER = re.compile(r"\{\{\s*(.*?)\s*\}\}")
_TOKEN = re.compile(r"""\.?([^.\[\]\s]+)|\[\s*(-?\d+)\s*\]|\[\s*["']([^"']*)["']\s*\]""")
NAMESPACES = ("item", "sample")


class TemplateError(Exception):
    """A template referenced a path that the item or sample lacks (OpenAI's invalid_variable_error)."""

    def __init__(self, path: str, reason: str):
        self.path = path
        super().__init__(f"{{{{ {path} }}}}: {reason}")


def parse_path(path: str) -> tuple[str, tuple[str | int, ...]]:
    """Split `sample.output_tools[0].function` into its namespace and keys; ValueError when malformed."""
    keys: list[str | int] = []
    pos = 0
    while pos < len(path):
        m = _TOKEN.match(path, pos)
        if not m or m.end() == pos:
            raise ValueError(f"malformed template path {path!r}")
        name, index, quoted = m.groups()
        keys.append(name if name is not None else int(index) if index is not None else quoted)
        pos = m.end()
    if not keys or keys[0] not in NAMESPACES:
        raise ValueError(f"template path {path!r} must start with item. or sample.")
    if len(keys) == 1:  # OpenAI refuses a bare namespace: a template names one variable
        raise ValueError(f"template {{{{ {path} }}}} names no variable: write {path}.FIELD")
    return str(keys[0]), tuple(keys[1:])


def lookup(root: object, path: str, keys: tuple[str | int, ...]) -> object:
    """The value at `keys` inside `root` (an item, a sample, or what a python caller hands in: only dicts and
    lists are looked into, so any value is taken), or the TemplateError that says where the path breaks."""
    value = root
    for key in keys:
        if isinstance(value, dict):
            if key in value:
                value = value[key]
                continue
            if isinstance(key, int) and str(key) in value:
                value = value[str(key)]
                continue
            raise TemplateError(path, f"no key {key!r}")
        if isinstance(value, list) and isinstance(key, int):
            if -len(value) <= key < len(value):
                value = value[key]
                continue
            raise TemplateError(path, f"index {key} out of range (length {len(value)})")
        raise TemplateError(path, f"cannot look up {key!r} in {type(value).__name__ if value is not None else 'null'}")
    return value


def to_text(value: object) -> str:
    """Strings as they are; everything else as JSON (a documented rfteval decision)."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


class Template:
    """A string with zero or more placeholders."""

    __slots__ = ("text", "_parts")

    def __init__(self, text: str):
        self.text = text
        parts: list[str | tuple[str, str, tuple[str | int, ...]]] = []
        pos = 0
        for m in _PLACEHOLDER.finditer(text):
            if m.start() > pos:
                parts.append(text[pos : m.start()])
            ns, keys = parse_path(m.group(1))
            parts.append((m.group(1), ns, keys))
            pos = m.end()
        if pos < len(text):
            parts.append(text[pos:])
        self._parts = parts

    @property
    def paths(self) -> list[str]:
        return [p[0] for p in self._parts if isinstance(p, tuple)]

    def render(self, item: JSONMapping, sample: Sample) -> str:
        out: list[str] = []
        for part in self._parts:
            if isinstance(part, str):
                out.append(part)
            else:
                path, ns, keys = part
                out.append(to_text(lookup(item if ns == "item" else sample, path, keys)))
        return "".join(out)


@lru_cache(maxsize=4096)
def compile_template(text: str) -> Template:
    return Template(text)


def check_template(text: str) -> str:
    """Pydantic validator helper: raise ValueError on a malformed template, return it unchanged."""
    compile_template(text)
    return text


@overload
def render_deep(value: JSONObject, item: JSONMapping, sample: Sample) -> JSONObject: ...
@overload
def render_deep(value: JSONValue, item: JSONMapping, sample: Sample) -> JSONValue: ...
def render_deep(value: JSONValue, item: JSONMapping, sample: Sample) -> JSONValue:
    """Render every string inside a nested structure (model grader message lists)."""
    if isinstance(value, str):
        return compile_template(value).render(item, sample) if "{{" in value else value
    if isinstance(value, list):
        return [render_deep(v, item, sample) for v in value]
    if isinstance(value, dict):
        return {k: render_deep(v, item, sample) for k, v in value.items()}
    return value
