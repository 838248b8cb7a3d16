"""rfteval/tools/mcp.py: MCP servers over stdio through the official SDK's client, each in the sandbox's namespaces.

The fault server is written with the SDK's own server class (tests/support/mcp_fault_server.py): a tool that raises
(an isError result), one that sleeps past --tool-timeout, one that exits the process mid-call, one that opens a URL
(refused without `network = true`), and a counter kept in the process (whether two rollouts share one). The real
servers from PyPI run end to end in tests/cli/test_run_mcp.py.
"""

from __future__ import annotations

import asyncio
import http.server
import json
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rfteval.errors import InputError
from rfteval.sandbox.policy import SandboxPolicy
from rfteval.tools.base import BAD_ARGUMENTS, TOOL_TIMEOUT, UNKNOWN_TOOL, RolloutToolError, ToolCall, ToolLimits
from rfteval.tools.mcp import (
    MCP_ERROR,
    SERVER_EXITED,
    MCPTools,
    check_declared,
    mcp_tools,
    open_mcp_tools,
    result_text,
    server_from,
    visible,
)
from tests.support.mcp_servers import fault_server, need_client, need_sandbox

FAULT_TOOLS = ["count", "die", "echo", "fail", "fetch", "hog", "nap"]


# ---- the entries, the listing and the results, without a server ---------------------------------------------------


def test_an_entry_is_a_table_or_a_command_line_and_each_mistake_is_one_line_naming_it():
    assert server_from("mcp-server-time --local-timezone 'Europe/Paris'", "--mcp").command == (
        "mcp-server-time", "--local-timezone", "Europe/Paris")
    table = server_from({"command": ["uvx", "mcp-server-sqlite"], "env": {"K": "${K}"}, "per": "run",
                         "network": True}, "[tools] mcp[0]")
    assert (table.per, table.network, dict(table.env)) == ("run", True, {"K": "${K}"})
    assert table.summary() == {"command": ["uvx", "mcp-server-sqlite"], "env": ["K"], "per": "run", "network": True}
    for bad, field in (({"command": []}, "[tools] mcp[0].command"), ({"command": ["x"], "per": "item"},
                                                                     "[tools] mcp[0].per"),
                       ({"command": ["x"], "network": "yes"}, "[tools] mcp[0].network"),
                       ({"command": ["x"], "cwd": "/"}, "[tools] mcp[0]"),
                       ({"command": ["x"], "env": {"K": 1}}, "[tools] mcp[0].env")):
        with pytest.raises(InputError) as err:
            server_from(bad, "[tools] mcp[0]")
        assert err.value.field == field and "\n" not in str(err.value)


def test_listed_tools_become_openai_function_tools():
    listed: list[Any] = [{"name": "get_current_time", "description": "Now.", "inputSchema": {
        "type": "object", "properties": {"timezone": {"type": "string"}}, "required": ["timezone"]}},
        {"name": "ping", "inputSchema": {}}]
    assert mcp_tools(listed) == [
        {"type": "function", "function": {"name": "get_current_time", "description": "Now.", "parameters": {
            "type": "object", "properties": {"timezone": {"type": "string"}}, "required": ["timezone"]}}},
        {"type": "function", "function": {"name": "ping", "parameters": {"type": "object", "properties": {}}}}]


def test_a_results_text_is_its_text_blocks_other_blocks_as_json_and_else_its_structured_content():
    need_client()
    from mcp_types import CallToolResult, ImageContent, TextContent

    mixed = CallToolResult(content=[TextContent(text="a"), ImageContent(data="AAA=", mime_type="image/png"),
                                    TextContent(text="b")])
    lines = result_text(mixed).split("\n")
    assert lines[0] == "a" and lines[2] == "b"
    assert json.loads(lines[1]) == {"type": "image", "data": "AAA=", "mimeType": "image/png"}
    assert result_text(CallToolResult(content=[], structured_content={"n": 2})) == '{"n": 2}'


def test_a_server_sees_its_own_virtualenv_and_the_python_it_was_made_from_and_its_script(tmp_path: Path):
    venv = tmp_path / "v"
    (venv / "bin").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text("home = /opt/py/bin\nversion = 3.11\n")
    script = tmp_path / "server.py"
    script.write_text("")
    assert visible([str(venv / "bin" / "python"), str(script), "--db", "/nonexistent/x.db"]) == [
        str(venv), "/opt/py", str(script)]
    assert visible(["/usr/local/bin/tool"]) == ["/usr/local/bin"]


