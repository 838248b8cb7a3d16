"""TRL's reward-function contract (GRPOTrainer, RLOOTrainer, AsyncGRPOTrainer).

`f(prompts=..., completions=..., completion_ids=..., trainer_state=..., **columns)` returns one reward per
completion; every dataset column but the prompt arrives as a keyword holding one value per completion
(trl/trainer/grpo_trainer.py, `_calculate_rewards`). None is a reward TRL understands: a row whose rewards are all
None is left out of the group's baseline and gets advantage 0, so a grading error is None here by default rather
than a 0 that would push that completion down."""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import Coroutine, Mapping, Sequence
from typing import Protocol, Unpack, runtime_checkable

from rfteval.data.json_types import JSONObject
from rfteval.reward.base import GraderLike, Reward
from rfteval.reward.core import Conversation, sample_from_completion
from rfteval.reward.items import META
from rfteval.reward.options import RewardOptions, RewardOptionsArgs
from rfteval.reward.targets import DatasetShape, ModuleRequest, ModuleText, RewardModule, RowParts, Trainer, register

# Keywords TRL's GRPOTrainer._calculate_rewards adds besides the dataset columns.
TRL_EXTRAS = frozenset({"trainer_state", "log_extra", "log_metric", "environments"})
TRLRewards = list[float | None]  # what TRL takes back: one per completion, None for "leave this one out"


@runtime_checkable
class _Column(Protocol):
    """A dataset column as TRL passes it (a list, one value per completion; an array does as well)."""

    def __len__(self) -> int: ...
    def __getitem__(self, index: int, /) -> object: ...


def _as_column(values: object, n: int) -> _Column | None:
    """`values` when they are a column of n values, else None (TRL's extras, a constant, a mapping)."""
    if isinstance(values, (list, tuple)):  # what TRL passes: checked first, a protocol's isinstance is slower
        return values if len(values) == n else None
    if isinstance(values, (str, bytes, Mapping)) or not isinstance(values, _Column) or len(values) != n:
        return None
    return values


class TRLReward(Reward):
    """A prompt's completions share one item (and one python process, as in `rfteval grade`)."""

    default_on_error = "none"

    def __call__(self, prompts: Sequence[Conversation] | None = None, completions: Sequence[Conversation] | None = None,
                 completion_ids: Sequence[Sequence[int]] | None = None, **kwargs: object) -> TRLRewards:
        """`kwargs`: the dataset's columns (TRL passes each one by its own name, so they cannot be named here) and
        TRL's extras (TRL_EXTRAS, ignored); completion_ids are not read (the grader scores the text)."""
        if completions is None:
            raise TypeError(f"{self.__name__}() needs completions= (TRL passes prompts=, completions=, "
                            "completion_ids= and the dataset columns)")
        n = len(completions)
        if prompts is not None and len(prompts) != n:
            raise ValueError(f"{self.__name__}(): {len(prompts)} prompts for {n} completions")
        columns: dict[str, _Column] = {}
        for key, values in kwargs.items():
            if key in TRL_EXTRAS:
                continue
            column = _as_column(values, n)
            if column is None:
                self.note_once(("ignored", key), "%s: keyword %r is not a column (one value per completion); not "
                               "part of the item", self.__name__, key)
                continue
            columns[key] = column
        items: list[JSONObject] = []
        units: list[int] = []
        seen: dict[str, int] = {}
        for i in range(n):
            item = self.find_item({key: values[i] for key, values in columns.items()},
                                  prompts[i] if prompts is not None else None)
            key = json.dumps(item, sort_keys=True, default=str)  # a prompt's completions share one item, one unit
            if key not in seen:
                seen[key] = len(items)
                items.append(item)
            units.append(seen[key])
        pairs = [(sample_from_completion(c, self.options), items[u]) for c, u in zip(completions, units)]
        return self.score(self.grade(pairs, units))


