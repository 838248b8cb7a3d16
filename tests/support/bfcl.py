"""BFCL's multi-turn base set as an rfteval agent eval, the oracle of issue 37: a benchmark written by others, run
through rfteval's rollout loop and checked by its own checker.

- `convert` makes one rfteval dataset line per BFCL entry from its first user turn: `messages` (that turn),
  `tools` (what BFCL's OpenAI function-calling handler sends: the function docs of the entry's classes, with BFCL's
  Python hint, through BFCL's own `convert_to_tool`), `id` (BFCL's), and what the grader reads: `bfcl_id`,
  `initial_config`, `involved_classes` and `ground_truth` (the first turn's calls, as a list of turns so that later
  turns can join it). BFCL's `excluded_function` field is carried by no code of BFCL's, so it is ignored here too.
- `write_tools` writes the tools module (bfcl_tools.py's text and one function per tool) and `GRADER` is the python
  grader (bfcl_grader.py): both run in rfteval's sandbox, so neither imports this checkout.
- `responder` is a responder of tests/support/fake_openai.py that plays BFCL's ground truth as tool calls (`Player`),
  or a perturbed ground truth: the last call dropped, or one argument changed.
- `bfcl_verdict` is BFCL's checker run outside rfteval on a transcript (the generated messages a record keeps), the
  entry and ground truth read again from BFCL's own files.

What is read of BFCL's code is read by import (its backends, its checker, its execution) or, where the module that
holds a function cannot be imported without tree-sitter or without creating directories beside site-packages
(bfcl_eval/utils.py, bfcl_eval/model_handler/utils.py), compiled from BFCL's own text (`bfcl_functions`): nothing
of its conversion is written again here.
"""

from __future__ import annotations

import ast
import copy
import functools
import importlib
import importlib.util
import inspect
import itertools
import json
import re
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import bfcl_eval
from bfcl_eval.constants.enums import ModelStyle
from bfcl_eval.constants.executable_backend_config import CLASS_FILE_PATH_MAPPING, MULTI_TURN_FUNC_DOC_FILE_MAPPING
from bfcl_eval.constants.type_mappings import GORILLA_TO_OPENAPI
from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils
from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import multi_turn_checker
from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_utils import is_empty_execute_response

from tests.support.fake_openai import Reply, Request

BFCL = Path(bfcl_eval.__file__).parent
CATEGORY = "multi_turn_base"
ENTRIES = BFCL / "data" / f"BFCL_v4_{CATEGORY}.json"
ANSWERS = BFCL / "data" / "possible_answer" / f"BFCL_v4_{CATEGORY}.json"
FUNC_DOCS = BFCL / "data" / "multi_turn_func_doc"
HERE = Path(__file__).parent
TOOLS_RUNTIME = HERE / "bfcl_tools.py"
GRADER = HERE / "bfcl_grader.py"
FINAL_ANSWER = "scripted BFCL ground-truth player: done"  # the player's last message, with no tool call


def bfcl_functions(relative: str, names: Iterable[str], **namespace: Any) -> dict[str, Any]:
    """Functions of BFCL's module `relative` (under bfcl_eval/), compiled from its text into one namespace (what
    they use of their module's globals given as `namespace`), without running the module's imports."""
    path = BFCL / relative
    wanted = set(names)
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    nodes: list[ast.stmt] = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in wanted]
    found = {n.name for n in nodes if isinstance(n, ast.FunctionDef)}
    if found != wanted:
        raise LookupError(f"{path}: no function {sorted(wanted - found)}")
    scope: dict[str, Any] = {"__name__": f"bfcl_eval/{relative}", **namespace}
    exec(compile(ast.Module(nodes, []), str(path), "exec"), scope)
    return scope


def _read_lines(path: Path, use_lock: bool = True) -> list[dict[str, Any]]:
    """BFCL's `load_file` without its file lock (the lock lives in a directory beside site-packages)."""
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