def test_a_declared_tool_no_server_has_is_one_line_naming_the_dataset_line(tmp_path: Path):
    data = tmp_path / "items.jsonl"
    rows = [{"messages": [{"role": "user", "content": "hi"}]},
            {"messages": [{"role": "user", "content": "hi"}], "tools": [
                {"type": "function", "function": {"name": "echo", "parameters": {"type": "object"}}},
                {"type": "function", "function": {"name": "teleport", "parameters": {"type": "object"}}}]}]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(InputError) as err:
        check_declared(data, frozenset({"echo", "count"}))
    assert err.value.line == 2 and err.value.field == "tools" and "'teleport'" in str(err.value)
    assert "count, echo" in str(err.value)
    check_declared(data, frozenset({"echo", "teleport"}))  # every declared tool is had: nothing raised
    check_declared(data, frozenset({"echo"}), limit=1)  # --limit 1: the second line is not played


# ---- the fault server ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def loopback() -> Iterator[str]:
    """An HTTP server on the host's 127.0.0.1 that answers "reached": what a server without the network cannot see."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the standard library's name
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"reached")

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}/"
    server.shutdown()


def open_faults(per: str = "rollout", network: bool = False, timeout_s: float = 20.0, memory_mb: int = 1024,
                **more: Any) -> MCPTools:
    need_client()
    need_sandbox()
    return open_mcp_tools([{"command": fault_server(), "per": per, "network": network, **more}],
                          ToolLimits(timeout_s=timeout_s, memory_mb=memory_mb, output_chars=200), SandboxPolicy())


def call(name: str, arguments: Any, call_id: str = "c") -> ToolCall:
    return ToolCall(call_id, name, arguments if isinstance(arguments, str) else json.dumps(arguments))


def play(box: MCPTools, turns: list[tuple[str, list[ToolCall]]]) -> list[list[tuple[str, str | None]]]:
    """Each (rollout, calls) turn run in order in one event loop, every rollout ended after, the box closed:
    (content, error) of each call, by turn; a rollout's generation error as ("raised", kind)."""

    async def main() -> list[list[tuple[str, str | None]]]:
        out: list[list[tuple[str, str | None]]] = []
        try:
            for rollout, calls in turns:
                try:
                    results, state = await box.run_turn(rollout, {}, calls, {})
                except RolloutToolError as exc:
                    out.append([("raised", exc.kind), (str(exc), None)])
                    continue
                assert state == {}
                out.append([(r.content, r.error) for r in results])
            for rollout in {r for r, _ in turns}:
                await box.end_rollout(rollout)
        finally:
            await box.aclose()
        return out

    return asyncio.run(main())


@pytest.mark.slow
def test_the_servers_tools_are_listed_offered_and_each_failure_is_a_result_of_its_type():
    box = open_faults()
    assert sorted(box.names()) == FAULT_TOOLS
    offered = {t["function"]["name"]: t["function"] for t in box.offered}  # type: ignore[index]
    assert offered["echo"]["parameters"]["required"] == ["text"] and offered["echo"]["description"] == "The text back."
    (results,) = play(box, [("r1", [
        call("echo", {"text": "hi"}, "c1"), call("fail", {"reason": "out of stock"}, "c2"), call("echo", "[1]", "c3"),
        call("echo", '{"text": ', "c4"), call("teleport", {}, "c5"), call("echo", {"text": "x" * 300}, "c6"),
        call("echo", {"wrong": 1}, "c7")])])
    assert results[0] == ("hi", None)
    assert results[1] == ("error: MCPError: Error executing tool fail: out of stock", MCP_ERROR)  # isError
    assert results[2][1] == BAD_ARGUMENTS and "must be a JSON object, got list" in results[2][0]
    assert results[3][1] == BAD_ARGUMENTS and results[3][0].startswith("error: BadArguments: the arguments are not JSON")
    assert results[4][1] == UNKNOWN_TOOL and "'teleport'" in results[4][0]
    assert results[5] == ("x" * 200 + "…[cut: 100 more characters]", None)  # --tool-output-limit
    assert results[6][1] == MCP_ERROR and "text" in results[6][0]  # the server's own schema check


@pytest.mark.slow
def test_a_call_past_the_turns_timeout_is_a_tool_timeout_and_the_turns_later_calls_are_not_sent():
    (results,) = play(open_faults(timeout_s=1.0), [("r1", [call("nap", {"seconds": 30}), call("echo", {"text": "x"})])])
    assert results[0] == ("error: ToolTimeout: no answer within 1 s (--tool-timeout)", TOOL_TIMEOUT)
    assert results[1][1] == TOOL_TIMEOUT and "not run" in results[1][0]


