"""rfteval/providers/history.py: what a server takes of an agent's history (content null beside tool calls)."""

from __future__ import annotations

import json
from pathlib import Path

from rfteval.providers.history import empty_tool_content, null_tool_content, refuses_null_content
from rfteval.providers.retry import one_line

CAPTURED = json.loads((Path(__file__).resolve().parents[1] / "fixtures" / "llama_cpp" / "null_content_500.json")
                      .read_text())
MESSAGES = CAPTURED["request_messages"]
REFUSAL = CAPTURED["body"]["error"]["message"]


def test_the_refusal_llama_cpp_python_sends_for_null_content_is_recognised() -> None:
    assert refuses_null_content(REFUSAL, MESSAGES)
    assert not refuses_null_content(REFUSAL, empty_tool_content(MESSAGES))  # nothing left to step down
    assert not refuses_null_content("Input should be 'text' or 'json_object' (input: 'json_schema')", MESSAGES)
    assert refuses_null_content("messages.1.content: content must be a string", MESSAGES)


def test_only_an_assistant_turn_with_tool_calls_and_null_content_is_changed() -> None:
    messages = [*MESSAGES, {"role": "assistant", "content": None}, {"role": "assistant", "content": "x",
                                                                     "tool_calls": MESSAGES[1]["tool_calls"]}]
    assert [null_tool_content(m) for m in messages] == [False, True, False, False, False]
    out = empty_tool_content(messages)
    assert out[1] == {**MESSAGES[1], "content": ""} and out[1] is not MESSAGES[1]
    assert all(a is b for i, (a, b) in enumerate(zip(out, messages)) if i != 1)


def test_its_one_line_names_the_content_not_the_role_every_other_member_wanted() -> None:
    assert one_line(f"HTTP 500: {REFUSAL}", 400) == ("HTTP 500: 7 validation errors: messages[1].content: Input "
                                                     "should be a valid string (input: None)")
