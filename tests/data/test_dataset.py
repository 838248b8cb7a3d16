import json
from pathlib import Path

import pytest

from rfteval.data.dataset import check_dataset, content_id, iter_items, load_dataset
from rfteval.errors import InputError, InputErrors

MSG = [{"role": "user", "content": "hi"}]


def write(tmp_path: Path, lines: list[str], name: str = "d.jsonl", raw: bytes | None = None) -> Path:
    p = tmp_path / name
    if raw is not None:
        p.write_bytes(raw)
    else:
        p.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return p


def line(**kw) -> str:
    return json.dumps({"messages": MSG, **kw})


def test_ids_from_field_or_content(tmp_path):
    p = write(tmp_path, [line(id="a"), "", line(reference_answer="x"), line(id=7)])
    ds = load_dataset(p)
    hashed = content_id({"messages": MSG, "reference_answer": "x"})
    assert [it.id for it in ds] == ["a", hashed, "7"]
    assert len(hashed) == 12 and int(hashed, 16) >= 0
    assert [it.line for it in ds] == [1, 3, 4]
    assert ds.items[1].data["reference_answer"] == "x"


def test_content_ids_do_not_move_when_lines_are_inserted(tmp_path):
    rows = [line(reference_answer=str(i)) for i in range(5)]
    before = [it.id for it in load_dataset(write(tmp_path, rows, "a.jsonl"))]
    shifted = [line(reference_answer="new first"), "", "", *rows]
    after = [it.id for it in load_dataset(write(tmp_path, shifted, "b.jsonl"))]
    assert after[1:] == before  # a new first item and blank lines move no id
    key_order = json.dumps({"reference_answer": "0", "messages": MSG})  # the same content, keys reordered
    assert load_dataset(write(tmp_path, [key_order], "c.jsonl")).items[0].id == before[0]


def test_identical_lines_are_numbered_in_file_order(tmp_path):
    same = line(reference_answer="dup")
    ids = [it.id for it in load_dataset(write(tmp_path, [same, line(reference_answer="other"), same, same]))]
    assert ids[2] == ids[0] + "-2" and ids[3] == ids[0] + "-3" and ids[1] != ids[0]
    streamed = [it.id for it in iter_items(write(tmp_path, [same, same], "s.jsonl"), check_duplicates=False)]
    assert streamed == [ids[0], ids[0] + "-2"]


def test_bom_and_crlf_accepted(tmp_path):
    raw = ("\ufeff" + line(id="a") + "\r\n" + line(id="b") + "\r\n").encode("utf-8")
    ds = load_dataset(write(tmp_path, [], raw=raw))
    assert [it.id for it in ds] == ["a", "b"]


@pytest.mark.parametrize(
    "text, expected",
    [
        ("{not json", "d.jsonl:2: invalid JSON"),
        ("[1, 2]", "d.jsonl:2: expected a JSON object, got list"),
        (json.dumps({"id": "x"}), "d.jsonl:2: messages: missing"),
        (json.dumps({"messages": []}), "d.jsonl:2: messages: must be a non-empty list"),
        (json.dumps({"messages": "hi"}), "d.jsonl:2: messages: must be a non-empty list"),
        (json.dumps({"messages": [{"role": "robot", "content": "x"}]}), "d.jsonl:2: messages[0].role: role must be"),
        (json.dumps({"messages": [{"role": "user"}]}), "d.jsonl:2: messages[0].content: missing"),
        (json.dumps({"messages": [{"role": "user", "content": 3}]}), "d.jsonl:2: messages[0].content: must be"),
        (json.dumps({"messages": MSG, "tools": {}}), "d.jsonl:2: tools: must be a list"),
        (json.dumps({"messages": MSG, "tool_choice": "always"}), "d.jsonl:2: tool_choice: must be one of auto"),
        (json.dumps({"messages": MSG, "tool_choice": {"type": "function"}}), "d.jsonl:2: tool_choice: must be"),
        (line(id="a"), "d.jsonl:2: id: duplicate id 'a' (first on line 1)"),
    ],
)
def test_each_problem_names_file_line_and_field(tmp_path, text, expected):
    p = write(tmp_path, [line(id="a"), text])
    with pytest.raises(InputError) as exc:
        load_dataset(p)
    assert str(exc.value).startswith(str(tmp_path / expected))