# BFCL's loader of multi-turn entries (bfcl_eval/utils.py): the function docs of the entry's classes, then each
# description with its language hint
_LOADER = bfcl_functions(
    "utils.py",
    ["populate_test_cases_with_predefined_functions", "add_language_specific_hint_to_function_doc",
     "_func_doc_language_specific_pre_processing", "_get_language_specific_hint", "extract_test_category_from_id",
     "is_multi_turn", "is_agentic", "is_java", "is_js"],
    json=json, load_file=_read_lines, MULTI_TURN_FUNC_DOC_PATH=FUNC_DOCS,
    MULTI_TURN_FUNC_DOC_FILE_MAPPING=MULTI_TURN_FUNC_DOC_FILE_MAPPING)
# BFCL's OpenAI handler: function docs as OpenAI tools, and a tool call's name and JSON arguments as a call string
_HANDLER = bfcl_functions("model_handler/utils.py",
                          ["_cast_to_openai_type", "convert_to_tool", "convert_to_function_call"],
                          copy=copy, json=json, re=re, ModelStyle=ModelStyle, GORILLA_TO_OPENAPI=GORILLA_TO_OPENAPI)
convert_to_function_call: Callable[[Any], list[str]] = _HANDLER["convert_to_function_call"]


def bfcl_entries() -> list[dict[str, Any]]:
    """BFCL's multi-turn base entries as its loader gives them to a model handler (with `function`)."""
    entries = _LOADER["populate_test_cases_with_predefined_functions"](_read_lines(ENTRIES))
    return list(_LOADER["add_language_specific_hint_to_function_doc"](entries))


@functools.cache
def _files() -> tuple[dict[str, dict[str, Any]], dict[str, list[list[str]]]]:
    """BFCL's entries and ground truth by id, read once (the checker's callers get copies)."""
    return ({entry["id"]: entry for entry in _read_lines(ENTRIES)},
            {line["id"]: line["ground_truth"] for line in _read_lines(ANSWERS)})


def ground_truth() -> dict[str, list[list[str]]]:
    """BFCL's ground truth of each entry: per user turn, the calls that answer it."""
    return copy.deepcopy(_files()[1])


