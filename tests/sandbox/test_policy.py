"""sandbox/policy.py, no processes: a policy is a value built where the flags are read (unsafe mode read from
RFTEVAL_UNSAFE_PYTHON_GRADERS only when its maker does not say), which pairs share a grading unit, and what of
rfteval's environment reaches grader code."""

from __future__ import annotations

import dataclasses

import pytest

from rfteval.limits import PYTHON_MEMORY_MB, PYTHON_TIMEOUT_S
from rfteval.sandbox import (
    UNSAFE_ENV,
    SandboxPolicy,
    group_units,
    worker_env,
)


def test_units_never_mix_keys_or_items() -> None:
    a, b = {"id": "a"}, {"id": "b"}
    pairs = [({}, a), ({}, a), ({}, b), ({}, a), ({}, dict(a))]
    assert group_units(pairs, None) == [[0], [1], [2], [3], [4]]  # undeclared: a process per sample
    assert group_units(pairs, ["base", "tuned", "base", "base", "base"]) == [[0, 3], [1], [2], [4]]


def test_only_the_allow_list_reaches_grader_code(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in [("OPENAI_API_KEY", "sk-test-not-a-real-key"), ("RFTEVAL_HARMLESS", "yes"), ("LC_ALL", "C"),
                        ("TZ", "UTC"), ("HOME", "/root"), ("OMP_NUM_THREADS", "8"), ("MY_PROVIDER_CRED", "x")]:
        monkeypatch.setenv(name, value)
    env = worker_env()
    assert env["LC_ALL"] == "C" and env["TZ"] == "UTC" and env["PATH"]
    assert "OPENAI_API_KEY" not in env and "RFTEVAL_HARMLESS" not in env and "MY_PROVIDER_CRED" not in env
    assert env["HOME"] == env["TMPDIR"] == "/tmp" and env["OMP_NUM_THREADS"] == env["MKL_NUM_THREADS"] == "1"
    monkeypatch.setenv("LC_SECRET", "x")  # on the allow-list by its prefix, but the command line named it
    assert worker_env()["LC_SECRET"] == "x"
    policy = SandboxPolicy.from_flags(False, ["LC_SECRET", None])
    assert policy.never_pass == frozenset({"LC_SECRET"})
    assert "LC_SECRET" not in worker_env(policy.never_pass)
    assert worker_env()["LC_SECRET"] == "x"  # nothing was set for the process: another policy's pool still has it


def test_unsafe_mode_is_read_from_the_environment_only_where_the_maker_does_not_say(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(UNSAFE_ENV, raising=False)
    assert SandboxPolicy().unsafe is False
    monkeypatch.setenv(UNSAFE_ENV, "1")
    assert SandboxPolicy().unsafe is True  # read when the policy is built, not when rfteval was imported
    assert SandboxPolicy.from_flags(False).unsafe is False  # a command's flag says, as before
    monkeypatch.setenv(UNSAFE_ENV, "yes")
    assert SandboxPolicy().unsafe is False  # "1" only


def test_a_policy_is_a_frozen_value_with_the_limits() -> None:
    policy = SandboxPolicy.from_flags(True, ("A", None, "B"), timeout_s=3, memory_mb=300)
    assert (policy.unsafe, policy.never_pass, policy.timeout_s, policy.memory_mb) == (
        True, frozenset({"A", "B"}), 3.0, 300)
    assert type(policy.timeout_s) is float
    assert (SandboxPolicy(unsafe=False).timeout_s, SandboxPolicy(unsafe=False).memory_mb) == (
        PYTHON_TIMEOUT_S, PYTHON_MEMORY_MB)
    with pytest.raises(dataclasses.FrozenInstanceError):
        policy.unsafe = False  # type: ignore[misc]
    with pytest.raises(ValueError, match="timeout_s must be positive"):
        SandboxPolicy(timeout_s=0)
