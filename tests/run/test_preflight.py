"""The preflight over stand-in providers: what it asks, how often, and the one line it raises. The real client
against the fake server is in tests/providers/test_openai_provider_self_hosted.py (the probes) and tests/cli/test_run.py
(the run, end to end)."""

from __future__ import annotations

from typing import Any

import pytest

from rfteval.errors import InputError
from rfteval.run.preflight import Check, preflight


class Stub:
    """What the preflight asks of an OpenAIProvider, counted."""

    def __init__(self, models: list[str] | None, base_url: str = "http://127.0.0.1:8080/v1",
                 missing: dict[str, str] | None = None, api: str = "chat"):
        self.models, self.base_url, self.missing, self.api = models, base_url, missing or {}, api
        self.api_key_env = "K"
        self.header_names: tuple[str, ...] = ()
        self.asked: list[str] = []

    def list_models(self) -> list[str] | None:
        self.asked.append("models")
        return self.models

    def missing_api(self, which: str) -> str | None:
        self.asked.append(which)
        return self.missing.get(which)


def test_known_models_pass_and_the_list_is_asked_once_per_endpoint() -> None:
    a, b = Stub(["smol-a", "smol-b"]), Stub(["smol-a", "smol-b"])  # two labels, one server
    preflight([Check(a, [("smol-a", "--model base")]), Check(b, [("smol-b", "--model tuned")])])
    assert a.asked == ["models"] and b.asked == []


def test_an_unknown_model_is_one_line_naming_the_flag_and_what_is_served() -> None:
    with pytest.raises(InputError) as info:
        preflight([Check(Stub(["smol-a", "smol-b"]), [("smol-bsae", "--model base")])])
    line = str(info.value)
    assert "\n" not in line and line.startswith("--model base: unknown model 'smol-bsae'")
    assert "serves smol-a, smol-b" in line and "--skip-model-check" in line


def test_a_long_list_is_cut() -> None:
    served = [f"m{i}" for i in range(45)]
    with pytest.raises(InputError) as info:
        preflight([Check(Stub(served), [("x", "--model a")])])
    assert "m19 and 25 more" in str(info.value) and "m20" not in str(info.value)


def test_no_list_no_check_and_skip_model_check() -> None:
    preflight([Check(Stub(None), [("anything", "--model a")])])  # /models did not answer: say nothing
    listed = Stub(["smol-a"])
    preflight([Check(listed, [("gateway-routed", "--model a")])], check_models=False)
    assert listed.asked == []


@pytest.mark.parametrize(("check", "expected"), [
    (dict(batch=True), "--batch: the endpoint has no Files and Batches API (GET /v1/batches: HTTP 404); write the "
                       "requests with --export-requests FILE.jsonl, run them with `vllm run-batch"),
    (dict(responses_field="--api"), "--api: the endpoint has no Responses API (POST /v1/responses: HTTP 404); use "
                                    "--api chat"),
    (dict(responses_field="--judge-api"), "--judge-api: the endpoint has no Responses API (POST /v1/responses: "
                                          "HTTP 404); use --judge-api chat"),
])
def test_a_missing_api_is_one_line_with_the_way_out(check: dict[str, Any], expected: str) -> None:
    stub = Stub(None, missing={"batch": "GET /v1/batches: HTTP 404", "responses": "POST /v1/responses: HTTP 404"})
    with pytest.raises(InputError) as info:
        preflight([Check(stub, **check)])
    assert str(info.value).startswith(expected)


def test_apis_are_probed_only_when_used_and_answers_that_say_nothing_pass() -> None:
    stub = Stub(["m"])
    preflight([Check(stub, [("m", "--model a")])])
    assert stub.asked == ["models"]
    preflight([Check(stub, batch=True, responses_field="--api")])  # the probes answered None: the APIs are there
    assert stub.asked == ["models", "batch", "responses"]


def test_providers_that_cannot_be_asked_are_skipped() -> None:
    class Replay:  # no list_models: replay providers and tests' stand-ins
        pass

    preflight([Check(Replay(), [("replay:x.jsonl", "--model a")], batch=True)])


def test_judge_models_of_a_grader_and_the_override() -> None:
    from rfteval.graders import parse_config
    from rfteval.run.preflight import judge_check, judge_models

    judge = {"type": "score_model", "name": "j", "model": "judge-a", "input": [{"role": "user", "content": "x"}]}
    multi = parse_config({"type": "multi", "name": "m", "calculate_output": "a + b", "graders": {
        "a": judge, "b": {**judge, "model": "judge-b"}}})
    assert judge_models(multi) == ["judge-a", "judge-b"]
    assert judge_models(multi, "local-judge") == ["local-judge"]
    string = parse_config({"type": "string_check", "name": "s", "input": "a", "reference": "a", "operation": "eq"})
    assert judge_models(string, "local-judge") == []  # no model grader: no judge to check
    check = judge_check(Stub(["judge-a"], api="responses"), ["judge-b"], overridden=True)
    assert check.models == [("judge-b", "--judge-model")] and check.responses_field == "--judge-api"
    with pytest.raises(InputError, match="--judge-model: unknown model 'judge-b'"):
        preflight([check])


def test_a_provider_without_both_probes_is_not_asked() -> None:
    class ListsOnly:
        def __init__(self) -> None:
            self.asked = 0

        def list_models(self) -> list[str]:
            self.asked += 1
            return ["m"]

    half = ListsOnly()
    preflight([Check(half, [("other", "--model a")], batch=True)])
    assert half.asked == 0
