"""rfteval/data/rollout.py: an agent's trajectory, typed, in OpenAI's chat shape."""

from __future__ import annotations

import json

from rfteval.data import rollout as traj


def test_a_turns_calls_keep_the_models_ids_and_get_one_where_a_server_sent_none():
    tools = [{"id": "call_a", "type": "function", "function": {"name": "add", "arguments": '{"a": 1}'}},
             {"id": None, "type": "function", "function": {"name": "add", "arguments": {"a": 2}}},
             {"type": "function", "function": {"name": "lookup", "arguments": None}},
             "not a call"]
    assert traj.turn_calls(tools, 3) == [
        {"id": "call_a", "name": "add", "arguments": '{"a": 1}'},
        {"id": "call_3_1", "name": "add", "arguments": '{"a": 2}'},  # an object sent as arguments becomes its JSON
        {"id": "call_3_2", "name": "lookup", "arguments": ""},
    ]


def test_an_assistant_turn_that_only_calls_tools_has_null_content_as_openai_sends_it():
    calls: list[traj.ToolCallJSON] = [{"id": "c1", "name": "add", "arguments": "{}"}]
    assert traj.assistant_message("", calls) == {
        "role": "assistant", "content": None,
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "add", "arguments": "{}"}}]}
    assert traj.assistant_message("thinking aloud", calls)["content"] == "thinking aloud"
    assert traj.assistant_message("", []) == {"role": "assistant", "content": ""}  # an empty answer stays text


def test_a_rollout_lists_every_call_the_results_that_ran_and_counts_errors_by_type():
    messages = [
        traj.assistant_message(None, [{"id": "c1", "name": "add", "arguments": '{"a": 1}'},
                                      {"id": "c2", "name": "nope", "arguments": "{}"}]),
        {"role": "tool", "tool_call_id": "c1", "content": "1"},
        {"role": "tool", "tool_call_id": "c2", "content": "error: UnknownTool: no tool named 'nope'"},
        traj.assistant_message("again", [{"id": "c3", "name": "add", "arguments": "{"}]),  # a last turn's call: not run
    ]
    rollout = traj.Rollout(messages, traj.MAX_TURNS, {"c2": "UnknownTool"})
    assert rollout.turns == 2
    assert [c["id"] for c in rollout.tool_calls()] == ["c1", "c2", "c3"]
    assert rollout.tool_results() == [
        {"tool_call_id": "c1", "name": "add", "content": "1", "error": None},
        {"tool_call_id": "c2", "name": "nope", "content": "error: UnknownTool: no tool named 'nope'",
         "error": "UnknownTool"}]
    assert rollout.tool_errors() == {"UnknownTool": 1}
    as_json = rollout.to_json()
    assert list(as_json) == ["messages", "tool_calls", "tool_results", "turns", "stop_reason", "tool_errors"]
    assert as_json["stop_reason"] == "max_turns" and as_json["messages"] == messages
    assert json.loads(rollout.transcript()) == messages


def test_the_stop_reasons_are_the_issues_six():
    assert traj.STOP_REASONS == ("no_tool_calls", "max_turns", "max_tool_calls", "length", "rollout_timeout",
                                 "context")


# ---- what the grader sees -----------------------------------------------------------------------------------------


CALL = {"id": "c1", "type": "function", "function": {"name": "search", "arguments": '{"q": "x"}'}}
MESSAGES = [
    {"role": "assistant", "content": None, "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "c1", "content": "error: ValueError: empty index"},
    {"role": "assistant", "content": '<think>the index failed</think>\n\n{"answer": 42}'},
]


def test_the_sample_is_the_final_turn_with_the_trajectory_beside_it():
    sample = traj.rollout_sample(MESSAGES, stop_reason="no_tool_calls", errors={"c1": "ValueError"})
    # Agent RFT's meaning: output_text is the final turn's answer (its thinking apart, as for a single answer)
    assert sample["output_text"] == '{"answer": 42}' and sample["output_json"] == {"answer": 42}
    assert sample["output_tools"] == []
    assert sample["choices"] == [{"index": 0, "finish_reason": "stop",
                                  "message": {"role": "assistant", "content": '{"answer": 42}'}}]
    assert sample["rollout"] == {
        "messages": MESSAGES,
        "tool_calls": [{"id": "c1", "name": "search", "arguments": '{"q": "x"}'}],
        "tool_results": [{"tool_call_id": "c1", "name": "search", "content": "error: ValueError: empty index",
                          "error": "ValueError"}],
        "turns": 2, "stop_reason": "no_tool_calls", "tool_errors": {"ValueError": 1}}


def test_a_rollout_stopped_while_calling_tools_shows_the_final_turns_calls():
    sample = traj.rollout_sample(MESSAGES[:1], stop_reason="max_turns")
    assert sample["output_text"] == "" and sample["output_tools"] == [CALL]
    assert sample["choices"][0]["finish_reason"] == "tool_calls"
    assert sample["rollout"]["turns"] == 1 and sample["rollout"]["tool_results"] == []


def test_a_stored_final_turn_gives_its_own_choices_and_parse():
    stored = [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "raw",
                                                                "reasoning_content": "hidden"}}]
    sample = traj.rollout_sample([{"role": "assistant", "content": "raw"}], stop_reason="no_tool_calls",
                                 output_json=None, choices=stored, reasoning="hidden", finish_reason="stop")
    assert sample["output_json"] is None  # the stored parse, not the text's own
    assert sample["choices"] == [{"index": 0, "finish_reason": "stop",  # without the reasoning field, as OpenAI's
                                  "message": {"role": "assistant", "content": "raw"}}]


def test_a_rollout_with_no_answered_turn_is_an_empty_answer():
    sample = traj.rollout_sample([], stop_reason="rollout_timeout")
    assert sample["output_text"] == "" and sample["rollout"]["turns"] == 0
