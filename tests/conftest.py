"""Shared fixtures: a local OpenAI-compatible server per test; and the CI rule: with CI set, a skip for want of
something the Makefile installs is a failure (tests/support/optional.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.fake_openai import FakeOpenAI
from tests.support.optional import pytest_make_collect_report, pytest_runtest_makereport

__all__ = ["fake_openai", "pytest_make_collect_report", "pytest_runtest_makereport"]  # hooks: pytest finds them here


@pytest.fixture
def fake_openai() -> Iterator[FakeOpenAI]:
    """A started FakeOpenAI on 127.0.0.1 (echo responder); tests queue replies or set `.responder`."""
    server = FakeOpenAI().start()
    try:
        yield server
    finally:
        server.stop()
