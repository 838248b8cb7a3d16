"""The `sample` dict handed to graders, as OpenAI builds it from a model response."""

from __future__ import annotations

import json
from typing import Any

Sample = dict[str, Any]


def parse_output_json(output_text: str) -> Any:
    """The output parsed as JSON when it is a JSON object or array, else None."""
    text = output_text.strip()
    if not text or text[0] not in "{[":
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


def make_sample(
    output_text: str | None,
    output_tools: list[dict[str, Any]] | None = None,
    choices: list[dict[str, Any]] | None = None,
    output_json: Any = ...,
) -> Sample:
    """Build the grader-facing sample; `choices` defaults to one Chat Completions choice."""
    text = output_text or ""
    tools = output_tools or []
    if output_json is ...:
        output_json = parse_output_json(text)
    if choices is None:
        message: dict[str, Any] = {"role": "assistant", "content": text}
        if tools:
            message["tool_calls"] = tools
        choices = [{"index": 0, "finish_reason": "tool_calls" if tools else "stop", "message": message}]
    return {"output_text": text, "output_json": output_json, "output_tools": tools, "choices": choices}
