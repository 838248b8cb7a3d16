"""What self-hosted OpenAI-compatible servers need from OpenAIProvider, through the real openai client against
FakeOpenAI: response formats as given, the output limit under both names (and the one a server refuses dropped),
tool_choice, lenient output_json, connection errors named, and the preflight's probes."""

from __future__ import annotations

import asyncio
import socket
import ssl
import struct
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from rfteval.providers.base import Generation, GenerationRequest, ProviderError, Sampling
from rfteval.providers.openai_provider import (
    OpenAIProvider,
    chat_body,
    connection_failure,
    responses_body,
    unsupported_key,
)
from tests.support.fake_openai import FakeOpenAI, Reply

KEY_ENV = "RFTEVAL_TEST_API_KEY"
MESSAGES = [{"role": "user", "content": "Where is the Eiffel tower?"}]
TOOL = {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object", "properties": {}}}}


@pytest.fixture(autouse=True)
def api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, "sk-test-0123456789")


def provider(base_url: str, api: str = "chat", **kw: Any) -> OpenAIProvider:
    return OpenAIProvider(base_url, api_key_env=KEY_ENV, api=api, **kw)  # type: ignore[arg-type]


def generate_all(p: OpenAIProvider, requests: list[GenerationRequest], timeout_s: float = 10.0) -> list[Any]:
    """Each request in turn on one provider (its sticky state carries over); a ProviderError is returned."""
    async def go() -> list[Any]:
        out: list[Any] = []
        try:
            for r in requests:
                try:
                    out.append(await p.generate(r, timeout_s))
                except ProviderError as exc:
                    out.append(exc)
        finally:
            await p.aclose()
        return out

    return asyncio.run(go())


def generate(p: OpenAIProvider, request: GenerationRequest, timeout_s: float = 10.0) -> Generation:
    (got,) = generate_all(p, [request], timeout_s)
    if isinstance(got, ProviderError):
        raise got
    return got


def req(**kw: Any) -> GenerationRequest:
    kw.setdefault("model", "fake-base")
    kw.setdefault("messages", MESSAGES)
    return GenerationRequest(**kw)


# ---- response formats, as the user gave them ------------------------------------------------------------------


JSON_MODE = {"type": "json_object", "schema": {"type": "object", "properties": {"city": {"type": "string"}}}}


@pytest.mark.parametrize("api", ["chat", "responses"])
@pytest.mark.parametrize("fmt", [JSON_MODE, {"type": "json_object"}, {"type": "text"}])
def test_json_object_and_text_reach_the_server_as_given(fake_openai: FakeOpenAI, api: str,
                                                        fmt: dict[str, Any]) -> None:
    generate(provider(fake_openai.base_url, api), req(sampling=Sampling(response_format=fmt)))
    (got,) = fake_openai.requests
    sent = got.body["response_format"] if api == "chat" else got.body["text"]["format"]
    assert sent == fmt  # extra keys (llama.cpp's `schema`) included, and no json_schema in sight


def test_json_schema_stays_structured_outputs() -> None:
    wrapper = {"name": "city", "schema": {"type": "object"}, "strict": True}
    body = chat_body(req(sampling=Sampling(response_format=wrapper)))
    assert body["response_format"] == {"type": "json_schema", "json_schema": wrapper}
    assert responses_body(req(sampling=Sampling(response_format=wrapper)))["text"]["format"] == {
        "type": "json_schema", **wrapper}


RAW_NEWLINE_JSON = '{"city": "Paris\nFrance", "n": 1}'  # a raw newline inside a string: not strict JSON


@pytest.mark.parametrize("api", ["chat", "responses"])
@pytest.mark.parametrize(("fmt", "expected"), [
    ({"type": "json_object"}, {"city": "Paris\nFrance", "n": 1}),
    ({"name": "r", "schema": {"type": "object"}, "strict": True}, {"city": "Paris\nFrance", "n": 1}),
    ({"type": "text"}, None),  # did not ask for JSON: the strict parse, which refuses it
    (None, None),
])
def test_output_json_lenient_only_where_json_was_asked_for(fake_openai: FakeOpenAI, api: str,
                                                           fmt: dict[str, Any] | None, expected: Any) -> None:
    fake_openai.queue(Reply(text=RAW_NEWLINE_JSON))
    gen = generate(provider(fake_openai.base_url, api), req(sampling=Sampling(response_format=fmt)))
    assert gen.output_json == expected


