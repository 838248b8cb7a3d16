"""An agent's rollout: the messages a model and its tools generated for one (model, item, epoch), typed.

`messages` are the generated ones only, in OpenAI's chat shape: each assistant turn (its content, and its
`tool_calls` when it called tools) followed by one `tool` message per call that ran; an item's scripted user turns
(`rfteval_followups`) stand between them as `user` messages, where they were sent. The item's own messages are
the item's. A rollout ends with one stop reason (STOP_REASONS). Pure functions over JSON: no I/O, beside sample.py
in the lowest layer, so the run and every trainer adapter read a trajectory alike.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypedDict

from rfteval.data.reasoning import DEFAULT_MODE, DEFAULT_TAGS, answer_of
from rfteval.data.sample import make_sample
from rfteval.limits import MAX_TURNS as MAX_TURNS_DEFAULT

if TYPE_CHECKING:
    from types import EllipsisType

    from rfteval.data.json_types import JSONObject, JSONValue
    from rfteval.data.sample import Sample

# How a rollout ended. `no_tool_calls`: the model answered (a turn without tool calls); the others are limits or
# refusals, and a limited rollout is graded as it stands.
NO_TOOL_CALLS = "no_tool_calls"
MAX_TURNS = "max_turns"  # --max-turns model turns were played, the last still calling tools or a follow-up unsent
MAX_TOOL_CALLS = "max_tool_calls"  # the model asked for more calls than --max-tool-calls leaves
LENGTH = "length"  # a turn was cut by the output limit (finish_reason "length")
ROLLOUT_TIMEOUT = "rollout_timeout"  # --rollout-timeout's time was spent
CONTEXT = "context"  # the server refused the history as longer than its context
STOP_REASONS = (NO_TOOL_CALLS, MAX_TURNS, MAX_TOOL_CALLS, LENGTH, ROLLOUT_TIMEOUT, CONTEXT)


class ToolCallJSON(TypedDict):
    """One call the model made: its id, the tool's name, the arguments as the model sent them (JSON text)."""

    id: str
    name: str
    arguments: str


class ToolResultJSON(TypedDict):
    """What one call returned to the model; `error` is the failure's type (tool_errors counts them), else None."""

    tool_call_id: str
    name: str
    content: str
    error: str | None


class RolloutJSON(TypedDict):
    """`sample["rollout"]`: the trajectory a grader sees beside the final turn (an rfteval extension)."""

    messages: list[JSONValue]
    tool_calls: list[ToolCallJSON]
    tool_results: list[ToolResultJSON]
    turns: int
    stop_reason: str
    tool_errors: dict[str, int]


@dataclass(frozen=True)
class RolloutLimits:
    """What one rollout may play (flags and [tools] keys): model turns, tool calls, time.

    `max_tool_calls`: when a turn asks for more calls than remain, none of that turn's calls runs and the rollout
    stops with `max_tool_calls`. Running only the first of them would answer some of a turn's calls and not the
    others (a history no model is sent: every call of an assistant message needs its tool message), and no model
    turn would ever read their results; the turn's calls stay the final turn's output_tools, as the model asked.
    The same holds for the last turn `max_turns` allows: its calls are the answer the grader sees, not run.

    `timeout_s` counts a rollout's time as its model turns' latencies and its tool turns' durations, the same
    whether it was played at once or resumed from stored turns; a turn under way when it runs out is dropped (not
    stored: a re-run with a longer timeout sends it)."""

    max_turns: int = MAX_TURNS_DEFAULT
    max_tool_calls: int | None = None
    timeout_s: float | None = None

    def key(self) -> JSONObject:
        """What the rollout key holds of the limits: another limit is another rollout (played again from the stored
        turns, so only a rollout the change affects sends anything)."""
        return {"max_turns": self.max_turns, "max_tool_calls": self.max_tool_calls, "timeout_s": self.timeout_s}


def call_id(call: Mapping[str, object], turn: int, index: int) -> str:
    """A call's id as the model sent it; a server that sends none (or an empty one) gets one made from where the
    call is, so that its tool message can answer it and the history stays the same on every replay."""
    given = call.get("id")
    return given if isinstance(given, str) and given else f"call_{turn}_{index}"


def arguments_text(arguments: object) -> str:
    """A call's arguments as JSON text: as the model sent them when text, JSON when a server sent an object."""
    if isinstance(arguments, str):
        return arguments
    if arguments is None:
        return ""
    return json.dumps(arguments, ensure_ascii=False)


def turn_calls(tools: Sequence[JSONValue] | None, turn: int) -> list[ToolCallJSON]:
    """The calls of one turn's tool calls as the provider parsed them ({"id", "type", "function": {"name",
    "arguments"}}), ids and arguments made text."""
    out: list[ToolCallJSON] = []
    for index, call in enumerate(tools or ()):
        if not isinstance(call, dict):
            continue
        fn = call.get("function")
        fn = fn if isinstance(fn, dict) else {}
        name = fn.get("name")
        out.append({"id": call_id(call, turn, index), "name": name if isinstance(name, str) else "",
                    "arguments": arguments_text(fn.get("arguments"))})
    return out


def assistant_message(content: str | None, calls: Sequence[ToolCallJSON]) -> JSONObject:
    """An assistant turn in OpenAI's chat shape: content null when the turn only called tools (as OpenAI sends
    it; a server that refuses null is sent "" by the provider, rfteval.providers.openai_provider)."""
    message: JSONObject = {"role": "assistant", "content": content if content or not calls else None}
    if calls:
        message["tool_calls"] = [{"id": c["id"], "type": "function",
                                  "function": {"name": c["name"], "arguments": c["arguments"]}} for c in calls]
    return message


