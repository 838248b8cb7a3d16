"""One record as the Item page's sample card: its texts cut at MAX_TEXT (the rest served on request), the rest as
stored, and an agent record's rollout turn by turn (`trajectory`): each call with the tool result that answered it,
cut at RESULT_CHARS, and the error type its content names."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, cast

from rfteval.compare.samples import ROLLOUT_FIELDS, transcript_messages
from rfteval.data.records import json_safe

if TYPE_CHECKING:
    from rfteval.data.json_types import JSONObject, JSONValue

RESULT_CHARS = 2_000  # characters of one tool result an item page sends; the rest on request (/api/result)
# a failed call's content, as the rollout writes it (rfteval.tools.base.error_result): "error: <Type>: <message>"
TOOL_ERROR = re.compile(r"error: ([A-Za-z_][A-Za-z0-9_.]*):")
MAX_TEXT = 100_000  # characters of one text sent with an item page; the rest on request (/api/text)


def cut_text(value: object, limit: int = MAX_TEXT) -> JSONValue:
    """A text for the page: cut at `limit` characters (the page says how many more and links to the rest)."""
    if not isinstance(value, str):
        return json_safe(value)
    if len(value) <= limit:
        return value
    return {"text": value[:limit], "omitted": len(value) - limit}


SAMPLE_FIELDS = ("epoch", "score", "passed", "sub_scores", "error", "usage", "latency_s", "finish_reason",
                 "truncated_in_reasoning", "model", "cached")


def sample_card(r: JSONObject) -> JSONObject:
    """One record for the Item page: its texts cut to MAX_TEXT, the rest as stored."""
    out: JSONObject = {k: json_safe(r.get(k)) for k in SAMPLE_FIELDS if k in r}
    for name in ("output_text", "reasoning_text", "grader_stdout"):
        out[name] = cut_text(r.get(name))
    out["output_json"] = json_safe(r.get("output_json"))
    out["output_tools"] = json_safe(r.get("output_tools"))
    out["grade_details"] = json_safe(r.get("grade_details"))
    if any(name in r for name in ROLLOUT_FIELDS):  # an agent run's record: a record without tools has none
        out["rollout"] = _rollout(r)
    return out


def _rollout(r: JSONObject) -> JSONObject:
    """An agent record's rollout for its sample card: the record's own counts and stop reason, and the trajectory
    (None without a readable transcript: a rollout that failed, or a transcript that is not JSON)."""
    messages = transcript_messages(r)
    turns, calls = r.get("turns"), r.get("tool_calls")
    return {"turns": turns if isinstance(turns, int) else None,
            "tool_calls": calls if isinstance(calls, int) else None,
            "stop_reason": json_safe(r.get("stop_reason")),
            "tool_errors": json_safe(_error_counts(r.get("tool_errors"))),
            "trajectory": cast("list[JSONValue]", trajectory(messages, r.get("output_text")))
            if messages is not None else None,
            "unreadable": messages is None and r.get("transcript") is not None}


def _error_counts(value: object) -> dict[str, int]:
    """A record's tool_errors as {type: count}: a dict in a line, (type, count) pairs from a Parquet map, JSON
    text; anything else (hostile, or absent) counts nothing."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return {}
    if isinstance(value, list):
        value = {v[0]: v[1] for v in value if isinstance(v, (list, tuple)) and len(v) == 2}
    if not isinstance(value, Mapping):
        return {}
    return {str(k): int(v) for k, v in value.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and v == v and abs(v) < 1e15}


def _content(value: object) -> str:
    """A message's content as text: a string as it is, a list of parts their texts, nothing as ""."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(p, dict) and isinstance(p.get("text"), str) for p in value):
        return "".join(str(p["text"]) for p in value if isinstance(p, dict))
    return json.dumps(value, ensure_ascii=False)


def _arguments(raw: object) -> tuple[JSONValue, bool]:
    """A call's arguments for the page: pretty-printed when they are JSON, as the model sent them otherwise (a
    model that sends broken JSON is something to see), and whether they parsed."""
    text = raw if isinstance(raw, str) else json.dumps(raw, ensure_ascii=False)
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return cut_text(text), False
    return cut_text(json.dumps(value, indent=2, ensure_ascii=False)), True


def trajectory(messages: list[JSONObject], output_text: object) -> list[JSONObject]:
    """The rollout's turns in order: each assistant message's text and calls (name, arguments), each call with the
    tool result that answered it (by tool_call_id, the earliest call of that id still unanswered; cut at
    RESULT_CHARS, its length said, numbered in the transcript's order for /api/result) and the error type its
    content names ("error: <Type>: ..."). A result no call asked for is listed under the turn it follows. The last
    turn's text, the record's output_text, is not sent twice: the turn says so (`final`) and the page shows the
    output there."""
    turns: list[JSONObject] = []
    pending: dict[str, list[JSONObject]] = {}
    results, assistant, last_text = 0, 0, None
    for m in messages:
        if m.get("role") == "tool":
            content = _content(m.get("content"))
            error = TOOL_ERROR.match(content)
            result: JSONObject = {"index": results, "chars": len(content), "text": cut_text(content, RESULT_CHARS),
                                  "error": error.group(1) if error else None}
            results += 1
            waiting = pending.get(str(m.get("tool_call_id")))
            if waiting:
                waiting.pop(0)["result"] = result
                continue
            if not turns:
                turns.append({"turn": None, "role": "tool", "text": None, "calls": [], "unasked": []})
            unasked = turns[-1]["unasked"]
            assert isinstance(unasked, list)
            unasked.append({**result, "tool_call_id": json_safe(m.get("tool_call_id"))})
            continue
        role = str(m.get("role") or "assistant")
        if role == "assistant":
            assistant += 1
        last_text = _content(m.get("content"))
        calls: list[JSONValue] = []
        listed = m.get("tool_calls")
        for c in listed if isinstance(listed, list) else []:
            c = c if isinstance(c, dict) else {}
            fn = c.get("function")
            fn = fn if isinstance(fn, dict) else {}
            name = fn.get("name")
            arguments, valid = _arguments(fn.get("arguments", ""))
            call: JSONObject = {"id": json_safe(c.get("id")), "name": name if isinstance(name, str) else
                                json.dumps(name), "arguments": arguments, "arguments_json": valid, "result": None}
            pending.setdefault(str(c.get("id")), []).append(call)
            calls.append(call)
        turns.append({"turn": assistant if role == "assistant" else None, "role": role,
                      "text": cut_text(last_text) or None, "calls": calls, "unasked": []})
    last = turns[-1] if turns else None
    if last is not None and last["role"] == "assistant" and last_text == output_text:
        last["text"], last["final"] = None, True
    return turns
