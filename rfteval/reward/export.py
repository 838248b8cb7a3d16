"""`rfteval export-reward`: a grader as a module on the trainer's side (TRL imports it, verl loads it by path or
`pkg://`, OpenRLHF by `--reward.remote_url`). The module holds the grader inline and imports rfteval at its first
call, so it imports cheaply and its functions pickle (by reference) into a trainer's worker processes."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

from rfteval.errors import InputError
from rfteval.graders.base import GraderConfig
from rfteval.providers.endpoint import JUDGE_KEYWORDS
from rfteval.reward.core import RewardOptions

TARGETS = ("trl", "verl", "openrlhf")
# What each target's factory takes besides RewardOptions.
_FACTORY_KEYS = {"trl": (), "verl": ("reference_field", "ground_truth_json", "details"),
                 "openrlhf": ("reference_field", "eos_tokens", "tokenizer")}
# export-reward's flags as the factories' options, and their defaults (RewardOptions' own, then the factories'): the
# module stores only what was chosen.
_REWARD_FLAGS = ("grader_timeout", "grader_memory", *JUDGE_KEYWORDS, "on_error", "reasoning", "think_tags")
DEFAULTS: dict[str, object] = {
    **{key: getattr(RewardOptions(), key) for key in _REWARD_FLAGS},
    "reference_field": "reference_answer", "ground_truth_json": False, "eos_tokens": None, "tokenizer": None}
# The flags only some targets take, and those targets.
_ONLY = {"reference_field": ("--reference-field", ("verl", "openrlhf")),
         "ground_truth_json": ("--ground-truth-json", ("verl",)),
         "eos_tokens": ("--eos-token", ("openrlhf",)), "tokenizer": ("--tokenizer", ("openrlhf",))}


def module_options(target: str, flags: Mapping[str, object]) -> dict[str, object]:
    """`rfteval export-reward`'s flag values (keyed as DEFAULTS) as the factory's options the module stores: those
    that differ from the default, an empty --reference-field as None; a flag its target does not take is refused."""
    options: dict[str, object] = {}
    for key, value in flags.items():
        if value == DEFAULTS[key] or (value == [] and DEFAULTS[key] is None):
            continue
        if key in _ONLY and target not in _ONLY[key][1]:
            flag, targets = _ONLY[key]
            raise InputError(f"{flag} is for --target {' or '.join(targets)}", field="--target")
        options[key] = (value or None) if key == "reference_field" else value
    if target == "verl" and options.get("on_error") == "none":  # refused here, not at the trainer's first step
        from rfteval.reward.verl import VerlReward

        raise InputError(f"--on-error none {VerlReward.none_refused}", field="--on-error")
    try:
        # checked as the module will build them (export_module checks again, for its other callers)
        RewardOptions(**cast("dict[str, Any]", {k: v for k, v in options.items() if k not in _FACTORY_KEYS[target]}))
    except ValueError as exc:
        field = "--think-tags" if "think_tags" in str(exc) else "--reasoning" if "reasoning" in str(exc) else None
        raise InputError(str(exc), field=field) from None
    return options


_EXPORT_HEAD = '''\
"""{doc}"""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any, cast

GRADER = json.loads(r"""
{config}
""")
OPTIONS: dict[str, Any] = json.loads(r"""{options}""")
_reward: Any = None
_building = threading.Lock()


def _get() -> Any:
    """The reward, built at the first call in each process (so the module pickles and imports cheaply), once:
    trainers call reward functions from several threads at a time (OpenRLHF's asyncio.to_thread), and each would
    otherwise build its own reward (and its own python workers)."""
    global _reward
    if _reward is None:
        with _building:
            if _reward is None:
                from rfteval.reward import {factory}

                _reward = {factory}(GRADER, **OPTIONS)
    return _reward


def close() -> None:
    """Stop rfteval's python workers now rather than at exit."""
    if _reward is not None:
        _reward.close()
'''

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


def _doc(text: str) -> str:
    """Text safe inside a triple-quoted docstring (names and paths are the user's)."""
    return text.replace("\\", "\\\\").replace('"""', '\\"\\"\\"')


def export_module(config: GraderConfig, target: str, source: str, out: str | Path,
                  options: Mapping[str, Any] | None = None) -> str:
    """The text of a Python module holding `config` inline (a JSON literal) and exposing it as TRL's `reward`,
    verl's `compute_score` (and its async and batch forms) or OpenRLHF's `reward_func`. `options` are the
    factory's keyword options, stored beside the config."""
    options = dict(options or {})
    if target not in TARGETS:
        raise ValueError(f"unknown target {target!r}; expected {', '.join(TARGETS)}")
    RewardOptions(**{k: v for k, v in options.items() if k not in _FACTORY_KEYS[target]})  # fails here, not later
    stem = Path(out).stem
    if target == "trl":
        name = options.get("name") or f"rfteval_{config.name}"
        title = f"TRL reward function for grader {config.name!r} (rfteval)."
        usage = (f"    from {stem} import reward       # or reward_async (AsyncGRPOTrainer too)\n"
                 "    trainer = GRPOTrainer(..., reward_funcs=[reward])")
        on_error = options.get("on_error") or "none"
        tail = _EXPORT_TRL.format(reward_name=name, error_value="None" if on_error == "none" else "0")
        factory = "for_trl"
    elif target == "verl":
        field = options.get("reference_field", "reference_answer")
        title = f"verl custom reward function for grader {config.name!r} (rfteval)."
        usage = (f"    reward.custom_reward_function.path={out}      (or pkg://{stem} with its folder on PYTHONPATH)\n"
                 "    reward.custom_reward_function.name=compute_score        (naive, dapo; the reward loop)\n"
                 "    reward.custom_reward_function.name=compute_score_async  (the reward loop, not remote)\n"
                 "    reward.custom_reward_function.name=compute_score_batch  (reward_manager=batch)\n"
                 "(verl before the reward loop spelled the key custom_reward_function at the top level.)\n\n"
                 f"The item is the row's extra_info with reward_model.ground_truth at {field!r}, or the original\n"
                 "line a dataset from `rfteval export-dataset --target verl` carries.")
        tail = _EXPORT_VERL.format(field=_doc(repr(field)))
        factory = "for_verl"
    else:
        title = f"OpenRLHF remote reward function for grader {config.name!r} (rfteval)."
        usage = (f"    --reward.remote_url {out}      (reward_func: the response is the query without its prompt)\n"
                 f"    --train.agent_func_path {out}  (AgentExecutor: the response as generated)\n\n"
                 "With a dataset from `rfteval export-dataset --target openrlhf`: "
                 "--data.prompt_dataset DIR/train.jsonl\n--data.input_key prompt --data.label_key label "
                 "--data.apply_chat_template.")
        tail = _EXPORT_OPENRLHF
        factory = "for_openrlhf"
    doc = (f"{title}\n\nWritten by `rfteval export-reward` from {source}\n(grader {config.name!r}, type "
           f"{config.type}).\n\nThe grader config is held below; rfteval, imported at the first call, scores with "
           "it exactly as\n`rfteval grade` does (python graders in its sandbox). Needs rfteval installed where the "
           f"trainer runs.\n\n{usage}\n")
    text = _EXPORT_HEAD.format(
        doc=_doc(doc), factory=factory,
        config=json.dumps(config.model_dump(mode="json", exclude_unset=True), indent=2),  # as written; ASCII only
        options=json.dumps(options),
    ) + tail
    compile(text, "<export>", "exec")  # a JSON text never holds three quotes in a row nor ends in a backslash
    return text
