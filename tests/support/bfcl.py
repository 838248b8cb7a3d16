"""BFCL's multi-turn base set as an rfteval agent eval, the oracle of issue 37: a benchmark written by others, run
through rfteval's rollout loop and checked by its own checker.

- `convert` makes one rfteval dataset line per BFCL entry from its first user turn: `messages` (that turn),
  `tools` (what BFCL's OpenAI function-calling handler sends: the function docs of the entry's classes, with BFCL's
  Python hint, through BFCL's own `convert_to_tool`), `id` (BFCL's), and what the grader reads: `bfcl_id`,
  `initial_config`, `involved_classes` and `ground_truth` (the first turn's calls, as a list of turns). With
  `whole=True` the line plays every user turn: the later turns of BFCL's `question` list are its
  `rfteval_followups` (sent by rfteval's rollout loop each time the agent answers), and `ground_truth` holds every
  turn's calls. BFCL's `excluded_function` field is carried by no code of BFCL's, so it is ignored here too.
- `write_tools` writes the tools module (bfcl_tools.py's text and one function per tool) and `GRADER` is the python
  grader (bfcl_grader.py): both run in rfteval's sandbox, so neither imports this checkout.
- `responder` is a responder of tests/support/fake_openai.py that plays BFCL's ground truth as tool calls (`Player`),
  or a perturbed ground truth: the last call dropped, or one argument changed.
- `bfcl_verdict` is BFCL's evaluation of one multi-turn entry (eval_runner's `_evaluate_single_multi_turn_entry`:
  the force-termination check, each step decoded, then its checker) run outside rfteval on a transcript (the
  generated messages a record keeps, split into user turns at its user messages), the entry and ground truth read
  again from BFCL's own files.

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


def convert(limit: int | None = None, whole: bool = False) -> list[dict[str, Any]]:
    """The dataset lines of the first `limit` entries (all when None), each playing the entry's first user turn, or
    with `whole` every user turn: the later ones as the line's follow-ups (each of BFCL's turns is one user
    message in the base set; a turn of several is refused rather than joined)."""
    answers = ground_truth()
    lines = []
    for entry in bfcl_entries()[:limit]:
        line = {"id": entry["id"], "messages": entry["question"][0], "tools": openai_tools(entry["function"]),
                "bfcl_id": entry["id"], "initial_config": entry["initial_config"],
                "involved_classes": entry["involved_classes"], "ground_truth": answers[entry["id"]][:1]}
        if whole:
            later = entry["question"][1:]
            if any(len(turn) != 1 or turn[0].get("role") != "user" for turn in later):
                raise ValueError(f"{entry['id']}: a user turn that is not one user message")
            line.update({"rfteval_followups": [turn[0] for turn in later], "ground_truth": answers[entry["id"]]})
        lines.append(line)
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

    def calls(self, line: dict[str, Any], user_turn: int = 0) -> list[tuple[str, dict[str, Any]]]:
        """The calls the player makes for user turn `user_turn` (0-based). A perturbation changes the line's last
        user turn that has calls (the first turn's, for a line playing only that), and no other."""
        truth = line["ground_truth"]
        calls = [call_arguments(c, line["involved_classes"]) for c in truth[user_turn]]
        perturbed = max((i for i, turn in enumerate(truth) if turn), default=0)
        if self.perturb is None or user_turn != perturbed:
            if self.perturb not in (None, "drop_last", "change_arg"):
                raise ValueError(f"unknown perturbation {self.perturb!r}")
            return calls
        if self.perturb == "drop_last":
            return calls[:-1]
        return change_argument(calls)

    def all_calls(self, line: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        """Every call the player makes over the line's user turns, in order."""
        return [c for user_turn in range(len(line["ground_truth"])) for c in self.calls(line, user_turn)]

    def step(self, line: dict[str, Any], turn: int, user_turn: int = 0) -> list[tuple[str, dict[str, Any]]]:
        """The calls of model turn `turn` (0-based, counted from user turn `user_turn`'s message); none: the
        answer that ends the user turn."""
        calls = self.calls(line, user_turn)
        if self.grouping == "parallel":
            return calls if turn == 0 else []
        if self.grouping == "steps":
            return calls[turn:turn + 1]
        raise ValueError(f"unknown grouping {self.grouping!r}")


def tool_calls(calls: list[tuple[str, dict[str, Any]]], turn: int, user_turn: int = 0) -> list[dict[str, Any]]:
    prefix = f"call_{turn}" if user_turn == 0 else f"call_u{user_turn}_{turn}"  # unique over the user turns
    return [{"id": f"{prefix}_{i}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
            for i, (name, args) in enumerate(calls)]


def reply(line: dict[str, Any], player: Player, turn: int, user_turn: int = 0) -> Reply:
    calls = player.step(line, turn, user_turn)
    return Reply(tool_calls=tool_calls(calls, turn, user_turn)) if calls else Reply(text=FINAL_ANSWER)


def user_turns(line: dict[str, Any]) -> list[str]:
    """The text of each user turn a line plays: its message, then its follow-ups."""
    return [line["messages"][0]["content"], *(m["content"] for m in line.get("rfteval_followups", []))]


def _perturbed_turn(line: dict[str, Any]) -> int:
    return max((i for i, turn in enumerate(line["ground_truth"]) if turn), default=0)


def responder(lines: list[dict[str, Any]], players: dict[str, Player]) -> Callable[[Request], Reply]:
    """A responder for FakeOpenAI: the request's model names its player, its user messages so far the item and the
    user turn (a follow-up), and the assistant messages since the last user message the model turn within it.
    Two entries may share their first user messages (multi_turn_base_40 and 43: one request, two file systems,
    different later turns); a player plays the same calls for both while they do, so that is refused only where
    their ground truths up to there differ."""
    by_prefix: dict[tuple[str, ...], dict[str, Any]] = {}
    for line in lines:
        texts = user_turns(line)
        for k in range(1, len(texts) + 1):
            seen = by_prefix.setdefault(tuple(texts[:k]), line)
            same = (seen["ground_truth"][:k], seen["involved_classes"], min(_perturbed_turn(seen), k)) == (
                line["ground_truth"][:k], line["involved_classes"], min(_perturbed_turn(line), k))
            if not same:
                raise ValueError(f"{seen['id']} and {line['id']} share their first user message, not their calls")

    def answer(request: Request) -> Reply:
        messages = [m for m in request.body.get("messages") or [] if isinstance(m, dict)]
        users = [i for i, m in enumerate(messages) if m.get("role") == "user"]
        turn = sum(1 for m in messages[users[-1]:] if m.get("role") == "assistant")
        return reply(by_prefix[tuple(request.user_texts())], players[request.model], turn, len(users) - 1)

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


def turn_steps(transcript: list[dict[str, Any]]) -> list[list[Any]]:
    """A transcript's steps per user turn, as BFCL's inference keeps a multi-turn entry's result: a user message
    in the transcript (a follow-up) starts the next turn; the first turn's user message is the item's own."""
    turns: list[list[dict[str, Any]]] = [[]]
    for message in transcript:
        if message.get("role") == "user":
            turns.append([])
        else:
            turns[-1].append(message)
    return [steps(turn) for turn in turns]


# BFCL's evaluation of one multi-turn entry (eval_checker/eval_runner.py): a result whose number of turns is not
# the ground truth's is force-terminated (invalid), each step is decoded by the handler's decode_execute (a step
# that fails to decode, or decodes to nothing, left out), then multi_turn_checker judges the decoded turns
_EVALUATE = bfcl_functions("eval_checker/eval_runner.py", ["_evaluate_single_multi_turn_entry"], BaseHandler=object,
                           multi_turn_checker=multi_turn_checker, is_empty_execute_response=is_empty_execute_response)
evaluate_entry: Callable[..., dict[str, Any]] = _EVALUATE["_evaluate_single_multi_turn_entry"]


class _OpenAIDecoder:
    """What BFCL's evaluation asks of its OpenAI function-calling handler: decode_execute, which is
    convert_to_function_call of a step's [{name: arguments}]."""

    def decode_execute(self, result: Any, has_tool_call_tag: bool = False) -> list[str]:
        return convert_to_function_call(result)


def bfcl_verdict(bfcl_id: str, transcript: list[dict[str, Any]], turns: int | None = 1) -> dict[str, Any]:
    """BFCL's evaluation of a transcript (its user turns split at its user messages), the entry and its first
    `turns` turns of ground truth (None: every turn) read from BFCL's files (not from the dataset line)."""
    entries, answers = _files()
    entry, truth = copy.deepcopy(entries[bfcl_id]), copy.deepcopy(answers[bfcl_id][:turns])
    return dict(fresh_instances(lambda name: evaluate_entry(_OpenAIDecoder(), bfcl_id, turn_steps(transcript), truth,
                                                            entry, name, CATEGORY)))


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