def test_strict_json_is_parsed_whatever_the_format(fake_openai: FakeOpenAI) -> None:
    fake_openai.queue(Reply(text='{"a": [1, 2]}'), Reply(text='"just a string"'))
    p = provider(fake_openai.base_url)
    a, b = generate_all(p, [req(), req(sampling=Sampling(response_format={"type": "json_object"}))])
    assert a.output_json == {"a": [1, 2]}
    assert b.output_json == "just a string"  # JSON was asked for: any JSON value


# ---- the output limit -----------------------------------------------------------------------------------------


def test_output_limit_under_both_names_except_at_openai(monkeypatch: pytest.MonkeyPatch) -> None:
    limited = req(sampling=Sampling(max_output_tokens=32))
    local = provider("http://127.0.0.1:9/v1").request_body(limited)
    assert local["max_completion_tokens"] == 32 and local["max_tokens"] == 32
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-0123456789")
    at_openai = OpenAIProvider(None).request_body(limited)  # built, never called
    assert at_openai["max_completion_tokens"] == 32 and "max_tokens" not in at_openai
    assert "max_tokens" not in provider("http://127.0.0.1:9/v1", "responses").request_body(limited)


@pytest.mark.parametrize("refused", ["max_tokens", "max_completion_tokens"])
def test_a_refused_limit_key_is_dropped_for_the_rest_of_the_run(fake_openai: FakeOpenAI, refused: str) -> None:
    fake_openai.unsupported_keys = {refused}
    p = provider(fake_openai.base_url)
    limited = req(sampling=Sampling(max_output_tokens=16))
    results = generate_all(p, [limited, limited, limited])
    assert all(isinstance(r, Generation) for r in results)  # the first one too: sent again without the key
    kept = next(k for k in ("max_tokens", "max_completion_tokens") if k != refused)
    bodies = [r.body for r in fake_openai.requests]  # the refused attempt is not recorded by the fake
    assert len(bodies) == 3 and all(refused not in b and b[kept] == 16 for b in bodies)
    assert p.dropped_keys == {refused}
    assert refused in p.request_body(limited)  # the cache key does not depend on what the server refused


def test_a_server_refusing_both_keys_is_a_bad_request_not_a_loop(fake_openai: FakeOpenAI) -> None:
    fake_openai.unsupported_keys = {"max_tokens", "max_completion_tokens"}
    (err,) = generate_all(provider(fake_openai.base_url), [req(sampling=Sampling(max_output_tokens=16))])
    assert isinstance(err, ProviderError) and err.kind == "bad_request" and "Unsupported parameter" in str(err)


def test_a_bad_value_is_not_an_unsupported_key(fake_openai: FakeOpenAI) -> None:
    fake_openai.queue(Reply.error(400, "max_tokens must be at least 1, got 0"))
    p = provider(fake_openai.base_url)
    (err,) = generate_all(p, [req(sampling=Sampling(max_output_tokens=16))])
    assert isinstance(err, ProviderError) and err.kind == "bad_request" and p.dropped_keys == set()


@pytest.mark.parametrize(("message", "key"), [
    ("Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead.",
     "max_tokens"),
    ("[{'type': 'extra_forbidden', 'loc': ('body', 'max_completion_tokens'), 'msg': 'Extra inputs are not "
     "permitted'}]", "max_completion_tokens"),
    ("Unrecognized request argument supplied: max_completion_tokens", "max_completion_tokens"),
    ("max_tokens must be at least 1", None),
    ("Unsupported parameter: 'logprobs'", None),
])
def test_unsupported_key_names_the_refused_one(message: str, key: str | None) -> None:
    assert unsupported_key(message, ("max_completion_tokens", "max_tokens")) == key