def openai_tools(functions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What BFCL's OpenAI chat-completions handler sends as `tools` for these function docs."""
    return list(_HANDLER["convert_to_tool"](functions, GORILLA_TO_OPENAPI, ModelStyle.OPENAI_COMPLETIONS))


def convert(limit: int | None = None) -> list[dict[str, Any]]:
    """The dataset lines of the first `limit` entries (all when None), each playing the entry's first user turn."""
    answers = ground_truth()
    lines = []
    for entry in bfcl_entries()[:limit]:
        lines.append({"id": entry["id"], "messages": entry["question"][0], "tools": openai_tools(entry["function"]),
                      "bfcl_id": entry["id"], "initial_config": entry["initial_config"],
                      "involved_classes": entry["involved_classes"], "ground_truth": answers[entry["id"]][:1]})
    return lines


def write_dataset(path: Path, lines: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


# ---- the tools module ---------------------------------------------------------------------------------------------


def tool_function_source(function: dict[str, Any]) -> str:
    """One tool as a python function of the tools module: the schema's parameters, required ones first, optional
    ones defaulting to UNSET (left out of BFCL's call string, as the model left them out of its arguments)."""
    name, parameters = function["name"], function["parameters"]
    properties, required = list(parameters["properties"]), set(parameters.get("required", []))
    if not name.isidentifier() or not all(p.isidentifier() for p in properties):
        raise ValueError(f"BFCL function {name!r}: a name that is not a python identifier")
    signature = [p for p in properties if p in required] + [f"{p}=UNSET" for p in properties if p not in required]
    arguments = ", ".join(f"{p!r}: {p}" for p in properties)
    return (f"\n\ndef {name}({', '.join([*signature, '*', 'item=None', 'state=None'])}):\n"
            f"    return _call({name!r}, {{{arguments}}}, item, state)\n")


def defined(node: ast.stmt) -> list[str]:
    """The module-level names a statement binds."""
    if isinstance(node, ast.FunctionDef | ast.ClassDef):
        return [node.name]
    if isinstance(node, ast.Import | ast.ImportFrom):
        return [(alias.asname or alias.name).partition(".")[0] for alias in node.names]
    if isinstance(node, ast.Assign | ast.AnnAssign):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return [t.id for t in targets if isinstance(t, ast.Name)]
    return []


def write_tools(path: Path, lines: list[dict[str, Any]]) -> Path:
    """The tools module of these lines: bfcl_tools.py's text, then one function per tool of any line. BFCL's
    multi-turn function names are plain (`cd`, `ls`), so two classes naming one function the same would make one
    tool out of two, and a function named as one of bfcl_tools.py's own names would replace it: both are refused."""
    functions: dict[str, dict[str, Any]] = {}
    for line in lines:
        for tool in line["tools"]:
            function = tool["function"]
            seen = functions.setdefault(function["name"], function)
            if seen != function:
                raise ValueError(f"two BFCL functions are named {function['name']!r}")
    runtime = TOOLS_RUNTIME.read_text(encoding="utf-8")
    taken = set(functions) & {name for node in ast.parse(runtime).body for name in defined(node)}
    if taken:
        raise ValueError(f"BFCL functions named as bfcl_tools.py's own names: {sorted(taken)}")
    source = runtime + "".join(
        tool_function_source(functions[name]) for name in sorted(functions))
    path.write_text(source, encoding="utf-8")
    return path


# ---- the ground truth as tool calls ---------------------------------------------------------------------------------


def backend_method(name: str, classes: Iterable[str]) -> Callable[..., Any]:
    """The method `name` of the backend class among `classes` that has it."""
    for class_name in classes:
        backend = getattr(importlib.import_module(CLASS_FILE_PATH_MAPPING[class_name]), class_name)
        method = getattr(backend, name, None)
        if method is not None and not name.startswith("_"):
            return method
    raise LookupError(f"no backend of {list(classes)} has a method {name!r}")


def call_arguments(call: str, classes: Iterable[str]) -> tuple[str, dict[str, Any]]:
    """A ground-truth call string as a tool call's name and arguments. Positional arguments (`sort('a.pdf')`) are
    named by the backend method's own signature, which BFCL's execution binds them to."""
    node = ast.parse(call, mode="eval").body
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        raise ValueError(f"not a plain call: {call!r}")
    name = node.func.id
    parameters = [p for p in inspect.signature(backend_method(name, classes)).parameters if p != "self"]
    arguments = {parameters[i]: ast.literal_eval(value) for i, value in enumerate(node.args)}
    arguments.update({k.arg: ast.literal_eval(k.value) for k in node.keywords if k.arg is not None})
    return name, arguments


UNKNOWN_ARGUMENT = "changed"  # the argument change_arg adds where the ground truth passes no string or number


# The entries whose changed call BFCL's own checker accepts: the changed call leaves the backends' state and the
# call's answer as the ground truth leaves them. A stock already on the watchlist (the ground truth adds it again, a
# no-op, and an unknown symbol is refused without a change); authenticate_travel, which keeps no client_id; a drive
# of 451 miles as feasible as one of 450.
CHANGE_ARG_ACCEPTED = frozenset(f"multi_turn_base_{n}" for n in (66, 103, 111, 135, 137, 139, 142, 143, 161, 172, 193))


def change_argument(calls: list[tuple[str, dict[str, Any]]]) -> list[tuple[str, dict[str, Any]]]:
    """The calls with one argument made wrong: the first string argument of the last call that has one (a name
    that exists nowhere: `_changed` appended), else the first number of the last call that has one (plus 1), else
    the last call given an argument its function does not take. Booleans are never flipped: BFCL's own checker
    finds `ls(a=False)` as good as `ls(a=True)` in a directory with nothing hidden, so a flip would not be wrong."""
    for kind in (str, int | float):
        for index in reversed(range(len(calls))):
            name, arguments = calls[index]
            key = next((k for k, v in arguments.items() if isinstance(v, kind) and not isinstance(v, bool)), None)
            if key is not None:
                value = arguments[key]
                wrong = value + "_changed" if isinstance(value, str) else value + 1
                return [*calls[:index], (name, {**arguments, key: wrong}), *calls[index + 1:]]
    name, arguments = calls[-1]
    return [*calls[:-1], (name, {**arguments, UNKNOWN_ARGUMENT: UNKNOWN_ARGUMENT})]


@dataclass(frozen=True)
class Player:
    """How the scripted server plays an item's ground truth.

    BFCL's ground truth is one flat list of calls per user turn, not grouped into the model's steps, so either
    grouping is the ground truth: `steps` answers one call per model turn (the tools' state carried across
    turns), `parallel` answers all of them as parallel tool calls of the first model turn (run in order in one
    turn). Then a text answer with no tool call. `perturb`: None (the ground truth), `drop_last` (its last call
    left out) or `change_arg` (one argument made wrong: `change_argument`)."""

    grouping: str = "steps"
    perturb: str | None = None

    def calls(self, line: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        calls = [call_arguments(c, line["involved_classes"]) for c in line["ground_truth"][0]]
        if self.perturb == "drop_last":
            return calls[:-1]
        if self.perturb == "change_arg":
            return change_argument(calls)
        if self.perturb is not None:
            raise ValueError(f"unknown perturbation {self.perturb!r}")
        return calls

    def step(self, line: dict[str, Any], turn: int) -> list[tuple[str, dict[str, Any]]]:
        """The calls of model turn `turn` (0-based); none: the final answer."""
        calls = self.calls(line)
        if self.grouping == "parallel":
            return calls if turn == 0 else []
        if self.grouping == "steps":
            return calls[turn:turn + 1]
        raise ValueError(f"unknown grouping {self.grouping!r}")


def tool_calls(calls: list[tuple[str, dict[str, Any]]], turn: int) -> list[dict[str, Any]]:
    return [{"id": f"call_{turn}_{i}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
            for i, (name, args) in enumerate(calls)]


def reply(line: dict[str, Any], player: Player, turn: int) -> Reply:
    calls = player.step(line, turn)
    return Reply(tool_calls=tool_calls(calls, turn)) if calls else Reply(text=FINAL_ANSWER)


def responder(lines: list[dict[str, Any]], players: dict[str, Player]) -> Callable[[Request], Reply]:
    """A responder for FakeOpenAI: the request's model names its player, its first user message the item, and the
    assistant messages already in its history the model turn. Two entries may share their first user message
    (multi_turn_base_40 and 43: one request, two file systems); the player plays the same calls for both, so that
    is refused only where their ground truths differ."""
    by_prompt: dict[str, dict[str, Any]] = {}
    for line in lines:
        seen = by_prompt.setdefault(line["messages"][0]["content"], line)
        if (seen["ground_truth"], seen["involved_classes"]) != (line["ground_truth"], line["involved_classes"]):
            raise ValueError(f"{seen['id']} and {line['id']} share their first user message, not their calls")

    def answer(request: Request) -> Reply:
        messages = request.body.get("messages") or []
        turn = sum(1 for m in messages if isinstance(m, dict) and m.get("role") == "assistant")
        return reply(by_prompt[request.user_texts()[0]], players[request.model], turn)

    return answer


# ---- BFCL's checker outside rfteval ---------------------------------------------------------------------------------

_NAMES = itertools.count()


def fresh_instances(run: Callable[[str], Any]) -> Any:
    """`run(model_name)` with a model name of its own, the backend instances BFCL keeps in its module's globals
    under that name removed afterwards (BFCL would otherwise reuse them for the next check of the entry)."""
    names = vars(multi_turn_utils)
    before = set(names)
    try:
        return run(f"rfteval_outside_{next(_NAMES)}")
    finally:
        for key in set(names) - before:
            del names[key]


def steps(transcript: list[dict[str, Any]]) -> list[Any]:
    """A transcript's model steps as BFCL's OpenAI handler records them: each assistant message's tool calls as
    [{name: arguments}], or its text when it has none."""
    return [[{c["function"]["name"]: c["function"]["arguments"]} for c in m["tool_calls"]] if m.get("tool_calls")
            else m.get("content") for m in transcript if m.get("role") == "assistant"]


def decode(model_steps: list[Any]) -> list[list[str]]:
    """BFCL's evaluation of a turn's steps (eval_runner's _evaluate_single_multi_turn_entry): each decoded with the
    handler's decode_execute, a step that fails to decode or decodes to nothing left out."""
    decoded = []
    for step in model_steps:
        try:
            calls = convert_to_function_call(step)
        except Exception:
            continue
        if not is_empty_execute_response(calls):
            decoded.append(calls)
    return decoded


def bfcl_verdict(bfcl_id: str, transcript: list[dict[str, Any]], turns: int = 1) -> dict[str, Any]:
    """BFCL's multi-turn checker on a one-user-turn transcript, the entry and its first `turns` turns of ground truth
    read from BFCL's files (not from the dataset line)."""
    entries, answers = _files()
    entry, truth = copy.deepcopy(entries[bfcl_id]), copy.deepcopy(answers[bfcl_id][:turns])
    return dict(fresh_instances(lambda name: multi_turn_checker([decode(steps(transcript))], truth, entry, CATEGORY,
                                                                name)))


def execute_steps(calls: list[str], line: dict[str, Any]) -> list[str]:
    """BFCL's results of `calls` each run as a step of its own on instances kept across steps, as BFCL's inference
    runs a model's steps."""
    def run(name: str) -> list[str]:
        return [result for call in calls for result in multi_turn_utils.execute_multi_turn_func_call(
            [call], line["initial_config"], line["involved_classes"], name, line["bfcl_id"])[0]]
    return list(fresh_instances(run))


# ---- a rollout played in this process ------------------------------------------------------------------------------


def run_tool(function: Callable[..., Any], arguments: dict[str, Any], line: dict[str, Any],
             state: dict[str, Any]) -> tuple[str, str | None]:
    """One call as issue 37's contract runs it: arguments that do not bind are `BadArguments`, shown as an error."""
    try:
        inspect.signature(function).bind(**arguments, item=line, state=state)
    except TypeError as exc:
        return f"error: BadArguments: {exc}", "BadArguments"
    return function(**arguments, item=line, state=state), None


def play(line: dict[str, Any], player: Player, tools: Any, max_turns: int = 10) -> dict[str, Any]:
    """The sample a rollout of `player` on `line` gives, played here without rfteval's loop: each model turn's
    calls run through the tools module `tools` in order, the state passed between turns as JSON text (as the
    sandbox carries it), in the shape of issue 37's `sample["rollout"]`."""
    state = json.dumps(tools.init_state(line))
    messages: list[dict[str, Any]] = []
    all_calls: list[dict[str, Any]] = []
    results: list[dict[str, Any]] = []
    errors: Counter[str] = Counter()
    for turn in range(max_turns):
        answer = reply(line, player, turn)
        messages.append({"role": "assistant", "content": answer.text or "",
                         **({"tool_calls": answer.tool_calls} if answer.tool_calls else {})})
        if not answer.tool_calls:
            break
        carried = json.loads(state)
        for call in answer.tool_calls:
            function = call["function"]
            content, error = run_tool(getattr(tools, function["name"]), json.loads(function["arguments"]), line,
                                      carried)
            errors.update([error] if error else [])
            all_calls.append({"id": call["id"], "name": function["name"], "arguments": function["arguments"]})
            results.append({"tool_call_id": call["id"], "name": function["name"], "content": content, "error": error})
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": content})
        state = json.dumps(carried)
    final = messages[-1]
    return {"output_text": final["content"], "output_tools": [],
            "rollout": {"messages": messages, "tool_calls": all_calls, "tool_results": results,
                        "turns": sum(1 for m in messages if m["role"] == "assistant"),
                        "stop_reason": "max_turns" if final.get("tool_calls") else "no_tool_calls",
                        "tool_errors": dict(errors)}}


def load_module(path: Path, name: str) -> Any:
    """A python file imported as a module of its own (the tools module, the grader), as rfteval's sandbox loads it."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
