"""The tool seam's small parts: a result as the tool message the model is shown, a failure's line, the cut."""

from __future__ import annotations

from rfteval.tools.base import BAD_ARGUMENTS, ToolCall, ToolResult, cut, error_result


def test_a_result_answers_its_call_as_a_tool_message() -> None:
    assert ToolResult("call_1", "search", "3 hits").message() == {
        "role": "tool", "tool_call_id": "call_1", "content": "3 hits"}


def test_a_failed_call_is_shown_as_an_error_line_and_counted_by_its_type() -> None:
    result = error_result(ToolCall("c", "search", "{not json"), BAD_ARGUMENTS, "arguments are not JSON")
    assert (result.content, result.error, result.call_id) == ("error: BadArguments: arguments are not JSON",
                                                              "BadArguments", "c")


def test_a_long_result_is_cut_at_the_limit_and_says_how_much_is_left_out() -> None:
    assert cut("abcdef", 6) == "abcdef"
    assert cut("abcdefgh", 3) == "abc…[cut: 5 more characters]"