def test_an_ignored_limit_is_reported_once_per_model(fake_openai: FakeOpenAI) -> None:
    fake_openai.responder = lambda r: Reply(text="long", usage={"output_tokens": 87})
    p = provider(fake_openai.base_url)
    said: list[str] = []
    p.on_warning = said.append
    limited = Sampling(max_output_tokens=32)
    generate_all(p, [req(sampling=limited), req(sampling=limited), req(model="fake-tuned", sampling=limited),
                     req(sampling=Sampling(max_output_tokens=100))])
    assert len(said) == 2 and "fake-base" in said[0] and "fake-tuned" in said[1]
    assert "the server ignored the output limit" in said[0] and "87" in said[0] and "32" in said[0]
    assert "sent as max_completion_tokens and max_tokens" in said[0]


def test_an_honoured_limit_says_nothing(fake_openai: FakeOpenAI) -> None:
    fake_openai.responder = lambda r: Reply(text="short", usage={"output_tokens": 32})
    p = provider(fake_openai.base_url)
    said: list[str] = []
    p.on_warning = said.append
    generate_all(p, [req(sampling=Sampling(max_output_tokens=32))])
    assert said == []


# ---- tool_choice ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("api", ["chat", "responses"])
def test_tool_choice_auto_whenever_tools_are_given(fake_openai: FakeOpenAI, api: str) -> None:
    p = provider(fake_openai.base_url, api)
    generate_all(p, [req(tools=[TOOL]), req()])
    with_tools, without = fake_openai.requests
    assert with_tools.body["tool_choice"] == "auto" and "tool_choice" not in without.body


@pytest.mark.parametrize("choice", [
    {"type": "function", "function": {"name": "lookup"}},  # chat's shape
    {"type": "function", "name": "lookup"},  # Responses' shape
])
def test_an_items_named_tool_choice_in_each_apis_shape(fake_openai: FakeOpenAI, choice: dict[str, Any]) -> None:
    generate_all(provider(fake_openai.base_url), [req(tools=[TOOL], tool_choice=choice)])
    generate_all(provider(fake_openai.base_url, "responses"), [req(tools=[TOOL], tool_choice=choice)])
    chat, responses = fake_openai.requests
    assert chat.body["tool_choice"] == {"type": "function", "function": {"name": "lookup"}}
    assert responses.body["tool_choice"] == {"type": "function", "name": "lookup"}


def test_an_items_required_tool_choice_is_sent() -> None:
    assert chat_body(req(tools=[TOOL], tool_choice="required"))["tool_choice"] == "required"
    assert responses_body(req(tools=[TOOL], tool_choice="none"))["tool_choice"] == "none"


def test_a_tool_that_is_no_object_goes_as_the_item_gave_it() -> None:
    """validate_row checks that `tools` is a list, not what it holds: a non-object entry is sent as given (the
    server answers for it, a 400 recorded on the cell) rather than failing in the body's building."""
    assert chat_body(req(tools=[TOOL, "lookup"]))["tools"][1] == "lookup"
    assert responses_body(req(tools=["lookup"]))["tools"] == ["lookup"]


# ---- connection errors, named ---------------------------------------------------------------------------------


def _error(base_url: str, transport: str) -> ProviderError:
    (err,) = generate_all(provider(base_url, transport=transport), [req()], timeout_s=5)
    assert isinstance(err, ProviderError)
    return err


