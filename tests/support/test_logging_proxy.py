"""The request log in front of a server (tests/support/logging_proxy.py): what it records, and what a client sees
when the server behind it is gone."""

from __future__ import annotations

import json

import openai
import pytest

from tests.support.fake_openai import FakeOpenAI, Reply
from tests.support.logging_proxy import LoggingProxy

pytestmark = pytest.mark.slow  # a server, a proxy and a client


def test_it_relays_and_records_each_exchange_and_a_dead_server_is_a_connection_error() -> None:
    with FakeOpenAI(lambda req: Reply(text="hello")) as fake, LoggingProxy(fake.port) as proxy:
        client = openai.OpenAI(base_url=proxy.base_url, api_key="sk-test-000000000000", max_retries=0, timeout=10)
        messages = [{"role": "user", "content": "hi"}]
        got = client.chat.completions.create(model="m", messages=messages)  # type: ignore[arg-type]
        assert got.choices[0].message.content == "hello"
        with pytest.raises(openai.NotFoundError):  # the server's refusal relayed as it came (a GET it lacks)
            client.models.list()
        assert proxy.exchanges[-1].status == 404 and proxy.exchanges[-1].method == "GET"
        (chat,) = proxy.chat()
        assert chat.status == 200 and chat.request_json()["messages"] == messages
        assert chat.answer_json()["choices"][0]["message"]["content"] == "hello"
        assert chat.digest != proxy.exchanges[-1].digest and len(proxy.exchanges) == 2
        chat_requests = [r for r in fake.requests if r.api == "chat"]
        assert [r.body for r in chat_requests] == [json.loads(chat.body)]  # the server got the body the proxy logged

        fake.stop()  # the server dies behind the proxy, which stays up
        with pytest.raises(openai.APIConnectionError):  # as a dead server's client sees it, not a 502 to retry
            client.chat.completions.create(model="m", messages=messages)  # type: ignore[arg-type]
        assert proxy.chat()[-1].status is None and proxy.chat()[-1].request_json()["messages"] == messages
