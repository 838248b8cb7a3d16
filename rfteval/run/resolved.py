"""spec.resolved.toml: the spec a run used, after its flags and defaults, written into the run directory so that
`rfteval run DIR/spec.resolved.toml` runs the same evaluation again."""

from __future__ import annotations

import json
import re

from rfteval.data.json_types import JSONObject
from rfteval.providers.endpoint import JUDGE_CONCURRENCY


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)  # a JSON string is a valid TOML basic string
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(type(value))


def _toml_key(key: str) -> str:
    return key if re.match(r"^[A-Za-z0-9_-]+$", key) else json.dumps(key)


def toml_text(data: JSONObject) -> str:
    """A spec's data (model_dump, the name and out filled in) as TOML: top-level keys, then its tables."""
    lines = ["# Written by rfteval run: the spec after flags and defaults. API keys are never stored here,",
             "# only the name of the environment variable holding one.", ""]
    if data.get("judge") == {"concurrency": JUDGE_CONCURRENCY}:
        data.pop("judge")  # all defaults: leave the table out
    tables: JSONObject = {k: data.pop(k) for k in ("endpoint", "sampling", "judge", "tools", "models", "pricing")
                          if k in data}
    for k, v in data.items():
        lines.append(f"{_toml_key(k)} = {_toml_value(v)}")
    for name in ("endpoint", "sampling", "judge", "tools"):  # [tools]: an agent run's only
        table = tables.get(name)
        if isinstance(table, dict) and table:
            lines += ["", f"[{name}]"] + [f"{_toml_key(k)} = {_toml_value(v)}" for k, v in table.items()]
    for name in ("models", "pricing"):
        table = tables.get(name)
        for label, body in table.items() if isinstance(table, dict) else ():
            lines += ["", f"[{name}.{_toml_key(label)}]"]
            lines += [f"{_toml_key(k)} = {_toml_value(v)}" for k, v in body.items()] if isinstance(body, dict) else []
    return "\n".join(lines) + "\n"
