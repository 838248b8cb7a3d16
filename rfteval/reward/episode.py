"""What the episode trainers' adapters share (tinker-cookbook, OpenPipe ART): one sampled assistant message as the
grader's sample, and one grade as the numeric metrics those trainers log beside the reward.

These trainers hand over a whole message, not text: tinker-cookbook's renderers parse a thinking model's reply into
`thinking` and `text` content parts; an OpenAI-compatible server with a reasoning parser (vLLM, SGLang) sends the
thinking in `reasoning_content` / `reasoning` and the answer after it with its leading newlines. `rfteval grade`
strips such an answer, so the sample is built here with the same rule (rfteval.data.reasoning) from the parts the
message holds, never from the text a trainer's helper would have flattened."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rfteval.data.reasoning import split_reasoning
from rfteval.data.sample import Sample, make_sample
from rfteval.graders.base import GradeResult
from rfteval.reward.core import RewardOptions, make_sample_for, openai_tool_calls, plain_data

ERROR_METRIC = "rfteval/grading_error"  # 1 for a completion whose grading failed (its reward is the error rule's)
SUB_PREFIX = "rfteval/"  # a multi grader's sub-scores, each under its own name


def _dump(value: object) -> object:
    """A pydantic model (tinker's ToolCall, openai's message types) as plain data; anything else as it is."""
    dump = getattr(value, "model_dump", None)
    return dump(mode="json") if callable(dump) else value


def _parts(content: Sequence[object]) -> tuple[str, str | None]:
    """(text, thinking) of a content list: text parts joined; thinking parts joined, None when there was none."""
    text: list[str] = []
    thinking: list[str] | None = None
    for part in content:
        if isinstance(part, str):
            text.append(part)
            continue
        part = _dump(part)
        if not isinstance(part, Mapping):
            continue
        kind = part.get("type")
        if kind == "thinking" and isinstance(part.get("thinking"), str):
            thinking = [*(thinking or []), part["thinking"]]
        elif kind in ("text", "output_text", None) and isinstance(part.get("text"), str):
            text.append(part["text"])
    return "".join(text), None if thinking is None else "".join(thinking)


def message_sample(message: object, options: RewardOptions) -> Sample:
    """The sample of one assistant message (a mapping or a pydantic model): its answer by `rfteval grade`'s rule
    (thinking from content parts or the reasoning field is not the answer, and the answer after it is stripped as
    grade strips it), its tool calls in OpenAI's shape. No message (None): the empty answer."""
    message = _dump(message)
    if message is None:
        return make_sample("")
    if not isinstance(message, Mapping):
        raise TypeError(f"a message must be a mapping or a pydantic model, not {type(message).__name__}")
    calls = message.get("tool_calls")
    tools = openai_tool_calls([_dump(c) for c in calls] if isinstance(calls, Sequence) else calls)
    content = message.get("content")
    field = message.get("reasoning_content")
    if not isinstance(field, str):
        field = message.get("reasoning")
    reasoning = field if isinstance(field, str) else None
    if isinstance(content, Sequence) and not isinstance(content, str):
        text, thinking = _parts(content)
        if thinking is not None:
            reasoning = thinking if reasoning is None else reasoning + thinking
    else:
        text = content if isinstance(content, str) else ""
    if reasoning is None:
        answer = make_sample_for(text, options)["output_text"]  # a think block left in the text: core's one rule
        return make_sample(answer if isinstance(answer, str) else text, tools)
    return make_sample(split_reasoning(text, reasoning, mode=options.reasoning).answer, tools)


def result_metrics(result: GradeResult) -> dict[str, float]:
    """What the trainer logs beside the reward: whether grading failed, and each sub-score (multi graders)."""
    out = {ERROR_METRIC: 1.0 if result.error is not None else 0.0}
    for name, value in (result.sub_scores or {}).items():
        out[f"{SUB_PREFIX}{name}"] = float(value)
    return out


def plain_metadata(metadata: Mapping[str, object]) -> dict[str, object]:
    """A trainer's metadata values as JSON data (numpy and Arrow values turned back exactly)."""
    return {str(k): plain_data(v) for k, v in metadata.items()}
