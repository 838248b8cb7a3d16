"""rfteval/providers/agent_rft.py: what Agent RFT's tool servers and endpoint graders share: `${VAR}` headers and
their secrecy, the 1 MB limit, the retry rule and the timeout, the pacing of a rate_limit, against the local server
of tests/support/agent_rft_server.py."""

from __future__ import annotations

import asyncio
import json
import socket
from typing import Any

import pytest

from rfteval.errors import InputError
from rfteval.providers import agent_rft
from rfteval.providers.agent_rft import (
    REDACTED,
    EndpointFailed,
    Pacer,
    Resolved,
    Secrets,
    check_placeholders,
    new_client,
    new_trace_id,
    post,
    resolve,
    run_sync,
    shown_url,
    variables,
)
from tests.support.agent_rft_server import AgentRFTServer


def test_variables_are_read_from_braces_only_and_a_malformed_one_is_refused():
    assert variables("Bearer ${KEY} and ${OTHER_2}") == ["KEY", "OTHER_2"]
    assert variables("$KEY {KEY} plain") == []
    assert check_placeholders("Bearer ${KEY}") == "Bearer ${KEY}"
    for bad in ("Bearer ${KEY", "${1KEY}", "${}", "${KE Y}"):
        with pytest.raises(ValueError, match="must name an environment variable"):
            check_placeholders(bad)


def test_a_url_is_shown_without_its_query_or_credentials():
    assert shown_url("https://app.azurewebsites.net/api/grader?code=abc123") == \
        "https://app.azurewebsites.net/api/grader?…"
    assert shown_url("http://user:pw@127.0.0.1:8080/tools") == "http://127.0.0.1:8080/tools"
    assert shown_url("http://127.0.0.1:8080/tools") == "http://127.0.0.1:8080/tools"


def test_resolve_reads_each_variable_and_keeps_the_values_as_secrets():
    env = {"KEY": "k-0123456789", "CODE": "c-abcdef"}
    got = resolve("https://h/score?code=${CODE}", {"Authorization": "Bearer ${KEY}", "Accept": "application/json",
                                                   "X-Functions-Key": "literal-key-777"}, "g.json", environ=env)
    assert got.url == "https://h/score?code=c-abcdef"
    assert got.headers == {"Authorization": "Bearer k-0123456789", "Accept": "application/json",
                           "X-Functions-Key": "literal-key-777"}
    # the variables' values, and a credential written out in the file; never a plain header's value
    assert set(got.secrets.values) == {"k-0123456789", "c-abcdef", "literal-key-777"}
    text = "sent Bearer k-0123456789 to ?code=c-abcdef with literal-key-777, accepting application/json"
    assert got.secrets.scrub(text) == f"sent Bearer {REDACTED} to ?code={REDACTED} with {REDACTED}, accepting " \
                                      "application/json"


def test_a_short_value_is_no_secret_to_scrub():
    got = resolve("http://h/t", {"X-Api-Key": "${K}"}, None, environ={"K": "ab"})
    assert got.headers == {"X-Api-Key": "ab"} and got.secrets == Secrets()


def test_an_unset_or_empty_variable_is_one_line_naming_the_file_field_and_variable():
    with pytest.raises(InputError) as caught:
        resolve("http://h/t", {"Authorization": "Bearer ${NOPE}"}, "tools.json", "[3]", environ={})
    assert str(caught.value) == ("tools.json: [3].headers.Authorization: ${NOPE} is not set in the environment: "
                                 "export NOPE before the run (its value is sent, and written nowhere)")
    with pytest.raises(InputError, match="url: \\$\\{EMPTY\\} is not set"):
        resolve("http://h/${EMPTY}", {}, None, environ={"EMPTY": ""})


def test_new_trace_ids_are_agent_rfts_shape_and_distinct():
    ids = {new_trace_id() for _ in range(50)}
    assert len(ids) == 50 and all(t.startswith("trace_") and len(t) == 42 and t.count("-") == 4 for t in ids)


def call(server: AgentRFTServer, name: str, secrets: Secrets = Secrets(), **kw: Any) -> Any:
    endpoint = Resolved(server.url(f"/tool/{name}"), {}, secrets)
    body = json.dumps({"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": name,
                       "arguments": '{"expression": "2*3"}', "trace_id": "trace_t", "item": {}}).encode()

    async def go() -> Any:
        async with new_client() as client:
            return await post(client, endpoint, body, base_s=0.001, **kw)

    return asyncio.run(go())


