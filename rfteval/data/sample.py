"""The `sample` dict handed to graders, as OpenAI builds it from a model response."""

from __future__ import annotations

import json
import json.scanner
from typing import TYPE_CHECKING

import msgspec

if TYPE_CHECKING:
    from types import EllipsisType

    from rfteval.data.json_types import JSONObject, JSONValue

# The public names (what `from ... import *` and the alias package in rfteval/ hand on)
__all__ = [
    "Sample", "parse_output_json", "ParsedSample", "make_sample", "rebuild_args",
]

Sample = dict[str, "JSONValue"]  # quoted: JSONValue is a name for the checker only

# json.loads's own C scanner without its Python wrapper (two regex matches and three calls per text)
_scan = json.scanner.make_scanner(json.JSONDecoder())  # type: ignore[arg-type]  # typeshed: the C scanner's type
# msgspec's decoder: faster than the scanner on model outputs (bench/README.md), and this parse is most of what a
# cheap python grader's worker does besides grade(). Where it succeeds it agrees with json.loads value for value
# (integers of any size, floats correctly rounded, duplicate keys: the last wins at the first's place); what it
# refuses and json.loads takes (NaN and Infinity, 1e400, lone surrogates) goes to the scanner. tests/data/test_sample.py
# holds it to that.
_fast = msgspec.json.Decoder().decode
_KEYS = ("output_text", "output_json", "output_tools", "choices", "output_audio")
_CHOICE_KEYS = ("index", "finish_reason", "message")
_MESSAGE_KEYS = ("role", "content")
_TOOL_MESSAGE_KEYS = ("role", "content", "tool_calls")


def parse_output_json(output_text: str) -> JSONValue:
    """The output parsed as JSON when it is a JSON object or array, else None.

    Exactly json.loads on the stripped text: it starts with { or [ (no BOM, no leading whitespace) and ends
    with a non-space, so json.loads's trailing-whitespace rule reduces to "the value ends the text". One
    difference: nesting too deep for json.loads (RecursionError) is "not JSON" here, None.
    """
    text = output_text.strip()
    if not text or text[0] not in "{[":
        return None
    try:
        return _fast(text)
    except (ValueError, RecursionError):  # msgspec.DecodeError, or UnicodeEncodeError for a lone surrogate
        pass
    try:
        value, end = _scan(text, 0)
    except (ValueError, StopIteration, RecursionError):
        return None
    return value if end == len(text) else None


class ParsedSample(dict[str, "JSONValue"]):
    """A sample whose output_json make_sample parsed from its own text. `_origin` keeps (text, parse) so the
    python pool can tell, by identity, that output_json is still that parse and send the text alone."""

    __slots__ = ("_origin",)
    _origin: tuple[str, JSONValue]


def make_sample(
    output_text: str | None,
    output_tools: list[JSONValue] | None = None,
    choices: list[JSONValue] | None = None,
    output_json: JSONValue | EllipsisType = ...,
) -> Sample:
    """Build the grader-facing sample; `choices` defaults to one Chat Completions choice.

    `output_audio` is always there, as in OpenAI's sample dict, and None: rfteval samples text and tool
    calls only, and a grader that reads `sample["output_audio"]` should see what a text-only job gives it,
    not a KeyError."""
    text = output_text or ""
    tools = output_tools or []
    parsed: JSONValue = None  # the text's own parse, when output_json is left to make_sample
    if output_json is ...:
        output_json = parsed = parse_output_json(text)
    if choices is None:  # the tool calls are carried into the sample as given, never looked into
        message: JSONObject = {"role": "assistant", "content": text}
        if tools:
            message["tool_calls"] = tools
        choices = [{"index": 0, "finish_reason": "tool_calls" if tools else "stop", "message": message}]
    if parsed is not None:
        sample = ParsedSample(output_text=text, output_json=parsed, output_tools=tools, choices=choices,
                              output_audio=None)
        sample._origin = (text, parsed)
        return sample
    return {"output_text": text, "output_json": output_json, "output_tools": tools, "choices": choices,
            "output_audio": None}


def rebuild_args(sample: object) -> tuple[str, list[JSONValue] | None, bool] | None:
    """(text, tools, parse) such that make_sample(text, tools, output_json=<the text's parse if `parse`, else
    None>) builds this very sample: same keys in the same order, same types, the same objects shared. None when
    it would not (fields replaced or added, caller-supplied choices or output_json, subclasses): such a sample
    must travel whole. Checked field by field, cheaply (the python pool calls it on every sample it sends).

    Not detectable at this cost: edits made in place inside a parsed output_json after make_sample built it;
    replace the field (or build a new sample) instead.
    """
    kind = type(sample)
    if (kind is not dict and kind is not ParsedSample) or not isinstance(sample, dict):  # the second: for mypy
        return None
    if tuple(sample) != _KEYS:
        return None
    text, output_json, tools, choices, audio = sample.values()
    if audio is not None or type(text) is not str or type(tools) is not list or type(choices) is not list or len(choices) != 1:
        return None
    if output_json is None:
        parse = False
    elif isinstance(sample, ParsedSample) and sample._origin[0] is text and sample._origin[1] is output_json:
        parse = True
    else:
        return None
    choice = choices[0]
    if type(choice) is not dict or tuple(choice) != _CHOICE_KEYS:
        return None
    index, reason, message = choice.values()
    if type(index) is not int or index != 0 or type(reason) is not str or type(message) is not dict:
        return None
    if tools:
        if reason != "tool_calls" or tuple(message) != _TOOL_MESSAGE_KEYS:
            return None
        role, content, calls = message.values()
        if calls is not tools:
            return None
    else:
        if reason != "stop" or tuple(message) != _MESSAGE_KEYS:
            return None
        role, content = message.values()
    if content is not text or type(role) is not str or role != "assistant":
        return None
    return text, tools or None, parse
