"""BFCL's multi-turn backends as an rfteval tools module: the fixed half of the module tests/support/bfcl.py writes.

`write_tools` writes this file's text followed by one function per BFCL tool (`def cd(folder, *, item=None,
state=None): return _call("cd", {...}, item, state)`), so rfteval sees a plain module of named functions whose
parameters are the tool's schema. The written module runs in rfteval's sandbox, which holds site-packages but not
this checkout: it imports only the standard library and bfcl_eval.

A rollout's tools run one turn per fresh process, with only JSON carried between turns, while BFCL keeps its backend
instances alive for a whole conversation. So the state is the list of BFCL call strings executed so far, and each call
builds the instances again from the item's initial_config, replays those calls and then runs the new one, all through
BFCL's own `execute_multi_turn_func_call`. The backends are deterministic (their random generators are seeded from
the scenario), so the replayed instances are the ones BFCL would hold, and the call's result is the string BFCL's
execution returns: an exception inside a backend comes back as BFCL's "Error during execution: ..." text, as BFCL
shows it to the model.
"""

from __future__ import annotations

import ast
import itertools
import json
from pathlib import Path
from typing import Any

import bfcl_eval
from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils

# The backends of the multi-turn base set, imported once in the sandbox's template rather than in every turn's process
# (BFCL's execution imports each lazily by name)
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

CALLS = "bfcl_calls"  # the state's key: BFCL call strings executed so far, in order


class _Unset:
    """The default of an optional parameter: the model left it out, so BFCL's call string leaves it out too."""

    def __repr__(self) -> str:
        return "UNSET"


UNSET = _Unset()
_NAMES = itertools.count()


def _bfcl_function(relative: str, name: str) -> Any:
    """A function of BFCL's source, compiled from its text: its module imports tree-sitter parsers and creates
    directories beside site-packages at import, neither of which a `--no-deps` install or the sandbox allows."""
    path = Path(bfcl_eval.__file__).parent / relative
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    node = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)
    namespace: dict[str, Any] = {"json": json}
    exec(compile(ast.Module([node], []), str(path), "exec"), namespace)
    return namespace[name]


# BFCL's OpenAI handler turns a tool call's name and JSON arguments into the call string it executes with this
_convert_to_function_call = _bfcl_function("model_handler/utils.py", "convert_to_function_call")


def _execute(calls: list[str], item: dict[str, Any]) -> list[str]:
    """BFCL's results of `calls` run in order on backend instances made fresh from the item's initial_config.

    BFCL keeps its instances in its module's globals under a name per model and entry; a new name per execution gives
    fresh ones, and they are removed afterwards so that nothing carries over to the next."""
    names = vars(multi_turn_utils)
    before = set(names)
    try:
        results, _ = multi_turn_utils.execute_multi_turn_func_call(
            calls, item["initial_config"], item["involved_classes"], f"rfteval_tools_{next(_NAMES)}", item["bfcl_id"],
            long_context=False, is_evaL_run=False)
    finally:
        for key in set(names) - before:
            del names[key]
    return list(results)


def init_state(item: dict[str, Any]) -> dict[str, Any]:
    return {CALLS: []}


def _call(name: str, arguments: dict[str, Any], item: dict[str, Any], state: dict[str, Any]) -> str:
    """One tool call: the earlier calls replayed, this one run, its result returned and the call kept in `state`."""
    given = {key: value for key, value in arguments.items() if value is not UNSET}
    line = _convert_to_function_call([{name: given}])[0]
    done = state.setdefault(CALLS, [])
    result = _execute([*done, line], item)[-1]
    done.append(line)
    return result


# ---- the tools (written by tests/support/bfcl.py) ------------------------------------------------------------------
