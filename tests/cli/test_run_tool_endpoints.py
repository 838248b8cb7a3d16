"""`rfteval run --tool-endpoints`, end to end: the model scripted on FakeOpenAI, its tool calls POSTed to a local
Agent RFT tool server with ZavaRetailAgent-style retail tools, an `endpoint` grader on the same server joining its
tool log on the trace_id (tests/support/agent_rft_server.py). The contract's faults: a 4xx shown to the model, a
5xx retried then a generation error (resumed by re-running), 413 both ways, a timeout; and the secrets in the
headers absent from every file of the run and from the terminal."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from rfteval.cli.app import app
from tests.support.agent_rft_server import RETAIL_TOOLS, AgentRFTServer, tools_config
from tests.support.fake_openai import FakeOpenAI, Reply, Request
from tests.support.toolboxes import calculator, scripted_agent, tool_call, tool_messages

pytestmark = pytest.mark.slow  # each test runs `rfteval run` against two local servers

TOOLS_KEY = "tools-s3cr3t-9f27c1d4e8"
GRADER_KEY = "grader-s3cr3t-51ab6e0c33"
ENV = {"NO_COLOR": "1", "COLUMNS": "200", "RETAIL_TOOLS_KEY": TOOLS_KEY, "RETAIL_GRADER_KEY": GRADER_KEY}


def items(n: int = 2, **extra: Any) -> list[dict[str, Any]]:
    """Retail questions the scripted agent answers by looking the order up; references as ZavaRetailAgent's lines
    hold them (reference_tool_calls), read by the grader, sent whole to the tool server."""
    return [{"id": f"q{i}", "messages": [{"role": "user", "content": f"Is my hiking boots order delivered? ({i})"}],
             "tools": RETAIL_TOOLS, "reference_answer": "delivered",
             "reference_tool_calls": ["find_user_id_by_name_zip", "get_order_details"], **extra} for i in range(n)]


def setup(tmp: Path, server: AgentRFTServer, data: list[dict[str, Any]] | None = None,
          tool_headers: dict[str, str] | None = None) -> dict[str, Path]:
    (tmp / "items.jsonl").write_text("".join(json.dumps(x) + "\n" for x in data or items()))
    headers = {"X-Functions-Key": "${RETAIL_TOOLS_KEY}"} if tool_headers is None else tool_headers
    (tmp / "tools-config.json").write_text(json.dumps(tools_config(server.url("/tools"), headers), indent=2))
    (tmp / "grader.json").write_text(json.dumps({
        "type": "endpoint", "name": "retail_grader", "url": server.url("/score"),
        "headers": {"Authorization": "Bearer ${RETAIL_GRADER_KEY}"}, "rate_limit": 50, "pass_threshold": 0.75}))
    return {"dataset": tmp / "items.jsonl", "grader": tmp / "grader.json", "tools": tmp / "tools-config.json",
            "out": tmp / "run"}


def retail_agent(request: Request, turn: int) -> Reply:
    """Turn 1 finds the user, turn 2 looks the order up, turn 3 answers with the status the tool returned (or what
    went wrong)."""
    if turn == 1:
        return Reply(text=None, tool_calls=[tool_call("find_user_id_by_name_zip", {
            "first_name": "Ava", "last_name": "Moore", "zip": "78234"}, "call_find")])
    if turn == 2:
        return Reply(text=None, tool_calls=[tool_call("get_order_details", {"order_id": "#W4817420"}, "call_order")])
    last = tool_messages(request)[-1]["content"]
    status = json.loads(last).get("status") if last.startswith("{") else None
    return Reply(text=f"Your order is {status}." if status else f"Sorry: {last}")


def invoke(f: dict[str, Path], fake: FakeOpenAI, *more: str) -> Any:
    args = ["run", "--dataset", str(f["dataset"]), "--grader", str(f["grader"]), "--model", "base=fake-base",
            "--epochs", "2", "--base-url", fake.base_url, "--out", str(f["out"]), "--tool-endpoints", str(f["tools"]),
            "--retry-base-delay", "0.01", "--no-readiness", *more]
    return CliRunner().invoke(app, args, env=ENV)


def records(f: dict[str, Path]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (f["out"] / "base.jsonl").read_text().splitlines()]


def no_secret_anywhere(root: Path, output: str) -> None:
    """Neither secret in any file under `root` (the run directory, its store, its results) nor in the terminal."""
    assert TOOLS_KEY not in output and GRADER_KEY not in output
    files = [p for p in root.rglob("*") if p.is_file()]
    assert len(files) > 5  # the store's logs and index, the records, results.parquet, summary.json, the spec
    for path in files:
        data = path.read_bytes()
        assert TOOLS_KEY.encode() not in data and GRADER_KEY.encode() not in data, path


def test_a_run_sends_agent_rfts_calls_and_the_grader_joins_each_rollouts_tool_log_on_its_trace_id(
        tmp_path: Path) -> None:
    with AgentRFTServer(key=TOOLS_KEY, grader_key=GRADER_KEY) as server, \
            FakeOpenAI(scripted_agent(retail_agent)) as fake:
        f = setup(tmp_path, server)
        res = invoke(f, fake)
        assert res.exit_code == 0, res.output
        assert len(fake.requests) == 2 * 2 * 3  # 2 items x 2 epochs, three turns each
    calls = server.calls
    assert [c.status for c in calls] == [200] * 8 and all(c.headers["x-functions-key"] == TOOLS_KEY for c in calls)
    first = calls[0].body
    assert set(first) == {"type", "id", "call_id", "name", "arguments", "trace_id", "item"}
    assert first["type"] == "function_call" and first["call_id"] == "call_find" and first["id"] == "fc_find"
    assert json.loads(first["arguments"]) == {"first_name": "Ava", "last_name": "Moore", "zip": "78234"}
    assert first["item"] == items()[int(first["item"]["id"][1])]  # the whole line, references included
    traces: dict[str, list[str]] = {}
    for c in calls:
        traces.setdefault(c.body["trace_id"], []).append(c.body["name"])
    # one trace per rollout, carried by both of its calls; four rollouts, four traces
    assert len(traces) == 4 and all(v == ["find_user_id_by_name_zip", "get_order_details"] for v in traces.values())
    assert all(t.startswith("trace_") and len(t) == len("trace_") + 36 for t in traces)
    grades = server.grades
    assert sorted(g.body["trace_id"] for g in grades) == sorted(traces)  # each rollout graded under its own trace
    assert all(g.headers["authorization"] == f"Bearer {GRADER_KEY}" for g in grades)
    graded = grades[0].body
    assert set(graded) == {"sample", "item", "trace_id"} and "rollout" not in graded["sample"]
    assert graded["sample"]["output_text"] == "Your order is delivered."
    recs = records(f)
    assert [r["score"] for r in recs] == [1.0] * 4  # the answer, and the tools the grader's log holds for the trace
    assert all(r["passed"] and r["grade_details"]["trace_id"] in traces for r in recs)
    assert all(r["turns"] == 3 and r["tool_calls"] == 2 and r["tool_errors"] == {} for r in recs)
    summary = json.loads((f["out"] / "summary.json").read_text())
    assert summary["tools"]["endpoints"] == str(f["tools"]) and summary["tools"]["python"] is None
    assert summary["tools"]["item_fields"] is None and summary["tools"]["endpoint_timeout"] == 600.0
    assert f"agent run: tools {f['tools']};" in res.output and "endpoint call timeout 600 s (the whole line sent)" \
        in res.output
    assert "'retail_grader' is Agent RFT's endpoint grader" in res.output
    no_secret_anywhere(f["out"], res.output)


def test_a_4xx_is_shown_to_the_model_and_counted_and_a_server_echoing_its_key_is_scrubbed(tmp_path: Path) -> None:
    with AgentRFTServer(key=TOOLS_KEY, grader_key=GRADER_KEY) as server, \
            FakeOpenAI(scripted_agent(retail_agent)) as fake:
        f = setup(tmp_path, server, items(1))
        server.fail("get_order_details", 404)  # the first rollout's second call
        server.echo("get_order_details")  # the second rollout's: a 400 quoting the request's headers, the key too
        res = invoke(f, fake, "--concurrency", "1", "--fixed")  # one rollout after the other
        assert res.exit_code == 0, res.output
        shown = [tool_messages(r)[-1]["content"] for r in fake.requests if len(tool_messages(r)) == 2]
    assert shown[0] == 'error: HTTP404: {"error":{"message":"scripted 404"}}'
    assert shown[1].startswith('error: HTTP400: {"error":"bad request","received_headers":{') \
        and '"x-functions-key":"[redacted]"' in shown[1]
    recs = records(f)
    assert sorted(json.dumps(r["tool_errors"]) for r in recs) == ['{"HTTP400": 1}', '{"HTTP404": 1}']
    assert all(r["error"] is None and r["score"] == 0.0 for r in recs)  # graded as they stand: no status to answer
    assert [c.status for c in server.calls].count(404) == 1  # a 4xx is never retried
    no_secret_anywhere(f["out"], res.output)


def test_a_5xx_is_retried_three_times_then_the_rollout_is_a_generation_error_and_a_rerun_resumes_it(
        tmp_path: Path) -> None:
    with AgentRFTServer(key=TOOLS_KEY, grader_key=GRADER_KEY) as server, \
            FakeOpenAI(scripted_agent(retail_agent)) as fake:
        f = setup(tmp_path, server, items(1))
        server.fail("get_order_details", 503, times=4)  # the first rollout's call: sent 4 times, 503 each time
        res = invoke(f, fake, "--max-error-rate", "1", "--concurrency", "1", "--fixed")
        assert res.exit_code == 0, res.output
        statuses = [(c.body["name"], c.status) for c in server.calls]
        assert statuses[:5] == [("find_user_id_by_name_zip", 200)] + [("get_order_details", 503)] * 4
        recs = records(f)
        failed = [r for r in recs if r["error"] is not None]
        assert len(failed) == 1 and failed[0]["error"]["stage"] == "generate"
        assert failed[0]["error"]["type"] == "tool_server_error"
        assert "HTTP 503" in failed[0]["error"]["message"] and "after 3 retries" in failed[0]["error"]["message"]
        s = json.loads((f["out"] / "summary.json").read_text())["models"]["base"]
        assert s["errors"]["by_type"] == {"generate:tool_server_error": 1} and s["mean"] == 1.0  # left out, not 0
        failed_trace = next(c.body["trace_id"] for c in server.calls if c.status == 503)
        sent_before, calls_before = len(fake.requests), len(server.calls)

        res = invoke(f, fake, "--max-error-rate", "1")  # the server answers again: the same command resumes
        assert res.exit_code == 0, res.output
        again = server.calls[calls_before:]
        # only the failed turn runs again, under the rollout's own trace; its first turn's call is not re-sent
        assert [(c.body["name"], c.status, c.body["trace_id"]) for c in again] == [
            ("get_order_details", 200, failed_trace)]
        assert len(fake.requests) - sent_before == 1  # the third model turn only
        assert [r["error"] for r in records(f)] == [None, None] and [r["score"] for r in records(f)] == [1.0, 1.0]
        assert any(g.body["trace_id"] == failed_trace for g in server.grades)


def test_a_dropped_connection_is_retried_then_a_generation_error_of_its_own_type(tmp_path: Path) -> None:
    with AgentRFTServer(key=TOOLS_KEY, grader_key=GRADER_KEY) as server, \
            FakeOpenAI(scripted_agent(retail_agent)) as fake:
        f = setup(tmp_path, server, items(1))
        server.drop("find_user_id_by_name_zip", times=4)
        res = invoke(f, fake, "--max-error-rate", "1", "--epochs", "1")
        assert res.exit_code == 0, res.output
    (rec,) = records(f)
    assert rec["error"]["type"] == "tool_connection_error" and rec["turns"] == 1
    assert [c.status for c in server.calls] == [-1] * 4 and server.grades == []


def test_413_both_ways_and_item_fields_sending_less_of_the_line(tmp_path: Path) -> None:
    big = {"attachment": "y" * 1_100_000}  # the line is over 1 MB: a call carrying it is never sent
    with AgentRFTServer(key=TOOLS_KEY, grader_key=GRADER_KEY) as server, \
            FakeOpenAI(scripted_agent(retail_agent)) as fake:
        f = setup(tmp_path, server, items(1, **big))
        res = invoke(f, fake, "--epochs", "1", "--max-error-rate", "1")
        assert res.exit_code == 0, res.output
        assert server.calls == [] and server.grades == []  # the grader's request is over 1 MB too: not sent
        (rec,) = records(f)
        assert rec["error"]["type"] == "endpoint_grader_server_error" and "over an endpoint grader's 1 MB limit" in \
            rec["error"]["message"]
        first = tool_messages(fake.requests[1])[0]["content"]
        assert first.startswith("error: HTTP413: the call is 1,10") and first.endswith("it was not sent")

        server.huge("get_order_details")  # an answer over 1 MB: not read
        (tmp_path / "b").mkdir()
        f2 = setup(tmp_path / "b", server, items(1, **big))
        res = invoke(f2, fake, "--epochs", "1", "--tool-item-fields", "id,messages,reference_answer",
                     "--max-error-rate", "1")
        assert res.exit_code == 0, res.output
        assert [set(c.body["item"]) for c in server.calls] == [{"id", "messages", "reference_answer"}] * 2
        second = tool_messages(fake.requests[-1])[-1]["content"]
        assert second == ("error: HTTP413: the answer is over the 1 MB limit (1,048,576 bytes) of a tool endpoint; "
                          "it was not read")
    (rec,) = records(f2)
    assert rec["tool_errors"] == {"HTTP413": 1}
    summary = json.loads((f2["out"] / "summary.json").read_text())
    assert summary["tools"]["item_fields"] == ["id", "messages", "reference_answer"]


def test_a_call_past_its_timeout_shows_the_model_a_tool_timeout_and_is_not_retried(tmp_path: Path) -> None:
    with AgentRFTServer(key=TOOLS_KEY, grader_key=GRADER_KEY) as server, \
            FakeOpenAI(scripted_agent(retail_agent)) as fake:
        f = setup(tmp_path, server, items(1))
        server.delay("get_order_details", 3.0)
        res = invoke(f, fake, "--epochs", "1", "--tool-endpoint-timeout", "0.5")
        assert res.exit_code == 0, res.output
        shown = tool_messages(fake.requests[-1])[-1]["content"]
    assert shown == "error: ToolTimeout: no answer within 0.5 s"
    assert [c.body["name"] for c in server.calls] == ["find_user_id_by_name_zip", "get_order_details"]
    (rec,) = records(f)
    assert rec["tool_errors"] == {"ToolTimeout": 1} and rec["error"] is None


def test_a_grader_5xx_is_a_counted_grading_error_regraded_by_the_same_command_with_no_model_request(
        tmp_path: Path) -> None:
    with AgentRFTServer(key=TOOLS_KEY, grader_key=GRADER_KEY) as server, \
            FakeOpenAI(scripted_agent(retail_agent)) as fake:
        f = setup(tmp_path, server, items(1))
        server.fail("score", 503, times=4)  # one grade's four tries
        res = invoke(f, fake, "--epochs", "1")
        assert res.exit_code == 3, res.output  # 1 of 1 cells in error
        (rec,) = records(f)
        assert rec["error"]["stage"] == "grade" and rec["error"]["type"] == "endpoint_grader_server_error"
        assert len(server.grades) == 4
        sent, calls = len(fake.requests), len(server.calls)
        res = invoke(f, fake, "--epochs", "1")
        assert res.exit_code == 0, res.output
        assert len(fake.requests) == sent and len(server.calls) == calls  # nothing generated, no tool run again
        (rec,) = records(f)
        assert rec["error"] is None and rec["score"] == 1.0 and len(server.grades) == 5


def test_an_unset_variable_is_one_line_naming_the_field_before_anything_is_written(tmp_path: Path) -> None:
    with AgentRFTServer() as server, FakeOpenAI(scripted_agent(retail_agent)) as fake:
        f = setup(tmp_path, server, tool_headers={"X-Functions-Key": "${NOT_SET_ANYWHERE}"})
        res = invoke(f, fake)
        assert res.exit_code == 2
        assert (f"{f['tools']}: [0].headers.X-Functions-Key: ${{NOT_SET_ANYWHERE}} is not set in the environment"
                in res.output)
        assert fake.requests == [] and server.calls == [] and not (f["out"] / "store").exists()


def test_zavas_placeholder_url_says_how_to_fill_it_in(tmp_path: Path) -> None:
    with AgentRFTServer() as server, FakeOpenAI(scripted_agent(retail_agent)) as fake:
        f = setup(tmp_path, server)
        f["tools"].write_text(json.dumps(tools_config("#TOOLS_SERVER_URL#")))
        res = invoke(f, fake)
    assert res.exit_code == 2 and "[0].server_url: '#TOOLS_SERVER_URL#' is a placeholder, not a URL" in res.output
    assert fake.requests == []


@pytest.fixture
def python_tools(monkeypatch: pytest.MonkeyPatch) -> None:
    """`rfteval.tools.python` as the run finds it, opening the in-process calculator (add, count) for tools.py."""
    module = types.ModuleType("rfteval.tools.python")
    module.open_python_tools = lambda path, limits, policy: calculator()  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "rfteval.tools.python", module)


def test_python_tools_and_endpoint_tools_in_one_rollout(tmp_path: Path, python_tools: None) -> None:
    def agent(request: Request, turn: int) -> Reply:
        if turn == 1:  # one turn calling both kinds, in order
            return Reply(text=None, tool_calls=[tool_call("count", {}, "call_a"), tool_call(
                "find_user_id_by_email", {"email": "liam.chen@example.com"}, "call_b"), tool_call("count", {}, "call_c")])
        return Reply(text="; ".join(m["content"] for m in tool_messages(request)))

    with AgentRFTServer(key=TOOLS_KEY, grader_key=GRADER_KEY) as server, FakeOpenAI(scripted_agent(agent)) as fake:
        f = setup(tmp_path, server, items(1))
        (tmp_path / "tools.py").write_text("def count(*, state=None):\n    return 0\n")
        res = invoke(f, fake, "--epochs", "1", "--tools", str(tmp_path / "tools.py"))
        assert res.exit_code == 0, res.output
        assert tool_messages(fake.requests[-1]) == [
            {"role": "tool", "tool_call_id": "call_a", "content": "1"},
            {"role": "tool", "tool_call_id": "call_b", "content": "liam_chen_9055"},
            {"role": "tool", "tool_call_id": "call_c", "content": "2"}]  # the python state carried across the call
    assert [c.body["name"] for c in server.calls] == ["find_user_id_by_email"]
    assert f"agent run: tools {tmp_path / 'tools.py'} and {f['tools']};" in res.output


def test_a_tool_name_in_both_is_one_line(tmp_path: Path, python_tools: None) -> None:
    with AgentRFTServer() as server, FakeOpenAI(scripted_agent(retail_agent)) as fake:
        f = setup(tmp_path, server)
        f["tools"].write_text(json.dumps(tools_config(server.url("/tools"), names=["add", "calculate"])))
        (tmp_path / "tools.py").write_text("def add(a, b):\n    return a + b\n")
        res = invoke(f, fake, "--tools", str(tmp_path / "tools.py"))
    assert res.exit_code == 2
    assert res.output.strip().splitlines()[-1] == (
        f"rfteval: {f['tools']}: --tool-endpoints: tool 'add' is both in {tmp_path / 'tools.py'} and in "
        f"{f['tools']}: a tool name must be one tool's (rename or drop one of them)")
    assert fake.requests == []


def test_a_tool_server_that_is_down_stops_the_run_early_and_the_same_command_resumes(tmp_path: Path) -> None:
    from rfteval.tools.endpoint import GONE_AFTER

    with AgentRFTServer(key=TOOLS_KEY, grader_key=GRADER_KEY) as server, \
            FakeOpenAI(scripted_agent(retail_agent)) as fake:
        f = setup(tmp_path, server, items(12))
        server.drop("find_user_id_by_name_zip", times=10_000)  # down: every call's connection dropped
        res = invoke(f, fake, "--max-error-rate", "1", "--epochs", "1", "--concurrency", "1")
        assert res.exit_code == 2, res.output
        assert f"{GONE_AFTER} calls in a row could not connect, each after its retries" in res.output
        assert "the tool server is down" in res.output and "Traceback" not in res.output
        # stopped after about GONE_AFTER rollouts' first calls (others may be in flight), not after all twelve
        assert GONE_AFTER <= len({c.body["trace_id"] for c in server.calls}) < 12
        server.faults.clear()
        res = invoke(f, fake, "--epochs", "1")  # the server is back: the same command finishes the run
        assert res.exit_code == 0, res.output
    assert [r["error"] for r in records(f)] == [None] * 12
    no_secret_anywhere(f["out"], res.output)
