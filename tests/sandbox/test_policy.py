"""sandbox/policy.py, no processes: which pairs share a grading unit, and what of rfteval's environment
reaches grader code."""

from __future__ import annotations

import pytest

from rfteval.sandbox import (
    group_units,
    worker_env,
)


def test_units_never_mix_keys_or_items() -> None:
    a, b = {"id": "a"}, {"id": "b"}
    pairs = [({}, a), ({}, a), ({}, b), ({}, a), ({}, dict(a))]
    assert group_units(pairs, None) == [[0], [1], [2], [3], [4]]  # undeclared: a process per sample
    assert group_units(pairs, ["base", "tuned", "base", "base", "base"]) == [[0, 3], [1], [2], [4]]


def test_only_the_allow_list_reaches_grader_code(monkeypatch: pytest.MonkeyPatch) -> None:
    from rfteval.sandbox import policy

    monkeypatch.setattr(policy, "POLICY", policy.Policy())
    for name, value in [("OPENAI_API_KEY", "sk-test-not-a-real-key"), ("RFTEVAL_HARMLESS", "yes"), ("LC_ALL", "C"),
                        ("TZ", "UTC"), ("HOME", "/root"), ("OMP_NUM_THREADS", "8"), ("MY_PROVIDER_CRED", "x")]:
        monkeypatch.setenv(name, value)
    env = worker_env()
    assert env["LC_ALL"] == "C" and env["TZ"] == "UTC" and env["PATH"]
    assert "OPENAI_API_KEY" not in env and "RFTEVAL_HARMLESS" not in env and "MY_PROVIDER_CRED" not in env
    assert env["HOME"] == env["TMPDIR"] == "/tmp" and env["OMP_NUM_THREADS"] == env["MKL_NUM_THREADS"] == "1"
    monkeypatch.setenv("LC_SECRET", "x")  # on the allow-list by its prefix, but the command line named it
    assert worker_env()["LC_SECRET"] == "x"
    policy.configure(never_pass=["LC_SECRET", None])
    assert "LC_SECRET" not in worker_env() and policy.POLICY.never_pass == {"LC_SECRET"}
