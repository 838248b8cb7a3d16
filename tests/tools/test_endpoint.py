"""rfteval/tools/endpoint.py: Agent RFT's tools list read as written, each call POSTed as Agent RFT posted it to
the local tool server (tests/support/agent_rft_server.py), and what the model is shown for every answer."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from rfteval.errors import InputError
from rfteval.providers.agent_rft import RETRIES
from rfteval.tools.base import TOOL_TIMEOUT, UNKNOWN_TOOL, RolloutToolError, ToolCall, ToolLimits, ToolResult
from rfteval.tools.endpoint import BAD_TOOL_OUTPUT, EndpointTools, open_tool_endpoints, read_tools_config
from tests.support.agent_rft_server import TOOL_NAMES, AgentRFTServer, tools_config

KEY = "functions-key-4f1e9a"
ITEM: dict[str, Any] = {"id": "q7", "messages": [{"role": "user", "content": "cancel my water bottle order"}],
                        "reference_answer": "cancelled", "reference_tool_calls": ["cancel_pending_order"]}


def write(tmp: Path, obj: Any, name: str = "tools-config.json") -> Path:
    path = tmp / name
    path.write_text(obj if isinstance(obj, str) else json.dumps(obj, indent=2))
    return path


# ---- the tools list ------------------------------------------------------------------------------------------------


def test_the_list_is_read_as_agent_rft_writes_it_and_from_a_fine_tuning_job(tmp_path: Path):
    listed = [{"name": "search_catalog", "server_url": "https://x.azurewebsites.net/tool/search_catalog",
               "headers": {"X-Functions-Key": "${FUNC_KEY}"}}, {"name": "calculate", "server_url": "http://h/t"}]
    got = read_tools_config(write(tmp_path, listed))
    assert [(t.name, t.server_url, t.headers) for t in got] == [
        ("search_catalog", "https://x.azurewebsites.net/tool/search_catalog", {"X-Functions-Key": "${FUNC_KEY}"}),
        ("calculate", "http://h/t", {})]
    job = {"model": "o4-mini", "method": {"type": "reinforcement", "reinforcement": {
        "grader": {"type": "endpoint", "url": "http://h/score"}, "tools": listed, "max_episode_steps": 10}}}
    assert read_tools_config(write(tmp_path, job, "job.json")) == got


@pytest.mark.parametrize("text, message, line, field", [
    ('{"tools": []}', "expected Agent RFT's tools list", None, None),
    ('[{"name": "a", "server_url": "http://h/t", "header": {}}]', "unknown key 'header' (an Agent RFT tool has "
     "name, server_url, headers) did you mean `headers`?", 1, "[0].header"),
    ('[\n{"name": "a b", "server_url": "http://h/t"}]', "must be a function name", 2, "[0].name"),
    ('[{"name": "a", "server_url": "http://h/t"},\n {"name": "a", "server_url": "http://h/u"}]',
     "tool 'a' is listed twice (entries 0 and 1)", None, "[1].name"),
    ('[{"name": "a", "server_url": "ftp://h/t"}]', "must be an http(s) URL, got 'ftp://h/t'", 1, "[0].server_url"),
    ('[{"name": "a", "server_url": "http://h/t", "headers": {"K": 3}}]', "must be an object of header names and "
     "string values", 1, "[0].headers"),
    ('[{"name": "a", "server_url": "http://h/t", "headers": {"K": "${K"}}]', "a ${...} must name an environment "
     "variable", 1, "[0].headers.K"),
    ('[{"name": "a",\n "server_url": "http://h/t",}]', "invalid JSON: Expecting property name", 2, None),
])
def test_a_bad_list_is_one_line_naming_the_entry_and_field(tmp_path: Path, text: str, message: str,
                                                           line: int | None, field: str | None):
    path = write(tmp_path, text)
    with pytest.raises(InputError) as caught:
        read_tools_config(path)
    err = caught.value
    assert message in err.message and err.file == path and err.field == field
    if line is not None:
        assert err.line == line


def test_zavas_placeholder_says_how_it_is_filled_in(tmp_path: Path):
    path = write(tmp_path, tools_config("#TOOLS_SERVER_URL#"), "rft_tools-config.json")
    with pytest.raises(InputError) as caught:
        read_tools_config(path)
    assert caught.value.field == "[0].server_url"
    assert caught.value.message == (
        "'#TOOLS_SERVER_URL#' is a placeholder, not a URL: fill it in first, as Microsoft's ZavaRetailAgent notebook "
        "does from $TOOLS_SERVER_URL (sed 's|#TOOLS_SERVER_URL#|'\"$TOOLS_SERVER_URL\"'|g' rft_tools-config.json > "
        "tools-config.json), or write ${TOOLS_SERVER_URL}")


def test_opening_reads_every_variable_first_and_checks_the_timeout(tmp_path: Path):
    path = write(tmp_path, tools_config("http://127.0.0.1:9/tools", {"X-Functions-Key": "${TOOLS_KEY_X}"}))
    with pytest.raises(InputError) as caught:
        open_tool_endpoints(path, ToolLimits(), environ={})
    assert (caught.value.file, caught.value.field) == (path, "[0].headers.X-Functions-Key")
    assert "${TOOLS_KEY_X} is not set" in caught.value.message
    with pytest.raises(InputError, match="Agent RFT waits 10 minutes at most") as too_long:
        open_tool_endpoints(path, ToolLimits(), timeout_s=601, environ={"TOOLS_KEY_X": KEY})
    assert too_long.value.field == "--tool-endpoint-timeout"
    box = open_tool_endpoints(path, ToolLimits(), environ={"TOOLS_KEY_X": KEY})
    assert box.names() == frozenset(TOOL_NAMES) and box.shown()[0] == {"name": "find_user_id_by_email",
                                                                        "server_url": "http://127.0.0.1:9/tools"}


def test_the_identity_covers_urls_item_fields_timeout_and_output_limit_never_a_header(tmp_path: Path):
    def identity(url: str = "http://h/tools", key: str = "k-one-1111", **kw: Any) -> str:
        path = write(tmp_path, tools_config(url, {"Authorization": "Bearer ${TOKEN_V}"}))
        limits = kw.pop("limits", ToolLimits())
        return open_tool_endpoints(path, limits, environ={"TOKEN_V": key}, **kw).identity

    base = identity()
    assert identity(key="k-two-2222") == base  # another key: the same results
    others = [identity(url="http://h/other"), identity(item_fields=["id", "messages"]), identity(timeout_s=60),
              identity(limits=ToolLimits(output_chars=100))]
    assert len({base, *others}) == 5
    bare = open_tool_endpoints(write(tmp_path, tools_config("http://h/tools")), ToolLimits())
    assert bare.identity == base  # headers (names and values) are not part of it at all


# ---- calls against the local server --------------------------------------------------------------------------------


def box_for(tmp: Path, server: AgentRFTServer, path: str = "/tools", **kw: Any) -> EndpointTools:
    config = write(tmp, tools_config(server.url(path), {"X-Functions-Key": "${TOOLS_KEY_X}"}))
    kw.setdefault("retry_base_s", 0.001)
    limits = kw.pop("limits", ToolLimits())
    return open_tool_endpoints(config, limits, environ={"TOOLS_KEY_X": KEY}, **kw)


def turn(box: EndpointTools, *calls: tuple[str, str, Any], trace: str = "trace_a",
         item: dict[str, Any] | None = None) -> list[ToolResult]:
    wanted = [ToolCall(cid, name, args if isinstance(args, str) else json.dumps(args)) for cid, name, args in calls]

    async def go() -> list[ToolResult]:
        try:
            results, state = await box.run_turn(trace, ITEM if item is None else item, wanted, {"kept": 1})
            assert state == {"kept": 1}  # a tool server keeps its own state: the box passes the run's on
            return results
        finally:
            await box.aclose()

    return asyncio.run(go())


@pytest.mark.slow
def test_each_call_is_posted_as_agent_rft_posted_it_and_its_output_is_the_tool_message(tmp_path: Path):
    with AgentRFTServer(key=KEY) as server:
        box = box_for(tmp_path, server)
        results = turn(box, ("call_1", "list_user_orders", {"user_id": "ava_moore_4721"}),
                       ("call_2", "cancel_pending_order", '{"order_id": "#W2301877", "reason": "no longer needed"}'),
                       ("call_3", "cancel_pending_order", {"order_id": "#W2301877", "reason": "no longer needed"}))
    assert [r.error for r in results] == [None, None, None]
    assert results[0].content == '["#W4817420", "#W2301877"]'
    assert json.loads(results[1].content)["status"] == "cancelled"
    assert results[2].content == "Error: non-pending order cannot be cancelled (status: cancelled)"  # in order
    first = server.calls[0]
    assert first.path == "/tools" and first.headers["x-functions-key"] == KEY
    assert first.body == {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "list_user_orders",
                          "arguments": '{"user_id": "ava_moore_4721"}', "trace_id": "trace_a", "item": ITEM}
    assert server.calls[1].body["arguments"] == '{"order_id": "#W2301877", "reason": "no longer needed"}'  # as sent


@pytest.mark.slow
def test_per_tool_urls_item_fields_and_arguments_sent_as_the_model_wrote_them(tmp_path: Path):
    with AgentRFTServer(key=KEY) as server:
        config = write(tmp_path, [{"name": "calculate", "server_url": server.url("/tool/calculate"),
                                   "headers": {"Authorization": "Bearer ${TOOLS_KEY_X}"}}])
        box = open_tool_endpoints(config, ToolLimits(), item_fields=["id", "messages", "absent"],
                                  environ={"TOOLS_KEY_X": KEY})
        results = turn(box, ("c1", "calculate", "{not json"), ("c2", "calculate", {"expression": "(2+3)*4"}))
    assert [c.path for c in server.calls] == ["/tool/calculate"] * 2
    assert all(c.body["item"] == {"id": "q7", "messages": ITEM["messages"]} for c in server.calls)
    assert server.calls[0].body["arguments"] == "{not json"  # the server decides what bad arguments are
    assert results[0].content == 'error: HTTP400: {"error":{"message":"arguments are not JSON"}}'
    assert results[1].content == "20.0" and results[1].error is None


@pytest.mark.slow
def test_every_answer_that_is_not_an_output_is_shown_as_an_error_and_counted_by_its_type(tmp_path: Path):
    with AgentRFTServer(key=KEY) as server:
        server.fail("calculate", 422)
        server.echo("calculate")
        server.huge("calculate")
        results = turn(box_for(tmp_path, server), *[(f"c{i}", "calculate", {"expression": "1"}) for i in range(3)],
                       ("c3", "no_such", {}), ("c4", "transfer_to_human_agents", {"summary": "x"}))
        wrong_key = open_tool_endpoints(write(tmp_path, tools_config(server.url("/tools"), {
            "X-Functions-Key": "wrong-key-000"})), ToolLimits())
        (unauthorized,) = turn(wrong_key, ("c5", "calculate", {"expression": "1"}))
    assert [r.error for r in results] == ["HTTP422", "HTTP400", "HTTP413", UNKNOWN_TOOL, None]
    assert results[0].content == 'error: HTTP422: {"error":{"message":"scripted 422"}}'
    assert '"x-functions-key":"[redacted]"' in results[1].content and KEY not in results[1].content
    assert results[2].content == ("error: HTTP413: the answer is over the 1 MB limit (1,048,576 bytes) of a tool "
                                  "endpoint; it was not read")
    assert results[3].content.startswith("error: UnknownTool: no tool named 'no_such' (the tools are: calculate, ")
    assert len(server.calls) == 5 and "no_such" not in [c.body["name"] for c in server.calls]  # never sent
    assert unauthorized.content == 'error: HTTP401: {"detail":"Unauthorized"}'


@pytest.mark.slow
def test_an_output_as_content_parts_a_missing_output_and_the_output_limit(tmp_path: Path, monkeypatch):
    from tests.support import agent_rft_server

    outputs: list[Any] = [[{"type": "input_text", "text": "part one, "}, {"type": "input_text", "text": "two"}],
                          {"rows": 3}, None, "x" * 50]

    def scripted(self: Any, name: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        out = outputs.pop(0)
        return 200, ({"type": "function_call_output"} if out is None else {"output": out})

    monkeypatch.setattr(agent_rft_server.AgentRFTServer, "call", scripted)
    with AgentRFTServer(key=KEY) as server:
        results = turn(box_for(tmp_path, server, limits=ToolLimits(output_chars=20)),
                       *[(f"c{i}", "calculate", {}) for i in range(4)])
    bad = 'error: BadToolOutput: the server answered without a function_call_output\'s `output`: {"type":' \
          '"function_call_output"}'
    assert [r.content for r in results] == [
        "part one, two", '{"rows": 3}', bad[:20] + f"…[cut: {len(bad) - 20} more characters]",
        "xxxxxxxxxxxxxxxxxxxx…[cut: 30 more characters]"]
    assert [r.error for r in results] == [None, None, BAD_TOOL_OUTPUT, None]


@pytest.mark.slow
def test_a_call_over_one_megabyte_is_not_sent(tmp_path: Path):
    with AgentRFTServer(key=KEY) as server:
        (result,) = turn(box_for(tmp_path, server), ("c1", "calculate", {"expression": "1"}),
                         item={**ITEM, "attachment": "z" * 1_048_576})
        assert server.calls == []
        box = box_for(tmp_path, server, item_fields=["id"])
        (sent,) = turn(box, ("c1", "calculate", {"expression": "1"}), item={**ITEM, "attachment": "z" * 1_048_576})
    assert result.error == "HTTP413" and result.content.startswith("error: HTTP413: the call is 1,048,")
    assert sent.error is None and len(server.calls) == 1


@pytest.mark.slow
def test_a_5xx_or_a_dropped_connection_after_its_retries_ends_the_rollout(tmp_path: Path):
    with AgentRFTServer(key=KEY) as server:
        server.fail("calculate", 502, times=4)
        with pytest.raises(RolloutToolError) as failed:
            turn(box_for(tmp_path, server), ("c1", "calculate", {"expression": "1"}))
        server.drop("calculate", times=4)
        with pytest.raises(RolloutToolError) as dropped:
            turn(box_for(tmp_path, server), ("c1", "calculate", {"expression": "1"}))
        server.fail("calculate", 503, times=3)  # three failures: the third retry answers
        (recovered,) = turn(box_for(tmp_path, server), ("c1", "calculate", {"expression": "1"}))
    assert failed.value.kind == "tool_server_error" and str(failed.value) == (
        f"tool 'calculate' at {server.url('/tools')}: HTTP 502: {{\"error\": {{\"message\": \"scripted 502\"}}}} "
        "(after 3 retries)")
    assert dropped.value.kind == "tool_connection_error"
    assert recovered.content == "1.0" and [c.status for c in server.calls][-4:] == [503, 503, 503, 200]


@pytest.mark.slow
def test_a_call_past_its_timeout_is_a_tool_timeout_shown_and_never_retried(tmp_path: Path):
    with AgentRFTServer(key=KEY) as server:
        server.delay("calculate", 2.0)
        (result,) = turn(box_for(tmp_path, server, timeout_s=0.3), ("c1", "calculate", {"expression": "1"}))
    assert (result.error, result.content) == (TOOL_TIMEOUT, "error: ToolTimeout: no answer within 0.3 s")
    assert len(server.calls) == 1


@pytest.mark.slow
def test_a_server_that_cannot_be_reached_five_calls_in_a_row_is_down_and_an_answer_between_resets_it(
        tmp_path: Path):
    from rfteval.tools.endpoint import GONE_AFTER, ToolServerGone

    attempts = RETRIES + 1  # each call is tried once, then retried
    with AgentRFTServer(key=KEY) as server:
        box = box_for(tmp_path, server)
        server.drop("calculate", times=(GONE_AFTER - 1) * attempts)
        for _ in range(GONE_AFTER - 1):  # a flaky server: each of these ends its own rollout only
            with pytest.raises(RolloutToolError):
                turn(box, ("c1", "calculate", {"expression": "1"}))
        (answered,) = turn(box, ("c1", "calculate", {"expression": "2"}))
        assert answered.content == "2.0"  # it answered: the count starts over
        server.drop("calculate", times=GONE_AFTER * attempts)
        for _ in range(GONE_AFTER - 1):
            with pytest.raises(RolloutToolError):
                turn(box, ("c1", "calculate", {"expression": "1"}))
        with pytest.raises(ToolServerGone) as gone:
            turn(box, ("c1", "calculate", {"expression": "1"}))
    assert str(gone.value).startswith(f"tool 'calculate' at {server.url('/tools')}: {GONE_AFTER} calls in a row "
                                      "could not connect, each after its retries (")
    assert str(gone.value).endswith("): the tool server is down") and KEY not in str(gone.value)
