"""The seam between an agent's rollout and the tools it calls: ToolCall in, ToolResult out, state carried as JSON.

A tool box runs one turn's calls at a time, in order, for one rollout, from the state the previous turn left; it
returns one result per call and the state after. A failing call is a result too (`error` set, its content the
"error: <Type>: <message>" line the model is shown), never an exception: the model sees what went wrong and the
rollout goes on. Only the machinery failing (the sandbox gone) raises; and a tool the rollout depends on that gives
no answer after its retries (an Agent RFT tool server's 5xx) raises RolloutToolError, which ends that one rollout.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from rfteval.limits import TOOL_MEMORY_MB, TOOL_OUTPUT_CHARS, TOOL_TIMEOUT_S

if TYPE_CHECKING:
    from rfteval.data.json_types import JSONObject

# ToolResult.error: the type of a failed call, counted by type in a rollout's tool_errors. An exception the tool
# raised is counted by its own type name (ValueError, KeyError, ...); these name the failures that are not one.
BAD_ARGUMENTS = "BadArguments"  # the arguments are not a JSON object, or do not fit the function's parameters
UNKNOWN_TOOL = "UnknownTool"  # no tool of that name
TOOL_TIMEOUT = "ToolTimeout"  # past --tool-timeout: the unit was killed
TOOL_MEMORY = "ToolMemory"  # past --tool-memory: the unit was killed
TOOL_CRASH = "ToolCrash"  # the unit died otherwise (a signal, os._exit)


class RolloutToolError(Exception):
    """A call got no answer the model could be shown, after its retries (a tool server's 5xx, a dropped connection):
    the rollout ends there as a generation error (Agent RFT discarded it), counted by `kind` and left out of the
    means, never scored; the run goes on, and re-running it plays the rollout again from its stored turns. The
    message is one line with no secret in it."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class ToolCall:
    """One call the model made: its id (the tool message answers it), the tool's name, the arguments as the model
    sent them (JSON text, possibly invalid)."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class ToolResult:
    """What the model is shown for one call. `content` is the tool's return value as text (a non-string as JSON),
    cut at the output limit with a marker; a failed call has `error` set to its type and content
    "error: <Type>: <message>"."""

    call_id: str
    name: str
    content: str
    error: str | None = None

    def message(self) -> JSONObject:
        """The `tool` message that answers the call, in OpenAI's chat shape."""
        return {"role": "tool", "tool_call_id": self.call_id, "content": self.content}


@dataclass(frozen=True)
class ToolLimits:
    """What one turn's tool calls may use: wall time and memory of the unit they run in, and the characters of one
    result shown to the model."""

    timeout_s: float = TOOL_TIMEOUT_S
    memory_mb: int | None = TOOL_MEMORY_MB
    output_chars: int = TOOL_OUTPUT_CHARS


def error_result(call: ToolCall, kind: str, message: str) -> ToolResult:
    """A failed call as the model is shown it."""
    return ToolResult(call.id, call.name, f"error: {kind}: {message}", error=kind)


def cut(text: str, limit: int) -> str:
    """`text` shown to the model at most `limit` characters long, the cut marked with what was left out."""
    if len(text) <= limit:
        return text
    return text[:limit] + f"…[cut: {len(text) - limit} more characters]"


class ToolBox(Protocol):
    """The tools of a run. `identity` changes whenever a result could: the sources, the limits; it is part of the
    key a tool turn is stored under, so a changed tool re-runs and an unchanged one is read back."""

    @property
    def identity(self) -> str: ...

    def names(self) -> frozenset[str]: ...

    async def init_state(self, item: JSONObject) -> JSONObject:
        """A rollout's first state ({} when the tools keep none)."""
        ...

    async def run_turn(self, rollout_id: str, item: JSONObject, calls: Sequence[ToolCall],
                       state: JSONObject) -> tuple[list[ToolResult], JSONObject]:
        """One turn's calls, in order, from `state`: one result per call, and the state after. `rollout_id` is the
        rollout's trace id (providers.agent_rft.new_trace_id), the same for each of its turns, resumed ones too."""
        ...

    async def aclose(self) -> None: ...
