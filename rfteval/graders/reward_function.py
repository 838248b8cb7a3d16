"""`reward_function` (rfteval extension): a TRL-style reward function used as a grader, run in the python sandbox.

A team moving between OpenAI graders and an open trainer often holds its scoring logic as a TRL reward function
(`f(prompts, completions, completion_ids, **columns) -> list[float]`). This type grades with such a function
unchanged, so `rfteval run`, `grade` and `validate grader` measure a model by the very reward it is trained on
(`--grader FILE.py:FUNCTION`, see loader.py).

The function never runs in the rfteval process: the config is wrapped into a generated python-grader source
(`grader_source`) and graded by the same sandboxed worker pool as `python` graders. The sandbox calls
`grade(sample, item)` once per sample, each grading unit (one model's samples of one item) in a fresh process, one
sample after another. To call the reward function once per item with all of that item's samples, as a trainer
calls it for a prompt's group of completions, every unit's item carries the unit's completions: the first
`grade()` of the unit calls the function on all of them and keeps the rewards; each call returns its sample's.

What counts as "all of an item's samples" is the grading unit: the samples of one model for one item graded in one
batch. `rfteval grade` and `validate grader` batch up to 2,048 outputs; `rfteval run` grades cells as they finish,
so an item's epochs may reach the function in more than one call. A reward that scores each completion on its own
(the usual kind: accuracy, format) gives the same scores either way; one that compares a group's completions with
each other sees the group the unit holds.
"""

from __future__ import annotations

import ast
import itertools
import json
import os
from collections.abc import Hashable, Mapping, Sequence
from typing import TYPE_CHECKING, Literal

from pydantic import field_validator, model_validator
from pydantic_core import PydanticCustomError

from rfteval.graders.base import BuildContext, GraderConfig, GradeResult, Pair, register
from rfteval.graders.python import parse_source, top_level_bindings

if TYPE_CHECKING:
    from rfteval.data.json_types import JSONMapping, JSONObject, JSONValue
    from rfteval.data.sample import Sample

CALL_KEY = "rfteval_reward_call"  # the item key that carries a unit's completions into the sandbox (popped there)
# What TRL's GRPOTrainer._calculate_rewards leaves out of the keyword columns (the prompt is `prompts`).
NOT_COLUMNS = ("prompt", "completion", "completion_ids")

_units = itertools.count()


def _error(message: str) -> PydanticCustomError:
    return PydanticCustomError("reward_function", message)


def check_reward_source(source: str, function: str) -> None:
    """Raise a validation error unless `source` is Python of at most 256 kB binding `function` at top level, and,
    when it is a def, one TRL could call (keywords only, every dataset column among them: it needs **kwargs)."""
    tree = parse_source(source, _error)
    defs = top_level_bindings(tree.body, function)
    if not defs:
        raise _error(f"the reward file defines no top-level function {function}")
    last = defs[-1]
    if isinstance(last, ast.ClassDef):
        raise _error(f"line {last.lineno}: {function} is a class; it must be a function")
    if isinstance(last, (ast.FunctionDef, ast.AsyncFunctionDef)):
        args = last.args
        if args.vararg is None and any(a.arg == "completions" for a in args.posonlyargs):
            raise _error(f"line {last.lineno}: {function} takes completions positional-only; TRL passes keywords")
        if args.kwarg is None:
            raise _error(f"line {last.lineno}: {function} must take **kwargs: TRL passes every dataset column (and "
                         "trainer_state) as a keyword")
        named = {a.arg for a in args.args + args.kwonlyargs}
        if "completions" not in named:
            raise _error(f"line {last.lineno}: {function} has no `completions` parameter; TRL passes "
                         "prompts=, completions=, completion_ids= and the dataset columns as keywords")


