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
from rfteval.reward.base import refuse_rollout_reads
from rfteval.reward.options import RewardOptions
from rfteval.reward.targets import TRAINERS, ModuleRequest, doc_text, reward_module

# export-reward's flags as the factories' options, and their defaults (RewardOptions' own, then the factories'): the
# module stores only what was chosen.
_REWARD_FLAGS = ("grader_timeout", "grader_memory", *JUDGE_KEYWORDS, "on_error", "reasoning", "think_tags")
DEFAULTS: dict[str, object] = {
    **{key: getattr(RewardOptions(), key) for key in _REWARD_FLAGS},
    "reference_field": "reference_answer", "ground_truth_json": False, "eos_tokens": None, "tokenizer": None}
# The flag of a factory option only some targets take, where it is not the option's name.
_FLAGS = {"eos_tokens": "--eos-token"}


def _only(key: str) -> tuple[str, list[str]] | None:
    """A factory option only some targets take: its flag and those targets; None for an option every one takes."""
    takers = [name for name, t in TRAINERS.items() if t.reward is not None and key in t.reward.keys]
    return (_FLAGS.get(key, "--" + key.replace("_", "-")), takers) if takers else None


def module_options(target: str, flags: Mapping[str, object]) -> dict[str, object]:
    """`rfteval export-reward`'s flag values (keyed as DEFAULTS) as the factory's options the module stores: those
    that differ from the default, an empty --reference-field as None; a flag its target does not take is refused."""
    module = reward_module(target)
    options: dict[str, object] = {}
    for key, value in flags.items():
        if value == DEFAULTS[key] or (value == [] and DEFAULTS[key] is None):
            continue
        only = _only(key)
        if only is not None and target not in only[1]:
            raise InputError(f"{only[0]} is for --target {' or '.join(only[1])}", field="--target")
        options[key] = (value or None) if key == "reference_field" else value
    if module.check is not None:  # refused here, not at the trainer's first step
        module.check(options)
    try:
        # checked as the module will build them (export_module checks again, for its other callers)
        RewardOptions(**cast("dict[str, Any]", {k: v for k, v in options.items() if k not in module.keys}))
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
                from {factory_module} import {factory}

                _reward = {factory}(GRADER, **OPTIONS)
    return _reward


def close() -> None:
    """Stop rfteval's python workers now rather than at exit."""
    if _reward is not None:
        _reward.close()
'''


def export_module(config: GraderConfig, target: str, source: str, out: str | Path,
                  options: Mapping[str, Any] | None = None) -> str:
    """The text of a Python module holding `config` inline (a JSON literal) and exposing it as the target trainer's
    reward functions (rfteval.reward.targets: TRL's `reward`, verl's `compute_score` and its async and batch forms,
    OpenRLHF's `reward_func`). `options` are the factory's keyword options, stored beside the config."""
    options = dict(options or {})
    module = reward_module(target)
    if module.text_only is not None:
        refuse_rollout_reads(config, module.text_only)
    RewardOptions(**{k: v for k, v in options.items() if k not in module.keys})  # fails here, not later
    part = module.text(ModuleRequest(config.name, Path(out).stem, out, options))
    doc = (f"{part.title}\n\nWritten by `rfteval export-reward` from {source}\n(grader {config.name!r}, type "
           f"{config.type}).\n\nThe grader config is held below; rfteval, imported at the first call, scores with "
           "it exactly as\n`rfteval grade` does (python graders in its sandbox). Needs rfteval installed where the "
           f"trainer runs.\n\n{part.usage}\n")
    text = _EXPORT_HEAD.format(
        doc=doc_text(doc), factory=module.factory, factory_module=module.factory_module,
        config=json.dumps(config.model_dump(mode="json", exclude_unset=True), indent=2),  # as written; ASCII only
        options=json.dumps(options),
    ) + part.tail
    compile(text, "<export>", "exec")  # a JSON text never holds three quotes in a row nor ends in a backslash
    return text
