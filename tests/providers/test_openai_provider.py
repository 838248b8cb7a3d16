"""OpenAIProvider through the real openai client against FakeOpenAI: request shapes, parsing, error kinds, secrets."""

from __future__ import annotations

import asyncio
import email.utils
import json
import subprocess
import sys
from typing import Any

import pytest

from rfteval.errors import InputError
from rfteval.providers import make_provider
from rfteval.providers.base import Generation, GenerationRequest, ProviderError, Sampling
from rfteval.providers.openai_provider import OpenAIProvider, parse_retry_after, responses_input
from tests.support.fake_openai import FakeOpenAI, Reply, count_tokens

KEY_ENV = "RFTEVAL_TEST_API_KEY"
SECRET = "sk-proj-SECRETSECRET0123456789abcdef"

SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "integer"}},
    "required": ["answer"],
    "additionalProperties": False,
}
CHAT_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        "strict": True,
    },
}
MESSAGES = [{"role": "developer", "content": "Answer in JSON."}, {"role": "user", "content": "What is 6*7?"}]


@pytest.fixture(autouse=True)
def api_key(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv(KEY_ENV, SECRET)
    return SECRET


def provider(fake: FakeOpenAI, api: str = "chat", **kw: Any) -> OpenAIProvider:
    return OpenAIProvider(fake.base_url, api_key_env=KEY_ENV, api=api, **kw)  # type: ignore[arg-type]


def generate(p: OpenAIProvider, request: GenerationRequest, timeout_s: float = 10.0) -> Generation:
    async def go() -> Generation:
        try:
            return await p.generate(request, timeout_s)
        finally:
            await p.aclose()

    return asyncio.run(go())


def error_of(p: OpenAIProvider, request: GenerationRequest, timeout_s: float = 10.0) -> ProviderError:
    with pytest.raises(ProviderError) as info:
        generate(p, request, timeout_s)
    return info.value


def req(**kw: Any) -> GenerationRequest:
    kw.setdefault("model", "fake-base")
    kw.setdefault("messages", MESSAGES)
    return GenerationRequest(**kw)


FULL_SAMPLING = Sampling(
    temperature=0.5,
    top_p=0.9,
    seed=7,
    reasoning_effort="medium",
    max_output_tokens=256,
    response_format={"name": "answer", "schema": SCHEMA, "strict": True},
)


# ---- request shapes, as the server received them -----------------------------------------------------------------


def test_chat_request_shape(fake_openai: FakeOpenAI) -> None:
    p = provider(fake_openai)
    request = req(sampling=FULL_SAMPLING, tools=[CHAT_TOOL])
    generate(p, request)
    (got,) = fake_openai.requests
    assert got.path == "/v1/chat/completions"
    assert got.body == {
        "model": "fake-base",
        "messages": MESSAGES,
        "tools": [CHAT_TOOL],
        "tool_choice": "auto",  # said whenever tools are given: llama.cpp's function calling needs it
        "response_format": {"type": "json_schema", "json_schema": {"name": "answer", "schema": SCHEMA, "strict": True}},
        "reasoning_effort": "medium",
        "max_completion_tokens": 256,
        "max_tokens": 256,  # not OpenAI's endpoint: the limit under both names
        "temperature": 0.5,
        "top_p": 0.9,
        "seed": 7,
    }
    assert got.body == p.request_body(request)  # the cache key is exactly what was sent


def test_chat_minimal_request_sends_only_what_is_set(fake_openai: FakeOpenAI) -> None:
    p = provider(fake_openai)
    generate(p, req())
    assert fake_openai.requests[0].body == {"model": "fake-base", "messages": MESSAGES}


def test_responses_request_shape(fake_openai: FakeOpenAI) -> None:
    p = provider(fake_openai, api="responses")
    request = req(sampling=FULL_SAMPLING, tools=[CHAT_TOOL])
    generate(p, request)
    (got,) = fake_openai.requests
    assert got.path == "/v1/responses"
    assert got.body == {
        "model": "fake-base",
        "input": MESSAGES,  # system/developer messages stay in input
        "tools": [
            {
                "type": "function",
                "name": "get_weather",
                "description": "Weather for a city",
                "parameters": CHAT_TOOL["function"]["parameters"],
                "strict": True,
            }
        ],
        "tool_choice": "auto",
        "text": {"format": {"type": "json_schema", "name": "answer", "schema": SCHEMA, "strict": True}},
        "reasoning": {"effort": "medium"},
        "max_output_tokens": 256,
        "temperature": 0.5,
        "top_p": 0.9,
        "store": False,
    }
    assert got.body == p.request_body(request)


def test_wrapped_response_format_is_accepted(fake_openai: FakeOpenAI) -> None:
    wrapped = {"type": "json_schema", "json_schema": {"name": "x", "schema": SCHEMA}}
    body = provider(fake_openai).request_body(req(sampling=Sampling(response_format=wrapped)))
    assert body["response_format"] == {"type": "json_schema", "json_schema": {"name": "x", "schema": SCHEMA}}


def test_request_body_is_deterministic_and_a_copy(fake_openai: FakeOpenAI) -> None:
    p = provider(fake_openai, api="responses")
    request = req(sampling=FULL_SAMPLING, tools=[CHAT_TOOL])
    a, b = p.request_body(request), p.request_body(request)
    assert json.dumps(a) == json.dumps(b)
    a["input"][0]["content"] = "changed"
    a["tools"][0]["parameters"]["x"] = 1
    assert request.messages[0]["content"] == "Answer in JSON." and "x" not in CHAT_TOOL["function"]["parameters"]


def test_responses_input_converts_tool_turns() -> None:
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "weather?"}]},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "w", "arguments": '{"c":"P"}'}}],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
        {"role": "assistant", "content": [{"type": "text", "text": "It is sunny."}]},
    ]
    assert responses_input(messages) == [
        {"role": "user", "content": [{"type": "input_text", "text": "weather?"}]},
        {"type": "function_call", "call_id": "call_1", "name": "w", "arguments": '{"c":"P"}'},
        {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
        {"role": "assistant", "content": [{"type": "output_text", "text": "It is sunny."}]},
    ]


def test_responses_accepts_converted_tool_turns(fake_openai: FakeOpenAI) -> None:
    messages = [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "w", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
        {"role": "user", "content": "so?"},
    ]
    gen = generate(provider(fake_openai, api="responses"), req(messages=messages))
    assert gen.output_text == "echo:fake-base:so?"


# ---- parsing: text, usage, tools, json ---------------------------------------------------------------------------


def test_chat_generation_and_usage(fake_openai: FakeOpenAI) -> None:
    gen = generate(provider(fake_openai), req(sampling=Sampling(reasoning_effort="low")))
    text = "echo:fake-base:What is 6*7?"
    assert gen.output_text == text
    assert gen.output_tools == [] and gen.output_json is None and gen.finish_reason == "stop"
    assert gen.usage == {
        "input_tokens": count_tokens("Answer in JSON.") + count_tokens("What is 6*7?"),
        "output_tokens": count_tokens(text) + 8,
        "reasoning_tokens": 8,
    }
    assert gen.usage["input_tokens"] == 4 + 6
    assert gen.choices == [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}]


