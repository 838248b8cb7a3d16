"""OpenRLHF's remote reward function: `reward_func(queries, prompts, labels, **kwargs)` returns
`{"rewards": Tensor, "scores": Tensor, "extra_logs": {...}}` (examples/python/reward_func.py), loaded with
`--reward.remote_url FILE.py`. `labels` are the dataset's `--data.label_key` column: an exported dataset's label
carries the original line.

OpenRLHF 0.11.2 hands over no response of its own (openrlhf/utils/agent.py, SingleTurnAgentExecutor): `queries` are
the prompt's tokens and the response's decoded together with their special tokens, and the prompt's tokens are cut
from the left when the prompt is longer than `--data.max_len` leaves room for. So the completion is found here: the
query without its prompt (or without the end of the prompt that was kept) and without its trailing end-of-turn
tokens. A query where neither can be found is a grading error, said once, never the whole query graded. OpenRLHF's
agent contract (`--train.agent_func_path`) does hand over the response: `OpenRLHFReward.step` grades that."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol, TypeAlias, TypedDict, Unpack, cast

from rfteval.data.json_types import JSONObject, JSONValue
from rfteval.graders.base import GradeResult
from rfteval.reward.base import GraderLike, Reward
from rfteval.reward.core import make_sample_for
from rfteval.reward.items import log, plain_data
from rfteval.reward.options import RewardOptions, RewardOptionsArgs
from rfteval.reward.targets import DatasetShape, ModuleRequest, ModuleText, RewardModule, Trainer, register

if TYPE_CHECKING:
    import torch

LABEL_ITEM = "rfteval_item"  # the key of an exported label's JSON object that holds the original line
# OpenRLHF decodes the query with skip_special_tokens=False, so the response ends with the token the model stopped
# on; OpenAI's output_text never holds it. The ones of the common chat models (from their tokenizers' configs and
# chat templates), stripped from the end: ChatML (Qwen, SmolLM2, Phi-3), Llama 2 and 3, Gemma, DeepSeek-R1/V3,
# gpt-oss (harmony: <|return|> ends the final answer, <|end|> a message, <|call|> a tool call), GLM-4 (the next turn's
# role token ends a reply), Mistral.
END_TOKENS = ("<|im_end|>", "<|endoftext|>",                         # ChatML: Qwen, SmolLM2; GLM-4's eos too
              "<|eot_id|>", "<|eom_id|>", "<|end_of_text|>", "</s>",  # Llama 3, Llama 2 and Mistral
              "<end_of_turn>", "<eos>",                               # Gemma
              "<｜end▁of▁sentence｜>",                                 # DeepSeek-R1 and V3
              "<|return|>", "<|end|>", "<|call|>",                    # gpt-oss; <|end|> is Phi-3's too
              "<|user|>", "<|observation|>")                          # GLM-4
# A left cut can garble the first characters of what is kept (a UTF-8 character split between tokens decodes to
# U+FFFD, a SentencePiece word loses its leading space): that many are allowed before the kept part of the prompt.
HEAD_SLACK = 8
PROMPT_TAIL = 64  # the prompt's last characters, searched for in a query that does not start with the prompt
MIN_KEPT = 16  # fewer characters of the prompt kept than this: too little to tell it from the response
NOT_FOUND = ("prompt_not_found", "the query starts with neither its prompt nor the end of it (OpenRLHF cuts a long "
             "prompt from the left): the response cannot be told apart from the prompt, so it is not graded")
# What OpenRLHF reads: float tensors; a list where torch is not importable (rfteval's own tests without torch).
Values: TypeAlias = "torch.Tensor | list[float]"


class OpenRLHFResult(TypedDict):
    rewards: Values
    scores: Values
    extra_logs: dict[str, Values]


class ChatTokenizer(Protocol):
    """What is read of a Hugging Face tokenizer: its chat template (rendered) and its special tokens."""

    eos_token: str | None
    all_special_tokens: list[str]

    def apply_chat_template(self, conversation: list[dict[str, str]], *, tokenize: bool = ...,
                            add_generation_prompt: bool = ...) -> object: ...


def prompt_end(query: str, prompt: str) -> int | None:
    """Where the prompt ends in `query`: after the whole prompt when the query starts with it, else after the end
    of the prompt OpenRLHF kept when it cut the prompt from the left (the query's head, give or take HEAD_SLACK
    garbled characters, is a suffix of the prompt); None when neither is there."""
    if query.startswith(prompt):
        return len(prompt)

    def kept(start: int, end: int) -> bool:
        return end - start >= min(MIN_KEPT, len(prompt)) and prompt.endswith(query[start:end])

    tail = prompt[-PROMPT_TAIL:]
    limit = len(prompt) + HEAD_SLACK  # what was kept of the prompt is no longer than the prompt
    at = query.find(tail, 0, limit)
    while at >= 0:  # the first place the tail ends where the text before it is the prompt's end
        end = at + len(tail)
        if any(kept(d, end) for d in range(min(HEAD_SLACK, at) + 1)):
            return end
        at = query.find(tail, at + 1, limit)
    for d in range(HEAD_SLACK + 1):  # less than the tail was kept: the longest end of the prompt the query starts with
        for k in range(min(len(tail) - 1, len(query) - d), MIN_KEPT - 1, -1):
            if query.startswith(prompt[-k:], d):
                return d + k
    return None


def strip_end_tokens(response: str, end_tokens: Iterable[str] = END_TOKENS) -> str:
    """The response without the end-of-turn tokens it ends with (any number, any order)."""
    tokens = [t for t in end_tokens if t]
    stripped = True
    while stripped:
        stripped = False
        for token in tokens:
            if response.endswith(token):
                response = response[: -len(token)]
                stripped = True
    return response


def response_of(query: str, prompt: str, end_tokens: Iterable[str] = END_TOKENS) -> str | None:
    """The completion in an OpenRLHF query: the query after its prompt (or after the part of it a left cut kept),
    without its trailing end-of-turn tokens; None when the prompt cannot be found in the query."""
    end = prompt_end(query, prompt)
    return None if end is None else strip_end_tokens(query[end:], end_tokens)


def chat_template_end_tokens(tokenizer: ChatTokenizer) -> tuple[str, ...]:
    """The special tokens a tokenizer's chat template writes after an assistant's reply (before the next turn, and
    at the end of the conversation), and its eos token: what a response generated with that template ends on."""
    mark = "RFTEVAL_REPLY_7f3a"
    specials = sorted({t for t in getattr(tokenizer, "all_special_tokens", ()) or () if isinstance(t, str) and t},
                      key=len, reverse=True)
    found: list[str] = []
    for turns in ([{"role": "user", "content": "hi"}, {"role": "assistant", "content": mark},
                   {"role": "user", "content": "RFTEVAL_NEXT_7f3a"}],
                  [{"role": "user", "content": "hi"}, {"role": "assistant", "content": mark}]):
        try:
            text = tokenizer.apply_chat_template(turns, tokenize=False, add_generation_prompt=False)
        except Exception as exc:  # noqa: BLE001  a template may refuse a shape (Jinja raise_exception): try the next
            log.debug("chat template refused %s turns: %s", len(turns), exc)
            continue
        if not isinstance(text, str) or mark not in text:
            continue
        gap = text.split(mark, 1)[1].split("RFTEVAL_NEXT_7f3a", 1)[0]
        at = 0
        while at < len(gap):  # the special tokens in the gap, in order, longest first where they overlap
            token = next((t for t in specials if gap.startswith(t, at)), None)
            if token is None:
                at += 1
                continue
            if token not in found:
                found.append(token)
            at += len(token)
    eos = getattr(tokenizer, "eos_token", None)
    if isinstance(eos, str) and eos and eos not in found:
        found.append(eos)
    return tuple(found)


def _load_tokenizer(name: str) -> ChatTokenizer:
    from transformers import AutoTokenizer

    # transformers' own tokenizer classes have these members; its stubs type apply_chat_template more loosely
    return cast("ChatTokenizer", AutoTokenizer.from_pretrained(name))


class OpenRLHFReward(Reward):
    text_only = "OpenRLHF"  # its reward gets the query text; its agent executor's observations are text too

    def __init__(self, grader: GraderLike, options: RewardOptions, reference_field: str | None = "reference_answer",
                 end_tokens: Sequence[str] = END_TOKENS, eos_tokens: Sequence[str] = (),
                 tokenizer: ChatTokenizer | str | None = None):
        super().__init__(grader, options)
        self.reference_field = reference_field
        read = () if tokenizer is None else chat_template_end_tokens(
            _load_tokenizer(tokenizer) if isinstance(tokenizer, str) else tokenizer)
        self.end_tokens = tuple(dict.fromkeys([*end_tokens, *read, *eos_tokens]))
        if self.on_error == "none":
            # OpenRLHF keeps every reward as a float in a tensor and has no "leave this one out": a NaN would make
            # the group's advantages NaN, None is taken for "ask the reward model". So none is 0, said once.
            log.warning("%s: OpenRLHF cannot store a missing reward (None has no tensor form, NaN would spread to the "
                        "group's advantages), so on_error='none' scores a grading error 0.0 here, as 'zero' does; "
                        "errors are counted in extra_logs['grading_errors']", self.__name__)
            self.on_error = "zero"

    def _extra(self) -> dict[str, object]:
        return {"reference_field": self.reference_field, "end_tokens": list(self.end_tokens)}

    def item(self, label: object) -> JSONObject:
        plain = plain_data(label)
        if isinstance(plain, str) and plain.startswith("{"):
            try:
                parsed = json.loads(plain)
            except ValueError:
                parsed = None
            if isinstance(parsed, dict) and isinstance(parsed.get(LABEL_ITEM), dict):
                return parsed[LABEL_ITEM]
        if self.table is not None:
            return self.find_item({self.options.id_field: plain})
        return {self.reference_field: plain} if self.reference_field else {}

    def __call__(self, queries: Sequence[str], prompts: Sequence[str], labels: Sequence[object] | None = None,
                 **kwargs: object) -> OpenRLHFResult:
        """`labels`: the --data.label_key column's values; `kwargs`: what else OpenRLHF passes (open in its
        contract), not read."""
        n = len(queries)
        if len(prompts) != n or (labels is not None and len(labels) != n):
            raise ValueError(f"{self.__name__}(): {n} queries, {len(prompts)} prompts, "
                             f"{len(labels) if labels is not None else 0} labels")
        items = [self.item(label) for label in (labels if labels is not None else [None] * n)]
        keys = [json.dumps(it, sort_keys=True, default=str) for it in items]
        responses = [response_of(q, p, self.end_tokens) for q, p in zip(queries, prompts)]
        found = [i for i, r in enumerate(responses) if r is not None]
        graded = iter(self.grade([(make_sample_for(responses[i] or "", self.options), items[i]) for i in found],
                                 [keys.index(keys[i]) for i in found]))
        results = [next(graded) if r is not None else GradeResult.failed(*NOT_FOUND) for r in responses]
        values = [0.0 if v is None else v for v in self.score(results)]  # never None: on_error is "zero" here
        errors = [1.0 if r.error is not None else 0.0 for r in results]
        return {"rewards": _tensor(values), "scores": _tensor(values), "extra_logs": {"grading_errors": _tensor(errors)}}

    def step(self, states: Mapping[str, object]) -> AgentStep:
        """OpenRLHF's agent contract (`--train.agent_func_path`: AgentInstance.step, run by its MultiTurnAgentExecutor):
        the response is handed over as it was generated (`action_text`), so no prompt has to be found; one step
        ends the episode."""
        action = states.get("action_text")
        if not isinstance(action, str):
            raise TypeError(f"{self.__name__}.step(): states['action_text'] must be the generated text, not "
                            f"{type(action).__name__}")
        item = self.item(states.get("label"))
        result = self.grade_one(make_sample_for(strip_end_tokens(action, self.end_tokens), self.options), item)
        value = self.value(result)
        reward = _tensor([0.0 if value is None else value])
        return {"rewards": reward, "scores": reward, "environment_feedback": "", "done": True,
                "extra_logs": {"grading_errors": _tensor([1.0 if result.error is not None else 0.0])}}


class AgentStep(TypedDict):
    """What OpenRLHF's MultiTurnAgentExecutor reads from a step (openrlhf/utils/agent.py)."""

    rewards: Values
    scores: Values
    environment_feedback: str
    done: bool
    extra_logs: dict[str, Values]


