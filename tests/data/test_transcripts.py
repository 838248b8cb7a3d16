"""rfteval/data/transcripts.py: another harness's rollout read as the generated messages the loop writes."""

from __future__ import annotations

from pathlib import Path

import pytest

from rfteval.data.outputs import prompt_index
from rfteval.data.transcripts import read_transcript, without_system
from rfteval.errors import InputError

P = Path("out.jsonl")
CALL = {"id": "c1", "type": "function", "function": {"name": "add", "arguments": {"a": 1, "b": 2}}}


def test_a_plain_output_holds_no_transcript():
    assert read_transcript({"item_id": "q", "output_text": "x"}, P, 1) is None


def test_messages_are_brought_to_the_loops_shape_and_the_stop_reason_derived():
    t = read_transcript({"messages": [{"role": "assistant", "content": "", "tool_calls": [CALL]},
                                      {"role": "tool", "tool_call_id": "c1", "content": 3},
                                      {"role": "assistant", "content": "3"}]}, P, 1)
    assert t is not None and (t.shape, t.stop_reason, t.output_text, t.prompt, t.choices) == (
        "messages", "no_tool_calls", "3", None, None)
    # content null beside the calls, the arguments as JSON text, a tool's content as text: as the run writes them
    assert t.messages[:2] == [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "3"}]
    cut = read_transcript({"messages": [{"role": "assistant", "content": None, "tool_calls": [CALL]}]}, P, 1)
    assert cut is not None and cut.stop_reason == "max_turns"  # still calling tools when the harness stopped it
    given = read_transcript({"messages": [{"role": "assistant", "content": "x"}], "stop_reason": "length"}, P, 1)
    assert given is not None and given.stop_reason == "length"


def test_verifiers_completion_as_messages_or_text_and_its_prompt():
    prompt = [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}]
    t = read_transcript({"prompt": prompt, "completion": "answer", "reward": 1.0}, P, 1)
    assert t is not None and t.messages == [{"role": "assistant", "content": "answer"}] and t.prompt == prompt
    assert without_system(prompt) == prompt[1:]


def test_art_choices_are_the_sampled_turns_after_the_prompt_and_the_final_one_is_kept():
    choice = {"index": 0, "finish_reason": "stop", "logprobs": None,
              "message": {"role": "assistant", "content": "done", "refusal": None, "tool_calls": None}}
    t = read_transcript({"messages_and_choices": [{"role": "user", "content": "q"}, choice], "reward": 0.0}, P, 1)
    assert t is not None and t.prompt == [{"role": "user", "content": "q"}]
    assert t.messages == [{"role": "assistant", "content": "done"}]
    assert t.choices == [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "done"}}]


@pytest.mark.parametrize(("row", "field"), [
    ({"messages": {}}, "messages"), ({"completion": 3}, "completion"), ({"messages": ["x"]}, "messages[0]"),
    ({"messages": [{"role": "developer", "content": "x"}]}, "messages[0].role"),
    ({"messages": [{"role": "assistant", "content": 3}]}, "messages[0].content"),
    ({"messages": [{"role": "assistant", "content": "x", "tool_calls": {}}]}, "messages[0].tool_calls"),
    ({"messages": [{"role": "tool", "content": "x"}, {"role": "assistant", "content": "y"}]},
     "messages[0].tool_call_id"),
    ({"messages": [{"role": "user", "content": "x"}]}, "messages"),
    ({"messages": [{"role": "assistant", "content": "x"}], "stop_reason": "done"}, "stop_reason"),
])
def test_a_malformed_transcript_names_its_field(row, field):
    with pytest.raises(InputError) as err:
        read_transcript(row, P, 7)
    assert (err.value.line, err.value.field) == (7, field)


def test_the_prompt_index_finds_an_item_by_its_prompt_and_marks_a_shared_one():
    a, b = [{"role": "user", "content": "a"}], [{"role": "system", "content": "s"}, {"role": "user", "content": "b"}]
    index = prompt_index([("i1", a), ("i2", b), ("i3", a)])
    from rfteval.data.transcripts import prompt_key

    assert index[prompt_key(a)] is None  # two items share it: the line must say which
    assert index[prompt_key(b)] == "i2" and index[prompt_key(b[1:])] == "i2"