def tool_message(result: ToolResultJSON) -> JSONObject:
    """The `tool` message that answers one call."""
    return {"role": "tool", "tool_call_id": result["tool_call_id"], "content": result["content"]}


def message_calls(message: Mapping[str, object]) -> list[ToolCallJSON]:
    """The calls an assistant message of a rollout holds (what assistant_message wrote)."""
    calls = message.get("tool_calls")
    out: list[ToolCallJSON] = []
    for call in calls if isinstance(calls, list) else ():
        if not isinstance(call, dict):
            continue
        fn = call.get("function")
        fn = fn if isinstance(fn, dict) else {}
        cid, name = call.get("id"), fn.get("name")
        out.append({"id": cid if isinstance(cid, str) else "", "name": name if isinstance(name, str) else "",
                    "arguments": arguments_text(fn.get("arguments"))})
    return out


@dataclass(frozen=True)
class Rollout:
    """The trajectory of one rollout: its generated messages, how it ended, and which calls failed (call id →
    the error's type; the content of their tool message says why, as the model was shown it)."""

    messages: Sequence[JSONValue]
    stop_reason: str
    errors: Mapping[str, str] = field(default_factory=dict)

    @property
    def turns(self) -> int:
        """Model turns: the assistant messages."""
        return sum(1 for m in self.messages if isinstance(m, dict) and m.get("role") == "assistant")

    def tool_calls(self) -> list[ToolCallJSON]:
        """Every call the model made, in order (a last turn's calls that a limit kept from running too)."""
        return [c for m in self.messages if isinstance(m, dict) and m.get("role") == "assistant"
                for c in message_calls(m)]

    def tool_results(self) -> list[ToolResultJSON]:
        """Every call that ran, in order: what its tool message showed the model, and its error's type."""
        names = {c["id"]: c["name"] for c in self.tool_calls()}
        out: list[ToolResultJSON] = []
        for m in self.messages:
            if not isinstance(m, dict) or m.get("role") != "tool":
                continue
            cid, content = m.get("tool_call_id"), m.get("content")
            cid = cid if isinstance(cid, str) else ""
            out.append({"tool_call_id": cid, "name": names.get(cid, ""),
                        "content": content if isinstance(content, str) else arguments_text(content),
                        "error": self.errors.get(cid)})
        return out

    def tool_errors(self) -> dict[str, int]:
        """Failed calls by the error's type."""
        return dict(Counter(r["error"] for r in self.tool_results() if r["error"] is not None))

    def to_json(self) -> RolloutJSON:
        """`sample["rollout"]`."""
        return {"messages": list(self.messages), "tool_calls": self.tool_calls(), "tool_results": self.tool_results(),
                "turns": self.turns, "stop_reason": self.stop_reason, "tool_errors": self.tool_errors()}

    def transcript(self) -> str:
        """The generated messages as JSON text (the record's `transcript`)."""
        return json.dumps(list(self.messages), ensure_ascii=False, separators=(",", ":"))


def final_message(messages: Sequence[JSONValue]) -> JSONObject | None:
    """The rollout's final turn: its last assistant message (None before any)."""
    return next((m for m in reversed(messages) if isinstance(m, dict) and m.get("role") == "assistant"), None)


def rollout_sample(messages: Sequence[JSONValue], *, stop_reason: str, errors: Mapping[str, str] | None = None,
                   output_json: JSONValue | EllipsisType = ..., choices: list[JSONValue] | None = None,
                   reasoning: str | None = None, finish_reason: str | None = None, mode: str = DEFAULT_MODE,
                   tags: Sequence[tuple[str, str]] = DEFAULT_TAGS) -> Sample:
    """The grader's sample of a rollout, from its generated messages: the one rule the run and every trainer adapter
    build it by.

    `sample.output_text`, `output_tools` and `choices` keep the meaning Agent RFT gave them: the final turn's (the
    last assistant message; its answer apart from any thinking, as for a single answer: rfteval.data.reasoning).
    The whole trajectory is one rfteval extension, `sample["rollout"]` (RolloutJSON: the messages, every call, every
    result, the turns, the stop reason, the errors by type). `errors` says which calls failed (call id → type);
    `output_json`, `choices`, `reasoning` and `finish_reason` are the final turn's as the server sent them, when
    known (a run's stored turn): else the text's own parse and one chat choice, as make_sample builds them."""
    final = final_message(messages)
    content = final.get("content") if final is not None else None
    text = content if isinstance(content, str) else ""
    calls = final.get("tool_calls") if final is not None else None
    tools: list[JSONValue] = list(calls) if isinstance(calls, list) else []
    answer = answer_of(text, None if output_json is ... else output_json, choices, reasoning, finish_reason,
                       mode=mode, tags=tags)
    if output_json is ...:  # no stored parse: the answer's own, as make_sample parses it
        sample = make_sample(answer.output_text, tools, answer.choices)
    else:
        sample = make_sample(answer.output_text, tools, answer.choices, answer.output_json)
    t = Rollout(messages, stop_reason, errors or {}).to_json()
    calls_json: list[JSONValue] = [{"id": c["id"], "name": c["name"], "arguments": c["arguments"]}
                                   for c in t["tool_calls"]]
    results_json: list[JSONValue] = [{"tool_call_id": r["tool_call_id"], "name": r["name"], "content": r["content"],
                                      "error": r["error"]} for r in t["tool_results"]]
    errors_json: JSONObject = dict(t["tool_errors"].items())
    sample["rollout"] = {"messages": t["messages"], "tool_calls": calls_json, "tool_results": results_json,
                         "turns": t["turns"], "stop_reason": t["stop_reason"], "tool_errors": errors_json}
    return sample
