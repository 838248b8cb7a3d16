"""What every trainer adapter shares: the options, the grader's engine, the sample built from a completion, the item
found again exactly whatever the trainer's loader did to it, and the error rule the trainer understands.

A team that leaves OpenAI's fine-tuning keeps its grader; training on it in TRL, verl, verifiers or OpenRLHF must not
mean re-writing it, or eval and training drift apart. Every adapter runs the grader through the same engine as
`rfteval grade` (python graders in the same sandbox), so a completion gets the same score in training as in
evaluation, as long as the grader sees the same item: hence `items=` and the exported datasets' metadata column.

A grading error is never raised (one bad completion never stops a training run): it scores 0 (OpenAI's rule,
`on_error="zero"`) or None (`on_error="none"`, which TRL leaves out of the group's baseline), and is logged once per
error type on the `rfteval.reward` logger. Bad setup (an unreadable grader, a model grader with no judge endpoint,
a sandbox that cannot be built) raises at construction.
"""

from __future__ import annotations

import datetime as _dt
import functools
import json
import logging
import threading
import weakref
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeAlias, TypedDict, TypeVar

from rfteval.data.json_types import JSONMapping, JSONObject, JSONValue
from rfteval.data.reasoning import message_reasoning, parse_tags, split_reasoning
from rfteval.data.rollout import MAX_TURNS, NO_TOOL_CALLS, arguments_text, call_id, final_message, rollout_sample
from rfteval.data.sample import Sample, make_sample
from rfteval.errors import InputError
from rfteval.graders.base import GradeOptions, GraderConfig, GradeResult
from rfteval.graders.engine import GradingEngine
from rfteval.graders.loader import load_grader, parse_config, unwrap_grader
from rfteval.limits import PYTHON_MEMORY_MB, PYTHON_TIMEOUT_S
from rfteval.providers.endpoint import DEFAULT_API, DEFAULT_KEY_ENV, JUDGE_CONCURRENCY, JUDGE_KEYWORDS, JudgeEndpoint
from rfteval.sandbox.policy import SandboxPolicy, unsafe_from_env

if TYPE_CHECKING:
    from rfteval.providers.judge import Judge

log = logging.getLogger("rfteval.reward")

GraderLike: TypeAlias = "str | Path | JSONMapping | GraderConfig"  # a string: JSONMapping is one at run time
# One message of a conversation as trainers hand it over (role, content, tool_calls...): read by key, never whole.
Message = Mapping[str, object]
# A prompt or a completion: text (TRL's standard format, verl's solution_str) or a list of messages (conversational).
Conversation = str | Sequence[Message]

# The column `rfteval export-dataset` adds: JSON text saying which fields it stored as JSON text (because the
# trainer's loader would have changed them) and which it added (the id of a line that had none), so the adapter
# rebuilds the original line exactly.
META = "rfteval"
ON_ERROR = ("zero", "none")
REASONING = ("strip", "keep")


