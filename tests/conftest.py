"""Shared fixtures: a local OpenAI-compatible server per test."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from fake_openai import FakeOpenAI  # noqa: E402


@pytest.fixture
def fake_openai() -> Iterator[FakeOpenAI]:
    """A started FakeOpenAI on 127.0.0.1 (echo responder); tests queue replies or set `.responder`."""
    server = FakeOpenAI().start()
    try:
        yield server
    finally:
        server.stop()
