"""verl's custom reward function, in the three forms its reward managers call.

- `compute_score(data_source, solution_str, ground_truth, extra_info, **reward_kwargs)`: the reward loop's naive
  and dapo managers (verl/experimental/reward_loop/reward_manager/), the legacy naive one; a float, or a dict
  with "score" (other keys logged as reward_extra_info) when details=True.
- the same as an `async def` (the reward loop awaits it; its remote manager refuses async functions).
- `compute_score(data_sources=, solution_strs=, ground_truths=, extra_infos=, **reward_kwargs)` returning a list:
  the legacy BatchRewardManager (verl/workers/reward_manager/batch.py).

A call the form cannot grade raises TypeError naming what is missing: a silent 0.0 trains on nothing."""

from __future__ import annotations

import asyncio
import enum
import json
from collections.abc import Collection, Coroutine, Mapping
from typing import Literal, Unpack, overload

from rfteval.data.json_types import JSONObject
from rfteval.errors import InputError
from rfteval.graders.base import GradeResult
from rfteval.reward.base import GraderLike, NamedPartial, Reward, RewardDetails
from rfteval.reward.core import make_sample_for
from rfteval.reward.items import META, plain_data
from rfteval.reward.options import RewardOptions, RewardOptionsArgs
from rfteval.reward.targets import (
    DatasetShape,
    ModuleRequest,
    ModuleText,
    RewardModule,
    RowParts,
    Trainer,
    doc_text,
    register,
)

# Keys verl writes into extra_info (the naive managers: num_turns, rollout_reward_scores; the agent loop: raw_prompt,
# turn_scores, tool_rewards) or passes beside it (reward_router_address, reward_model_tokenizer, the config's
# reward_kwargs): never the dataset's, so never the grader's item.
VERL_ADDED = frozenset({"num_turns", "rollout_reward_scores", "raw_prompt", "turn_scores", "tool_rewards",
                        "reward_router_address", "reward_model_tokenizer", "reward_kwargs"})
_SINGLE = ("data_source", "solution_str", "ground_truth")
_PLURAL = ("data_sources", "solution_strs", "ground_truths", "extra_infos")


class _Unset(enum.Enum):
    """The default of compute_score's positional parameters: a call missing one is an error naming it."""

    UNSET = enum.auto()


_UNSET = _Unset.UNSET
# What verl takes back: a float, or with details=True a dict with "score"; None only with on_error="none".
VerlScore = float | None | RewardDetails
ExtraInfo = Mapping[str, object]  # a row's extra_info: the dataset's fields and verl's own (VERL_ADDED)
VerlBatch = NamedPartial[list[VerlScore]]  # for_verl(batch=True): BatchRewardManager's plural call
VerlAsync = NamedPartial[Coroutine[object, object, VerlScore]]  # for_verl(asynchronous=True): the reward loop's