@dataclass(frozen=True)
class RewardOptions:
    """The settings `rfteval grade` takes as flags (--judge-*, --grader-timeout, --grader-memory,
    --unsafe-python-graders), plus how the adapter finds the item and scores an error."""

    judge_base_url: str | None = None
    judge_api_key_env: str = DEFAULT_KEY_ENV
    judge_api: str = DEFAULT_API
    judge_model: str | None = None
    judge_concurrency: int = JUDGE_CONCURRENCY
    grader_timeout: float = PYTHON_TIMEOUT_S
    grader_memory: int = PYTHON_MEMORY_MB
    python_workers: int | None = None
    unsafe_python_graders: bool = False
    name: str | None = None  # the reward's __name__ (TRL logs rewards under it); default rfteval_<grader name>
    # "zero": an erroring completion scores 0 (OpenAI's rule); "none": None, which TRL leaves out of the group's
    # baseline. None here means the adapter's default (TRL: "none", the others: "zero").
    on_error: str | None = None
    # "strip": the grader sees the final answer, without a leading think block (what OpenAI's output_text is);
    # "keep": the completion as generated.
    reasoning: str = "strip"
    # The think-block tags, as `rfteval grade --think-tags` takes them: "OPEN,CLOSE" per pair (one string, or a list);
    # None: grade's default, <think>,</think>. Eval and training must strip the same blocks, or a custom-tag model
    # is graded on its answer in one and on its thinking in the other.
    think_tags: str | Sequence[str] | None = None
    # The original RFT lines (a JSONL path, or the rows): each completion's item is the line whose id is in the
    # trainer's id column, exactly as `rfteval grade` reads it, whatever the trainer's loader did to the columns.
    items: str | Sequence[JSONObject] | None = None
    id_field: str = "id"

    def __post_init__(self) -> None:
        if self.on_error is not None and self.on_error not in ON_ERROR:
            raise ValueError(f"on_error must be 'zero' or 'none', not {self.on_error!r}")
        if self.reasoning not in REASONING:
            raise ValueError(f"reasoning must be 'strip' or 'keep', not {self.reasoning!r}")
        if isinstance(self.items, Path):
            object.__setattr__(self, "items", str(self.items))
        if self.think_tags is not None:  # a tuple of strings: hashable, and the same after a JSON round trip
            tags = (self.think_tags,) if isinstance(self.think_tags, str) else tuple(self.think_tags)
            try:
                parse_tags(tags)
            except (ValueError, AttributeError, TypeError) as exc:
                raise ValueError(f"think_tags: {exc} (as `rfteval grade --think-tags`), not "
                                 f"{self.think_tags!r}") from None
            object.__setattr__(self, "think_tags", tags)

    def judge_endpoint(self) -> JudgeEndpoint:
        """The judge_* options as the endpoint a model grader's judge is opened on."""
        return JudgeEndpoint(**{field: getattr(self, key) for key, field in JUDGE_KEYWORDS.items()})

    def sandbox_policy(self) -> SandboxPolicy:
        """The python grader sandbox's, for this reward's pool alone: unsafe with unsafe_python_graders=True (else
        as RFTEVAL_UNSAFE_PYTHON_GRADERS=1 says), the judge's key variable kept from grader code, the limits."""
        return SandboxPolicy.from_flags(self.unsafe_python_graders or unsafe_from_env(), (self.judge_api_key_env,),
                                        self.grader_timeout, self.grader_memory)

    @functools.cached_property
    def tags(self) -> tuple[tuple[str, str], ...]:
        """think_tags as (open, close) pairs: `rfteval grade`'s parse of the same values."""
        return parse_tags(self.think_tags if not isinstance(self.think_tags, str) else (self.think_tags,))


class RewardOptionsArgs(TypedDict, total=False):
    """RewardOptions as the keyword options every `for_*` factory takes (`**options`), so a call is checked field by
    field (tests/reward/test_core.py holds it to RewardOptions' fields)."""

    judge_base_url: str | None
    judge_api_key_env: str
    judge_api: str
    judge_model: str | None
    judge_concurrency: int
    grader_timeout: float
    grader_memory: int
    python_workers: int | None
    unsafe_python_graders: bool
    name: str | None
    on_error: str | None
    reasoning: str
    think_tags: str | Sequence[str] | None
    items: str | Sequence[JSONObject] | None
    id_field: str


def judge_keywords(endpoint: JudgeEndpoint) -> dict[str, str | int | None]:
    """An endpoint as RewardOptions' judge_* keywords (what an exported module stores)."""
    return {key: getattr(endpoint, field) for key, field in JUDGE_KEYWORDS.items()}


_T = TypeVar("_T")


class NamedPartial(functools.partial[_T]):
    """A functools.partial that carries the `__name__` trainers log a reward under (verl, verifiers): it pickles as a
    partial does and inspect.iscoroutinefunction sees through it to the wrapped function."""

    __name__: str


def grader_config(grader: GraderLike) -> GraderConfig:
    """A grader in any form `load_grader` takes (a path, FILE.py:FUNCTION), or a dict as the file would hold it
    (bare, {"grader": ...} or a fine-tuning job), or a parsed config."""
    if isinstance(grader, GraderConfig):
        return grader
    if isinstance(grader, Mapping):
        obj, prefix = unwrap_grader(dict(grader))
        return parse_config(obj, None, prefix.rstrip("."))
    if isinstance(grader, (str, Path)):
        return load_grader(grader)
    raise TypeError(f"grader must be a path, a dict or a grader config, not {type(grader).__name__}")


def _answer(text: str, options: RewardOptions, reasoning: str | None = None) -> str:
    """The one place a completion's text becomes sample.output_text, for every trainer: the final answer, without
    reasoning, when options.reasoning is "strip", the blocks options.think_tags names. The rule is `rfteval run`'s and
    `rfteval grade`'s (rfteval.data.reasoning.split_reasoning, with the same defaults and the reasoning field the
    message carried), so a think-block or reasoning-parser completion scores in training as its answer does in
    evaluation."""
    return split_reasoning(text, reasoning, mode=options.reasoning, tags=options.tags).answer


# ------------------------------------------------------------------ values a loader changed, turned back


