"""PrimeIntellect verifiers: a reward function asks for its arguments by name.

The Rubric contract (`vf.Rubric(funcs=[...], weights=[...])`, verifiers' legacy rubrics): `completion` (a string or
a list of messages), `prompt`, `answer`, `info`, `state`. verifiers 0.4's tasks (`verifiers.v1`) call a reward with
`task` (the task's data) and `trace` (the rollout). One function takes either set, so the same reward serves
prime-rl, tinker-cookbook's verifiers_rl, torchtitan and Miles, which run verifiers environments."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rfteval.graders.base import GraderConfig
from rfteval.reward.core import Reward, RewardOptions, plain_data, sample_from_completion


def _fields(value: Any) -> dict[str, Any]:
    """A pydantic model (verifiers.v1's TaskData) or a mapping as a dict."""
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dict(dump())
    return dict(value) if isinstance(value, Mapping) else {}


class VerifiersReward(Reward):
    """The item: the line an exported dataset's `info` carries; or, with items=, the line named by info's id;
    else `info` with `answer` at `reference_field` and the prompt as `messages`."""

    def __init__(self, grader: Any, options: RewardOptions, reference_field: str | None = "reference_answer"):
        super().__init__(grader, options)
        self.reference_field = reference_field

    def _extra(self) -> dict[str, Any]:
        return {"reference_field": self.reference_field}

    def item(self, prompt: Any, answer: Any, info: Any) -> dict[str, Any]:
        fields = _fields(info)
        if self.table is not None or "rfteval" in fields:
            return self.find_item(fields)
        item = self.find_item(fields, prompt)
        if self.reference_field and answer not in (None, "") and self.reference_field not in item:
            item[self.reference_field] = plain_data(answer)
        return item

    def __call__(self, completion: Any = None, answer: Any = None, info: Any = None, prompt: Any = None,
                 state: Any = None, task: Any = None, trace: Any = None, **kwargs: Any) -> float | None:
        if task is not None or trace is not None:  # verifiers.v1: the task's data and the rollout
            data = _fields(task)
            info = data.get("info", data) if isinstance(data.get("info"), Mapping) else data
            prompt = data.get("prompt") if prompt is None else prompt
            answer = data.get("answer") if answer is None else answer
            if completion is None and trace is not None:
                completion = [_fields(m) for m in getattr(trace, "messages", [])]
        if completion is None:
            raise TypeError(f"{self.__name__}() needs completion= (verifiers' Rubric) or trace= (verifiers.v1)")
        sample = sample_from_completion(plain_data(completion), self.options)
        return self.value(self.grade_one(sample, self.item(prompt, answer, info)))


async def _verifiers_reward(reward: VerifiersReward, completion: Any = None, answer: Any = None, info: Any = None,
                            prompt: Any = None, state: Any = None, task: Any = None, trace: Any = None) -> Any:
    """verifiers passes only the parameters a reward names (inspect.signature), awaits it when it is a coroutine
    function, and runs many at once: grade in a thread."""
    return await asyncio.to_thread(reward, completion, answer, info, prompt, state, task, trace)


def for_verifiers(grader: str | Path | Mapping[str, Any] | GraderConfig, reference_field: str | None = "reference_answer",
                  asynchronous: bool = True, **options: Any) -> Any:
    """A verifiers reward function scoring with `grader`: `vf.Rubric(funcs=[for_verifiers(grader)])`, or a
    verifiers.v1 task's reward. Async by default (a functools.partial of an `async def`, which pickles);
    asynchronous=False gives the synchronous callable. Options as for_trl (on_error defaults to "zero")."""
    reward = VerifiersReward(grader, RewardOptions(**options), reference_field)
    if not asynchronous:
        return reward
    fn = functools.partial(_verifiers_reward, reward)
    fn.__name__ = reward.__name__  # type: ignore[attr-defined]  # verifiers names the reward in its metrics
    return fn