class VerlReward(Reward):
    """The item is `extra_info` (verl's keys left out) with `ground_truth` at `reference_field`; or the line an
    exported dataset carries in extra_info; or, with items=, the line named by extra_info's id."""

    text_only = "verl"  # solution_str: the response text (its agent loop's tool observations included, as text)

    none_refused = (
        'cannot be a verl reward: its reward managers write every score into a float tensor (None fails the '
        "step: can't assign a NoneType to a torch.FloatTensor)")

    def __init__(self, grader: GraderLike, options: RewardOptions, reference_field: str | None = "reference_answer",
                 ground_truth_json: bool = False, details: bool = False):
        super().__init__(grader, options)
        self.reference_field = reference_field
        self.ground_truth_json = ground_truth_json
        self.details_dict = details

    def _extra(self) -> dict[str, object]:
        return {"reference_field": self.reference_field, "ground_truth_json": self.ground_truth_json,
                "details": self.details_dict}

    def item(self, ground_truth: object, extra_info: ExtraInfo | None) -> JSONObject:
        fields = {k: v for k, v in dict(extra_info or {}).items() if k not in VERL_ADDED}
        if self.table is not None or "rfteval" in fields:
            return self.find_item(fields)
        item = self.find_item(fields)
        if self.reference_field:
            truth = plain_data(ground_truth, self.reference_field, self.coercions)
            if self.ground_truth_json and isinstance(truth, str):
                try:
                    truth = json.loads(truth)
                except ValueError:
                    pass  # not JSON: the grader gets the string (and may well score it 0)
            item[self.reference_field] = truth
        return item

    def _out(self, result: GradeResult) -> VerlScore:
        return self.details(result) if self.details_dict else self.value(result)

    def __call__(self, data_source: object = _UNSET, solution_str: str | _Unset = _UNSET,
                 ground_truth: object = _UNSET, extra_info: ExtraInfo | None = None, **kwargs: object) -> VerlScore:
        """verl may call this from several threads at once (its reward loop's executor): the engine is
        thread-safe. reward_router_address, reward_model_tokenizer and the config's reward_kwargs (`kwargs`, open
        in verl's contract) are ignored; data_source is not read (the grader is the same for every source)."""
        given = {"data_source": data_source, "solution_str": solution_str, "ground_truth": ground_truth}
        missing = [k for k in _SINGLE if given[k] is _UNSET]
        if missing:
            plural = [k for k in _PLURAL if k in kwargs]
            hint = (" (this is BatchRewardManager's call: use for_verl(..., batch=True), or the exported module's "
                    "compute_score_batch)") if plural else ""
            raise TypeError(f"{self.__name__}() missing {', '.join(missing)}{hint}")
        if not isinstance(solution_str, str):
            raise TypeError(f"{self.__name__}(): solution_str must be the decoded response text, not "
                            f"{type(solution_str).__name__}")
        result = self.grade_one(make_sample_for(solution_str, self.options), self.item(ground_truth, extra_info))
        return self._out(result)

    def batch(self, data_sources: Collection[object] | None = None, solution_strs: Collection[str] | None = None,
              ground_truths: Collection[object] | None = None,
              extra_infos: Collection[ExtraInfo | None] | None = None, **kwargs: object) -> list[VerlScore]:
        """BatchRewardManager's call: one score per row, graded together (rows of one prompt share a process).
        verl hands data_sources and extra_infos over as numpy object arrays, hence Collection, not Sequence."""
        missing = [k for k, v in (("solution_strs", solution_strs), ("ground_truths", ground_truths)) if v is None]
        if missing:
            raise TypeError(f"{self.__name__}.batch() missing {', '.join(missing)} (BatchRewardManager passes "
                            "data_sources=, solution_strs=, ground_truths=, extra_infos=)")
        assert solution_strs is not None and ground_truths is not None
        n = len(solution_strs)
        infos: list[ExtraInfo | None] = list(extra_infos) if extra_infos is not None else [None] * n
        if len(ground_truths) != n or len(infos) != n:
            raise ValueError(f"{self.__name__}.batch(): {n} solution_strs, {len(ground_truths)} ground_truths, "
                             f"{len(infos)} extra_infos")
        items = [self.item(g, e) for g, e in zip(ground_truths, infos)]
        keys = [json.dumps(it, sort_keys=True, default=str) for it in items]
        units = [keys.index(k) for k in keys]
        results = self.grade([(make_sample_for(s, self.options), it) for s, it in zip(solution_strs, items)], units)
        return [self._out(r) for r in results]


def _verl_batch(reward: VerlReward, data_sources: Collection[object] | None = None,
                solution_strs: Collection[str] | None = None, ground_truths: Collection[object] | None = None,
                extra_infos: Collection[ExtraInfo | None] | None = None, **kwargs: object) -> list[VerlScore]:
    return reward.batch(data_sources, solution_strs, ground_truths, extra_infos, **kwargs)


async def _verl_async(reward: VerlReward, data_source: object = _UNSET, solution_str: str | _Unset = _UNSET,
                      ground_truth: object = _UNSET, extra_info: ExtraInfo | None = None,
                      **kwargs: object) -> VerlScore:
    """The reward loop awaits an async compute_score in its event loop: grade in a thread, keep the loop free."""
    return await asyncio.to_thread(reward, data_source, solution_str, ground_truth, extra_info, **kwargs)


# The overloads give each form its own type (batch= and asynchronous= as literals), so typed code calling
# for_verl(...) gets a VerlReward, not a union it would have to narrow.
@overload
def for_verl(grader: GraderLike, reference_field: str | None = ..., ground_truth_json: bool = ..., details: bool = ...,
             batch: Literal[False] = ..., asynchronous: Literal[False] = ...,
             **options: Unpack[RewardOptionsArgs]) -> VerlReward: ...
@overload
def for_verl(grader: GraderLike, reference_field: str | None = ..., ground_truth_json: bool = ..., details: bool = ...,
             *, batch: Literal[True], asynchronous: Literal[False] = ...,
             **options: Unpack[RewardOptionsArgs]) -> VerlBatch: ...
@overload
def for_verl(grader: GraderLike, reference_field: str | None = ..., ground_truth_json: bool = ..., details: bool = ...,
             *, batch: Literal[False] = ..., asynchronous: Literal[True],
             **options: Unpack[RewardOptionsArgs]) -> VerlAsync: ...
@overload
def for_verl(grader: GraderLike, reference_field: str | None = ..., ground_truth_json: bool = ..., details: bool = ...,
             batch: bool = ..., asynchronous: bool = ...,
             **options: Unpack[RewardOptionsArgs]) -> VerlReward | VerlBatch | VerlAsync: ...


