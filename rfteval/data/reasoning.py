"""Reasoning models: the final answer apart from the thinking, the way OpenAI's `sample.output_text` has it.

Servers hand back a reasoning model's thinking in one of three ways: in a field of its own (`reasoning_content`:
SGLang, llama.cpp, DeepSeek, older vLLM; `reasoning`: newer vLLM, OpenRouter; the Responses API's reasoning
items), inside the content as a leading `<think>...</think>` block (no reasoning parser on the server), or as
content ending its thinking with a lone `</think>` (the chat template opened the block in the prompt). Graders
must see only the answer, or an exact-match grader fails every sample of a model that thinks. One rule, here,
serves the run, `rfteval grade` and the trainer reward adapters, so training and eval read answers alike.

Pure functions over text: no I/O; beside records.py and sample.py in the lowest layer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple, Protocol

from rfteval.data.sample import Sample, make_sample, parse_output_json

if TYPE_CHECKING:
    from rfteval.data.json_types import JSONValue

REASONING_MODES = ("strip", "keep")
DEFAULT_MODE = "strip"
DEFAULT_TAGS: tuple[tuple[str, str], ...] = (("<think>", "</think>"),)


@dataclass(frozen=True)
class Split:
    answer: str  # what graders see as sample.output_text in "strip" mode
    reasoning: str | None  # the thinking, None when there was none
    truncated_in_reasoning: bool  # stopped (finish_reason "length") while still thinking: no answer


def check_mode(mode: str) -> str:
    if mode not in REASONING_MODES:
        raise ValueError(f"unknown reasoning mode {mode!r}; expected one of {', '.join(REASONING_MODES)}")
    return mode


def parse_tags(values: Sequence[str] | None) -> tuple[tuple[str, str], ...]:
    """`--think-tags` values ("OPEN,CLOSE", repeatable; several pairs in one value as "O1,C1,O2,C2") as tag
    pairs; none given: DEFAULT_TAGS. ValueError (the caller names the option) for an odd or empty list."""
    if not values:
        return DEFAULT_TAGS
    parts = [p.strip() for value in values for p in value.split(",")]
    if len(parts) % 2 or any(not p for p in parts):
        raise ValueError("expected OPEN,CLOSE tag pairs, e.g. '<think>,</think>'")
    return tuple((parts[i], parts[i + 1]) for i in range(0, len(parts), 2))


REASONING_FIELDS = ("reasoning_content", "reasoning")  # SGLang, llama.cpp, DeepSeek, older vLLM; newer vLLM, OpenRouter


def message_reasoning(message: Mapping[str, object]) -> str | None:
    """The thinking a chat message carries beside its content: the first non-empty of `reasoning_content` and
    `reasoning`; "" when one was sent empty (the model reasoned and showed none of it); None when neither is text.
    The provider reads a server's message with it and the reward adapters a trainer's, so both strip alike."""
    texts = [v for v in (message.get(name) for name in REASONING_FIELDS) if isinstance(v, str)]
    return next((t for t in texts if t), texts[0] if texts else None)


def _leading_block(content: str, tags: Sequence[tuple[str, str]]) -> tuple[str, str, bool] | None:
    """(reasoning, answer, closed) of a think block at the start of `content`, or None when there is none.

    A block opened at the start (after whitespace) ends at its first close tag; never closed, all of it is
    reasoning. Without an opening tag, text up to a lone close tag is reasoning whose block the chat template
    opened in the prompt; a close tag that follows an opening tag of its own pair later in the text is not lone.
    """
    head = content.lstrip() if content[:1].isspace() else content  # no copy of every plain answer
    for open_tag, close_tag in tags:
        if head.startswith(open_tag):
            rest = head[len(open_tag):]
            end = rest.find(close_tag)
            if end < 0:
                return rest, "", False
            return rest[:end], rest[end + len(close_tag):], True
    first: tuple[int, str, str] | None = None
    for open_tag, close_tag in tags:
        end = content.find(close_tag)
        if end < 0:
            continue
        opened = content.find(open_tag)
        if 0 <= opened < end:  # a block opened later in the text: not the template's, and not leading
            continue
        if first is None or end < first[0]:
            first = (end, open_tag, close_tag)
    if first is None:
        return None
    end, _, close_tag = first
    return content[:end], content[end + len(close_tag):], True


def split_reasoning(content: str | None, reasoning_field: str | None = None, *, mode: str = DEFAULT_MODE,
                    tags: Sequence[tuple[str, str]] = DEFAULT_TAGS, finish_reason: str | None = None) -> Split:
    """The answer and the reasoning of one response (see the module docstring for the shapes).

    `reasoning_field` is what the server sent apart; when it is given the content is the answer as it stands (a
    server that parsed the reasoning out does not leave a block behind). "keep" grades the raw content; the
    reasoning is still reported. A response cut off by the output limit while still thinking (an unterminated
    block, or a reasoning field with no content) is `truncated_in_reasoning`, its answer empty.

    Only an answer that had thinking taken from it (or sent beside it) is stripped of surrounding whitespace, as
    the text after `</think>` starts with newlines OpenAI's output_text would not have; content with no reasoning
    is graded exactly as sent, as it always was (its stored grades stay valid).
    """
    check_mode(mode)
    raw = content or ""
    length = finish_reason == "length"
    if reasoning_field:
        answer = raw.strip()
        return Split(raw if mode == "keep" else answer, reasoning_field, length and not answer)
    block = _leading_block(raw, tags)
    if block is None:
        if reasoning_field is None:  # no reasoning at all: the content exactly as before, whitespace included
            return Split(raw, None, False)
        # "" from the server: it reasoned but showed none of it (the Responses API without a summary)
        answer = raw.strip()
        return Split(raw if mode == "keep" else answer, None, length and not answer)
    reasoning, answer, closed = block
    answer = answer.strip()
    # an empty block (Qwen3 with thinking switched off sends one) is no reasoning
    return Split(raw if mode == "keep" else answer, reasoning.strip() or None, length and not closed)


def answer_text(content: str | None, *, mode: str = DEFAULT_MODE,
                tags: Sequence[tuple[str, str]] = DEFAULT_TAGS) -> str:
    """The answer of a completion that came with no metadata (a TRL completion): the same rule as a run's."""
    return split_reasoning(content, mode=mode, tags=tags).answer


