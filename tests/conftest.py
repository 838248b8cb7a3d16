"""Shared fixtures: a local OpenAI-compatible server per test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.fake_openai import FakeOpenAI


@pytest.fixture
def fake_openai() -> Iterator[FakeOpenAI]:
    """A started FakeOpenAI on 127.0.0.1 (echo responder); tests queue replies or set `.responder`."""
    server = FakeOpenAI().start()
    try:
        yield server
    finally:
        server.stop()
