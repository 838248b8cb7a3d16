"""A python grader (OpenAI's format) that scores a rollout on BFCL's multi-turn set with BFCL's own checker.

The item is a line tests/support/bfcl.py wrote: BFCL's test entry (`bfcl_id`, `initial_config`, `involved_classes`)
and `ground_truth`, the calls of each user turn the item plays (the first only, for now). The rollout's assistant
messages are BFCL's steps, read as BFCL's evaluation reads an OpenAI function-calling model's answers: a message's
tool calls decoded by BFCL's own `convert_to_function_call`, a step that does not decode (a text answer) or decodes
to nothing left out; a user message in the rollout starts the next turn. `multi_turn_checker` then executes the
model's calls and the ground truth on fresh backends and compares their state and responses after each turn: 1.0
when it finds them valid, else 0.0, with BFCL's error printed (the record's grader_stdout).

It runs in rfteval's sandbox, which holds site-packages but not this checkout: only the standard library and
bfcl_eval are imported.
"""

from __future__ import annotations

import ast
import itertools
import json
from pathlib import Path
from typing import Any

import bfcl_eval
from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils

# The backends of the multi-turn base set, imported once in the sandbox's template rather than in every unit
from bfcl_eval.eval_checker.multi_turn_eval.func_source_code import (  # noqa: F401
    gorilla_file_system,
    math_api,
    message_api,
    posting_api,
    ticket_api,
    trading_bot,
    travel_booking,
    vehicle_control,
)
from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import multi_turn_checker
from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_utils import is_empty_execute_response

CATEGORY = "multi_turn_base"
_NAMES = itertools.count()


def bfcl_function(relative: str, name: str) -> Any:
    """A function of BFCL's source, compiled from its text: its module imports tree-sitter parsers and creates
    directories beside site-packages at import, neither of which a `--no-deps` install or the sandbox allows."""
    path = Path(bfcl_eval.__file__).parent / relative
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    node = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)
    namespace: dict[str, Any] = {"json": json}
    exec(compile(ast.Module([node], []), str(path), "exec"), namespace)
    return namespace[name]


convert_to_function_call = bfcl_function("model_handler/utils.py", "convert_to_function_call")


def decoded_turns(messages: list[dict[str, Any]]) -> list[list[list[str]]]:
    """The rollout's steps per user turn, each decoded into BFCL call strings as BFCL's evaluation decodes them."""
    turns: list[list[list[str]]] = [[]]
    for message in messages:
        if message.get("role") == "user":
            turns.append([])
        if message.get("role") != "assistant":
            continue
        calls = message.get("tool_calls") or []
        step = [{c["function"]["name"]: c["function"]["arguments"]} for c in calls] if calls else message.get("content")
        try:
            decoded = convert_to_function_call(step)
        except Exception:  # BFCL leaves out a step it cannot decode: a text answer, bad JSON
            continue
        if not is_empty_execute_response(decoded):
            turns[-1].append(decoded)
    return turns


def check(turns: list[list[list[str]]], ground_truth: list[list[str]], entry: dict[str, Any]) -> dict[str, Any]:
    """BFCL's multi-turn checker on decoded turns. It keeps its backend instances in its module's globals under a
    name per model and entry: a new name per check, removed afterwards, so no check sees another's instances."""
    names = vars(multi_turn_utils)
    before = set(names)
    try:
        return dict(multi_turn_checker(turns, ground_truth, entry, CATEGORY, f"rfteval_grader_{next(_NAMES)}"))
    finally:
        for key in set(names) - before:
            del names[key]


def grade(sample: dict[str, Any], item: dict[str, Any]) -> float:
    ground_truth = item["ground_truth"]
    turns = decoded_turns(sample["rollout"]["messages"])
    if len(turns) != len(ground_truth):  # BFCL: a model that did not reach every turn fails
        print(f"multi_turn:force_terminated: {len(turns)} turns, the ground truth has {len(ground_truth)}")
        return 0.0
    entry = {"id": item["bfcl_id"], "initial_config": item["initial_config"],
             "involved_classes": item["involved_classes"]}
    result = check(turns, ground_truth, entry)
    if not result["valid"]:
        print(f"{result.get('error_type')}: {result.get('error_message')}")
    return 1.0 if result["valid"] else 0.0