def _tensor(values: list[float]) -> Values:
    """A float tensor where torch is importable (what OpenRLHF reads), else the list."""
    try:
        import torch
    except ImportError:
        return values
    return torch.tensor(values, dtype=torch.float32)


def for_openrlhf(grader: GraderLike, reference_field: str | None = "reference_answer",
                 end_tokens: Sequence[str] = END_TOKENS, eos_tokens: Sequence[str] = (),
                 tokenizer: ChatTokenizer | str | None = None,
                 **options: Unpack[RewardOptionsArgs]) -> OpenRLHFReward:
    """OpenRLHF's `reward_func(queries, prompts, labels)` scoring with `grader`. A label written by `rfteval
    export-dataset --target openrlhf` carries the original line; with items= a label is an id; otherwise a label is
    the reference, put at `reference_field`. Stripped from the end of each response (OpenRLHF keeps special tokens in
    the query): `end_tokens` (the common chat models' end-of-turn tokens), `eos_tokens` (more), and, given
    `tokenizer` (a Hugging Face tokenizer, or its name or folder), the tokens its chat template ends a reply with.
    Options as for_trl; on_error "none" scores 0.0 here, as "zero" does (OpenRLHF stores no missing reward)."""
    return OpenRLHFReward(grader, RewardOptions(**options), reference_field, end_tokens, eos_tokens, tokenizer)


