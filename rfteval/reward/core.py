"""The sample a trainer's completion becomes, for every adapter: text (TRL's standard format, verl's solution_str,
OpenRLHF's response) through `_answer`, the one place a completion's text becomes sample.output_text (reasoning
stripped as `rfteval grade` strips it); messages (TRL's tool mode, verifiers, ART, tinker-cookbook) as the run's
rollout, through rfteval.data.rollout.rollout_sample, the one function `rfteval run --tools` builds a trajectory's
sample with; tool calls in OpenAI's shape whatever the trainer's.

The package's shared parts live beside it: options.py (the options), items.py (the item found again exactly),
base.py (the grader ready to score, the error rule); their public names are importable from here too.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence

from rfteval.data.json_types import JSONObject, JSONValue
from rfteval.data.reasoning import message_reasoning, split_reasoning
from rfteval.data.rollout import MAX_TURNS, NO_TOOL_CALLS, arguments_text, call_id, final_message, rollout_sample
from rfteval.data.sample import Sample, make_sample
from rfteval.reward.base import GraderLike, NamedPartial, Reward, RewardDetails, grader_config, refuse_rollout_reads
from rfteval.reward.items import META, Coercions, ItemTable, decode_exported, log, plain_data
from rfteval.reward.options import RewardOptions, RewardOptionsArgs, judge_keywords

__all__ = [
    "Message", "Conversation", "make_sample_for", "sample_from_message", "sample_from_messages",
    "sample_from_completion", "generated_messages", "plain_message", "openai_tool_call", "openai_tool_calls",
    "rollout_sample",
    # options.py's, items.py's and base.py's, handed on
    "RewardOptions", "RewardOptionsArgs", "judge_keywords", "META", "Coercions", "ItemTable", "decode_exported", "log",
    "plain_data", "GraderLike", "NamedPartial", "Reward", "RewardDetails", "grader_config", "refuse_rollout_reads",
]

# One message of a conversation as trainers hand it over (role, content, tool_calls...): read by key, never whole.
Message = Mapping[str, object]
# A prompt or a completion: text (TRL's standard format, verl's solution_str) or a list of messages (conversational).
Conversation = str | Sequence[Message]


def _answer(text: str, options: RewardOptions, reasoning: str | None = None) -> str:
    """The one place a completion's text becomes sample.output_text, for every trainer: the final answer, without
    reasoning, when options.reasoning is "strip", the blocks options.think_tags names. The rule is `rfteval run`'s and
    `rfteval grade`'s (rfteval.data.reasoning.split_reasoning, with the same defaults and the reasoning field the
    message carried), so a think-block or reasoning-parser completion scores in training as its answer does in
    evaluation."""
    return split_reasoning(text, reasoning, mode=options.reasoning, tags=options.tags).answer


def plain_message(value: object) -> object:
    """A pydantic model (tinker's Message and ToolCall, openai's message types, verifiers.v1's messages) as plain
    data; anything else as it is."""
    dump = getattr(value, "model_dump", None)
    return dump(mode="json") if callable(dump) else value


def _content_parts(content: object) -> tuple[str, str | None]:
    """(text, thinking) of a message's content: a string, or a content list whose text parts are joined (OpenAI's
    `text` / `output_text`, bare strings) and whose `thinking` parts (tinker-cookbook's renderers parse a thinking
    model's reply into one) are joined apart, None when there was none."""
    if content is None:
        return "", None
    if isinstance(content, str):
        return content, None
    if not isinstance(content, Sequence):
        return str(content), None
    text: list[str] = []
    thinking: list[str] | None = None
    for part in content:
        if isinstance(part, str):
            text.append(part)
            continue
        part = plain_message(part)
        if not isinstance(part, Mapping):
            continue
        kind = part.get("type")
        if kind == "thinking" and isinstance(part.get("thinking"), str):
            thinking = [*(thinking or []), part["thinking"]]
        elif kind in ("text", "output_text", None) and isinstance(part.get("text"), str):
            text.append(part["text"])
    return "".join(text), None if thinking is None else "".join(thinking)


def openai_tool_call(given: Mapping[str, object]) -> JSONObject:
    """One tool call in the shape OpenAI graders read: `{"id", "type": "function", "function": {"name",
    "arguments"}}`, or `{"id", "type": "custom", "custom": {"name", "input"}}` for a custom tool.

    Trainers hand calls over in other shapes: verifiers 0.4's traces are flat (`{id, type, name, namespace,
    arguments}`, type "function" or "custom"; a namespace is kept beside the call), as are the Responses API's items
    (`function_call` / `custom_tool_call`, with `call_id`); TRL's parse_response gives arguments as a dict. OpenAI's
    arguments are a JSON string, written here as vLLM's tool parsers write them (json.dumps, ensure_ascii=False)."""
    call = plain_data(given)
    assert isinstance(call, dict)  # plain_data makes a dict of a Mapping
    kind = call.get("type")
    nested = call.get("function") if kind != "custom" else call.get("custom")
    if not isinstance(nested, dict) and isinstance(call.get("name"), str):  # flat: verifiers 0.4, Responses items
        custom = kind in ("custom", "custom_tool_call")
        flat: JSONObject = {}
        rid = call.get("id", call.get("call_id"))
        if rid is not None:
            flat["id"] = rid
        flat["type"] = "custom" if custom else "function"
        value = call.get("input", call.get("arguments")) if custom else call.get("arguments")
        flat["custom" if custom else "function"] = {"name": call["name"], ("input" if custom else "arguments"): value}
        if call.get("namespace") is not None:
            flat["namespace"] = call["namespace"]
        call = flat
    function = call.get("function")
    if isinstance(function, dict):
        if not isinstance(function.get("arguments"), str) and function.get("arguments") is not None:
            function["arguments"] = json.dumps(function["arguments"], ensure_ascii=False)
    call.setdefault("type", "function")
    return call


def openai_tool_calls(calls: object) -> list[JSONValue]:
    """A message's tool calls (a list of calls in any shape openai_tool_call takes, or None) as
    `sample.output_tools`: every adapter builds them here, so a grader reading `function.name` reads it whatever
    the trainer's shape."""
    out: list[JSONValue] = []
    if not calls:
        return out
    if not isinstance(calls, Iterable):
        raise TypeError(f"tool_calls must be a list of calls, not {type(calls).__name__}")
    for given in calls:
        if isinstance(given, Mapping):
            out.append(openai_tool_call(given))
    return out


def make_sample_for(text: str, options: RewardOptions) -> Sample:
    """The sample for a completion given as text (TRL's standard format, verl's solution_str, OpenRLHF's
    response)."""
    return make_sample(_answer(text, options))


def sample_from_message(message: object, options: RewardOptions) -> Sample:
    """The sample of one assistant message, for every adapter that is handed a message (a mapping or a pydantic
    model; None, no reply, is the empty answer): its content as the answer, stripped of reasoning as `rfteval
    grade` strips it (options.reasoning and options.think_tags), with the message's own `reasoning_content` /
    `reasoning` and its `thinking` content parts as the reasoning field (a server with a reasoning parser leaves
    the answer's leading newlines in the content; tinker-cookbook's renderers parse the thinking into a part); its
    tool calls in OpenAI's shape."""
    message = plain_message(message)
    if message is None:
        return make_sample("")
    if not isinstance(message, Mapping):
        raise TypeError(f"a message must be a mapping or a pydantic model, not {type(message).__name__}")
    calls = message.get("tool_calls")
    tools = openai_tool_calls([plain_message(c) for c in calls] if isinstance(calls, Sequence) else calls)
    text, thinking = _content_parts(message.get("content"))
    reasoning = message_reasoning(message)
    if thinking is not None:
        reasoning = thinking if reasoning is None else reasoning + thinking
    return make_sample(_answer(text, options, reasoning), tools)


def generated_messages(messages: Sequence[object]) -> tuple[list[JSONValue], str | None]:
    """A trainer's generated messages in the shape `rfteval run --tools` writes a rollout (rfteval.data.rollout),
    and the final reply's reasoning field: so rollout_sample builds the same sample from them as from the run's.

    Each assistant turn: its text (content parts joined, `thinking` parts kept apart as the reasoning), null beside
    tool calls when empty (TRL's parse_response gives ""), its calls in OpenAI's shape (openai_tool_calls: verifiers
    0.4's flat calls, TRL's dict arguments); a call without an id (TRL's never have one, tinker-cookbook's may not)
    gets the one the run gives a server's id-less call (`call_<turn>_<index>`). A tool message without a
    `tool_call_id` (TRL writes `name` only, tinker-cookbook "" for an id-less call) answers the next unanswered
    call of the turn before it, as both append results in call order. User turns as they are."""
    out: list[JSONValue] = []
    reasoning: str | None = None
    turn = 0
    pending: list[str] = []  # the ids of the last assistant turn's calls no tool message has answered yet
    for given in messages:
        message = plain_message(given)
        if not isinstance(message, Mapping):
            raise TypeError(f"a message must be a mapping or a pydantic model, not {type(message).__name__}")
        role = message.get("role")
        if role == "assistant":
            turn += 1
            raw = message.get("tool_calls")
            calls = openai_tool_calls([plain_message(c) for c in raw] if isinstance(raw, Sequence) else raw)
            for index, call in enumerate(calls):
                if isinstance(call, dict) and not call.get("id"):
                    call["id"] = call_id(call, turn, index)
            pending = [cid for c in calls if isinstance(c, dict) and isinstance(cid := c.get("id"), str)]
            text, thinking = _content_parts(message.get("content"))
            reasoning = message_reasoning(message)
            if thinking is not None:
                reasoning = thinking if reasoning is None else reasoning + thinking
            reply: JSONObject = {"role": "assistant", "content": text if text or not calls else None}
            if calls:
                reply["tool_calls"] = calls
            out.append(reply)
        elif role == "tool":
            cid = message.get("tool_call_id")
            if not isinstance(cid, str) or not cid:
                cid = pending[0] if pending else ""
            if cid in pending:
                pending.remove(cid)
            content = message.get("content")
            text = content if isinstance(content, str) else (
                _content_parts(content)[0] if isinstance(content, list) else arguments_text(plain_data(content)))
            out.append({"role": "tool", "tool_call_id": cid, "content": text})
        else:
            out.append(plain_data(message))
    return out, reasoning


def sample_from_messages(messages: Sequence[object], options: RewardOptions | None = None, *,
                         stop_reason: str | None = None, choices: list[JSONValue] | None = None) -> Sample:
    """The grader's sample of a trainer's rollout given as the messages the model and its tools generated (never the
    prompt's): built by rollout_sample, the one rule `rfteval run --tools` builds it by, so an agent trained on the
    reward is scored as the eval scores it: the final turn's output_text (its answer, without reasoning, as
    options.reasoning and think_tags say), output_tools and choices, and the whole trajectory as
    `sample["rollout"]`. `stop_reason`: how the trainer's rollout ended, when it says (else `no_tool_calls` when the
    last turn called no tool, `max_turns` when it did, as `grade --outputs` derives it); `choices`: the final turn's
    choice as the trainer kept it (ART's Choice)."""
    options = options or RewardOptions()
    generated, reasoning = generated_messages(messages)
    if stop_reason is None:
        final = final_message(generated)
        stop_reason = MAX_TURNS if final is not None and final.get("tool_calls") else NO_TOOL_CALLS
    return rollout_sample(generated, stop_reason=stop_reason, choices=choices, reasoning=reasoning,
                          mode=options.reasoning, tags=options.tags)


def sample_from_completion(completion: object, options: RewardOptions | None = None) -> Sample:
    """The grader's sample for one completion, for every adapter: a string (TRL's standard format, verl's
    solution_str, OpenRLHF's response), or a list of messages (conversational format, TRL's tool mode, verifiers'
    ToolEnv) built as a run's rollout (sample_from_messages): the last assistant message gives output_text and
    output_tools, the trajectory sample["rollout"]; no assistant message (a rollout stopped before the model's first
    reply) is an empty answer. The list must hold only what the model generated: an adapter whose
    trainer hands over the whole conversation passes only the sampled messages, never a few-shot turn of the
    prompt. Anything else is a TypeError (a trainer's value, checked here rather than trusted)."""
    options = options or RewardOptions()
    if isinstance(completion, str):
        return make_sample_for(completion, options)
    if isinstance(completion, Mapping):
        completion = [completion]
    if isinstance(completion, Sequence):
        return sample_from_messages(completion, options)
    raise TypeError(f"a completion must be a string or a list of messages, not {type(completion).__name__}")
