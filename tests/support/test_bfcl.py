"""tests/support/bfcl.py, the BFCL multi-turn oracle's parts, each on its own before rfteval's rollout loop plays
them (tests/cli/test_bfcl_oracle.py): the converter against BFCL's own files, the tools module against BFCL's own
execution, the grader against BFCL's own checker (in this process and in rfteval's sandbox), and the scripted
players through FakeOpenAI and the real openai client."""

from __future__ import annotations

import inspect
import json
from collections import Counter
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.support.optional import require

require("bfcl_eval", "bfcl")

from rfteval.graders import GradingEngine, load_grader  # noqa: E402
from tests.support import bfcl  # noqa: E402
from tests.support.fake_openai import FakeOpenAI, Request  # noqa: E402

BFCL_DATA = bfcl.BFCL / "data"
N_ENTRIES = 200  # the multi-turn base set of bfcl-eval 2026.3.23
# BFCL's own types of a parameter, as JSON Schema names them (written here, not read from BFCL's mapping)
SCHEMA_TYPE = {"string": "string", "integer": "integer", "float": "number", "boolean": "boolean", "array": "array",
               "dict": "object"}
PLAYERS = {"steps": bfcl.Player("steps"), "parallel": bfcl.Player("parallel"),
           "drop_last": bfcl.Player("steps", "drop_last"), "change_arg": bfcl.Player("steps", "change_arg")}


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.fixture(scope="module")
def lines() -> list[dict[str, Any]]:
    return bfcl.convert()


@pytest.fixture(scope="module")
def tools(lines: list[dict[str, Any]], tmp_path_factory: pytest.TempPathFactory) -> Any:
    path = bfcl.write_tools(tmp_path_factory.mktemp("bfcl") / "bfcl_tools_written.py", lines)
    return bfcl.load_module(path, "bfcl_tools_written")


@pytest.fixture(scope="module")
def grader() -> Any:
    return bfcl.load_module(bfcl.GRADER, "bfcl_grader_in_process")


# ---- the converter ------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_each_entry_becomes_a_line_playing_its_first_user_turn(lines: list[dict[str, Any]]) -> None:
    entries = read_jsonl(BFCL_DATA / "BFCL_v4_multi_turn_base.json")
    answers = {a["id"]: a["ground_truth"] for a in read_jsonl(BFCL_DATA / "possible_answer" /
                                                                "BFCL_v4_multi_turn_base.json")}
    assert len(lines) == len(entries) == N_ENTRIES
    for line, entry in zip(lines, entries, strict=True):
        assert line["id"] == line["bfcl_id"] == entry["id"]
        assert line["messages"] == entry["question"][0] and line["messages"][0]["role"] == "user"
        assert (line["initial_config"], line["involved_classes"]) == (entry["initial_config"],
                                                                      entry["involved_classes"])
        assert line["ground_truth"] == answers[entry["id"]][:1] and line["ground_truth"][0]
    assert bfcl.convert(3) == lines[:3]
    bfcl.responder(lines, {})  # a first user message that two entries share asks for the same calls
    twin = {**lines[43], "ground_truth": [["ls()"]]}
    with pytest.raises(ValueError, match="multi_turn_base_40 and multi_turn_base_43 share their first user message"):
        bfcl.responder([*lines[:43], twin], {})


@pytest.mark.slow
def test_tools_are_the_function_docs_of_the_entrys_classes_as_openai_tools(lines: list[dict[str, Any]]) -> None:
    files = {"GorillaFileSystem": "gorilla_file_system", "MathAPI": "math_api", "MessageAPI": "message_api",
             "TwitterAPI": "posting_api", "TicketAPI": "ticket_api", "TradingBot": "trading_bot",
             "TravelAPI": "travel_booking", "VehicleControlAPI": "vehicle_control"}
    docs = {name: read_jsonl(BFCL_DATA / "multi_turn_func_doc" / f"{file}.json") for name, file in files.items()}
    for line in lines:
        expected = [doc for name in line["involved_classes"] for doc in docs[name]]
        assert [t["type"] for t in line["tools"]] == ["function"] * len(expected)
        functions = [t["function"] for t in line["tools"]]
        assert [f["name"] for f in functions] == [d["name"] for d in expected]
        for function, doc in zip(functions, expected, strict=True):
            hint = " Note that the provided function is in Python 3 syntax."
            assert function["description"] == doc["description"] + hint
            schema = function["parameters"]
            assert schema["type"] == "object" and schema.get("required", []) == doc["parameters"].get("required", [])
            assert list(schema["properties"]) == list(doc["parameters"]["properties"])
            for name, parameter in schema["properties"].items():
                given = doc["parameters"]["properties"][name]
                assert parameter["type"] == SCHEMA_TYPE[given["type"]]
                if given["type"] == "float":  # BFCL's OpenAI handler marks a float, which JSON Schema cannot
                    assert parameter["format"] == "float" and parameter["description"].endswith("float type value.")
                if "items" in given:
                    assert parameter["items"]["type"] == SCHEMA_TYPE[given["items"]["type"]]
    used = {t["function"]["name"] for line in lines for t in line["tools"]}
    assert len(used) == sum(len(d) for d in docs.values())  # no name is shared by two classes