# `export-reward --target openrlhf`: the module's functions, OpenRLHF's remote reward and agent contracts over the
# shared _get().
_EXPORT_OPENRLHF = '''

def reward_func(queries: Any, prompts: Any, labels: Any = None, **kwargs: Any) -> dict[str, Any]:
    """OpenRLHF's remote reward contract: {"rewards", "scores", "extra_logs"}; the prompt (or the end of it a left
    cut kept) and the trailing end-of-turn tokens are stripped from each query; a label from `rfteval export-dataset
    --target openrlhf` carries the original line."""
    return _get()(queries, prompts, labels, **kwargs)


try:  # inside OpenRLHF: the same grader through its agent contract, which hands over the response as generated
    from openrlhf.utils.agent import AgentInstanceBase, MultiTurnAgentExecutor
except ImportError:  # imported elsewhere (a test, a script): reward_func alone
    pass
else:
    class AgentInstance(AgentInstanceBase):
        """One episode of one step: the response (action_text) graded against the label's item."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            pass

        async def step(self, state_dict: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
            return await asyncio.to_thread(_get().step, state_dict)

    class AgentExecutor(MultiTurnAgentExecutor):
        """What --train.agent_func_path loads (openrlhf/trainer/ray/vllm_engine.py: module.AgentExecutor())."""

        def __init__(self) -> None:
            super().__init__(AgentInstance)
'''


