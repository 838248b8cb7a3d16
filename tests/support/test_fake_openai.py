"""The test server itself: the real openai client must parse what it sends, and it must record what it got."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path

import openai
import pytest

from tests.support.fake_openai import FakeOpenAI, Reply, Request, count_tokens

HERE = Path(__file__).parent


def client(fake: FakeOpenAI, key: str = "sk-test-000000000000") -> openai.OpenAI:
    return openai.OpenAI(base_url=fake.base_url, api_key=key, max_retries=0, timeout=10)


def post(url: str, body: bytes) -> tuple[int, dict]:
    req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_binds_loopback_only(fake_openai: FakeOpenAI) -> None:
    assert fake_openai.base_url.startswith("http://127.0.0.1:")
    assert fake_openai.base_url.endswith("/v1")
    assert fake_openai.port > 0


def test_chat_echo_and_usage(fake_openai: FakeOpenAI) -> None:
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "first question"},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": [{"type": "text", "text": "What is 2+2?"}]},
    ]
    resp = client(fake_openai).chat.completions.create(model="fake-base", messages=messages)
    text = "echo:fake-base:What is 2+2?"
    assert resp.choices[0].message.content == text
    assert resp.choices[0].finish_reason == "stop"
    assert resp.model == "fake-base"
    # "Be brief." = 3, "first question" = 2, "ok" = 1, "What is 2+2?" = 6 tokens
    assert resp.usage.prompt_tokens == 3 + 2 + 1 + 6
    assert resp.usage.completion_tokens == 12  # echo : fake - base : What is 2 + 2 ?
    assert resp.usage.completion_tokens_details.reasoning_tokens == 0
    (req,) = fake_openai.requests
    assert req.api == "chat" and req.model == "fake-base" and req.path == "/v1/chat/completions"
    assert req.user_texts() == ["first question", "What is 2+2?"]
    assert req.body["messages"] == messages
    assert req.headers["authorization"] == "Bearer sk-test-000000000000"


def test_token_counter_is_words_and_punctuation() -> None:
    assert count_tokens("echo:fake-base:What is 2+2?") == 12
    assert count_tokens("") == 0
    assert count_tokens("hello,  world") == 3


def test_reasoning_tokens_count_in_output(fake_openai: FakeOpenAI) -> None:
    resp = client(fake_openai).chat.completions.create(
        model="m", messages=[{"role": "user", "content": "x"}], reasoning_effort="high"
    )
    assert resp.usage.completion_tokens_details.reasoning_tokens == 128
    assert resp.usage.completion_tokens == count_tokens("echo:m:x") + 128


def test_responses_echo_usage_and_shapes(fake_openai: FakeOpenAI) -> None:
    resp = client(fake_openai).responses.create(
        model="fake-tuned",
        input=[{"role": "developer", "content": "rules"},
               {"role": "user", "content": [{"type": "input_text", "text": "hi you"}]}],
        reasoning={"effort": "low"},
    )
    assert resp.output_text == "echo:fake-tuned:hi you"
    assert [item.type for item in resp.output] == ["reasoning", "message"]
    assert resp.usage.input_tokens == 1 + 2
    assert resp.usage.output_tokens_details.reasoning_tokens == 8
    assert resp.usage.output_tokens == count_tokens("echo:fake-tuned:hi you") + 8
    assert resp.status == "completed"
    (req,) = fake_openai.requests
    assert req.api == "responses" and req.user_text() == "hi you"


def test_responses_string_input(fake_openai: FakeOpenAI) -> None:
    resp = client(fake_openai).responses.create(model="m", input="plain prompt")
    assert resp.output_text == "echo:m:plain prompt"


def test_tool_calls_in_both_apis(fake_openai: FakeOpenAI) -> None:
    call = {"id": "call_7", "type": "function", "function": {"name": "lookup", "arguments": '{"q": "x"}'}}
    fake_openai.queue(Reply(tool_calls=[call]), Reply(tool_calls=[call]))
    c = client(fake_openai)
    chat = c.chat.completions.create(model="m", messages=[{"role": "user", "content": "go"}])
    assert chat.choices[0].finish_reason == "tool_calls"
    tc = chat.choices[0].message.tool_calls[0]
    assert (tc.id, tc.function.name, tc.function.arguments) == ("call_7", "lookup", '{"q": "x"}')
    resp = c.responses.create(model="m", input="go")
    (fc,) = resp.output
    assert (fc.type, fc.call_id, fc.name, fc.arguments) == ("function_call", "call_7", "lookup", '{"q": "x"}')


def test_queue_then_responder_and_string_replies(fake_openai: FakeOpenAI) -> None:
    fake_openai.responder = lambda req: f"R:{req.user_text().upper()}"
    fake_openai.queue(Reply(text="first"), Reply(text="second"))
    c = client(fake_openai)
    outs = [
        c.chat.completions.create(model="m", messages=[{"role": "user", "content": f"q{i}"}]).choices[0].message.content
        for i in range(3)
    ]
    assert outs == ["first", "second", "R:Q2"]
    assert [r.user_text() for r in fake_openai.requests] == ["q0", "q1", "q2"]


def test_n_choices(fake_openai: FakeOpenAI) -> None:
    resp = client(fake_openai).chat.completions.create(model="m", messages=[{"role": "user", "content": "a"}], n=3)
    assert [c.index for c in resp.choices] == [0, 1, 2]


def test_refusal_both_apis(fake_openai: FakeOpenAI) -> None:
    fake_openai.queue(Reply(refusal="I can't help with that."), Reply(refusal="No."))
    c = client(fake_openai)
    chat = c.chat.completions.create(model="m", messages=[{"role": "user", "content": "a"}])
    assert chat.choices[0].message.refusal == "I can't help with that." and chat.choices[0].message.content is None
    resp = c.responses.create(model="m", input="a")
    assert resp.output[0].content[0].type == "refusal" and resp.output[0].content[0].refusal == "No."


def test_error_bodies_as_openai_sends_them(fake_openai: FakeOpenAI) -> None:
    c = client(fake_openai)
    fake_openai.queue(Reply(status=429, headers={"Retry-After": "7"}), Reply(status=500), Reply.error(400, "bad field"))
    with pytest.raises(openai.RateLimitError) as rl:
        c.chat.completions.create(model="m", messages=[{"role": "user", "content": "a"}])
    assert rl.value.response.headers["retry-after"] == "7"
    assert rl.value.code == "rate_limit_exceeded" and rl.value.type == "requests"
    with pytest.raises(openai.InternalServerError) as se:
        c.chat.completions.create(model="m", messages=[{"role": "user", "content": "a"}])
    assert se.value.status_code == 500 and se.value.type == "server_error"
    with pytest.raises(openai.BadRequestError) as br:
        c.responses.create(model="m", input="a")
    assert br.value.body["message"] == "bad field"


def test_api_key_and_models_enforced() -> None:
    with FakeOpenAI(api_key="sk-right-key-123456", models=["known"]) as fake:
        with pytest.raises(openai.AuthenticationError) as auth:
            client(fake, key="sk-wrong-key-987654").chat.completions.create(
                model="known", messages=[{"role": "user", "content": "a"}]
            )
        assert auth.value.code == "invalid_api_key"
        assert "sk-wrong-key-987654" not in str(auth.value)  # masked, as OpenAI does
        assert "7654" in str(auth.value)
        good = client(fake, key="sk-right-key-123456")
        with pytest.raises(openai.NotFoundError) as nf:
            good.chat.completions.create(model="other", messages=[{"role": "user", "content": "a"}])
        assert nf.value.code == "model_not_found" and "`other`" in nf.value.message
        ok = good.chat.completions.create(model="known", messages=[{"role": "user", "content": "a"}])
        assert ok.choices[0].message.content == "echo:known:a"
        assert [m.id for m in good.models.list().data] == ["known"]


def test_raw_body_and_bad_requests(fake_openai: FakeOpenAI) -> None:
    fake_openai.queue(Reply(raw_body=b"{not json"))
    with pytest.raises(json.JSONDecodeError):
        client(fake_openai).chat.completions.create(model="m", messages=[{"role": "user", "content": "a"}])
    status, body = post(fake_openai.base_url + "/chat/completions", b"[1, 2")
    assert status == 400 and body["error"]["type"] == "invalid_request_error"
    status, body = post(fake_openai.base_url + "/nowhere", b"{}")
    assert status == 404 and body["error"]["message"] == "Invalid URL (POST /v1/nowhere)"


def test_broken_responder_answers_500(fake_openai: FakeOpenAI) -> None:
    fake_openai.responder = lambda req: 1 / 0
    status, body = post(fake_openai.base_url + "/chat/completions", b'{"model": "m", "messages": []}')
    assert status == 500 and "ZeroDivisionError" in body["error"]["message"]


def test_stop_releases_a_hung_request() -> None:
    fake = FakeOpenAI().start()
    fake.queue(Reply(delay_s=600))
    errors: list[BaseException] = []

    def call() -> None:
        try:
            post(fake.base_url + "/chat/completions", b'{"model": "m", "messages": []}')
        except BaseException as exc:  # noqa: BLE001 - the dropped connection is the point
            errors.append(exc)

    t = threading.Thread(target=call)
    t.start()
    while not fake.requests:
        threading.Event().wait(0.01)
    fake.stop()
    t.join(timeout=30)
    assert not t.is_alive()
    assert len(errors) == 1


def test_request_user_text_for_responses_items() -> None:
    req = Request(
        path="/v1/responses",
        body={"input": [{"role": "user", "content": "a"}, {"type": "function_call_output", "call_id": "c", "output": "x"},
                        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "b"}]}]},
        headers={},
        model="m",
        api="responses",
    )
    assert req.user_texts() == ["a", "b"] and req.user_text() == "a\nb" and req.last_user_text() == "b"


@pytest.mark.slow
def test_runs_as_a_process_with_a_script(tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"queue": ["scripted one"], "by_prompt": {"ping": {"text": "pong"}}}))
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "fake_openai.py"), "--port", "0", "--delay-ms", "1", "--script", str(script)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        base_url = proc.stdout.readline().strip()
        assert base_url.startswith("http://127.0.0.1:") and base_url.endswith("/v1")
        c = openai.OpenAI(base_url=base_url, api_key="x", max_retries=0, timeout=10)

        def ask(text: str) -> str:
            r = c.chat.completions.create(model="m", messages=[{"role": "user", "content": text}])
            return r.choices[0].message.content

        assert [ask("anything"), ask("ping"), ask("other")] == ["scripted one", "pong", "echo:m:other"]
    finally:
        proc.terminate()
        assert proc.wait(timeout=30) == 0


def test_a_null_content_beside_tool_calls_is_refused_with_llama_cpp_pythons_own_500() -> None:
    captured = json.loads((Path(__file__).resolve().parents[1] / "fixtures" / "llama_cpp" /
                           "null_content_500.json").read_text())
    with FakeOpenAI() as fake:
        fake.refuse_null_tool_content = True
        body = {"model": "smol-tools", "messages": captured["request_messages"], "tool_choice": "auto"}
        status, answer = post(f"{fake.base_url}/chat/completions", json.dumps(body).encode())
        assert (status, answer) == (captured["status"], captured["body"])  # the real server's answer, exactly
        messages = [dict(m, content="") if m["role"] == "assistant" else m for m in captured["request_messages"]]
        status, _ = post(f"{fake.base_url}/chat/completions", json.dumps({**body, "messages": messages}).encode())
        assert status == 200  # content "" is taken, as the real server takes it
