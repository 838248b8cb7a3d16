"""The judge endpoint (providers.endpoint.JudgeEndpoint): one frozen value with one set of defaults, read by the
spec, the commands' flags, the reward adapters and the Judge; open_judge opens a judge only for a grader that
calls one."""

from __future__ import annotations

import dataclasses
import inspect

import pytest
import typer.main

from rfteval.graders import parse_config
from rfteval.providers.endpoint import (
    DEFAULT_API,
    DEFAULT_KEY_ENV,
    JUDGE_CONCURRENCY,
    JUDGE_MAX_RETRIES,
    JUDGE_TIMEOUT_S,
    JudgeEndpoint,
)
from rfteval.providers.judge import Judge, open_judge

LOCAL = "http://127.0.0.1:9/v1"  # never connected to: opening a judge sends nothing
STRING = {"type": "string_check", "name": "s", "input": "{{sample.output_text}}", "reference": "a", "operation": "eq"}
JUDGED = {"type": "score_model", "name": "j", "model": "judge-a",
          "input": [{"role": "user", "content": "{{sample.output_text}}"}]}


def test_defaults_and_frozen() -> None:
    endpoint = JudgeEndpoint()
    assert (endpoint.base_url, endpoint.api_key_env, endpoint.api, endpoint.model) == (None, DEFAULT_KEY_ENV,
                                                                                       DEFAULT_API, None)
    assert (endpoint.concurrency, endpoint.timeout_s, endpoint.max_retries) == (JUDGE_CONCURRENCY, JUDGE_TIMEOUT_S,
                                                                                 JUDGE_MAX_RETRIES)
    with pytest.raises(dataclasses.FrozenInstanceError):
        endpoint.model = "other"  # type: ignore[misc]


def test_the_key_is_named_never_held(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JUDGE_KEY", "sk-secret-value")
    endpoint = JudgeEndpoint(LOCAL, "JUDGE_KEY")
    assert "sk-secret-value" not in repr(endpoint) and "JUDGE_KEY" in repr(endpoint)


def test_the_judge_defaults_are_the_endpoint_s() -> None:
    params = inspect.signature(Judge).parameters
    assert (params["concurrency"].default, params["timeout_s"].default, params["max_retries"].default) == (
        JUDGE_CONCURRENCY, JUDGE_TIMEOUT_S, JUDGE_MAX_RETRIES)


def test_open_judge_only_for_a_grader_that_calls_one() -> None:
    endpoint = JudgeEndpoint(LOCAL, "NO_SUCH_KEY_VAR", "responses", "local-judge", 3, timeout_s=7.0, max_retries=2,
                             developer_as="system")
    assert open_judge(endpoint, parse_config(STRING)) is None
    multi = parse_config({"type": "multi", "name": "m", "calculate_output": "a + b",
                          "graders": {"a": STRING, "b": JUDGED}})
    assert multi.needs_judge and not parse_config(STRING).needs_judge
    judge = open_judge(endpoint, multi)
    assert judge is not None
    try:
        assert (judge.model_override, judge.timeout_s, judge.policy.max_retries) == ("local-judge", 7.0, 2)
        provider = judge.provider
        assert (provider.base_url, provider.api, provider.api_key_env) == (LOCAL, "responses", "NO_SUCH_KEY_VAR")
        assert provider.developer_as == "system"  # type: ignore[attr-defined]
    finally:
        judge.close()


def test_the_run_spec_falls_back_to_its_endpoint_and_drives_the_judge_as_its_models() -> None:
    from rfteval.run.spec import RunSpec

    spec = RunSpec.model_validate({
        "dataset": "d.jsonl", "grader": "g.json", "models": {"a": {"model": "m"}}, "timeout": 30.0, "max_retries": 4,
        "endpoint": {"base_url": LOCAL, "api_key_env": "RUN_KEY", "api": "responses"}, "developer_as": "system",
        "judge": {"model": "local-judge", "concurrency": 5}})
    assert spec.judge_endpoint() == JudgeEndpoint(LOCAL, "RUN_KEY", "responses", "local-judge", 5, timeout_s=30.0,
                                                  max_retries=4, developer_as="system")
    spec = spec.model_copy(update={"judge": spec.judge.model_copy(update={"base_url": "http://127.0.0.1:8/v1",
                                                                           "api_key_env": "J", "api": "chat"})})
    endpoint = spec.judge_endpoint()
    assert (endpoint.base_url, endpoint.api_key_env, endpoint.api) == ("http://127.0.0.1:8/v1", "J", "chat")
    assert RunSpec.model_fields["judge"].default_factory().concurrency == JUDGE_CONCURRENCY  # type: ignore[misc]


def test_the_reward_options_are_an_endpoint() -> None:
    from rfteval.reward.core import RewardOptions

    assert RewardOptions().judge_endpoint() == JudgeEndpoint()
    options = RewardOptions(judge_base_url=LOCAL, judge_api_key_env="K", judge_api="responses", judge_model="m",
                            judge_concurrency=2)
    assert options.judge_endpoint() == JudgeEndpoint(LOCAL, "K", "responses", "m", 2)


def test_every_judge_flag_defaults_to_the_endpoint_s() -> None:
    from rfteval.cli.app import app

    defaults = {"--judge-base-url": None, "--judge-api-key-env": DEFAULT_KEY_ENV, "--judge-api": DEFAULT_API,
                "--judge-model": None, "--judge-concurrency": JUDGE_CONCURRENCY}
    seen = 0

    def walk(group: object) -> None:
        nonlocal seen
        for name, cmd in group.commands.items():  # type: ignore[attr-defined]
            if hasattr(cmd, "commands"):
                walk(cmd)
                continue
            for param in cmd.params:
                flag = next((o for o in param.opts if o in defaults), None)
                if flag is not None and name != "run":  # run's fall back to its [endpoint] (None: not given)
                    assert param.default == defaults[flag], (name, flag)
                    seen += 1

    walk(typer.main.get_command(app))
    assert seen >= 5 * 6  # grade, validate grader, readiness, probe-grader, agree, export-*