def test_a_call_string_becomes_a_tool_calls_arguments_named_by_the_backends_signature() -> None:
    classes = ["TwitterAPI", "GorillaFileSystem"]
    assert bfcl.call_arguments("sort('final_report.pdf')", classes) == ("sort", {"file_name": "final_report.pdf"})
    assert bfcl.call_arguments("mv(source='a.txt',destination='temp')", classes) == (
        "mv", {"source": "a.txt", "destination": "temp"})
    assert bfcl.call_arguments("ls(a=True)", classes) == ("ls", {"a": True})
    with pytest.raises(LookupError, match="no backend"):
        bfcl.call_arguments("add(a=1, b=2)", classes)  # MathAPI's: not among the entry's classes


# ---- the tools module ---------------------------------------------------------------------------------------------


def test_a_tools_function_takes_the_schemas_parameters_and_item_and_state() -> None:
    doc = {"name": "tail", "parameters": {"type": "object", "properties": {"lines": {"type": "integer"},
                                                                           "file_name": {"type": "string"}},
                                          "required": ["file_name"]}}
    scope: dict[str, Any] = {"UNSET": object(), "_call": lambda *args: args}
    exec(bfcl.tool_function_source(doc), scope)
    signature = inspect.signature(scope["tail"])
    assert [(p.name, p.kind.name, p.default is p.empty) for p in signature.parameters.values()] == [
        ("file_name", "POSITIONAL_OR_KEYWORD", True), ("lines", "POSITIONAL_OR_KEYWORD", False),
        ("item", "KEYWORD_ONLY", False), ("state", "KEYWORD_ONLY", False)]
    assert signature.parameters["lines"].default is scope["UNSET"]
    assert scope["tail"]("log.txt", item={"i": 1}, state={}) == (
        "tail", {"lines": scope["UNSET"], "file_name": "log.txt"}, {"i": 1}, {})


@pytest.mark.slow
def test_two_classes_naming_one_function_are_refused(tmp_path: Path, lines: list[dict[str, Any]]) -> None:
    other = json.loads(json.dumps(lines[0]))
    function = other["tools"][0]["function"]
    function["description"] = "another class's function of that name"
    with pytest.raises(ValueError, match=f"two BFCL functions are named '{function['name']}'"):
        bfcl.write_tools(tmp_path / "tools.py", [lines[0], other])


@pytest.mark.slow
def test_a_function_named_as_the_tools_modules_own_names_is_refused(tmp_path: Path, lines: list[dict[str, Any]]) -> None:
    other = json.loads(json.dumps(lines[0]))
    other["tools"][0]["function"]["name"] = "init_state"
    with pytest.raises(ValueError, match=r"named as bfcl_tools.py's own names: \['init_state'\]"):
        bfcl.write_tools(tmp_path / "tools.py", [other])


@pytest.mark.slow
def test_the_tools_give_what_bfcls_execution_gives_the_ground_truth(lines: list[dict[str, Any]], tools: Any) -> None:
    """Every entry's first-turn ground truth, one call at a time through the tools module with the state carried as
    JSON text between calls (as the sandbox carries it between turns), against BFCL running the same calls as steps
    on instances it keeps (as its inference runs a model's steps): the same result strings on every entry."""
    agree = 0
    for line in lines:
        state = json.dumps(tools.init_state(line))
        results = []
        for call in line["ground_truth"][0]:
            name, arguments = bfcl.call_arguments(call, line["involved_classes"])
            carried = json.loads(state)
            results.append(getattr(tools, name)(**arguments, item=line, state=carried))
            state = json.dumps(carried)
        expected = bfcl.execute_steps(line["ground_truth"][0], line)
        assert results == expected, line["id"]
        assert all(isinstance(r, str) for r in results)
        agree += 1
    assert agree == N_ENTRIES


