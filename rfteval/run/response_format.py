"""A run's response format: read from its file and held as Sampling holds it (structured outputs, JSON mode or text)."""

from __future__ import annotations

from pathlib import Path

from rfteval.data.json_types import JSONObject
from rfteval.errors import InputError


def load_response_format_file(path: str | Path) -> JSONObject:
    """A response format file → Sampling.response_format (see normalize_response_format).

    Accepts a bare JSON schema, the wrapper {"name", "schema", "strict"?}, the full
    {"type": "json_schema", "json_schema": {...}} as the Chat API spells it, {"type": "json_object", ...}
    (JSON mode, sent as given) or {"type": "text"}.
    """
    from rfteval.graders.loader import read_json_file

    obj, _ = read_json_file(path)
    if not isinstance(obj, dict):
        raise InputError("a response format must be a JSON object (a JSON schema)", path)
    return normalize_response_format(obj, path)


PLAIN_FORMATS = ("json_object", "text")


def normalize_response_format(obj: JSONObject, source: str | Path | None = None) -> JSONObject:
    """A response format as Sampling holds it. `{"type": "json_object", ...}` and `{"type": "text"}` are kept
    exactly as given, extra keys included (llama.cpp's json_object takes a `schema`; servers without structured
    outputs often have JSON mode). A json_schema format, in Chat's or Responses' spelling, or a bare JSON schema
    becomes the wrapper {"name", "schema", "strict"}, the structured outputs request."""
    kind = obj.get("type")
    if kind in PLAIN_FORMATS:
        return dict(obj)
    wrapped = obj.get("json_schema")
    if kind == "json_schema" and isinstance(wrapped, dict):
        obj = wrapped
    elif kind == "json_schema" and not isinstance(obj.get("schema"), dict):
        raise InputError("a json_schema response format needs `json_schema` (Chat) or `schema` (Responses)", source,
                         field="response_format")
    schema = obj.get("schema")
    if isinstance(schema, dict):
        out: JSONObject = {"name": str(obj.get("name") or "response"), "schema": schema}
        out["strict"] = bool(obj.get("strict", True))
        return out
    if "type" in obj or "properties" in obj or "$schema" in obj:
        return {"name": "response", "schema": obj, "strict": True}
    raise InputError("not a JSON schema (expected a schema object, or {name, schema, strict})", source)