def test_responses_generation_and_usage(fake_openai: FakeOpenAI) -> None:
    gen = generate(provider(fake_openai, api="responses"), req(sampling=Sampling(reasoning_effort="high")))
    text = "echo:fake-base:What is 6*7?"
    assert gen.output_text == text and gen.finish_reason == "stop" and gen.choices is None
    assert gen.usage == {"input_tokens": 10, "output_tokens": count_tokens(text) + 128, "reasoning_tokens": 128}


def test_usage_passed_through_as_reported(fake_openai: FakeOpenAI) -> None:
    fake_openai.queue(Reply(text="x", usage={"input_tokens": 11, "output_tokens": 22, "reasoning_tokens": 5}))
    gen = generate(provider(fake_openai), req())
    assert gen.usage == {"input_tokens": 11, "output_tokens": 22, "reasoning_tokens": 5}


@pytest.mark.parametrize("api", ["chat", "responses"])
def test_structured_output_parsed(fake_openai: FakeOpenAI, api: str) -> None:
    fake_openai.queue(Reply(text='{"answer": 42}'))
    gen = generate(provider(fake_openai, api=api), req(sampling=FULL_SAMPLING))
    assert gen.output_json == {"answer": 42} and gen.output_text == '{"answer": 42}'


def test_json_text_parsed_without_response_format(fake_openai: FakeOpenAI) -> None:
    fake_openai.queue(Reply(text=' [1, 2] '))
    assert generate(provider(fake_openai), req()).output_json == [1, 2]


