"""OpenRLHF's remote reward function: `reward_func(queries, prompts, labels, **kwargs)` returns
`{"rewards": Tensor, "scores": Tensor, "extra_logs": {...}}` (examples/python/reward_func.py), loaded with
`--reward.remote_url FILE.py`. `queries` are prompt + response: the prompt is stripped to get the completion.
`labels` are the dataset's `--data.label_key` column: an exported dataset's label carries the original line."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, TypeAlias, TypedDict, Unpack

from rfteval.data.json_types import JSONObject
from rfteval.reward.core import GraderLike, Reward, RewardOptions, RewardOptionsArgs, make_sample_for, plain_data

if TYPE_CHECKING:
    import torch

LABEL_ITEM = "rfteval_item"  # the key of an exported label's JSON object that holds the original line
# OpenRLHF decodes the query with skip_special_tokens=False (openrlhf/utils/agent.py), so the response ends with the
# model's end-of-turn token; OpenAI's output_text never holds it. The common ones, stripped from the end.
END_TOKENS = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end|>", "<|end_of_text|>", "</s>", "<eos>",
              "<end_of_turn>")
# What OpenRLHF reads: float tensors; a list where torch is not importable (rfteval's own tests without torch).
Values: TypeAlias = "torch.Tensor | list[float]"


class OpenRLHFResult(TypedDict):
    rewards: Values
    scores: Values
    extra_logs: dict[str, Values]


def response_of(query: str, prompt: str, end_tokens: tuple[str, ...] = END_TOKENS) -> str:
    """The completion in an OpenRLHF query: the query without its prompt and its trailing end-of-turn tokens."""
    response = query[len(prompt):] if query.startswith(prompt) else query
    stripped = True
    while stripped:
        stripped = False
        for token in end_tokens:
            if token and response.endswith(token):
                response = response[: -len(token)]
                stripped = True
    return response


class OpenRLHFReward(Reward):
    def __init__(self, grader: GraderLike, options: RewardOptions, reference_field: str | None = "reference_answer",
                 end_tokens: Sequence[str] = END_TOKENS):
        super().__init__(grader, options)
        self.reference_field = reference_field
        self.end_tokens = tuple(end_tokens)

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
        units = [keys.index(k) for k in keys]
        pairs = [(make_sample_for(response_of(q, p, self.end_tokens), self.options), it)
                 for q, p, it in zip(queries, prompts, items)]
        results = self.grade(pairs, units)
        values = [math.nan if v is None else v for v in self.score(results)]
        errors = [1.0 if r.error is not None else 0.0 for r in results]
        return {"rewards": _tensor(values), "scores": _tensor(values), "extra_logs": {"grading_errors": _tensor(errors)}}


def _tensor(values: list[float]) -> Values:
    """A float tensor where torch is importable (what OpenRLHF reads), else the list."""
    try:
        import torch
    except ImportError:
        return values
    return torch.tensor(values, dtype=torch.float32)


def for_openrlhf(grader: GraderLike, reference_field: str | None = "reference_answer",
                 end_tokens: Sequence[str] = END_TOKENS, **options: Unpack[RewardOptionsArgs]) -> OpenRLHFReward:
    """OpenRLHF's `reward_func(queries, prompts, labels)` scoring with `grader`. A label written by `rfteval
    export-dataset --target openrlhf` carries the original line; with items= a label is an id; otherwise a label is
    the reference, put at `reference_field`. `end_tokens` are stripped from the end of each response (OpenRLHF
    keeps special tokens in the query). Options as for_trl (on_error defaults to "zero")."""
    return OpenRLHFReward(grader, RewardOptions(**options), reference_field, end_tokens)