def test_a_misspelt_messages_field_is_named(tmp_path):
    """Any field but messages is the item's own (RFT's format), so `mesages` is no error of its own: the line lacks
    `messages`, and the error says which field of it was most likely meant."""
    p = write(tmp_path, [json.dumps({"mesages": MSG, "answer": "1"}), json.dumps({"answer": "1", "notes": ["x"]})])
    count, errors = check_dataset(p)
    assert count == 0 and [str(e) for e in errors] == [
        f"{p}:1: messages: missing (the line has `mesages`: did you mean `messages`?)",
        f"{p}:2: messages: missing"]


def test_a_misspelt_message_key_or_role_is_named(tmp_path):
    """Tried as a new user: `{"rol": "user", ...}` said "role must be one of ..., got None" (the user wrote no None)
    and `{"role": "user", "contnet": ...}` only "missing content"; the key or role most likely meant is named, as
    for the line's own `messages`. A key of the Chat API's own (name) is never taken for a misspelling."""
    p = write(tmp_path, [json.dumps({"messages": [{"rol": "user", "content": "2+2?"}]}),
                         json.dumps({"messages": [{"role": "user", "contnet": "2+2?"}]}),
                         json.dumps({"messages": [{"role": "usr", "content": "2+2?"}]}),
                         json.dumps({"messages": [{"name": "x", "content": "2+2?"}]})])
    count, errors = check_dataset(p)
    assert count == 0 and [str(e) for e in errors] == [
        f"{p}:1: messages[0].role: missing (the message has `rol`: did you mean `role`?)",
        f"{p}:2: messages[0].content: missing content (the message has `contnet`: did you mean `content`?)",
        f"{p}:3: messages[0].role: role must be one of assistant, developer, system, tool, user, got 'usr' "
        "(did you mean `user`?)",
        f"{p}:4: messages[0].role: missing"]


def test_a_one_line_summary_says_line(tmp_path):
    from rfteval.data.dataset import inspect_dataset

    p = write(tmp_path, ["{bad"])
    assert inspect_dataset(p).summary() == f"{p}: 1 line: 0 valid, 1 with problems"


def test_curly_quotes_in_a_line_are_named(tmp_path):
    p = write(tmp_path, [line(id="a"), '{\u201cmessages\u201d: []}'])
    with pytest.raises(InputError) as exc:
        load_dataset(p)
    assert str(exc.value) == (f"{p}:2: invalid JSON: Expecting property name enclosed in double quotes (column 2); "
                              "contains curly quotes (\u201c at column 2): replace them with straight quotes")


def test_several_problems_reported_first_with_count(tmp_path):
    p = write(tmp_path, ["{bad", line(id="a"), "[]", "3"])
    with pytest.raises(InputErrors) as exc:
        load_dataset(p)
    assert str(exc.value).endswith("(and 2 more problems)")
    assert ":1: invalid JSON" in str(exc.value)


def test_skip_invalid_keeps_the_good_lines(tmp_path):
    p = write(tmp_path, ["{bad", line(id="a"), "[]"])
    ds = load_dataset(p, skip_invalid=True)
    assert [it.id for it in ds] == ["a"]
    assert [e.line for e in ds.skipped] == [1, 3]


def test_check_dataset_lists_all(tmp_path):
    count, errors = check_dataset(write(tmp_path, ["{bad", line(), "[]"]))
    assert count == 1 and len(errors) == 2