class Coercions:
    """What a loader did to the columns that cannot be undone exactly, noted once per (column, kind) so the
    warning names the column and says to pass items= (never silent, never a flood)."""

    def __init__(self, owner: str):
        self.owner = owner
        self._seen: set[tuple[str, str]] = set()
        self._lock = threading.Lock()

    def note(self, column: str, kind: str) -> None:
        with self._lock:
            if (column, kind) in self._seen:
                return
            self._seen.add((column, kind))
        why = {"timestamp": "holds a timestamp the loader made from a date-like string (Arrow's JSON reader does); "
                            "it is given to the grader as ISO text, which may not be the line's own text",
               "null": "holds null, which a loader writes for a key the line did not have (Arrow pads struct "
                       "keys and columns other rows have); the grader may see a key the line never had",
               "text": "holds a value JSON has no form for (bytes, a decimal, a duration: never read from a JSON "
                       "line); it is given to the grader as its text (str)"}[kind]
        log.warning("%s: column %r %s. Pass items=ITEMS.jsonl (or export the dataset with `rfteval export-dataset`) "
                    "so the item is the original line (logged once per column)", self.owner, column, why)


def plain_data(value: object, column: str | None = None, notes: Coercions | None = None) -> JSONValue:
    """Column values as JSON data: numpy arrays and scalars, Arrow scalars (what parquet- and Arrow-backed
    datasets hand over, verl's and TRL's among them) become lists and numbers, exactly. What cannot be undone
    exactly (a timestamp made from a string, null padding, a value of no JSON kind given as its text) is noted on
    `notes` under `column`."""
    if value is None:
        if notes is not None and column is not None:
            notes.note(column, "null")
        return None
    if isinstance(value, (str, int, float, bool)):
        return value
    if isinstance(value, Mapping):
        return {k: plain_data(v, column, notes) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain_data(v, column, notes) for v in value]
    if isinstance(value, (_dt.datetime, _dt.date, _dt.time)):
        if notes is not None and column is not None:
            notes.note(column, "timestamp")
        if isinstance(value, _dt.datetime) and value.tzinfo is None and value.time() == _dt.time():
            return value.date().isoformat()  # "2025-03-14" came in as midnight of that day: the likeliest text
        return value.isoformat()
    as_py = getattr(value, "as_py", None)  # Arrow scalars
    if callable(as_py):
        return plain_data(as_py(), column, notes)
    tolist = getattr(value, "tolist", None)  # numpy arrays and scalars, torch tensors
    if callable(tolist):
        return plain_data(tolist(), column, notes)
    # No JSON line holds such a value (an item read as `rfteval grade` reads it never does), so no score depends
    # on it staying an object; as text the item stays JSON, which every grader and the python sandbox take.
    if notes is not None and column is not None:
        notes.note(column, "text")
    return str(value)


def decode_exported(row: Mapping[str, object], prompt: object = None) -> JSONObject | None:
    """The original line of a row written by `rfteval export-dataset` (it has the META column), else None: the
    line's own keys in its order, those stored as JSON text parsed back, the one the prompt column holds taken from
    `prompt` (TRL hands the prompt over apart from the columns); keys a reader padded, the id export-dataset added
    and keys a trainer added are left out."""
    meta = row.get(META)
    if not isinstance(meta, str):
        return None
    try:
        info = json.loads(meta)
    except ValueError:
        return None
    if not isinstance(info, dict) or not isinstance(info.get("fields"), list):
        return None
    as_json = set(info.get("json", ()))
    out: JSONObject = {}
    for key in info["fields"]:
        if key == info.get("prompt"):
            out[key] = plain_data(prompt)
        elif key in as_json:
            text = row[key]
            if not isinstance(text, (str, bytes, bytearray)):  # what json.loads refuses, refused as it would
                raise TypeError(f"column {key!r} should hold JSON text (rfteval export-dataset wrote it so), not "
                                f"{type(text).__name__}")
            out[key] = json.loads(text)
        else:
            out[key] = plain_data(row.get(key))
    return out


def _row_ids(rows: Iterable[JSONObject], id_field: str) -> Iterable[tuple[str, JSONObject]]:
    """(id, row) as rfteval reads a dataset: the id field, else the line's content hash (identical lines numbered
    in order: abc123, abc123-2, ...), so the id `export-dataset` added is the one `rfteval grade` uses."""
    from rfteval.data.dataset import content_id

    repeats: dict[str, int] = {}
    for row in rows:
        if row.get(id_field) is not None:
            yield str(row[id_field]), dict(row)
            continue
        rid = content_id(dict(row))
        count = repeats[rid] = repeats.get(rid, 0) + 1
        yield (rid if count == 1 else f"{rid}-{count}"), dict(row)