@pytest.mark.slow
def test_an_optional_argument_left_out_is_left_out_of_bfcls_call(lines: list[dict[str, Any]], tools: Any) -> None:
    line = next(x for x in lines if x["id"] == "multi_turn_base_1")  # alex's workspace, with a hidden file
    state = tools.init_state(line)
    tools.cd("workspace", item=line, state=state)
    shown, everything = tools.ls(item=line, state=state), tools.ls(a=True, item=line, state=state)
    assert state == {"bfcl_calls": ["cd(folder='workspace')", "ls()", "ls(a=True)"]}
    assert ".hidden_file" in everything and ".hidden_file" not in shown
    # a backend's exception comes back in BFCL's own words, as BFCL shows it to the model
    assert tools._call("cd", {"dir": "x"}, line, state).startswith("Error during execution: ")


# ---- the players and the grader -----------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("player", list(PLAYERS))
def test_the_grader_agrees_with_bfcls_checker_on_every_entry(player: str, lines: list[dict[str, Any]], tools: Any,
                                                             grader: Any) -> None:
    """Each player's rollouts, played here: the grader's score and BFCL's checker on the transcript (entry and
    ground truth read from BFCL's files) agree on every entry; the ground truth scores 1 however its calls are
    grouped into steps, with its last call dropped 0, with an argument changed 0 but where BFCL's own checker finds
    the changed call as good (bfcl.CHANGE_ARG_ACCEPTED)."""
    outcomes: Counter[tuple[float, bool]] = Counter()
    accepted = set()
    for line in lines:
        sample = bfcl.play(line, PLAYERS[player], tools)
        assert sample["rollout"]["stop_reason"] == "no_tool_calls"
        score = grader.grade(sample, line)
        valid = bfcl.bfcl_verdict(line["bfcl_id"], sample["rollout"]["messages"])["valid"]
        outcomes[score, valid] += 1
        if valid:
            accepted.add(line["id"])
    assert set(outcomes) <= {(1.0, True), (0.0, False)}, outcomes  # agreement on every entry
    every = {line["id"] for line in lines}
    expected = {"steps": every, "parallel": every, "drop_last": set(),
                "change_arg": bfcl.CHANGE_ARG_ACCEPTED}[player]
    assert accepted == expected