def test_missing_file_and_empty_file(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        load_dataset(tmp_path / "nope.jsonl")
    with pytest.raises(InputError, match="no items"):
        load_dataset(write(tmp_path, [""]))


def test_not_utf8(tmp_path):
    p = write(tmp_path, [], raw=b'{"messages": "\xff"}\n')
    with pytest.raises(InputError, match="not UTF-8"):
        load_dataset(p)


def test_streams_without_reading_everything(tmp_path):
    p = write(tmp_path, [line(id=str(i)) for i in range(1000)] + ["{bad"])
    it = iter_items(p)
    first = [next(it) for _ in range(3)]
    assert [x.id for x in first] == ["0", "1", "2"]  # problems later in the file are not reached yet


@pytest.mark.parametrize("choice", ["auto", "required", "none", {"type": "function", "function": {"name": "f"}},
                                    {"type": "function", "name": "f"}, {"type": "allowed_tools", "mode": "auto", "tools": []}])
def test_an_items_tool_choice_is_its_own(tmp_path, choice):
    (item,) = load_dataset(write(tmp_path, [line(tools=[], tool_choice=choice)])).items
    assert item.tool_choice == choice


def test_no_tool_choice_is_none(tmp_path):
    (item,) = load_dataset(write(tmp_path, [line()])).items
    assert item.tool_choice is None


# ---- the RFT format's own rules (FormatCheck)

# Azure's RFT sample training lines (azure-sdk-for-net, Azure.AI.Projects Sample18_FineTuning_Reinforcement.md,
# data/rft_training_set.jsonl): system + user + the assistant's answer, and no reference field.
AZURE_LINES = [json.dumps({"messages": [{"role": "system", "content": "You are a helpful math tutor."},
                                        {"role": "user", "content": q}, {"role": "assistant", "content": a}]})
               for q, a in (("What is 12 * 7?", "12 * 7 = 84."), ("What is the square root of 81?", "It is 9."))]


def test_azure_sample_lines_trip_all_three_rules(tmp_path):
    from rfteval.data.dataset import FormatCheck

    p = write(tmp_path, AZURE_LINES)
    check = FormatCheck(p)
    count, errors = check_dataset(p, check)
    assert count == 2 and errors == []
    problems = check.problems()
    assert [(e.line, e.field) for e in problems] == [(1, "messages[2].role"), (2, "messages[2].role")]
    assert str(problems[0]).startswith(f"{p}:1: messages[2].role: the last message is the assistant's: an RFT line "
                                       "is a prompt")
    assert "--allow-trailing-assistant" in problems[0].message
    assert check.warnings() == [
        f"{p}: 2 of 2 lines hold a system message (lines 1, 2): Azure's RFT refuses them and OpenAI's RFT format has "
        "no system role (developer is its role)",
        f"{p}: 2 of 2 lines hold no field but messages, so no grader can read a reference from them (lines 1, 2)"]


def test_allow_trailing_assistant_and_a_grader_reference_fields(tmp_path):
    from rfteval.data.dataset import check_format

    p = write(tmp_path, [*AZURE_LINES, line(reference_answer="9"), line(answer="9")])
    items = list(iter_items(p))
    check = check_format(items, p, allow_trailing_assistant=True, reference_fields=frozenset({"reference_answer"}))
    assert check.problems() == []
    assert check.warnings()[1] == (f"{p}: 3 of 4 lines hold no field the grader reads as a reference "
                                   "(item.reference_answer) (lines 1, 2, 4)")
    # a grader that reads no item field needs no reference: the cookbook's HealthBench RFT (openai-cookbook,
    # examples/fine-tuned_qa/reinforcement_finetuning_healthbench.ipynb) writes lines of one user message and grades
    # them with a rubric judge over {{item.messages}} and {{sample.output_text}}; only the system note is left
    none = check_format(items, p, True, frozenset())
    assert len(none.warnings()) == 1 and "system message" in none.warnings()[0]
    clean = check_format(iter_items(write(tmp_path, [line(reference_answer="x")], "ok.jsonl")), p)
    assert clean.problems() == [] and clean.warnings() == []


def test_a_tool_turn_or_a_user_turn_last_is_fine_and_errors_stop_at_the_limit(tmp_path):
    from rfteval.data.dataset import FormatCheck, check_format

    tool_last = json.dumps({"messages": [*MSG, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "42"}], "reference_answer": "42"})
    tool_check = check_format(iter_items(write(tmp_path, [tool_last])), tmp_path)
    assert tool_check.problems() == []
    # ... for OpenAI; Azure refuses it (openai-graders.md: "the final message must be user"), so it is a warning
    assert tool_check.warnings() == [f"{tmp_path}: 1 of 1 lines end with a tool message (line 1): Azure's RFT "
                                     "requires the last message to be the user's (OpenAI's RFT takes the line as a "
                                     "prompt either way)"]
    dangling = json.dumps({"messages": [*MSG, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}], "reference_answer": "42"})
    (problem,) = check_format(iter_items(write(tmp_path, [dangling], "dangling.jsonl")), tmp_path).problems()
    # not "the model would be sent the answer": a call whose result is missing
    assert problem.message.startswith("the last message is the assistant's tool call, with no tool message holding")
    many = write(tmp_path, AZURE_LINES * 30, "many.jsonl")
    check = FormatCheck(many, limit=5)
    for item in iter_items(many):
        check.add(item)
    problems = check.problems()
    assert len(problems) == 5 and problems[-1].message.endswith("(and 55 more such lines)")
    assert check.error_lines == 60  # the lines named and the lines only counted