class ItemTable:
    """The original lines by id (items=), read once per process."""

    def __init__(self, items: str | Sequence[JSONObject], id_field: str):
        from rfteval.data.dataset import iter_jsonl

        self.source = items if isinstance(items, str) else "items="
        if isinstance(items, str):
            rows: list[JSONObject] = []
            for lineno, row in iter_jsonl(Path(items)):
                if isinstance(row, InputError):
                    raise row
                if not isinstance(row, dict):
                    raise InputError(f"expected a JSON object, got {type(row).__name__}", items, lineno)
                rows.append(row)
        else:
            rows = [dict(r) for r in items]
        self.by_id = dict(_row_ids(rows, id_field))
        self.id_field = id_field

    def get(self, rid: object) -> JSONObject:
        key = str(plain_data(rid))
        try:
            return self.by_id[key]
        except KeyError:
            raise InputError(f"no line with {self.id_field} {key!r} in {self.source}: the trainer's dataset is not "
                             "the one items= names", field=self.id_field) from None


# ------------------------------------------------------------------ completions as samples


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


# ------------------------------------------------------------------ the grader, ready to score


# What a pickled reward holds: its class, its grader config as JSON, its options, its subclass's own arguments.
_Pickled: TypeAlias = "tuple[type[Reward], JSONObject, RewardOptions, dict[str, object]]"


class RewardDetails(TypedDict):
    """A result as a trainer logs it beside the score (verl's details=True: keys other than score are logged)."""

    score: float | None
    error: str  # the error type, "" when none
    passed: bool


def _close(engine: GradingEngine, judge: Judge | None) -> None:
    try:
        engine.close()
    finally:
        if judge is not None:
            judge.close()


def refuse_rollout_reads(config: GraderConfig, trainer: str) -> None:
    """A trainer that hands the reward text only (verl's solution_str, OpenRLHF's query) has no trajectory to build
    sample.rollout from: a grader reading it would score every completion as a grading error, so it is refused, in
    one line naming the field, before any training step."""
    from rfteval.graders.checks import reads_rollout

    if reads_rollout(config):
        raise InputError(f"grader {config.name!r} reads sample.rollout (an agent run's trajectory), but {trainer} hands "
                         "the reward text only, no messages: train it where the reward gets the messages (TRL's tool "
                         "mode, verifiers, ART, tinker-cookbook's tool_use)", field="sample.rollout")


