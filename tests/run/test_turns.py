"""rfteval/run/turns.py: one model turn sent with retries, and the watches that stop a run, per turn of a rollout."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from rfteval.providers.base import Generation, GenerationRequest, ProviderError, Sampling, ServerlessProvider
from rfteval.providers.retry import REJECT_AFTER, UNREACHABLE_AFTER, RetryPolicy
from rfteval.run.concurrency import AdaptiveLimiter
from rfteval.run.monitor import RunMonitor
from rfteval.run.spec import ModelRun
from rfteval.run.store import CellKeys
from rfteval.run.turns import FatalRunError, RequestRefused, TurnSender

RUN = ModelRun("base", "m-base", "openai", {}, Sampling())
REFUSED = "HTTP 500: messages[1].content: Input should be a valid string"


class Refusing(ServerlessProvider):
    """Answers a request of one message; refuses alike every request with a history (two messages or more)."""

    def __init__(self) -> None:
        self.sent = 0

    def identity(self) -> dict[str, Any]:
        return {"provider": "refusing"}

    def request_body(self, request: GenerationRequest) -> dict[str, Any]:
        return {"model": request.model, "messages": list(request.messages)}

    async def generate(self, request: GenerationRequest, timeout_s: float) -> Generation:
        self.sent += 1
        if len(request.messages) > 1:
            raise ProviderError("server", REFUSED, status=500)
        return Generation(output_text="ok")

    async def aclose(self) -> None:
        pass


def sender(provider: Refusing) -> TurnSender:
    return TurnSender({"base": provider}, {"base": AdaptiveLimiter(4)}, RetryPolicy(max_retries=0), RunMonitor(), 5.0)


def keys(n: int) -> CellKeys:
    return {"key": f"k{n}", "label": "base", "model": "m-base", "item_id": str(n), "epoch": 1, "session": "s"}


def request(messages: int) -> GenerationRequest:
    return GenerationRequest(model="m-base", messages=[{"role": "user", "content": "q"}] * messages)


def test_a_turn_answered_is_an_entry_and_a_failed_one_an_error_entry():
    provider = Refusing()
    send = sender(provider)
    ok = asyncio.run(send.send(RUN, request(1), keys(1)))
    assert ok.output_text == "ok" and ok.error is None and ok.key == "k1"
    failed = asyncio.run(send.send(RUN, request(2), keys(2), 2))  # one refusal: the cell's error, not yet a stop
    assert failed.error is not None and failed.error.type == "server" and failed.key == "k2"


def test_second_turns_refused_alike_stop_the_run_naming_the_turn_although_first_turns_succeed():
    """The first turns' watch settles with their successes; the second turns have a watch of their own."""
    provider = Refusing()
    send = sender(provider)

    async def go() -> None:
        for n in range(REJECT_AFTER):
            await send.send(RUN, request(1), keys(n))
            await send.send(RUN, request(2), keys(100 + n), 2)

    with pytest.raises(RequestRefused) as caught:
        asyncio.run(go())
    line = str(caught.value)
    assert f"refused {REJECT_AFTER} turn-2 requests (the history after a tool call) alike" in line
    assert "Input should be a valid string" in line and isinstance(caught.value, FatalRunError)
    assert caught.value.turn == 2
    assert provider.sent == 2 * REJECT_AFTER  # stopped at the refusal that completed the count, nothing after


def test_first_turns_refused_alike_say_no_turn():
    provider = Refusing()
    send = sender(provider)

    async def go() -> None:
        for n in range(REJECT_AFTER):
            await send.send(RUN, request(2), keys(n))

    with pytest.raises(RequestRefused) as caught:
        asyncio.run(go())
    assert f"the server refused {REJECT_AFTER} requests alike:" in str(caught.value)


# ---------------------------------------------------------------- labels on one endpoint


class Dying(ServerlessProvider):
    """A server at `base_url` that answers until `dead` is set, then cannot be connected to."""

    def __init__(self, base_url: str | None, dead: list[bool]) -> None:
        self.base_url, self.dead = base_url, dead

    def identity(self) -> dict[str, Any]:
        return {"provider": "dying"}

    def request_body(self, request: GenerationRequest) -> dict[str, Any]:
        return {"model": request.model}

    async def generate(self, request: GenerationRequest, timeout_s: float) -> Generation:
        if self.dead[0]:
            raise ProviderError("connection", "connection refused")
        return Generation(output_text="ok")

    async def aclose(self) -> None:
        pass


def two_labels(base_url: str | None, tuned_url: str | None) -> tuple[TurnSender, list[bool]]:
    dead = [False]
    providers = {"base": Dying(base_url, dead), "tuned": Dying(tuned_url, dead)}
    return TurnSender(providers, {label: AdaptiveLimiter(4) for label in providers},
                      RetryPolicy(max_retries=UNREACHABLE_AFTER, base_s=0.001), RunMonitor(), 5.0), dead


def test_a_server_that_died_after_answering_one_label_is_not_unreachable_for_the_other():
    """Two labels on one server (base and tuned): base answered, then the server died before tuned's first answer.
    Tuned's connection failures are a server that stopped answering (the run stops, exit 3, when they last), not
    one never reached (a FatalRunError, exit 2), which they were when each label had a watch of its own."""
    send, dead = two_labels("http://127.0.0.1:9/v1", "http://127.0.0.1:9/v1")
    tuned = ModelRun("tuned", "m-tuned", "openai", {}, Sampling())
    assert asyncio.run(send.send(RUN, request(1), keys(1))).error is None
    dead[0] = True
    failed = asyncio.run(send.send(tuned, request(1), {**keys(2), "label": "tuned"}))  # retries within DEAD_WINDOW_S
    assert failed.error is not None and failed.error.type == "connection" and failed.attempts == UNREACHABLE_AFTER + 1
    assert send.connections["base"] is send.connections["tuned"]


def test_labels_on_different_endpoints_keep_their_own_watch():
    send, dead = two_labels("http://127.0.0.1:9/v1", "http://127.0.0.1:10/v1")
    tuned = ModelRun("tuned", "m-tuned", "openai", {}, Sampling())
    assert asyncio.run(send.send(RUN, request(1), keys(1))).error is None
    dead[0] = True
    with pytest.raises(FatalRunError):  # the other server never answered: not worth minutes of retries
        asyncio.run(send.send(tuned, request(1), {**keys(2), "label": "tuned"}))
    send, _ = two_labels(None, None)  # no server (replays): nothing to share
    assert send.connections["base"] is not send.connections["tuned"]
