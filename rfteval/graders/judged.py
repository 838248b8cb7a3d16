"""What the model graders (score_model, label_model, group_judge) share: input messages, sampling params, the
judged grader, how a judge request is built and how its answer is read. The client that sends the requests is
rfteval.providers.judge."""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import re
from collections.abc import Callable, Hashable, Sequence
from typing import TYPE_CHECKING, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, field_validator

from rfteval.data.json_types import JSONField
from rfteval.graders.base import (
    MODEL_REFUSAL,
    MODEL_SERVER,
    MODEL_TRUNCATED,
    BuildContext,
    GraderConfig,
    GradeResult,
    Pair,
)
from rfteval.graders.template import check_template
from rfteval.providers.base import Generation, GenerationRequest, ProviderError, Sampling

if TYPE_CHECKING:
    from rfteval.data.json_types import JSONMapping, JSONObject, JSONValue
    from rfteval.data.sample import Sample
    from rfteval.providers.judge import JudgeClient

# The content parts a model grader's input takes (openai-python: types/graders/score_model_grader_param.py).
CONTENT_PART_TYPES = ("input_text", "output_text", "input_image", "input_audio")
# OpenAI's ReasoningEffort (openai-python: types/shared/reasoning_effort.py).
REASONING_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh", "max")


class InputMessage(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    role: Literal["user", "assistant", "system", "developer"]
    content: str | dict[str, JSONField] | list[JSONField]  # JSONField: pydantic takes no recursive string alias
    type: Literal["message"] | None = None

    @field_validator("content", mode="before")
    @classmethod
    def _parts_unset(cls, value: object) -> object:
        """A content part's null field is unset, at any depth (the SDK dumps an image part's `detail: null`, a text
        part's `prompt_cache_breakpoint: null` or its `ttl: null`)."""
        def clean(part: object) -> object:
            return {k: clean(v) for k, v in part.items() if v is not None} if isinstance(part, dict) else part

        return [clean(p) for p in value] if isinstance(value, list) else clean(value)

    @field_validator("content")
    @classmethod
    def _templates_parse(cls, value: str | dict[str, object] | list[object]) -> str | dict[str, object] | list[object]:
        for part in value if isinstance(value, list) else [value]:
            if isinstance(part, dict) and part.get("type") not in CONTENT_PART_TYPES:
                raise ValueError(f"a content part's type must be one of {', '.join(CONTENT_PART_TYPES)}, got "
                                 f"{part.get('type')!r}")

        def walk(v: object) -> None:
            if isinstance(v, str):
                check_template(v)
            elif isinstance(v, list):
                for x in v:
                    walk(x)
            elif isinstance(v, dict):
                for x in v.values():
                    walk(x)

        walk(value)
        return value


class SamplingParams(BaseModel):
    """The grader's sampling params; both spellings of the token limit exist in OpenAI's material."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
    max_completions_tokens: int | None = None
    max_completion_tokens: int | None = None
    reasoning_effort: Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"] | None = None
    seed: int | None = None
    temperature: float | None = None
    top_p: float | None = None

    @property
    def max_tokens(self) -> int | None:
        return self.max_completions_tokens or self.max_completion_tokens


class JudgePromptConfig(GraderConfig):
    """What score_model and label_model share: a judge model and the messages it is given."""

    model: str
    input: list[InputMessage] = Field(min_length=1)

    calls_judge = True

    def judge_prompt(self) -> list[JSONObject]:
        return [m.model_dump() for m in self.input]


C = TypeVar("C", bound=GraderConfig)


class JudgedGrader(Generic[C]):
    """A grader whose scores come from the judge client (`ctx.judge`); with none configured, every sample is a
    clear error rather than a silent 0."""

    grade_pairs: Callable[[C, Sequence[Pair], JudgeClient], list[GradeResult]]

    def __init__(self, config: C, ctx: BuildContext):
        self.config = config
        self.ctx = ctx

    def grade_batch(self, pairs: Sequence[Pair], units: Sequence[Hashable] | None = None) -> list[GradeResult]:
        if self.ctx.judge is None:
            msg = f"{self.config.type} needs a judge endpoint; none is configured for this command"
            return [GradeResult.failed(MODEL_SERVER, msg) for _ in pairs]
        return type(self).grade_pairs(self.config, pairs, self.ctx.judge)


def judge_request(config: JudgePromptConfig, sample: Sample, item: JSONMapping, sampling_params: SamplingParams | None,
                  response_format: JSONObject) -> GenerationRequest | GradeResult:
    """The judge request for one (sample, item): the config's input messages rendered, or the
    invalid_variable_error its templates raise (no call is made for it)."""
    from rfteval.graders.base import INVALID_VARIABLE
    from rfteval.graders.template import TemplateError, render_deep
    from rfteval.providers.base import GenerationRequest

    raw: list[JSONObject] = [m.model_dump(exclude_none=True) for m in config.input]
    try:
        rendered = [render_deep(m, item, sample) for m in raw]
    except TemplateError as exc:
        return GradeResult.failed(INVALID_VARIABLE, str(exc))
    return GenerationRequest(model=config.model, messages=judge_messages(rendered),
                             sampling=judge_sampling(sampling_params, response_format),
                             item_id=str(item.get("id", "")))


# ---- requests and answers ----------------------------------------------------------------------------------------

STEPS_SCHEMA: JSONObject = {
    "type": "array",
    "items": {
        "type": "object",
        "properties": {"description": {"type": "string"}, "conclusion": {"type": "string"}},
        "required": ["description", "conclusion"],
        "additionalProperties": False,
    },
}


def _chat_part(part: JSONValue) -> JSONObject:
    """OpenAI grader content parts (input_text, input_image, ...) → Chat Completions parts."""
    if isinstance(part, str):
        return {"type": "text", "text": part}
    if not isinstance(part, dict):
        return {"type": "text", "text": json.dumps(part, ensure_ascii=False)}
    kind = part.get("type")
    if kind in ("input_text", "output_text", "text"):
        return {"type": "text", "text": str(part.get("text", ""))}
    if kind == "input_image":
        image: JSONObject = {"url": part.get("image_url")}
        if part.get("detail"):
            image["detail"] = part["detail"]
        return {"type": "image_url", "image_url": image}
    return copy.deepcopy(part)


def chat_content(content: JSONValue) -> str | list[JSONValue]:
    """A message's content in chat form; an all-text part list becomes one string (local servers prefer it)."""
    if isinstance(content, str):
        return content
    parts: list[JSONValue] = [_chat_part(p) for p in (content if isinstance(content, list) else [content])]
    texts = [p["text"] for p in parts if isinstance(p, dict) and p.get("type") == "text"]
    if len(texts) == len(parts):
        return "".join(str(t) for t in texts)  # str already: _chat_part makes every text part's text a str
    return parts


def judge_messages(rendered: Sequence[JSONObject]) -> list[JSONObject]:
    """Rendered grader input messages → chat messages (the `type: "message"` tag dropped)."""
    return [{"role": m["role"], "content": chat_content(m.get("content"))} for m in rendered]


def judge_sampling(params: SamplingParams | None, response_format: JSONObject) -> Sampling:
    """The grader's sampling_params (max_completions_tokens → max tokens) with the forced structured output."""
    if params is None:
        return Sampling(response_format=response_format)
    return Sampling(
        temperature=params.temperature, top_p=params.top_p, seed=params.seed,
        reasoning_effort=params.reasoning_effort, max_output_tokens=params.max_tokens, response_format=response_format,
    )


_FENCE = re.compile(r"^```[A-Za-z]*\s*(.*?)\s*```$", re.S)


def parse_json_answer(text: str) -> JSONValue:
    """The judge's JSON answer; lenient (code fences, prose around one object) for servers without strict mode.

    A reasoning judge served without a reasoning parser (Qwen3, DeepSeek-R1 distills on vLLM or SGLang) thinks in
    its content: the leading think block is dropped first, since braces inside the thinking would otherwise be
    taken for the answer. Raw control characters inside strings (llama.cpp's JSON grammar allows them) are
    accepted as a last resort."""
    from rfteval.data.reasoning import answer_text

    t = answer_text(text or "").strip()
    candidates = [t]
    m = _FENCE.match(t)
    if m:
        candidates.append(m.group(1))
    start, end = t.find("{"), t.rfind("}")
    if 0 <= start < end:
        candidates.append(t[start : end + 1])
    for strict in (True, False):
        for c in candidates:
            try:
                return json.loads(c, strict=strict)
            except ValueError:
                continue
    return None


def finite_number(value: JSONValue) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def clean_steps(steps: JSONValue) -> list[JSONValue]:
    """The judge's reasoning steps as a list of {description, conclusion} (strings); anything else dropped."""
    out: list[JSONValue] = []
    if isinstance(steps, list):
        for s in steps:
            if isinstance(s, dict):
                out.append({"description": str(s.get("description", "")), "conclusion": str(s.get("conclusion", ""))})
    return out


def answer_details(request: GenerationRequest, answer: Generation) -> JSONObject:
    """What every model grade records about the judge call; `judge_call` tells one call from another (a group
    judge's call grades many samples, equal requests share one), so summaries count each call once."""
    return {"judge_model": request.model, "judge_cached": answer.cached, "judge_usage": dict(answer.usage or {}),
            "judge_call": answer.call_id[:16] if answer.call_id else None}


# ---- truncated answers -------------------------------------------------------------------------------------------

_LEADING = re.compile(r'^\s*\{\s*"(?P<key>\w+)"\s*:\s*(?P<value>-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?|"(?:[^"\\]|\\.)*")\s*[,}]')


def leading_value(text: str, key: str) -> JSONValue:
    """`key`'s value when the answer opens with it, complete (a number or a string followed by `,` or `}`), else
    None: what a judge answering `key` first committed to before its output was cut off."""
    from rfteval.data.reasoning import answer_text

    m = _LEADING.match(answer_text(text or ""))
    if m is None or m.group("key") != key:
        return None
    try:
        value: JSONValue = json.loads(m.group("value"))
    except ValueError:
        return None
    return value


def truncated(request: GenerationRequest, answer: Generation, details: JSONObject) -> GradeResult:
    """A judge answer cut off before it was whole (finish reason `length`): its own counted error, saying which
    limit to raise."""
    limit = request.sampling.max_output_tokens
    used = answer.usage.get("output_tokens")
    fix = (f"raise max_completions_tokens in the grader's sampling_params (now {limit})" if limit is not None else
           "the server's own output limit or its context cut it: raise the server's context size (llama.cpp: "
           "n_ctx / --ctx-size), or set max_completions_tokens in the grader's sampling_params")
    details["raw_answer"] = answer.output_text[:2000]
    tokens = f", {used} output tokens" if isinstance(used, int) else ""
    return GradeResult.failed(MODEL_TRUNCATED, f"judge answer cut off (finish_reason length{tokens}): {fix}",
                              details=details)


def context_exceeded(answer: ProviderError) -> bool:
    from rfteval.providers.base import exceeds_context

    return exceeds_context(answer.kind, str(answer))


def error_result(answer: ProviderError, model: str) -> GradeResult:
    """A judge call that ended in an error: a refusal, or the server's failure after retries. A call that was sent
    is on the record like an answered one (model, tokens, call id), so `judge` and `judge_results` count it."""
    details: JSONObject | None = None
    if answer.call_id is not None:
        details = {"judge_model": model, "judge_cached": answer.cached, "judge_usage": dict(answer.usage or {}),
                   "judge_call": answer.call_id[:16]}
    from rfteval.providers.retry import one_line

    if answer.kind == "refusal":
        return GradeResult.failed(MODEL_REFUSAL, f"judge {model} refused: {answer}"[:500], details=details)
    if context_exceeded(answer):
        return GradeResult.failed(MODEL_TRUNCATED, f"judge {model}: the prompt and output limit exceed the server's "
                                  f"context: raise the server's context size (llama.cpp: n_ctx / --ctx-size) or lower "
                                  f"max_completions_tokens: {one_line(str(answer), 300)}"[:600], details=details)
    return GradeResult.failed(MODEL_SERVER, f"judge {model}: {answer.kind}: {one_line(str(answer), 400)}"[:500],
                              details=details)


def effective_model(judge: JudgeClient, model: str) -> str:
    """The judge model actually asked: the judge's override (e.g. a local stand-in) or the grader's own."""
    return getattr(judge, "model_override", None) or model


def grade_with_judge(
    judge: JudgeClient,
    requests: list[GenerationRequest | GradeResult],
    parse: Callable[[GenerationRequest, Generation], GradeResult],
) -> list[GradeResult]:
    """Send the requests (entries already failed, e.g. a template error, are passed through) and parse answers."""
    todo = [r for r in requests if isinstance(r, GenerationRequest)]
    answers = iter(judge.complete(todo) if todo else [])
    out: list[GradeResult] = []
    for r in requests:
        if isinstance(r, GradeResult):
            out.append(r)
            continue
        answer = next(answers)
        model = effective_model(judge, r.model)
        req = dataclasses.replace(r, model=model)
        out.append(error_result(answer, model) if isinstance(answer, ProviderError) else parse(req, answer))
    return out
