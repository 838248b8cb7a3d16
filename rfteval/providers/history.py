"""What a server takes of an agent's history: the shape of the assistant turns a rollout sends back.

OpenAI sends a turn that only calls tools with `content: null` beside its `tool_calls`, and takes it back so.
llama-cpp-python's server (0.3.36) refuses that message (HTTP 500, its chat schema's "Input should be a valid
string" for the assistant message's content) and takes the same history with `content: ""`. The provider tries
null, and on that refusal steps down to "" once and for the rest of the run (saying so in one line, never
silently), as it drops an output-limit key a server calls unsupported. The stored history and the cache keys keep
null, so a run's keys do not depend on which server answered. What was learned is the endpoint's, not a label's: a
run's providers that reach one server share it (HistoryShape), so base and tuned on one server step down once.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from rfteval.data.json_types import JSONValue

# a server naming a message's content as not a string (llama-cpp-python's pydantic list: "...'AssistantMessage',
# 'content'), 'msg': 'Input should be a valid string', 'input': None"; others: "content must be a string")
_NOT_A_STRING = re.compile(r"content\W.{0,80}?(valid string|must be a string|should be a string|must not be null|"
                           r"cannot be null)|(valid string|must be a string|must not be null|cannot be null)"
                           r".{0,80}?\bcontent\b", re.I | re.S)


@dataclass
class HistoryShape:
    """What one endpoint was found to take of an agent's history; shared by the providers that reach it."""

    empty_tool_content: bool = False  # it refused null content beside tool_calls: such messages go with ""


def null_tool_content(message: JSONValue) -> bool:
    """An assistant message whose content is null beside its tool_calls."""
    return (isinstance(message, dict) and message.get("role") == "assistant" and message.get("content") is None
            and bool(message.get("tool_calls")))


def refuses_null_content(error: str, messages: Sequence[JSONValue]) -> bool:
    """Whether a refusal (its message) is of the null content of an assistant turn with tool calls that the request
    holds."""
    return any(null_tool_content(m) for m in messages) and bool(_NOT_A_STRING.search(error))


def empty_tool_content(messages: Sequence[JSONValue]) -> list[JSONValue]:
    """The messages with each null content beside tool_calls sent as "" (shallow copies; the rest as they are)."""
    return [{**m, "content": ""} if null_tool_content(m) and isinstance(m, dict) else m for m in messages]


STEP_DOWN = ("the server refuses an assistant message whose content is null beside its tool_calls ({reason}); "
             "such messages are sent with content \"\" from now on (the stored history keeps null)")