@pytest.fixture
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def resetting_server() -> Iterator[str]:
    """Accepts each connection, reads the request, and closes it with a TCP reset (SO_LINGER 0)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    stop = threading.Event()

    def serve() -> None:
        srv.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except (TimeoutError, OSError):
                continue
            conn.settimeout(2)
            try:
                conn.recv(65536)
            except OSError:
                pass
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{srv.getsockname()[1]}/v1"
    stop.set()
    thread.join(timeout=2)
    srv.close()


@pytest.mark.parametrize("transport", ["aiohttp", "httpx"])
def test_a_refused_connection_is_named_refused(free_port: int, transport: str) -> None:
    err = _error(f"http://127.0.0.1:{free_port}/v1", transport)
    assert err.kind == "connection" and "connection refused" in str(err) and "Timeout" not in str(err)


@pytest.mark.parametrize("transport", ["aiohttp", "httpx"])
def test_a_reset_connection_is_named(resetting_server: str, transport: str) -> None:
    err = _error(resetting_server, transport)
    assert err.kind == "connection"
    assert "connection reset" in str(err) or "closed the connection" in str(err)


@pytest.mark.parametrize("transport", ["aiohttp", "httpx"])
def test_tls_to_a_plain_http_server_is_named_tls(fake_openai: FakeOpenAI, transport: str) -> None:
    err = _error(fake_openai.base_url.replace("http://", "https://"), transport)
    assert err.kind == "connection" and "TLS error" in str(err)


def _wrapped(inner: BaseException) -> Exception:
    """An SDK-style wrapper whose cause is a transport wrapper whose cause is `inner`."""
    transport = RuntimeError("transport failed")
    transport.__cause__ = inner
    outer = Exception("Connection error.")
    outer.__cause__ = transport
    return outer


@pytest.mark.parametrize(("inner", "name"), [
    (socket.gaierror(-2, "Name or service not known"), "DNS lookup failed"),
    (ConnectionRefusedError(111, "Connection refused"), "connection refused"),
    (ConnectionResetError(104, "Connection reset by peer"), "connection reset"),
    (ssl.SSLCertVerificationError(1, "certificate verify failed"), "TLS error"),
    (OSError("[Errno -3] Temporary failure in name resolution"), "DNS lookup failed"),
    (TimeoutError(110, "Connection timed out"), "connect timed out"),
    (OSError(113, "No route to host"), "host unreachable"),
])
def test_connection_failure_walks_the_cause_chain(inner: BaseException, name: str) -> None:
    assert connection_failure(_wrapped(inner)).startswith(name)


def test_an_aiohttp_connector_error_names_its_os_error() -> None:
    class ClientConnectorError(Exception):  # aiohttp keeps the OSError as an attribute, not as a cause
        def __init__(self) -> None:
            super().__init__("Cannot connect to host example:443")
            self.os_error = socket.gaierror(-2, "Name or service not known")

    assert connection_failure(_wrapped(ClientConnectorError())) == "DNS lookup failed"


# ---- the preflight's probes ----------------------------------------------------------------------------------


def test_list_models_where_the_server_lists_them() -> None:
    with FakeOpenAI(models=["smol-a", "smol-b"]) as fake:
        assert provider(fake.base_url).list_models() == ["smol-a", "smol-b"]


def test_list_models_is_none_where_the_server_lists_nothing(fake_openai: FakeOpenAI, free_port: int) -> None:
    assert provider(fake_openai.base_url).list_models() is None  # models=None: GET /v1/models is a 404
    assert provider(f"http://127.0.0.1:{free_port}/v1").list_models() is None  # nothing listens


@pytest.mark.slow
def test_list_models_gives_up_after_its_timeout() -> None:
    silent = socket.socket()  # accepts connections (the backlog) and never answers
    silent.bind(("127.0.0.1", 0))
    silent.listen(4)
    try:
        assert provider(f"http://127.0.0.1:{silent.getsockname()[1]}/v1").list_models(timeout_s=0.3) is None
    finally:
        silent.close()


def test_missing_apis_are_named_with_their_route(fake_openai: FakeOpenAI) -> None:
    p = provider(fake_openai.base_url)
    assert p.missing_api("batch") is None and p.missing_api("responses") is None
    assert fake_openai.requests == []  # the Responses probe generated nothing
    fake_openai.no_batches = fake_openai.no_responses = True
    assert p.missing_api("batch") == "GET /v1/batches: HTTP 404"
    assert p.missing_api("responses") == "POST /v1/responses: HTTP 404"


def test_answer_values_of_the_wrong_json_type_read_as_absent() -> None:
    """Answers are narrowed, not trusted: a tool_calls that is not a list, a finish_reason or token count
    that is not what the API documents, read as absent (they raised AttributeError, or went into the record)."""
    from rfteval.providers.openai_provider import parse_chat, parse_responses

    gen = parse_chat({"choices": [{"message": {"role": "assistant", "content": "hi", "tool_calls": "nope"},
                                   "finish_reason": 7}, "not a choice"],
                      "usage": {"prompt_tokens": "12", "completion_tokens": 3, "completion_tokens_details": []}})
    assert (gen.output_text, gen.output_tools, gen.finish_reason) == ("hi", [], None)
    assert gen.usage == {"input_tokens": None, "output_tokens": 3, "reasoning_tokens": None}
    assert gen.choices == [{"message": {"role": "assistant", "content": "hi", "tool_calls": "nope"},
                            "finish_reason": 7}]
    gen = parse_responses({"output": [{"type": "message", "content": "text, not parts"},
                                      {"type": "message", "content": [{"type": "output_text", "text": 5}]},
                                      {"type": "reasoning", "summary": [{"type": "summary_text", "text": None}]}],
                           "usage": [], "incomplete_details": "?"})
    assert (gen.output_text, gen.reasoning, gen.finish_reason) == ("", "", "stop")
    assert gen.usage == {"input_tokens": None, "output_tokens": None, "reasoning_tokens": None}


# ---- an agent's history: content null beside tool calls (llama-cpp-python refuses it) ------------------------------


CALLED = {"role": "assistant", "content": None,
          "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "add", "arguments": "{}"}}]}
HISTORY = [{"role": "user", "content": "add"}, CALLED, {"role": "tool", "tool_call_id": "c1", "content": "2"}]


def test_null_content_beside_tool_calls_steps_down_to_empty_once_and_says_so(fake_openai: FakeOpenAI) -> None:
    fake_openai.refuse_null_tool_content = True
    p = provider(fake_openai.base_url)
    said: list[str] = []
    p.on_warning = said.append
    turn = req(messages=HISTORY)
    results = generate_all(p, [turn, turn, req()])
    assert all(isinstance(r, Generation) for r in results)  # the first one too: sent again with ""
    assert fake_openai.stats["invalid"] == 1  # one refused request in all: the step-down is remembered
    sent = [r.body["messages"] for r in fake_openai.requests]
    assert sent[0][1]["content"] == "" and sent[1][1]["content"] == "" and sent[0][1]["tool_calls"]
    assert sent[0][2] == HISTORY[2] and sent[2] == MESSAGES  # nothing else changed
    assert len(said) == 1 and "refuses an assistant message whose content is null beside its tool_calls" in said[0]
    assert "messages[1].content: Input should be a valid string" in said[0]  # the server's reason, in one line
    assert p.request_body(turn)["messages"][1]["content"] is None  # the cache key keeps null
    assert HISTORY[1]["content"] is None  # the request's own messages are never changed


def test_providers_of_one_endpoint_step_down_together(fake_openai: FakeOpenAI) -> None:
    """A run's base and tuned labels on one llama.cpp server (two providers): one refused request and one line for
    the endpoint, not one per label (said twice, alike, before they shared it); another endpoint learns its own."""
    from rfteval.providers.openai_provider import share_endpoint_state

    fake_openai.refuse_null_tool_content = True
    base, tuned, elsewhere = (provider(fake_openai.base_url), provider(fake_openai.base_url + "/"),
                              provider(fake_openai.base_url.replace("/v1", "/v2")))
    share_endpoint_state([base, tuned, elsewhere, object()])
    said: list[str] = []
    base.on_warning = tuned.on_warning = said.append
    generate(base, req(messages=HISTORY))
    generate(tuned, req(messages=HISTORY, model="fake-tuned"))
    assert fake_openai.stats["invalid"] == 1 and len(said) == 1
    assert [r.body["messages"][1]["content"] for r in fake_openai.requests] == ["", ""]  # answered, both ""
    assert tuned.empty_tool_content and not elsewhere.empty_tool_content


def test_a_server_that_takes_null_is_sent_null(fake_openai: FakeOpenAI) -> None:
    p = provider(fake_openai.base_url)
    generate(p, req(messages=HISTORY))
    assert fake_openai.requests[0].body["messages"][1]["content"] is None and not p.empty_tool_content


def test_a_refusal_of_something_else_is_no_step_down(fake_openai: FakeOpenAI) -> None:
    fake_openai.refused_roles = {"tool"}  # a schema without the tool role: "" would not help
    p = provider(fake_openai.base_url)
    (err,) = generate_all(p, [req(messages=HISTORY)])
    assert isinstance(err, ProviderError) and err.status == 500 and not p.empty_tool_content
    assert fake_openai.stats["invalid"] == 1  # not sent again