def for_verl(grader: GraderLike, reference_field: str | None = "reference_answer", ground_truth_json: bool = False,
             details: bool = False, batch: bool = False, asynchronous: bool = False,
             **options: Unpack[RewardOptionsArgs]) -> VerlReward | VerlBatch | VerlAsync:
    """verl's `compute_score` scoring with `grader`.

    The item is `extra_info` (verl's own keys left out) with `ground_truth` at `reference_field` (None: extra_info
    alone, for datasets that keep the whole item there); `ground_truth_json` parses a JSON-string ground truth
    first. A dataset from `rfteval export-dataset --target verl` carries the original line, and items= finds it by
    extra_info's id: either way the item is exact. `details=True` returns {"score", "error", "passed"} (verl logs
    the other keys). `batch=True`: BatchRewardManager's plural call; `asynchronous=True`: an `async def` for the
    reward loop. Both are functools.partial objects of module-level functions, so they pickle. Options as for_trl
    (on_error defaults to "zero": verl's advantage has no "left out")."""
    if batch and asynchronous:
        raise ValueError("batch and asynchronous: BatchRewardManager calls a synchronous function")
    reward = VerlReward(grader, RewardOptions(**options), reference_field, ground_truth_json, details)
    fn: VerlBatch | VerlAsync
    if batch:
        fn = NamedPartial(_verl_batch, reward)
    elif asynchronous:
        fn = NamedPartial(_verl_async, reward)
    else:
        return reward
    fn.__name__ = reward.__name__
    return fn


# `export-reward --target verl`: the module's functions, verl's three calls over the shared _get().
_EXPORT_VERL = '''

def compute_score(data_source: Any, solution_str: str, ground_truth: Any, extra_info: Any = None,
                  **kwargs: Any) -> Any:
    """verl's custom reward contract (naive / dapo managers, the reward loop); the item is extra_info with
    ground_truth at {field} (or the line an exported dataset carries)."""
    return _get()(data_source, solution_str, ground_truth, extra_info, **kwargs)


async def compute_score_async(data_source: Any, solution_str: str, ground_truth: Any, extra_info: Any = None,
                              **kwargs: Any) -> Any:
    """The reward loop awaits a coroutine function; grading runs in a thread (not for the remote manager)."""
    return await asyncio.to_thread(compute_score, data_source, solution_str, ground_truth, extra_info, **kwargs)


def compute_score_batch(data_sources: Any = None, solution_strs: Any = None, ground_truths: Any = None,
                        extra_infos: Any = None, **kwargs: Any) -> list[Any]:
    """BatchRewardManager's call (reward_manager=batch): plural keywords, one score per row."""
    return _get().batch(data_sources, solution_strs, ground_truths, extra_infos, **kwargs)
'''


def _module_text(request: ModuleRequest) -> ModuleText:
    field, out, stem = request.options.get("reference_field", "reference_answer"), request.out, request.stem
    return ModuleText(
        title=f"verl custom reward function for grader {request.grader!r} (rfteval).",
        usage=(f"    reward.custom_reward_function.path={out}      (or pkg://{stem} with its folder on PYTHONPATH)\n"
               "    reward.custom_reward_function.name=compute_score        (naive, dapo; the reward loop)\n"
               "    reward.custom_reward_function.name=compute_score_async  (the reward loop, not remote)\n"
               "    reward.custom_reward_function.name=compute_score_batch  (reward_manager=batch)\n"
               "(verl before the reward loop spelled the key custom_reward_function at the top level.)\n\n"
               f"The item is the row's extra_info with reward_model.ground_truth at {field!r}, or the original\n"
               "line a dataset from `rfteval export-dataset --target verl` carries."),
        tail=_EXPORT_VERL.format(field=doc_text(repr(field))))


def _check_options(options: Mapping[str, object]) -> None:
    if options.get("on_error") == "none":
        raise InputError(f"--on-error none {VerlReward.none_refused}", field="--on-error")


def _row(parts: RowParts) -> JSONObject:
    """verl's RLHFDataset row: the line's fields in extra_info, the reference as reward_model.ground_truth."""
    return {"data_source": parts.data_source, "prompt": parts.prompt, "ability": "rfteval",
            "reward_model": {"style": "rule", "ground_truth": parts.reference},
            "extra_info": {**parts.fields, META: parts.meta}}


register(Trainer(
    "verl",
    reward=RewardModule("verl (compute_score)", "for_verl", _module_text,
                        keys=("reference_field", "ground_truth_json", "details"), check=_check_options,
                        text_only="verl"),
    dataset=DatasetShape("verl (parquet)", row=_row, parquet=True)))