@pytest.mark.parametrize("api", ["chat", "responses"])
def test_tool_calls_mapped_to_chat_style(fake_openai: FakeOpenAI, api: str) -> None:
    calls = [
        {"id": "call_a", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
        {"id": "call_b", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Rome"}'}},
    ]
    fake_openai.queue(Reply(tool_calls=calls))
    gen = generate(provider(fake_openai, api=api), req(tools=[CHAT_TOOL]))
    assert gen.output_tools == calls
    assert gen.output_text == "" and gen.finish_reason == "tool_calls"


def test_responses_length_finish(fake_openai: FakeOpenAI) -> None:
    fake_openai.queue(Reply(text="trunc", finish_reason="length"))
    gen = generate(provider(fake_openai, api="responses"), req())
    assert gen.finish_reason == "length" and gen.output_text == "trunc"


# ---- error kinds ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("api", ["chat", "responses"])
def test_rate_limit_with_retry_after_seconds(fake_openai: FakeOpenAI, api: str) -> None:
    fake_openai.queue(Reply(status=429, headers={"Retry-After": "3"}))
    err = error_of(provider(fake_openai, api=api), req())
    assert (err.kind, err.status, err.retry_after, err.retryable, err.fatal) == ("rate_limit", 429, 3.0, True, False)
    assert "Rate limit reached" in str(err)


def test_rate_limit_retry_after_ms_wins(fake_openai: FakeOpenAI) -> None:
    fake_openai.queue(Reply(status=429, headers={"retry-after-ms": "1500", "Retry-After": "9"}))
    assert error_of(provider(fake_openai), req()).retry_after == 1.5


def test_rate_limit_retry_after_http_date(fake_openai: FakeOpenAI) -> None:
    fake_openai.queue(Reply(status=429, headers={"Retry-After": "Wed, 21 Oct 2099 07:28:00 GMT"}))
    err = error_of(provider(fake_openai), req())
    assert err.kind == "rate_limit" and err.retry_after is not None and err.retry_after > 365 * 86400


def test_rate_limit_without_header(fake_openai: FakeOpenAI) -> None:
    fake_openai.queue(Reply(status=429))
    err = error_of(provider(fake_openai), req())
    assert err.kind == "rate_limit" and err.retry_after is None


def test_parse_retry_after() -> None:
    now = 1_700_000_000.0
    date = email.utils.formatdate(now + 30, usegmt=True)
    assert parse_retry_after({"retry-after": date}, now) == 30.0
    assert parse_retry_after({"retry-after": email.utils.formatdate(now - 30, usegmt=True)}, now) == 0.0
    assert parse_retry_after({"retry-after": "2.5"}, now) == 2.5
    assert parse_retry_after({"retry-after-ms": "250"}, now) == 0.25
    assert parse_retry_after({"retry-after": "soon"}, now) is None
    assert parse_retry_after({"retry-after": "-4"}, now) is None
    assert parse_retry_after({}, now) is None


@pytest.mark.parametrize(
    ("status", "kind"),
    [(500, "server"), (502, "server"), (503, "server"), (400, "bad_request"), (422, "bad_request"),
     (401, "auth"), (403, "auth"), (404, "not_found"), (409, "server")],
)
def test_status_kinds(fake_openai: FakeOpenAI, status: int, kind: str) -> None:
    fake_openai.queue(Reply(status=status))
    err = error_of(provider(fake_openai), req())
    assert (err.kind, err.status) == (kind, status)
    assert err.retryable == (kind == "server")
    assert err.fatal == (kind in ("auth", "not_found"))


def test_unknown_model_is_not_found(fake_openai: FakeOpenAI) -> None:
    fake_openai.models = ["fake-base"]
    err = error_of(provider(fake_openai, api="responses"), req(model="gpt-nope"))
    assert err.kind == "not_found" and err.fatal
    assert "The model `gpt-nope` does not exist" in str(err) and "model_not_found" in str(err)


def test_wrong_key_is_auth_and_never_leaks(fake_openai: FakeOpenAI) -> None:
    fake_openai.api_key = "sk-the-right-one-000000"
    err = error_of(provider(fake_openai), req())
    assert err.kind == "auth" and err.status == 401 and err.fatal
    assert "Incorrect API key provided" in str(err)
    assert SECRET not in str(err) and SECRET not in repr(err)


def test_key_echoed_in_an_error_message_is_scrubbed(fake_openai: FakeOpenAI) -> None:
    fake_openai.queue(Reply.error(400, f"bad key {SECRET} in request"))
    err = error_of(provider(fake_openai), req())
    assert err.kind == "bad_request"
    assert SECRET not in str(err) and "bad key *** in request" in str(err)


def test_a_fastapi_detail_is_the_message(fake_openai: FakeOpenAI) -> None:
    """A server built on FastAPI answers `{"detail": "..."}` (transformers serve, for a prompt past its context):
    the detail is the error's message, not the bare "Error code: 400"."""
    detail = "The prompt has 9012 tokens, but the model takes at most 8192, prompt and answer (`--max-model-len`)."
    fake_openai.queue(Reply(status=400, raw_body=json.dumps({"detail": detail}).encode()))
    err = error_of(provider(fake_openai), req())
    assert err.kind == "bad_request" and err.status == 400 and str(err) == f"HTTP 400: {detail}"


@pytest.mark.slow
def test_hang_past_timeout(fake_openai: FakeOpenAI) -> None:
    fake_openai.queue(Reply(delay_s=60))
    err = error_of(provider(fake_openai), req(), timeout_s=0.3)
    assert err.kind == "timeout" and err.retryable and err.status is None


def test_connection_refused() -> None:
    closed = FakeOpenAI().start()
    closed.stop()  # nothing listens on that port any more
    err = error_of(OpenAIProvider(closed.base_url, api_key_env=KEY_ENV), req(), timeout_s=5)
    assert err.kind == "connection" and err.retryable


@pytest.mark.parametrize(
    ("raw", "api"),
    [
        (b"{not json", "chat"),
        (b"{not json", "responses"),
        (b'{"id": "chatcmpl-1", "object": "chat.completion"}', "chat"),  # no choices
        (b'{"id": "c", "choices": []}', "chat"),
        (b'{"id": "resp_1", "object": "response"}', "responses"),  # no output
        (b"[1, 2, 3]", "chat"),
        (b"", "chat"),
    ],
)
def test_malformed_bodies(fake_openai: FakeOpenAI, raw: bytes, api: str) -> None:
    fake_openai.queue(Reply(raw_body=raw))
    err = error_of(provider(fake_openai, api=api), req())
    assert err.kind == "malformed" and err.retryable


@pytest.mark.parametrize("api", ["chat", "responses"])
def test_refusal(fake_openai: FakeOpenAI, api: str) -> None:
    fake_openai.queue(Reply(refusal="I'm sorry, I can't help with that."))
    err = error_of(provider(fake_openai, api=api), req(sampling=FULL_SAMPLING))
    assert err.kind == "refusal" and not err.retryable and not err.fatal
    assert str(err) == "I'm sorry, I can't help with that."


# ---- keys, identity, headers ------------------------------------------------------------------------------------


def test_key_sent_but_never_in_identity_body_or_repr(fake_openai: FakeOpenAI) -> None:
    p = provider(fake_openai, extra_headers={"X-Team": "evals"})
    request = req(sampling=FULL_SAMPLING)
    generate(p, request)
    assert fake_openai.requests[0].headers["authorization"] == f"Bearer {SECRET}"
    assert fake_openai.requests[0].headers["x-team"] == "evals"
    assert p.identity() == {"provider": "openai", "base_url": fake_openai.base_url, "api": "chat", "extra_headers": ["X-Team"]}
    for text in (json.dumps(p.identity()), json.dumps(p.request_body(request)), repr(p), str(vars(p).get("base_url"))):
        assert SECRET not in text


def test_missing_key_for_local_server_uses_placeholder(fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(KEY_ENV)
    gen = generate(provider(fake_openai), req())
    assert gen.output_text.startswith("echo:")
    assert fake_openai.requests[0].headers["authorization"] == "Bearer unused"


@pytest.mark.parametrize("base_url", [None, "https://api.openai.com/v1"])
def test_missing_key_for_openai_is_input_error(monkeypatch: pytest.MonkeyPatch, base_url: str | None) -> None:
    monkeypatch.delenv(KEY_ENV)
    with pytest.raises(InputError) as info:
        OpenAIProvider(base_url, api_key_env=KEY_ENV)
    assert KEY_ENV in str(info.value) and info.value.field == "api_key_env"


def test_identity_defaults_to_openai(monkeypatch: pytest.MonkeyPatch) -> None:
    p = OpenAIProvider(None, api_key_env=KEY_ENV, api="responses")
    assert p.identity() == {"provider": "openai", "base_url": "https://api.openai.com/v1", "api": "responses"}
    asyncio.run(p.aclose())


def test_bad_api_name() -> None:
    with pytest.raises(InputError):
        OpenAIProvider("http://127.0.0.1:9/v1", api="completions")  # type: ignore[arg-type]


@pytest.mark.slow
def test_concurrent_requests_share_one_client(fake_openai: FakeOpenAI) -> None:
    p = provider(fake_openai)

    async def go() -> list[str]:
        try:
            gens = await asyncio.gather(
                *(p.generate(req(messages=[{"role": "user", "content": f"q{i}"}], item_id=str(i)), 10) for i in range(20))
            )
            return [g.output_text for g in gens]
        finally:
            await p.aclose()

    assert asyncio.run(go()) == [f"echo:fake-base:q{i}" for i in range(20)]
    assert sorted(r.user_text() for r in fake_openai.requests) == sorted(f"q{i}" for i in range(20))


# ---- make_provider ----------------------------------------------------------------------------------------------


def test_make_provider_openai(fake_openai: FakeOpenAI) -> None:
    p = make_provider("openai", base_url=fake_openai.base_url, api_key_env=KEY_ENV, api="responses")
    assert isinstance(p, OpenAIProvider) and p.identity()["api"] == "responses"
    asyncio.run(p.aclose())


def test_make_provider_rejects_unknowns() -> None:
    with pytest.raises(InputError, match="unknown provider 'vertex'"):
        make_provider("vertex")
    with pytest.raises(InputError, match="unknown setting.*base_ulr"):
        make_provider("openai", base_ulr="http://127.0.0.1:1/v1")


def test_package_import_stays_light() -> None:
    code = "import sys, rfteval.providers; print('openai' in sys.modules, 'rfteval.providers.openai_provider' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


# ---- issue 15: transports, rate-limit headers, service tier --------------------------------------------------------


@pytest.mark.parametrize("text,seconds", [("1s", 1.0), ("6m0s", 360.0), ("200ms", 0.2), ("1h2m3.5s", 3723.5),
                                          ("0.5", 0.5), ("", None), (None, None), ("soon", None), ("5x", None)])
def test_parse_duration(text: str | None, seconds: float | None) -> None:
    from rfteval.providers.openai_provider import parse_duration

    assert parse_duration(text) == (pytest.approx(seconds) if seconds is not None else None)


@pytest.mark.parametrize("transport", ["aiohttp", "httpx"])
def test_both_transports_answer_alike_and_carry_rate_headers(fake_openai: FakeOpenAI, transport: str) -> None:
    fake_openai.queue(Reply(text="hi", headers={"x-ratelimit-limit-requests": "500",
                                                "x-ratelimit-remaining-requests": "20",
                                                "x-ratelimit-reset-requests": "6m0s",
                                                "x-ratelimit-limit-tokens": "10000",
                                                "x-ratelimit-remaining-tokens": "9000"}))
    p = provider(fake_openai, transport=transport)
    assert p.transport == transport
    gen = generate(p, req())
    assert gen.output_text == "hi" and gen.rate is not None
    assert (gen.rate.limit_requests, gen.rate.remaining_requests, gen.rate.reset_requests_s) == (500, 20, 360.0)
    assert gen.rate.low(0.1) is True and gen.rate.low(0.01) is False
    # a server that sends no x-ratelimit-* headers
    assert generate(provider(fake_openai, transport=transport), req()).rate is None


def test_429_carries_its_rate_headers_and_retry_after(fake_openai: FakeOpenAI) -> None:
    fake_openai.queue(Reply.error(429, headers={"retry-after-ms": "250", "x-ratelimit-remaining-requests": "0",
                                                "x-ratelimit-limit-requests": "60",
                                                "x-ratelimit-reset-requests": "2s"}))
    err = error_of(provider(fake_openai), req())
    assert err.kind == "rate_limit" and err.retry_after == pytest.approx(0.25) and not err.unavailable
    assert err.rate is not None and err.rate.exhausted_wait() == pytest.approx(2.0)


def test_service_tier_is_sent_but_not_part_of_the_cache_key(fake_openai: FakeOpenAI) -> None:
    flex = provider(fake_openai, service_tier="flex")
    plain = provider(fake_openai)
    assert flex.request_body(req()) == plain.request_body(req()) and flex.identity() == plain.identity()
    gen = generate(flex, req())
    assert fake_openai.requests[-1].body["service_tier"] == "flex" and gen.tier == "flex"


def test_flex_resource_unavailable_is_its_own_429(fake_openai: FakeOpenAI) -> None:
    fake_openai.flex_unavailable = 1
    err = error_of(provider(fake_openai, service_tier="flex"), req())
    assert err.kind == "rate_limit" and err.unavailable


def test_bad_service_tier_and_transport_are_input_errors() -> None:
    with pytest.raises(InputError, match="service tier"):
        OpenAIProvider("http://127.0.0.1:9/v1", api_key_env=KEY_ENV, service_tier="cheap")
    with pytest.raises(InputError, match="transport"):
        OpenAIProvider("http://127.0.0.1:9/v1", api_key_env=KEY_ENV, transport="curl")


def test_every_client_shares_one_verifying_tls_context() -> None:
    """Building a TLS context loads the CA bundle: once per process, not once per client; and it still verifies."""
    import ssl

    from rfteval.providers.openai_provider import shared_tls_context

    ctx = shared_tls_context()
    assert ctx is shared_tls_context()
    assert ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname
