"""PrimeIntellect verifiers: a reward function asks for its arguments by name.

The Rubric contract (`vf.Rubric(funcs=[...], weights=[...])`, verifiers' legacy rubrics): `completion` (a string or
a list of messages), `prompt`, `answer`, `info`, `state`. verifiers 0.4's tasks (`verifiers.v1`) call a reward with
`task` (the task's data) and `trace` (the rollout). One function takes either set, so the same reward serves
prime-rl, tinker-cookbook's verifiers_rl, torchtitan and Miles, which run verifiers environments."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Mapping
from typing import Literal, Unpack, overload

from rfteval.data.json_types import JSONObject
from rfteval.reward.core import (
    Conversation,
    GraderLike,
    NamedPartial,
    Reward,
    RewardOptions,
    RewardOptionsArgs,
    plain_data,
    sample_from_completion,
)


def _fields(value: object) -> dict[str, object]:
    """A pydantic model (verifiers.v1's TaskData) or a mapping as a dict."""
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dict(dump())
    return dict(value) if isinstance(value, Mapping) else {}


class VerifiersReward(Reward):
    """The item: the line an exported dataset's `info` carries; or, with items=, the line named by info's id;
    else `info` with `answer` at `reference_field` and the prompt as `messages`."""

    def __init__(self, grader: GraderLike, options: RewardOptions, reference_field: str | None = "reference_answer"):
        super().__init__(grader, options)
        self.reference_field = reference_field

    def _extra(self) -> dict[str, object]:
        return {"reference_field": self.reference_field}

    def item(self, prompt: object, answer: object, info: object) -> JSONObject:
        fields = _fields(info)
        if self.table is not None or "rfteval" in fields:
            return self.find_item(fields)
        item = self.find_item(fields, prompt)
        if self.reference_field and answer not in (None, "") and self.reference_field not in item:
            item[self.reference_field] = plain_data(answer)
        return item

    def __call__(self, completion: Conversation | None = None, answer: str | None = None,
                 info: Mapping[str, object] | None = None, prompt: Conversation | None = None, state: object = None,
                 task: object = None, trace: object = None, **kwargs: object) -> float | None:
        """The Rubric's arguments (state and other keywords are not read), or verifiers.v1's task (its TaskData
        model, or a mapping) and trace (an object whose .messages are the rollout's, models or mappings)."""
        given: object = completion
        fields: object = info
        asked: object = prompt
        reference: object = answer
        if task is not None or trace is not None:  # verifiers.v1: the task's data and the rollout
            data = _fields(task)
            fields = data.get("info", data) if isinstance(data.get("info"), Mapping) else data
            asked = data.get("prompt") if prompt is None else prompt
            reference = data.get("answer") if answer is None else answer
            if completion is None and trace is not None:
                given = [_fields(m) for m in getattr(trace, "messages", [])]
        if given is None:
            raise TypeError(f"{self.__name__}() needs completion= (verifiers' Rubric) or trace= (verifiers.v1)")
        sample = sample_from_completion(plain_data(given), self.options)
        return self.value(self.grade_one(sample, self.item(asked, reference, fields)))


async def _verifiers_reward(reward: VerifiersReward, completion: Conversation | None = None,
                            answer: str | None = None, info: Mapping[str, object] | None = None,
                            prompt: Conversation | None = None, state: object = None, task: object = None,
                            trace: object = None) -> float | None:
    """verifiers passes only the parameters a reward names (inspect.signature), awaits it when it is a coroutine
    function, and runs many at once: grade in a thread."""
    return await asyncio.to_thread(reward, completion, answer, info, prompt, state, task, trace)


VerifiersAsync = NamedPartial[Coroutine[object, object, float | None]]  # for_verifiers' default form


# One type per form (asynchronous= as a literal), so typed code gets the form it asked for, not a union.
@overload
def for_verifiers(grader: GraderLike, reference_field: str | None = ..., asynchronous: Literal[True] = ...,
                  **options: Unpack[RewardOptionsArgs]) -> VerifiersAsync: ...
@overload
def for_verifiers(grader: GraderLike, reference_field: str | None = ..., *, asynchronous: Literal[False],
                  **options: Unpack[RewardOptionsArgs]) -> VerifiersReward: ...
@overload
def for_verifiers(grader: GraderLike, reference_field: str | None = ..., asynchronous: bool = ...,
                  **options: Unpack[RewardOptionsArgs]) -> VerifiersReward | VerifiersAsync: ...


def for_verifiers(grader: GraderLike, reference_field: str | None = "reference_answer", asynchronous: bool = True,
                  **options: Unpack[RewardOptionsArgs]) -> VerifiersReward | VerifiersAsync:
    """A verifiers reward function scoring with `grader`: `vf.Rubric(funcs=[for_verifiers(grader)])`, or a
    verifiers.v1 task's reward. Async by default (a functools.partial of an `async def`, which pickles);
    asynchronous=False gives the synchronous callable. Options as for_trl (on_error defaults to "zero")."""
    reward = VerifiersReward(grader, RewardOptions(**options), reference_field)
    if not asynchronous:
        return reward
    fn = NamedPartial(_verifiers_reward, reward)
    fn.__name__ = reward.__name__  # verifiers names the reward in its metrics
    return fn