async def rfteval_async_reward(reward: TRLReward, prompts: Sequence[Conversation] | None = None,
                               completions: Sequence[Conversation] | None = None,
                               completion_ids: Sequence[Sequence[int]] | None = None, **kwargs: object) -> TRLRewards:
    """TRL awaits an `async def` reward (inspect.iscoroutinefunction): the grading runs in a thread so the trainer's
    event loop keeps serving its other rewards and rollouts."""
    return await asyncio.to_thread(reward, prompts=prompts, completions=completions, completion_ids=completion_ids,
                                   **kwargs)


def for_trl(grader: GraderLike, **options: Unpack[RewardOptionsArgs]) -> TRLReward:
    """A TRL reward function (GRPOTrainer, RLOOTrainer, AsyncGRPOTrainer: `reward_funcs=[...]`) scoring with `grader`.

    Options: items= (the original JSONL, or its rows: each completion's item is the line named by the id column),
    id_field ("id"), on_error ("none": None for an erroring completion, what TRL documents; "zero"), reasoning
    ("strip" | "keep") and think_tags ("OPEN,CLOSE" pairs, as `rfteval grade --reasoning` and `--think-tags`),
    judge_base_url, judge_api_key_env, judge_api, judge_model, judge_concurrency (model graders only),
    grader_timeout, grader_memory, python_workers, unsafe_python_graders, name. Close it (or use `with`) to stop its
    python workers early; otherwise they stop at exit. It pickles (as its config and options)."""
    return TRLReward(grader, RewardOptions(**options))


def for_trl_async(grader: GraderLike,
                  **options: Unpack[RewardOptionsArgs]) -> functools.partial[Coroutine[object, object, TRLRewards]]:
    """The same reward as an `async def` TRL awaits: a functools.partial of a module-level coroutine function, so
    `inspect.iscoroutinefunction` is True and it pickles (AsyncGRPOTrainer ships rewards to another process).
    TRL logs a partial under the wrapped function's name, rfteval_async_reward; `export-reward --target trl`'s
    reward_async carries the grader's name instead."""
    reward = for_trl(grader, **options)
    return functools.partial(rfteval_async_reward, reward)


# `export-reward --target trl`: the module's functions, TRL's reward-function contract over the shared _get().
_EXPORT_TRL = '''

def reward(prompts: Any = None, completions: Any = None, completion_ids: Any = None, **kwargs: Any) -> list[Any]:
    """TRL's reward-function contract: one reward per completion; a grading error is {error_value} (logged once)."""
    return _get()(prompts=prompts, completions=completions, completion_ids=completion_ids, **kwargs)


async def reward_async(prompts: Any = None, completions: Any = None, completion_ids: Any = None,
                       **kwargs: Any) -> list[Any]:
    """The same as a coroutine function (TRL awaits it; grading runs in a thread)."""
    return await asyncio.to_thread(reward, prompts, completions, completion_ids, **kwargs)


reward.__name__ = {reward_name!r}  # the name TRL logs this reward under
reward_async.__name__ = {reward_name!r}
'''


def _module_text(request: ModuleRequest) -> ModuleText:
    name = request.options.get("name") or f"rfteval_{request.grader}"
    on_error = request.options.get("on_error") or "none"
    return ModuleText(
        title=f"TRL reward function for grader {request.grader!r} (rfteval).",
        usage=(f"    from {request.stem} import reward       # or reward_async (AsyncGRPOTrainer too)\n"
               "    trainer = GRPOTrainer(..., reward_funcs=[reward])"),
        tail=_EXPORT_TRL.format(reward_name=name, error_value="None" if on_error == "none" else "0"))


def _row(parts: RowParts) -> JSONObject:
    """TRL's row: the prompt column it generates from, then the line's fields as columns (the reward's keywords)."""
    return {"prompt": parts.prompt, **parts.fields, META: parts.meta}


register(Trainer(
    "trl",
    reward=RewardModule("trl (a reward function)", "for_trl", _module_text),
    # the prompt column is the messages TRL generates from and hands to the reward as `prompts`, not as a column
    dataset=DatasetShape("trl", row=_row, prompt_column=True)))