class Reward:
    """A grader ready to score completions: its engine (one python pool for the process's life), its judge, the
    original items when given, and the error rule. Each trainer's adapter is a subclass with that trainer's call."""

    default_on_error = "zero"
    # The trainer's name when it hands text only (no messages): a grader reading sample.rollout is refused
    text_only: str | None = None
    # Why on_error="none" is refused, for a trainer that records every reward as a float (None would fail its step
    # or its tensor); None: the trainer can leave a reward out (TRL), or maps it itself (OpenRLHF: 0.0, said once).
    none_refused: str | None = None

    def __init__(self, grader: GraderLike, options: RewardOptions):
        if options.on_error == "none" and self.none_refused is not None:
            raise ValueError(f"on_error='none' {self.none_refused}; a grading error scores 0 (on_error='zero', the "
                             "default) and is counted (error_counts)")
        self.config = grader_config(grader)
        if self.text_only is not None:
            refuse_rollout_reads(self.config, self.text_only)
        self.options = options
        self.on_error = options.on_error or self.default_on_error
        self.table = ItemTable(options.items, options.id_field) if options.items is not None else None
        judge = self._judge()
        grade_options = GradeOptions(sandbox=options.sandbox_policy(), python_workers=options.python_workers)
        try:
            self.engine = GradingEngine(self.config, grade_options, judge=judge)
        except BaseException:
            if judge is not None:
                judge.close()
            raise
        self._finalizer = weakref.finalize(self, _close, self.engine, judge)  # also runs at interpreter exit
        self._lock = threading.Lock()
        self._logged: set[Hashable] = set()
        self.__name__ = options.name or f"rfteval_{self.config.name}"
        self.coercions = Coercions(self.__name__)
        self.error_counts: dict[str, int] = {}  # grading errors by type, over the reward's life

    def _judge(self) -> Judge | None:
        """The judge the grader calls (None without a model grader); a setting it cannot be opened with says which
        options to pass."""
        from rfteval.graders.base import judge_types
        from rfteval.providers.judge import open_judge

        try:
            return open_judge(self.options.judge_endpoint(), self.config)
        except InputError as exc:
            types = "/".join(sorted(judge_types(self.config)))
            raise InputError(
                f"grader {self.config.name!r} has a {types} grader, which needs a judge "
                f"endpoint: pass judge_base_url= (an OpenAI-compatible server, e.g. vLLM), judge_api_key_env= (the "
                f"environment variable holding its key) and, to replace the grader's model, judge_model= "
                f"({exc.message})") from None

    # -- the item

    def find_item(self, fields: Mapping[str, object], prompt: object = None) -> JSONObject:
        """The item for one completion from what the trainer handed over: the items= line by id; else the line an
        exported dataset carries exactly; else the fields as they came (values a loader invented turned back where
        exact, warned about once per column where not), with a conversation prompt as `messages`."""
        if self.table is not None:
            rid = self._exported_id(fields)
            if rid is None:
                raise InputError(f"items= is given but the trainer passed no {self.options.id_field!r} column: keep "
                                 "the id column in the dataset (rfteval export-dataset writes it)",
                                 field=self.options.id_field)
            return self.table.get(rid)
        exported = decode_exported(fields, prompt)
        if exported is not None:
            return exported
        item: JSONObject = {}
        plain_prompt = plain_data(prompt)
        if "messages" not in fields and isinstance(plain_prompt, list) and plain_prompt and all(
                isinstance(m, Mapping) and "role" in m for m in plain_prompt):
            item["messages"] = plain_prompt
        item.update((key, plain_data(value, key, self.coercions)) for key, value in fields.items())
        return item

    def _exported_id(self, fields: Mapping[str, object]) -> object:
        """The id items= is looked up by: an exported row's own line's id first (export-dataset stores a date-like
        id as JSON text, which Arrow would have made a timestamp: the column holds '"2025-03-14"'), else the id
        column as it came (a line that had none has the id export-dataset added, in the column only)."""
        key = self.options.id_field
        try:
            exported = decode_exported(fields)
        except (TypeError, ValueError, KeyError):
            exported = None  # not export-dataset's row after all: the column as it came
        if exported is not None and exported.get(key) is not None:
            return exported[key]
        return fields.get(key)

    # -- grading and the error rule

    def grade(self, pairs: Sequence[tuple[Sample, JSONObject]], units: Sequence[Hashable]) -> list[GradeResult]:
        return self.engine.grade_batch(list(pairs), list(units))

    def grade_one(self, sample: Sample, item: JSONObject) -> GradeResult:
        return self.grade([(sample, item)], [0])[0]

    def value(self, result: GradeResult) -> float | None:
        """The reward for one result: its score, or on a grading error 0 ("zero") or None ("none"), the error
        counted and its type logged the first time it shows."""
        if result.error is None:
            return float(result.score)
        self._log_error(result)
        return 0.0 if self.on_error == "zero" else None

    def score(self, results: Sequence[GradeResult]) -> list[float | None]:
        return [self.value(r) for r in results]

    def details(self, result: GradeResult) -> RewardDetails:
        """A result as a dict a trainer logs beside the score: error type ("" when none) and passed."""
        return {"score": self.value(result), "error": result.error.type if result.error else "",
                "passed": bool(result.passed) if result.passed is not None else result.error is None and
                result.score >= 1.0}

    def _log_error(self, result: GradeResult) -> None:
        assert result.error is not None
        with self._lock:
            self.error_counts[result.error.type] = self.error_counts.get(result.error.type, 0) + 1
            if result.error.type in self._logged:
                return
            self._logged.add(result.error.type)
        rule = "scored 0" if self.on_error == "zero" else "scored None"
        log.warning("%s: %s, %s (logged once per error type): %s", self.__name__, result.error.type, rule,
                    result.error.message[:2000])

    def note_once(self, key: Hashable, message: str, *args: object) -> None:
        with self._lock:
            if key in self._logged:
                return
            self._logged.add(key)
        log.warning(message, *args)

    # -- life and pickling

    def close(self) -> None:
        """Stop the python workers and the judge (also done at exit)."""
        self._finalizer()

    def __enter__(self) -> Reward:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __reduce__(self) -> tuple[Callable[[type[Reward], JSONObject, RewardOptions, dict[str, object]], Reward],
                                  _Pickled]:
        """Pickled as its class, config and options (trainers ship reward functions to worker processes, TRL's
        AsyncGRPOTrainer among them); the copy starts its own engine."""
        return _rebuild, (type(self), self.config.model_dump(mode="json"), self.options, self._extra())

    def _extra(self) -> dict[str, object]:
        """The subclass's own constructor arguments, by keyword, for the copy a pickle rebuilds."""
        return {}

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.__name__} ({self.config.type})>"


def _rebuild(cls: type[Reward], config: JSONObject, options: RewardOptions, extra: dict[str, object]) -> Reward:
    return cls(config, options, **extra)