@pytest.mark.slow
def test_an_answer_comes_back_whole_with_its_status():
    with AgentRFTServer() as server:
        answer = call(server, "calculate")
        missing = call(server, "no_such_tool")
    assert answer.status == 200 and json.loads(answer.body)["output"] == "6.0" and not answer.over
    assert missing.status == 404 and json.loads(missing.body) == {"detail": "unknown tool 'no_such_tool'"}


@pytest.mark.slow
def test_a_5xx_is_retried_three_times_then_fails_and_fewer_failures_are_recovered():
    with AgentRFTServer() as server:
        server.fail("calculate", 503, times=2)
        assert call(server, "calculate").status == 200
        assert [c.status for c in server.calls] == [503, 503, 200]
        server.calls.clear()
        server.fail("calculate", 500, times=9)
        with pytest.raises(EndpointFailed) as caught:
            call(server, "calculate")
    assert [c.status for c in server.calls] == [500] * 4  # the first try and 3 retries
    assert caught.value.kind == "server" and caught.value.status == 500
    assert str(caught.value) == 'HTTP 500: {"error": {"message": "scripted 500"}} (after 3 retries)'


@pytest.mark.slow
def test_a_dropped_or_refused_connection_is_retried_then_a_connection_failure():
    with AgentRFTServer() as server:
        server.drop("calculate", times=4)
        with pytest.raises(EndpointFailed) as caught:
            call(server, "calculate")
        assert caught.value.kind == "connection" and len(server.calls) == 4
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    endpoint = Resolved(f"http://127.0.0.1:{port}/tools", {}, Secrets())

    async def go() -> Any:
        async with new_client() as client:
            return await post(client, endpoint, b"{}", base_s=0.001)

    with pytest.raises(EndpointFailed) as refused:
        asyncio.run(go())
    assert refused.value.kind == "connection" and "ConnectError" in str(refused.value)


@pytest.mark.slow
def test_a_timeout_is_not_retried_unless_asked_and_a_429_only_when_asked():
    with AgentRFTServer() as server:
        server.delay("calculate", 1.0, times=3)
        with pytest.raises(EndpointFailed) as caught:
            call(server, "calculate", timeout_s=0.2)
        assert caught.value.kind == "timeout" and str(caught.value) == "no answer within 0.2 s"
        assert len(server.calls) == 1
        server.calls.clear()
        with pytest.raises(EndpointFailed):
            call(server, "calculate", timeout_s=0.2, retry_timeouts=True, retries=1)
        assert len(server.calls) == 2
        server.calls.clear()
        server.fail("calculate", 429, times=2)
        assert call(server, "calculate").status == 429  # a tool's 429 is its answer (shown to the model)
        assert call(server, "calculate", retry_statuses=frozenset({429})).status == 200  # a grader's is retried
        assert [c.status for c in server.calls] == [429, 429, 200]


@pytest.mark.slow
def test_an_answer_over_one_megabyte_is_not_read():
    with AgentRFTServer() as server:
        server.huge("calculate")
        answer = call(server, "calculate")
    assert answer.status == 200 and answer.over and answer.body == b""


@pytest.mark.slow
def test_a_secret_echoed_in_a_5xx_is_scrubbed_from_the_failure():
    with AgentRFTServer() as server:
        secrets = Secrets(("scripted",))
        server.fail("calculate", 503, times=4)
        with pytest.raises(EndpointFailed) as caught:
            call(server, "calculate", secrets=secrets, retries=0)
    assert "scripted" not in str(caught.value) and REDACTED in str(caught.value)


def test_the_pacer_spaces_call_starts_by_one_over_the_rate(monkeypatch: pytest.MonkeyPatch):
    clock = [100.0]
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(round(seconds, 6))

    monkeypatch.setattr(agent_rft.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(agent_rft.asyncio, "sleep", sleep)
    pace = Pacer(4.0)  # 4 a second: a start every 0.25 s

    async def starts() -> None:
        for _ in range(4):
            await pace()
        clock[0] += 2.0  # a quiet while: the next start needs no wait
        await pace()

    asyncio.run(starts())
    assert waits == [0.25, 0.5, 0.75]
    unpaced: list[float] = []
    monkeypatch.setattr(agent_rft.asyncio, "sleep", lambda s: unpaced.append(s))
    asyncio.run(Pacer(None)())
    assert unpaced == []


def test_run_sync_works_outside_and_inside_a_running_event_loop():
    async def seven() -> int:
        await asyncio.sleep(0)
        return 7

    assert run_sync(seven) == 7

    async def inside() -> int:
        return run_sync(seven)  # a trainer's loop calling a sync reward

    assert asyncio.run(inside()) == 7