def _module_text(request: ModuleRequest) -> ModuleText:
    out = request.out
    return ModuleText(
        title=f"OpenRLHF remote reward function for grader {request.grader!r} (rfteval).",
        usage=(f"    --reward.remote_url {out}      (reward_func: the response is the query without its prompt)\n"
               f"    --train.agent_func_path {out}  (AgentExecutor: the response as generated)\n\n"
               "With a dataset from `rfteval export-dataset --target openrlhf`: "
               "--data.prompt_dataset DIR/train.jsonl\n--data.input_key prompt --data.label_key label "
               "--data.apply_chat_template."),
        tail=_EXPORT_OPENRLHF)


def _text_row(prompt: JSONValue, line: JSONObject, rid: str) -> JSONObject:
    """OpenRLHF's row: the label carries the line as JSON text (--data.label_key label), nothing for a reader to
    change."""
    return {"prompt": prompt, "label": json.dumps({LABEL_ITEM: line}, ensure_ascii=False), "id": str(rid)}


register(Trainer(
    "openrlhf",
    reward=RewardModule("openrlhf (reward_func)", "for_openrlhf", _module_text,
                        keys=("reference_field", "eos_tokens", "tokenizer"), text_only="OpenRLHF"),
    dataset=DatasetShape("openrlhf", text_row=_text_row)))