def choices_with_answer(choices: list[JSONValue] | None, answer: str,
                        mode: str = DEFAULT_MODE) -> list[JSONValue] | None:
    """The stored choices with choices[0].message.content the answer graders see; in "strip" mode without the
    reasoning fields too (OpenAI's sample carries none). None stays None (the sample builds its own)."""
    if not choices or not isinstance(choices[0], dict):
        return choices
    first = dict(choices[0])
    message = first.get("message")
    if not isinstance(message, dict):
        return choices
    message = dict(message)
    message["content"] = answer
    if mode == "strip":
        message.pop("reasoning_content", None)
        message.pop("reasoning", None)
    first["message"] = message
    return [first, *choices[1:]]


class Answer(NamedTuple):
    """What graders and the record see of one stored response under one reasoning mode (a tuple: built for every
    sample graded and every record written)."""

    output_text: str
    output_json: JSONValue  # the stored parse (carried), or the answer's own
    choices: list[JSONValue] | None
    reasoning: str | None
    truncated_in_reasoning: bool


def answer_of(output_text: str | None, output_json: JSONValue = None, choices: list[JSONValue] | None = None,
              reasoning_field: str | None = None, finish_reason: str | None = None, *, mode: str = DEFAULT_MODE,
              tags: Sequence[tuple[str, str]] = DEFAULT_TAGS) -> Answer:
    """A stored response (content as sent, its parse, choices, the reasoning field) as graders see it: output_json
    is the stored parse when the answer is the content unchanged, else the answer's own parse (the thinking in front
    of a JSON answer made the content itself unparseable)."""
    raw = output_text or ""
    if reasoning_field is None and not any(o in raw or c in raw for o, c in tags):  # most outputs: no reasoning
        return Answer(raw, output_json, choices, None, False)
    split = split_reasoning(output_text, reasoning_field, mode=mode, tags=tags, finish_reason=finish_reason)
    if split.answer == raw:
        if reasoning_field is not None and mode == "strip":
            choices = choices_with_answer(choices, raw, mode)  # without the reasoning fields
        return Answer(raw, output_json, choices, split.reasoning, split.truncated_in_reasoning)
    parsed = parse_output_json(split.answer)
    return Answer(split.answer, parsed if parsed is not None else (output_json if split.answer == raw.strip() else None),
                  choices_with_answer(choices, split.answer, mode), split.reasoning, split.truncated_in_reasoning)


class StoredResponse(Protocol):
    """What a stored response holds for grading (rfteval.run.store.ResponseEntry; a Protocol, since data/ sits
    below run/)."""

    @property
    def output_text(self) -> str | None: ...
    @property
    def output_json(self) -> JSONValue: ...
    @property
    def output_tools(self) -> list[JSONValue] | None: ...
    @property
    def choices(self) -> list[JSONValue] | None: ...
    @property
    def reasoning(self) -> str | None: ...
    @property
    def finish_reason(self) -> str | None: ...


def entry_sample(entry: StoredResponse, *, mode: str = DEFAULT_MODE,
                 tags: Sequence[tuple[str, str]] = DEFAULT_TAGS) -> Sample:
    """The grader's sample of a stored response: built from the answer, not the thinking."""
    a = answer_of(entry.output_text, entry.output_json, entry.choices, entry.reasoning, entry.finish_reason,
                  mode=mode, tags=tags)
    return make_sample(a.output_text, entry.output_tools, a.choices, a.output_json)


TRUNCATION_HINT = "raise --max-output-tokens (the limit counts reasoning tokens)"


def truncation_line(label: str, n: int, share: float) -> str | None:
    """What the run table and compare say of a model whose samples ran out of tokens while reasoning (None: none
    did)."""
    if not n:
        return None
    return (f"{label}: {n} sample(s) ({share:.1%}) ran out of tokens while reasoning and were graded as empty "
            f"answers; {TRUNCATION_HINT}")