class RewardFunctionConfig(GraderConfig):
    type: Literal["reward_function"]
    source: str  # the reward file's text: it travels with the config (the sandbox sees no host files)
    function: str  # the reward function's name in it
    path: str | None = None  # where the source came from: tracebacks and messages name it
    pass_threshold: float | None = None  # as a python grader's: passed = score >= pass_threshold

    @field_validator("function")
    @classmethod
    def _function(cls, value: str) -> str:
        if not value.isidentifier():
            raise _error(f"{value!r} is not a Python identifier")
        return value

    @model_validator(mode="after")
    def _source(self) -> RewardFunctionConfig:
        check_reward_source(self.source, self.function)
        return self

    runs_python = True

    def python_source(self) -> str:
        return self.source


def _imports(source: str) -> list[str]:
    """Absolute module names the reward file imports anywhere: named in the generated source so that the sandbox
    imports them once per worker rather than once per unit (it reads imports from the source's syntax tree)."""
    names: dict[str, None] = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update((alias.name, None) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names[node.module] = None
    return [n for n in names if all(part.isidentifier() for part in n.split("."))][:64]


# The python grader the sandbox runs. The reward file runs in a module of its own (its names, a `grade` of its own
# included, never meet the wrapper's); its lines show in tracebacks under its own file name.
_WRAPPER = '''\
"""Generated by rfteval: the TRL-style reward function {function} of {filename} as a python grader."""
import asyncio as _asyncio
import copy as _copy
import inspect as _inspect
import linecache as _linecache
import sys as _sys
import types as _types

_SOURCE = {source!r}
_FILE = {filename!r}
_FUNCTION = {function!r}
_CALL = {call_key!r}
_NOT_COLUMNS = {not_columns!r}


def _rfteval_preimports():  # never called
{imports}


def _load():
    module = _types.ModuleType("rfteval_reward_file")
    module.__file__ = _FILE
    _sys.modules[module.__name__] = module
    _linecache.cache[_FILE] = (len(_SOURCE), None, _SOURCE.splitlines(True), _FILE)
    exec(compile(_SOURCE, _FILE, "exec", dont_inherit=True), module.__dict__)
    fn = getattr(module, _FUNCTION, None)
    if not callable(fn):
        raise TypeError(_FILE + " defines no function " + _FUNCTION)
    return fn


_fn = _load()
_done = {{}}


def _noop(*args, **kwargs):
    return None


def _rewards(call, item):
    """TRL's call: every column but the prompt as a keyword with one value per completion."""
    n = len(call["completions"])
    prompt_key = call["prompt_key"]
    prompt = item.get(prompt_key) if prompt_key is not None else None
    columns = {{k: [_copy.deepcopy(v) for _ in range(n)] for k, v in item.items()
               if k != prompt_key and k not in _NOT_COLUMNS}}
    columns.update(trainer_state=None, log_extra=_noop, log_metric=_noop)
    rewards = _fn(prompts=[_copy.deepcopy(prompt) for _ in range(n)], completions=call["completions"],
                  completion_ids=None, **columns)
    if _inspect.isawaitable(rewards):
        rewards = _asyncio.run(rewards)
    rewards = list(rewards)
    if len(rewards) != n:
        raise ValueError(_FUNCTION + " returned %d rewards for %d completions" % (len(rewards), n))
    return rewards


def grade(sample, item):
    call = item.pop(_CALL)
    unit = call["unit"]
    if unit not in _done:
        try:
            _done[unit] = (True, _rewards(call, item))
        except BaseException as exc:  # every sample of the unit reports it; the function is not called again
            _done[unit] = (False, exc)
    ok, value = _done[unit]
    if not ok:
        raise value
    reward = value[sample["i"]]
    if reward is None:
        raise ValueError(_FUNCTION + " returned None for this completion (TRL: not applicable); a grade needs "
                         "a number")
    if isinstance(reward, bool):
        return float(reward)  # TRL takes booleans as 0.0 / 1.0
    return reward
'''


def grader_source(config: RewardFunctionConfig) -> str:
    """The python-grader source that runs `config`'s reward function in the sandbox."""
    imports = "".join(f"    import {name}\n" for name in _imports(config.source)) or "    pass\n"
    filename = os.path.basename(config.path) if config.path else "<reward file>"
    return _WRAPPER.format(function=config.function, filename=filename, source=config.source, call_key=CALL_KEY,
                           not_columns=NOT_COLUMNS, imports=imports.rstrip("\n"))


# ------------------------------------------------------------------ what the function is given


def is_messages(value: object) -> bool:
    """TRL's conversational test: a list of message dicts with a role."""
    return isinstance(value, list) and bool(value) and all(isinstance(m, Mapping) and "role" in m for m in value)


def prompt_key(item: JSONMapping) -> str | None:
    """The item field that is TRL's prompt: an RFT line's `messages`, else a `prompt` column."""
    if is_messages(item.get("messages")):
        return "messages"
    return "prompt" if "prompt" in item else None


def trl_tool_calls(tools: Sequence[JSONValue]) -> list[JSONValue]:
    """OpenAI tool calls in the shape TRL's parse_response gives: arguments as a dict when they are a JSON object."""
    out: list[JSONValue] = []
    for call in tools:
        if not isinstance(call, Mapping):
            out.append(call)
            continue
        call = dict(call)
        function = call.get("function")
        if isinstance(function, Mapping):
            function = dict(function)
            arguments = function.get("arguments")
            if isinstance(arguments, str):
                try:
                    parsed = json.loads(arguments)
                except ValueError:
                    parsed = None
                if isinstance(parsed, dict):
                    function["arguments"] = parsed
            call["function"] = function
        call.setdefault("type", "function")
        out.append(call)
    return out


def completion_for(sample: Sample, conversational: bool) -> str | list[JSONValue]:
    """A sample as TRL hands a completion to reward functions: the text (standard format), or one assistant
    message with its tool calls (conversational format)."""
    text = sample.get("output_text")
    text = text if isinstance(text, str) else ""  # make_sample's: a string
    if not conversational:
        return text
    message: JSONObject = {"role": "assistant", "content": text}
    tools = sample.get("output_tools")
    if isinstance(tools, list) and tools:
        message["tool_calls"] = trl_tool_calls(tools)
    return [message]


class RewardFunctionGrader:
    """Groups the batch into units, puts each unit's completions into its item, and grades in the python pool."""

    def __init__(self, config: RewardFunctionConfig, ctx: BuildContext):
        self.config = config
        self._ctx = ctx
        self.source = grader_source(config)

    def grade_batch(self, pairs: Sequence[Pair], units: Sequence[Hashable] | None = None) -> list[GradeResult]:
        if not pairs:
            return []
        keys: Sequence[Hashable] = [None] * len(pairs) if units is None else units
        groups: dict[tuple[Hashable, int], list[int]] = {}
        for i, ((_, item), key) in enumerate(zip(pairs, keys, strict=True)):
            groups.setdefault((key, id(item)), []).append(i)
        sent: list[Pair] = [None] * len(pairs)  # type: ignore[list-item]
        calls: list[Hashable] = [None] * len(pairs)
        for number, members in enumerate(groups.values()):
            item = pairs[members[0]][1]
            key = prompt_key(item)
            conversational = key is not None and is_messages(item.get(key))
            call: JSONObject = {"unit": f"{os.getpid()}-{next(_units)}", "prompt_key": key,
                    "completions": [completion_for(pairs[i][0], conversational) for i in members]}
            carried: JSONObject = {**item, CALL_KEY: call}
            for position, i in enumerate(members):
                sent[i] = ({"i": position}, carried)
                calls[i] = number
        results = self._ctx.python_pool().grade(self.source, sent, calls)
        threshold = self.config.pass_threshold
        if threshold is not None:
            for result in results:
                result.passed = result.error is None and result.score >= threshold
        return results


@register("reward_function", RewardFunctionConfig,
          "rfteval extension: a TRL-style reward function (--grader FILE.py:FUNCTION), run in the python sandbox",
          extension=True)
def build(config: RewardFunctionConfig, ctx: BuildContext) -> RewardFunctionGrader:
    from rfteval.errors import InputError
    from rfteval.sandbox.host_probe import sandbox_problem

    problem = sandbox_problem(ctx.options.sandbox)  # the one-line refusal the commands give `python` graders
    if problem is not None:
        raise InputError(problem, field="--unsafe-python-graders")
    return RewardFunctionGrader(config, ctx)
