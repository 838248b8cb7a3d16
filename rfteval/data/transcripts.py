"""Agent runs made elsewhere, read as rfteval's trajectory: one outputs line holding a transcript, in one of three
shapes, becomes the generated messages `rollout_sample` builds the grader's sample from (rfteval.data.rollout), so
`rfteval grade --outputs` grades another harness's rollouts as `rfteval run --tools` grades its own.

- `messages`: OpenAI chat messages, the assistant, tool (and later user) turns after the item's prompt.
- verifiers' `results.jsonl` (`vf-eval --save-results`): `completion` is the generated message list (a string for
  a single-turn text environment), `prompt` the messages it was sent.
- ART: an `art.Trajectory` serialised as JSON (`trajectory.model_dump(mode="json")`): `messages_and_choices` holds
  the prompt's messages, then each sampled turn as a `Choice` ({"index", "finish_reason", "message"}) among the
  tool and user messages. The generated part starts at the first choice (or assistant message).

Each message is brought to the shape the rollout loop writes: an assistant turn's content (null when it only calls
tools), its calls' arguments as JSON text; a tool message's content as text. Pure functions, no I/O.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rfteval.data.rollout import (
    MAX_TURNS,
    NO_TOOL_CALLS,
    STOP_REASONS,
    arguments_text,
    assistant_message,
    final_message,
    message_calls,
)
from rfteval.errors import InputError

if TYPE_CHECKING:
    from pathlib import Path

    from rfteval.data.json_types import JSONMapping, JSONObject, JSONValue

MESSAGES, VERIFIERS, ART = "messages", "completion", "messages_and_choices"  # the field that names each shape
SHAPES = (MESSAGES, VERIFIERS, ART)
_ROLES = ("assistant", "tool", "user")


@dataclass(frozen=True)
class Transcript:
    """A rollout another harness made: its generated messages (rfteval's shape), the prompt it was sent when the
    line holds it (the item is then found by it), the final turn's choice as the harness kept it (ART), and how it
    ended (the line's `stop_reason`, else `no_tool_calls` when the last turn called no tool, else `max_turns`)."""

    shape: str
    messages: list[JSONValue]
    prompt: list[JSONValue] | None
    choices: list[JSONValue] | None
    stop_reason: str

    @property
    def output_text(self) -> str:
        final = final_message(self.messages)
        content = final.get("content") if final is not None else None
        return content if isinstance(content, str) else ""


def read_transcript(row: JSONMapping, path: Path, lineno: int) -> Transcript | None:
    """The transcript an outputs line holds (None: a plain output, `output_text`); a malformed one is one line
    naming the file, line and field."""
    shape = next((s for s in SHAPES if s in row), None)
    if shape is None:
        return None
    value = row[shape]
    prompt: list[JSONValue] | None = None
    choices: list[JSONValue] | None = None
    if shape == VERIFIERS and isinstance(value, str):  # a single-turn text environment's completion
        value = [{"role": "assistant", "content": value}]
    if not isinstance(value, list):
        raise InputError("must be a list of messages", path, lineno, shape)
    if shape == ART:
        start = next((i for i, m in enumerate(value) if isinstance(m, dict) and _is_generated(m)), len(value))
        prompt, value = list(value[:start]), value[start:]
        generated = [i for i, m in enumerate(value) if isinstance(m, dict) and _is_generated(m)]
        last = value[generated[-1]] if generated else None  # the final turn, kept as a Choice when it is one
        choices = [_compact(last)] if isinstance(last, dict) and "message" in last else None
    elif shape == VERIFIERS:
        given = row.get("prompt")
        prompt = list(given) if isinstance(given, list) else None
    messages: list[JSONValue] = [_message(m, i, shape, path, lineno) for i, m in enumerate(value)]
    if not any(m.get("role") == "assistant" for m in messages if isinstance(m, dict)):
        raise InputError("holds no assistant turn: nothing was generated to grade", path, lineno, shape)
    stop = row.get("stop_reason")
    if stop is not None and stop not in STOP_REASONS:
        raise InputError(f"must be one of {', '.join(STOP_REASONS)}, got {stop!r}", path, lineno, "stop_reason")
    final = final_message(messages)
    derived = MAX_TURNS if final is not None and final.get("tool_calls") else NO_TOOL_CALLS
    return Transcript(shape, messages, prompt, choices, stop if isinstance(stop, str) else derived)


def _is_generated(message: JSONMapping) -> bool:
    return "message" in message or message.get("role") == "assistant"


def _compact(value: JSONValue) -> JSONValue:
    """A choice as a server sent it: the null fields the SDK fills in left out (as the run keeps choices)."""
    if isinstance(value, dict):
        return {k: _compact(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_compact(v) for v in value]
    return value


def _message(value: JSONValue, index: int, shape: str, path: Path, lineno: int) -> JSONObject:
    where = f"{shape}[{index}]"
    if isinstance(value, dict) and "message" in value:  # an ART Choice: the message the model sampled
        value = value["message"]
    if not isinstance(value, dict):
        raise InputError("must be a message object", path, lineno, where)
    role = value.get("role")
    if role not in _ROLES:
        raise InputError(f"role must be one of {', '.join(_ROLES)} (the turns after the prompt), got {role!r}", path,
                         lineno, f"{where}.role")
    content = value.get("content")
    if role == "assistant":
        calls = value.get("tool_calls")
        if calls is not None and not isinstance(calls, list):
            raise InputError("must be a list of tool calls", path, lineno, f"{where}.tool_calls")
        if content is not None and not isinstance(content, str):
            raise InputError("must be a string or null", path, lineno, f"{where}.content")
        return assistant_message(content, message_calls(value))
    if role == "tool":
        call = value.get("tool_call_id")
        if not isinstance(call, str):
            raise InputError("missing or not a string", path, lineno, f"{where}.tool_call_id")
        return {"role": "tool", "tool_call_id": call,
                "content": content if isinstance(content, str) else arguments_text(content)}
    return {"role": "user", "content": content if isinstance(content, (str, list)) else json.dumps(content)}


def prompt_key(messages: object) -> str:
    """A prompt as the index of items by prompt holds it: canonical JSON of its messages."""
    return json.dumps(messages, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def without_system(messages: list[JSONValue]) -> list[JSONValue]:
    """A prompt without its leading system and developer messages (a harness's own system prompt, as verifiers'
    `system_prompt` adds one, does not hide the item it was sent)."""
    i = 0
    while i < len(messages) and isinstance(m := messages[i], dict) and m.get("role") in ("system", "developer"):
        i += 1
    return messages[i:]
