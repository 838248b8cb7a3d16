"""The python grader's limits are held once (rfteval.limits): every flag, request, option and the sandbox's pool
default to those values, and the help texts that print a default print them."""

from __future__ import annotations

import dataclasses
import inspect

import typer.main

from rfteval.cli.app import app
from rfteval.limits import PYTHON_BATCH_SIZE, PYTHON_MEMORY_MB, PYTHON_MIN_MEMORY_MB, PYTHON_TIMEOUT_S

LIMIT_FLAGS = {"--grader-timeout": PYTHON_TIMEOUT_S, "--grader-memory": PYTHON_MEMORY_MB}


def _commands(group: object, prefix: str = "") -> list[tuple[str, object]]:
    out: list[tuple[str, object]] = []
    for name, cmd in group.commands.items():  # type: ignore[attr-defined]
        full = f"{prefix}{name}"
        out += _commands(cmd, full + " ") if hasattr(cmd, "commands") else [(full, cmd)]
    return out


def test_every_limit_flag_defaults_to_the_constant() -> None:
    seen = set()
    for name, cmd in _commands(typer.main.get_command(app)):
        for param in cmd.params:  # type: ignore[attr-defined]
            flag = next((o for o in param.opts if o in LIMIT_FLAGS), None)
            if flag is None:
                continue
            seen.add((name, flag))
            if name == "run":  # None: the spec's value (RunSpec's default), and the help says which
                assert param.default is None
                shown = f"{LIMIT_FLAGS[flag]:g}" if isinstance(LIMIT_FLAGS[flag], float) else str(LIMIT_FLAGS[flag])
                assert f"[default: {shown}]" in param.help, (name, flag, param.help)
            else:
                assert param.default == LIMIT_FLAGS[flag], (name, flag, param.default)
    assert {("grade", "--grader-timeout"), ("run", "--grader-memory"), ("export-reward", "--grader-memory"),
            ("validate grader", "--grader-timeout")} <= seen


def test_every_dataclass_and_the_spec_default_to_the_constants() -> None:
    from rfteval.graders.base import GradeOptions
    from rfteval.graders.paths import GradeRequest
    from rfteval.reward.core import RewardOptions
    from rfteval.reward.export import DEFAULTS
    from rfteval.run.spec import RunSpec

    options = GradeOptions()
    assert (options.sandbox.timeout_s, options.sandbox.memory_mb) == (PYTHON_TIMEOUT_S, PYTHON_MEMORY_MB)
    assert options.python_batch_size == PYTHON_BATCH_SIZE
    request = {f.name: f.default for f in dataclasses.fields(GradeRequest)}
    assert (request["python_timeout_s"], request["python_memory_mb"]) == (PYTHON_TIMEOUT_S, PYTHON_MEMORY_MB)
    reward = RewardOptions()
    assert (reward.grader_timeout, reward.grader_memory) == (PYTHON_TIMEOUT_S, PYTHON_MEMORY_MB)
    assert (DEFAULTS["grader_timeout"], DEFAULTS["grader_memory"]) == (PYTHON_TIMEOUT_S, PYTHON_MEMORY_MB)
    fields = RunSpec.model_fields
    assert (fields["grader_timeout"].default, fields["grader_memory"].default) == (PYTHON_TIMEOUT_S, PYTHON_MEMORY_MB)
    assert any(getattr(m, "ge", None) == PYTHON_MIN_MEMORY_MB for m in fields["grader_memory"].metadata)


def test_the_sandbox_pool_defaults_to_the_constants() -> None:
    from rfteval.sandbox import SandboxPolicy, WorkerPool

    params = inspect.signature(WorkerPool).parameters
    assert params["batch_size"].default == PYTHON_BATCH_SIZE
    for policy in (SandboxPolicy(), SandboxPolicy.from_flags(False)):
        assert (policy.timeout_s, policy.memory_mb) == (PYTHON_TIMEOUT_S, PYTHON_MEMORY_MB)
    with WorkerPool() as pool:  # no sandbox starts before a grade
        assert (pool.policy.timeout_s, pool.policy.memory_mb) == (PYTHON_TIMEOUT_S, PYTHON_MEMORY_MB)
