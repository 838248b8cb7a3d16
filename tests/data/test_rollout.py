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