@pytest.mark.slow
def test_the_players_steps(lines: list[dict[str, Any]], tools: Any) -> None:
    line = next(x for x in lines if len(x["ground_truth"][0]) == 3)
    truth = [bfcl.call_arguments(c, line["involved_classes"]) for c in line["ground_truth"][0]]

    def turns(player: str) -> list[list[tuple[str, dict[str, Any]]]]:
        messages = bfcl.play(line, PLAYERS[player], tools)["rollout"]["messages"]
        return [[(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in m.get("tool_calls", [])]
                for m in messages if m["role"] == "assistant"]

    assert turns("steps") == [[call] for call in truth] + [[]]
    assert turns("parallel") == [truth, []]
    assert turns("drop_last") == [[call] for call in truth[:-1]] + [[]]
    changed = turns("change_arg")
    assert len(changed) == 4 and sum(a != b for a, b in zip(changed[:3], [[c] for c in truth], strict=True)) == 1
    no_arguments = next(x for x in lines if x["id"] == "multi_turn_base_33")  # ls()
    sample = bfcl.play(no_arguments, PLAYERS["change_arg"], tools)
    assert sample["rollout"]["tool_calls"][0]["arguments"] == json.dumps({bfcl.UNKNOWN_ARGUMENT: bfcl.UNKNOWN_ARGUMENT})
    assert sample["rollout"]["tool_errors"] == {"BadArguments": 1}


@pytest.mark.slow
def test_the_grader_scores_the_same_in_rfteval_sandbox(lines: list[dict[str, Any]], tools: Any, grader: Any) -> None:
    """The grader file as rfteval loads and runs it (a python grader: the sandbox, which holds site-packages and not
    this checkout), on the ground truth and the last call dropped: the scores it gives in this process."""
    pairs = [(bfcl.play(line, PLAYERS[p], tools), line) for p in ("steps", "drop_last") for line in lines[::4]]
    with GradingEngine(load_grader(bfcl.GRADER)) as engine:
        results = engine.grade_batch(pairs)
    assert [r.error for r in results] == [None] * len(pairs)
    assert [r.score for r in results] == [grader.grade(s, line) for s, line in pairs]
    assert [r.score for r in results] == [1.0] * (len(pairs) // 2) + [0.0] * (len(pairs) // 2)
    assert "multi_turn:" in (results[-1].stdout or "")  # BFCL's reason, in the record's grader_stdout


@pytest.mark.slow
def test_the_tools_module_runs_in_rfteval_sandbox(lines: list[dict[str, Any]], tmp_path: Path) -> None:
    """The written tools module's code in the sandbox (imports, BFCL's source read, its globals cleaned), reached
    through a python grader made of the module and a grade() that runs the ground truth's calls with it."""
    source = bfcl.write_tools(tmp_path / "tools.py", lines).read_text(encoding="utf-8") + (
        "\n\ndef grade(sample, item):\n"
        "    state = init_state(item)\n"
        "    results = [globals()[name](**arguments, item=item, state=state) for name, arguments in item['calls']]\n"
        "    return float(results == item['expected'] and len(state['bfcl_calls']) == len(results))\n")
    grader_file = tmp_path / "tools_grader.json"
    grader_file.write_text(json.dumps({"type": "python", "name": "tools", "source": source}))
    items = [{**line, "calls": [bfcl.call_arguments(c, line["involved_classes"]) for c in line["ground_truth"][0]],
              "expected": bfcl.execute_steps(line["ground_truth"][0], line)} for line in lines[::10]]
    with GradingEngine(load_grader(grader_file)) as engine:
        results = engine.grade_batch([({"output_text": ""}, item) for item in items])
    assert [(r.error, r.score) for r in results] == [(None, 1.0)] * len(items)


# ---- the scripted server ------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_the_responder_answers_by_model_item_and_turn(lines: list[dict[str, Any]]) -> None:
    answer = bfcl.responder(lines, {"gt": PLAYERS["steps"], "gt-all": PLAYERS["parallel"]})
    line = next(x for x in lines if len(x["ground_truth"][0]) == 2)
    first, second = (bfcl.call_arguments(c, line["involved_classes"]) for c in line["ground_truth"][0])

    def request(model: str, history: list[dict[str, Any]]) -> Request:
        return Request("/v1/chat/completions", {"messages": [*line["messages"], *history]}, {}, model, "chat")

    called = answer(request("gt", []))
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in called.tool_calls or []] == [first]
    history = [{"role": "assistant", "content": "", "tool_calls": called.tool_calls},
               {"role": "tool", "tool_call_id": "call_0_0", "content": "ok"}]
    assert [c["function"]["name"] for c in answer(request("gt", history)).tool_calls or []] == [second[0]]
    done = answer(request("gt", history * 2))
    assert (done.text, done.tool_calls) == (bfcl.FINAL_ANSWER, None)
    assert len(answer(request("gt-all", [])).tool_calls or []) == 2
    assert answer(request("gt-all", history)).text == bfcl.FINAL_ANSWER


@pytest.mark.slow
def test_a_bare_openai_tool_loop_against_the_scripted_server_scores_one(lines: list[dict[str, Any]], tools: Any,
                                                                        grader: Any) -> None:
    """The player through FakeOpenAI and the real openai client, in a tool loop written here (not rfteval's): what it
    answers is what `play` assumes, so the rollouts grade as the in-process ones do."""
    chosen = [line for line in lines if len(line["ground_truth"][0]) >= 3][:3]
    with FakeOpenAI(bfcl.responder(chosen, {"gt": PLAYERS["steps"]})).start() as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="sk-bfcl-0001")
        for line in chosen:
            messages, state = list(line["messages"]), tools.init_state(line)
            start = len(messages)
            while True:
                message = client.chat.completions.create(model="gt", messages=messages,
                                                         tools=line["tools"]).choices[0].message
                messages.append(message.model_dump(exclude_none=True))
                if not message.tool_calls:
                    break
                for call in message.tool_calls:
                    content = getattr(tools, call.function.name)(**json.loads(call.function.arguments), item=line,
                                                                 state=state)
                    messages.append({"role": "tool", "tool_call_id": call.id, "content": content})
            generated = messages[start:]
            assert grader.grade({"output_text": message.content, "rollout": {"messages": generated}}, line) == 1.0
            assert bfcl.bfcl_verdict(line["bfcl_id"], generated)["valid"]
            assert len(server.requests) and server.requests[-1].body["tools"] == line["tools"]