@pytest.mark.slow
def test_a_server_that_exits_mid_call_ends_the_rollout_as_a_generation_error_and_others_go_on():
    results = play(open_faults(), [("r1", [call("count", {})]), ("r1", [call("die", {})]),
                                   ("r2", [call("count", {})])])
    assert results[0] == [("1", None)]
    assert results[1][0] == ("raised", SERVER_EXITED) and "exited mid-rollout" in results[1][1][0]
    assert results[2] == [("1", None)]  # another rollout: its own process, alive


@pytest.mark.slow
def test_one_process_per_rollout_by_default_and_one_for_the_run_when_the_spec_says_so():
    per_rollout = play(open_faults(), [("r1", [call("count", {})]), ("r2", [call("count", {})]),
                                       ("r1", [call("count", {})])])
    assert per_rollout == [[("1", None)], [("1", None)], [("2", None)]]  # r1's process kept across its turns
    per_run = play(open_faults(per="run"), [("r1", [call("count", {})]), ("r2", [call("count", {})]),
                                            ("r1", [call("count", {})])])
    assert per_run == [[("1", None)], [("2", None)], [("3", None)]]


@pytest.mark.slow
def test_the_network_is_refused_unless_the_spec_gives_it(loopback: str):
    (refused,) = play(open_faults(), [("r1", [call("fetch", {"url": loopback})])])
    assert refused[0][1] == MCP_ERROR and "Connection refused" in refused[0][0] and "reached" not in refused[0][0]
    (allowed,) = play(open_faults(network=True), [("r1", [call("fetch", {"url": loopback})])])
    assert allowed == [("reached", None)]


@pytest.mark.slow
def test_tool_memory_binds_the_servers_address_space():
    bound_box = open_faults(memory_mb=256, timeout_s=60)
    (bound,) = play(bound_box, [("r1", [call("hog", {"mb": 400}), call("hog", {"mb": 8})])])
    # the server's own MemoryError (whose message is empty), shown to the model as the SDK words it
    assert bound[0] == ("error: MCPError: Error executing tool hog: ", MCP_ERROR)
    assert bound[1] == ("held 8 MB", None)  # and it lives on
    (roomy,) = play(open_faults(memory_mb=1024, timeout_s=60), [("r1", [call("hog", {"mb": 400})])])
    assert roomy == [("held 400 MB", None)]
    a, b = open_faults(memory_mb=256), open_faults(memory_mb=1024)
    a.close()
    b.close()
    assert a.identity != b.identity  # the limit can change a result: another tool box


@pytest.mark.slow
def test_the_identity_holds_the_commands_and_env_names_never_their_values(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("FAULTS_TOKEN", "first-value")
    boxes = [open_faults(env={"TOKEN": "${FAULTS_TOKEN}"})]
    monkeypatch.setenv("FAULTS_TOKEN", "second-value")
    boxes += [open_faults(env={"TOKEN": "${FAULTS_TOKEN}"}), open_faults(env={"OTHER": "x"}), open_faults(per="run")]
    for box in boxes:
        box.close()
    assert boxes[0].identity == boxes[1].identity  # a value changed: the same tools
    assert len({b.identity for b in boxes[1:]}) == 3  # a name, per: another tool box
    assert "first-value" not in json.dumps([s.summary() for s in boxes[0].servers])


@pytest.mark.slow
def test_a_server_that_cannot_start_in_the_sandbox_is_one_line_with_what_it_said():
    need_client()
    need_sandbox()
    with pytest.raises(InputError) as err:  # it needs a home the sandbox does not show it
        open_mcp_tools([{"command": [sys.executable, "-c", "open('/root/.config/srv.toml')"]}], ToolLimits(),
                       SandboxPolicy())
    text = str(err.value)
    assert err.value.field == "[tools] mcp[0]" and "\n" not in text
    assert "did not start in the sandbox" in text and "No such file or directory: '/root/.config/srv.toml'" in text
    with pytest.raises(InputError) as unset:
        open_mcp_tools([{"command": fault_server(), "env": {"K": "${RFTEVAL_TEST_UNSET_VAR}"}}], ToolLimits(),
                       SandboxPolicy())
    assert unset.value.field == "[tools] mcp[0].env.K" and "RFTEVAL_TEST_UNSET_VAR is not set" in str(unset.value)