def test_inspect_dataset_counts_every_line_once(tmp_path):
    """valid + with problems = the file's non-blank lines, whichever rule refused a line and however many are only
    counted past the format check's limit; warnings are counted apart."""
    from rfteval.data.dataset import inspect_dataset

    refused = json.loads(AZURE_LINES[0])  # ends with the assistant's answer, and holds a system message
    p = write(tmp_path, ["{bad", "", line(reference_answer="4"), *[json.dumps(refused)] * 60, "[]"])
    checked = inspect_dataset(p)
    assert (checked.lines, checked.valid, checked.with_problems) == (63, 1, 62)
    assert len(checked.problems) == 2 + 50  # the format check names 50 and counts the rest in the last
    assert checked.summary() == f"{p}: 63 lines: 1 valid, 62 with problems (2 warnings above, not counted as problems)"
    allowed = inspect_dataset(p, allow_trailing_assistant=True)
    assert (allowed.valid, allowed.with_problems) == (61, 2)
    clean = inspect_dataset(write(tmp_path, [line(reference_answer="4")] * 2, "clean.jsonl"))
    assert clean.problems == [] and clean.summary() == f"{tmp_path / 'clean.jsonl'}: 2 items, no problems"
    empty = inspect_dataset(write(tmp_path, [""], "empty.jsonl"))
    assert empty.lines == 0 and empty.summary().endswith("the dataset has no items")




LINES_TRIED = [
    {"messages": MSG}, {"messages": MSG, "reference_answer": "x", "id": 3}, {"messages": MSG, "id": "a"},
    {"messages": [{"role": "assistant", "tool_calls": [{"id": "c", "type": "function"}]}, *MSG]},
    {"messages": [{"role": "user", "content": [{"type": "input_text", "text": "hi"}]}], "tools": []},
    {"messages": MSG, "tool_choice": "auto"}, {"messages": MSG, "tool_choice": {"type": "allowed_tools"}},
    {"messages": MSG, "tool_choice": {"type": "function", "function": {"name": "f"}}},
    {"messages": MSG, "tool_choice": {"type": "function", "name": "f"}},
    {"messages": MSG, "rfteval_followups": []}, {"messages": MSG, "rfteval_followups": ["a", {"role": "user",
                                                                                              "content": "b"}]},
    {"messages": MSG, "rfteval_followups": [{"role": "user", "content": [{"type": "text", "text": "c"}]}]},
    # refused:
    {}, {"mesages": MSG}, {"messages": []}, {"messages": "hi"}, {"messages": [{"role": "robot", "content": "x"}]},
    {"messages": [{"role": "user"}]}, {"messages": [{"role": "user", "content": 3}]}, {"messages": ["hi"]},
    {"messages": [{"role": "assistant", "tool_calls": []}]}, {"messages": MSG, "tools": {}},
    {"messages": MSG, "tool_choice": "always"}, {"messages": MSG, "tool_choice": {"type": "function"}},
    {"messages": MSG, "tool_choice": {"type": "function", "function": {"name": ""}}},
    {"messages": MSG, "tool_choice": {"type": "function", "function": {}, "name": "f"}},
    {"messages": MSG, "tool_choice": {"name": "f"}}, {"messages": MSG, "id": ""}, {"messages": MSG, "id": True},
    {"messages": MSG, "id": 1.5}, [MSG],
    {"messages": MSG, "rfteval_followups": "a"}, {"messages": MSG, "rfteval_followups": [3]},
    {"messages": MSG, "rfteval_followups": [{"role": "assistant", "content": "a"}]},
    {"messages": MSG, "rfteval_followups": [{"role": "user"}]},
    {"messages": MSG, "rfteval_followups": [{"role": "user", "content": 3}]},
]


@pytest.mark.parametrize("row", LINES_TRIED)
def test_the_line_type_and_the_line_check_give_one_verdict(row):
    """docs/schemas/dataset-line.schema.json is generated from DatasetLine; validate_row is what loading runs.
    Both must take and refuse the same lines, or an editor would pass a line the loader refuses."""
    import jsonschema
    import msgspec

    from rfteval.data.dataset import DatasetLine, validate_row

    schema = msgspec.json.schema(DatasetLine)
    assert jsonschema.Draft202012Validator(schema).is_valid(row) == (validate_row(row, Path("d.jsonl"), 1) is None)
