"""rfteval/graders/endpoint.py: Agent RFT's `endpoint` grader against the local grader of
tests/support/agent_rft_server.py: what it is sent (the sample without rfteval's rollout, the whole item, the
rollout's trace_id), its score and pass, its retries and errors, its rate limit, its secrets; and the grader in every
command that grades (`grade`, `agree --regrade`, `probe-grader`, `validate grader`), inside `multi`, and as a
trainer's reward called from inside the trainer's event loop."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from rfteval.cli.app import app
from rfteval.data.sample import make_sample
from rfteval.errors import InputError
from rfteval.graders import GradingEngine, parse_config
from rfteval.graders.base import REGISTRY
from rfteval.graders.endpoint import ENDPOINT_PARSE, ENDPOINT_SERVER, EndpointGrader
from rfteval.graders.paths import require_sandbox
from rfteval.sandbox.policy import SandboxPolicy
from tests.support.agent_rft_server import AgentRFTServer

KEY = "grader-key-8d2c77e1"
ITEM = {"id": "q1", "messages": [{"role": "user", "content": "Where is my order?"}], "reference_answer": "delivered",
        "reference_tool_calls": ["get_order_details"]}


def config(server: AgentRFTServer | None = None, **more: Any) -> dict[str, Any]:
    return {"type": "endpoint", "name": "retail", "url": server.url("/score") if server else "http://127.0.0.1:9/s",
            "headers": {"Authorization": "Bearer ${RETAIL_GRADER_KEY}"}, **more}


@pytest.fixture(autouse=True)
def grader_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RETAIL_GRADER_KEY", KEY)


def grader(server: AgentRFTServer, **more: Any) -> EndpointGrader:
    return EndpointGrader(parse_config(config(server, **more)), retry_base_s=0.001)


def rollout_sample(text: str, trace_id: str | None) -> dict[str, Any]:
    sample = make_sample(text)
    sample["rollout"] = {"messages": [], "turns": 1, **({"trace_id": trace_id} if trace_id else {})}
    return sample


# ---- the config ----------------------------------------------------------------------------------------------------


def test_the_config_is_agent_rfts_and_describes_itself():
    c = parse_config({**config(), "rate_limit": 50, "pass_threshold": 8})
    assert (c.type, c.rate_limit, c.pass_threshold) == ("endpoint", 50.0, 8.0)
    assert c.needs_env() == [("headers.Authorization", "RETAIL_GRADER_KEY")]
    assert c.score_range()[:2] == (0.0, 1.0) and "declares no range" in c.score_range()[2]
    assert not (c.calls_judge or c.runs_python or c.grades_groups) and not c.needs_judge
    assert REGISTRY["endpoint"].config is type(c) and not REGISTRY["endpoint"].extension
    assert any("is Agent RFT's endpoint grader: each sample is POSTed to http://127.0.0.1:9/s" in n for n in c._notes)
    assert parse_config({"type": "endpoint", "url": "https://h/g?code=${FUNC_CODE}"}).needs_env() == [
        ("url", "FUNC_CODE")]


@pytest.mark.parametrize("bad, field", [
    ({"url": "ftp://h/score"}, "url"), ({"url": "https://h/s", "headers": {"K": "${K"}}, "headers"),
    ({"rate_limit": 0}, "rate_limit"), ({"url_": "x"}, "url_"), ({"headers": {"K": 1}}, "headers.K"),
])
def test_a_bad_config_is_refused_naming_the_field(bad: dict[str, Any], field: str):
    with pytest.raises(InputError) as caught:
        parse_config({**config(), **bad})
    assert caught.value.field == field


def test_an_unset_variable_stops_before_grading_in_one_line(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("RETAIL_GRADER_KEY")
    multi = parse_config({"type": "multi", "graders": {"e": config()}, "calculate_output": "e"})
    with pytest.raises(InputError) as caught:
        require_sandbox(multi, SandboxPolicy())
    assert str(caught.value) == ("headers.Authorization: grader 'retail' reads ${RETAIL_GRADER_KEY}, which is not set "
                                 "in the environment: export RETAIL_GRADER_KEY first (its value is sent, and written "
                                 "nowhere)")
    with pytest.raises(InputError, match=r"headers.Authorization: \$\{RETAIL_GRADER_KEY\} is not set"):
        GradingEngine(parse_config(config()))


# ---- grading against the local grader ------------------------------------------------------------------------------


@pytest.mark.slow
def test_it_posts_the_sample_the_item_and_the_rollouts_trace_and_reads_the_score():
    with AgentRFTServer(grader_key=KEY) as server:
        server.tool_log["trace_joined"] = ["find_user_id_by_name_zip", "get_order_details"]  # the rollout's calls
        results = grader(server, pass_threshold=0.75).grade_batch([
            (rollout_sample("It was delivered.", "trace_joined"), ITEM),
            (rollout_sample("It was delivered.", None), ITEM),
            (make_sample("no idea"), ITEM)])
        sent = sorted(server.grades, key=lambda g: g.body["sample"]["output_text"])
    assert [(r.score, r.passed, r.error) for r in results] == [(1.0, True, None), (0.5, False, None),
                                                               (0.0, False, None)]
    first = next(g for g in sent if g.body["trace_id"] == "trace_joined")
    assert first.headers["authorization"] == f"Bearer {KEY}" and first.headers["content-type"] == "application/json"
    assert first.body["item"] == ITEM and first.body["sample"] == make_sample("It was delivered.")  # no rollout
    fresh = [g.body["trace_id"] for g in sent if g.body["trace_id"] != "trace_joined"]
    assert len(set(fresh)) == 2 and all(t.startswith("trace_") for t in fresh)  # a new one each, where none ran
    assert results[0].details == {"trace_id": "trace_joined"}


@pytest.mark.slow
def test_scores_are_taken_as_they_come_and_pass_by_the_threshold(monkeypatch: pytest.MonkeyPatch):
    from tests.support import agent_rft_server

    scores = iter([5, 7.5, 8, True])
    monkeypatch.setattr(agent_rft_server.AgentRFTServer, "score", lambda self, body: {"score": next(scores)})
    with AgentRFTServer(grader_key=KEY) as server:
        g = grader(server, pass_threshold=8)
        results = [g.grade_batch([(make_sample("x"), ITEM)])[0] for _ in range(4)]
    assert [(r.score, r.passed) for r in results[:3]] == [(5.0, False), (7.5, False), (8.0, True)]
    assert results[3].error is not None and results[3].error.type == ENDPOINT_PARSE  # a boolean is no score


@pytest.mark.slow
def test_failures_are_retried_three_times_then_a_counted_grading_error_never_a_score():
    with AgentRFTServer(grader_key=KEY) as server:
        server.fail("score", 503, times=2)
        server.fail("score", 429, times=1)
        (recovered,) = grader(server).grade_batch([(make_sample("delivered"), {**ITEM, "reference_tool_calls": []})])
        assert [g.status for g in server.grades] == [503, 503, 429, 200] and recovered.score == 1.0
        server.grades.clear()
        server.fail("score", 500, times=4)
        (failed,) = grader(server).grade_batch([(make_sample("delivered"), ITEM)])
        assert len(server.grades) == 4
        server.bad_score()
        (unparsed,) = grader(server).grade_batch([(make_sample("delivered"), ITEM)])
        server.grades.clear()
        server.fail("score", 401, times=1)
        (refused,) = grader(server).grade_batch([(make_sample("delivered"), ITEM)])
        assert len(server.grades) == 1  # a 401 is not retried
    assert failed.error is not None and failed.error.type == ENDPOINT_SERVER and failed.score == 0.0
    assert failed.error.message == (f"{server.url('/score')}: HTTP 500: {{\"error\": {{\"message\": \"scripted 500\"}}}} "
                                    "(after 3 retries)")
    assert unparsed.error is not None and unparsed.error.type == ENDPOINT_PARSE
    assert unparsed.error.message.endswith('the answer has no finite "score": \'{"score": "high"}\'')
    assert refused.error is not None and refused.error.type == ENDPOINT_SERVER and "HTTP 401" in refused.error.message


@pytest.mark.slow
def test_a_wrong_key_echoed_back_is_scrubbed_and_an_oversized_request_is_not_sent():
    with AgentRFTServer(grader_key=KEY) as server:
        server.echo("score")
        (echoed,) = grader(server).grade_batch([(make_sample("delivered"), ITEM)])
        (big,) = grader(server).grade_batch([(make_sample("x" * 1_048_576), ITEM)])
        assert len(server.grades) == 1
    assert echoed.error is not None and KEY not in echoed.error.message and "[redacted]" in echoed.error.message
    assert big.error is not None and big.error.type == ENDPOINT_SERVER and "it was not sent" in big.error.message


@pytest.mark.slow
def test_the_rate_limit_paces_every_request_retries_included():
    with AgentRFTServer(grader_key=KEY) as server:
        g = grader(server, rate_limit=20)
        assert g.pace.interval == 1 / 20  # rfteval.providers.agent_rft.Pacer (tested there): 20 starts a second
        paced: list[int] = []
        real = g.pace

        async def pace() -> None:
            paced.append(1)
            await real()

        g.pace = pace  # type: ignore[assignment]
        server.fail("score", 503, times=2)
        g.grade_batch([(make_sample("delivered"), ITEM)] * 6)
    assert len(server.grades) == 8 and len(paced) == 8  # six requests and two retries, each paced


@pytest.mark.slow
def test_inside_multi_with_another_grader():
    with AgentRFTServer(grader_key=KEY) as server:
        multi = parse_config({"type": "multi", "calculate_output": "0.5 * remote + 0.5 * exact", "graders": {
            "remote": config(server), "exact": {"type": "string_check", "input": "{{ sample.output_text }}",
                                                "reference": "{{ item.reference_answer }}", "operation": "like"}}})
        with GradingEngine(multi) as engine:
            result = engine.grade(make_sample("delivered"), {**ITEM, "reference_tool_calls": []})
    assert result.score == 1.0 and result.sub_scores == {"remote": 1.0, "exact": 1.0}


@pytest.mark.slow
def test_as_a_trainers_reward_called_from_inside_its_event_loop():
    from rfteval.reward import for_trl

    with AgentRFTServer(grader_key=KEY) as server:
        reward = for_trl(config(server))

        async def trainer_step() -> list[Any]:  # a trainer's loop calling the sync reward
            return reward(prompts=None, completions=["It was delivered.", "lost"],
                          reference_answer=["delivered", "delivered"], reference_tool_calls=[[], []])

        try:
            assert asyncio.run(trainer_step()) == [1.0, 0.0]
        finally:
            reward.close()
    assert [g.body["item"]["reference_answer"] for g in server.grades] == ["delivered", "delivered"]


# ---- the commands --------------------------------------------------------------------------------------------------


def files(tmp: Path, server: AgentRFTServer) -> dict[str, Path]:
    (tmp / "items.jsonl").write_text("".join(json.dumps({**ITEM, "id": f"q{i}", "reference_tool_calls": []}) + "\n"
                                             for i in range(3)))
    (tmp / "outputs.jsonl").write_text("".join(json.dumps({"item_id": f"q{i}", "output_text": text}) + "\n"
                                               for i, text in enumerate(["delivered", "lost", "it is delivered"])))
    (tmp / "endpoint.json").write_text(json.dumps(config(server, pass_threshold=0.5)))
    (tmp / "exact.json").write_text(json.dumps({"type": "string_check", "name": "exact", "operation": "eq",
                                                "input": "{{ sample.output_text }}",
                                                "reference": "{{ item.reference_answer }}"}))
    return {"dataset": tmp / "items.jsonl", "outputs": tmp / "outputs.jsonl", "endpoint": tmp / "endpoint.json",
            "exact": tmp / "exact.json"}


def cli(*args: str, env: dict[str, str] | None = None) -> Any:
    return CliRunner().invoke(app, list(args), env={"NO_COLOR": "1", "COLUMNS": "200", **(env or {})})


@pytest.mark.slow
def test_grade_agree_probe_grader_and_validate_grader_take_it(tmp_path: Path):
    with AgentRFTServer(grader_key=KEY) as server:
        f = files(tmp_path, server)
        graded = cli("grade", "--dataset", str(f["dataset"]), "--grader", str(f["endpoint"]), "--outputs",
                     str(f["outputs"]), "--out", str(tmp_path / "graded.jsonl"), "--format", "json")
        assert graded.exit_code == 0, graded.output
        scores = [json.loads(line)["score"] for line in (tmp_path / "graded.jsonl").read_text().splitlines()]
        assert scores == [1.0, 0.0, 1.0] and len(server.grades) == 3

        exact = cli("grade", "--dataset", str(f["dataset"]), "--grader", str(f["exact"]), "--outputs",
                    str(f["outputs"]), "--out", str(tmp_path / "exact.jsonl"))
        assert exact.exit_code == 0, exact.output
        agreed = cli("agree", str(tmp_path / "exact.jsonl"), "--regrade", str(f["endpoint"]), "--dataset",
                     str(f["dataset"]), "--format", "json")
        assert agreed.exit_code == 0, agreed.output
        assert len(server.grades) == 6  # B: the outputs graded again by the endpoint

        probed = cli("probe-grader", str(f["endpoint"]), "--dataset", str(f["dataset"]), "--format", "json")
        assert probed.exit_code == 0, probed.output
        assert len(server.grades) > 6  # the cheats went to the endpoint too

        described = cli("validate", "grader", str(f["endpoint"]))
        assert described.exit_code == 0, described.output
    assert described.output.splitlines()[0] == "grader 'retail': type endpoint, valid"
    assert (f"note: 'retail' is Agent RFT's endpoint grader: each sample is POSTed to {server.url('/score')} (with "
            "the item and the rollout's trace_id); OpenAI's public grader API has no such type") in described.output
    for out in (graded.output, agreed.output, probed.output, described.output):
        assert KEY not in out


@pytest.mark.slow
def test_grade_with_the_variable_unset_is_one_line_and_sends_nothing(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("RETAIL_GRADER_KEY")
    with AgentRFTServer(grader_key=KEY) as server:
        f = files(tmp_path, server)
        res = cli("grade", "--dataset", str(f["dataset"]), "--grader", str(f["endpoint"]), "--outputs",
                  str(f["outputs"]), "--out", str(tmp_path / "graded.jsonl"))
        assert res.exit_code == 2 and server.grades == [] and not (tmp_path / "graded.jsonl").exists()
    assert "headers.Authorization: grader 'retail' reads ${RETAIL_GRADER_KEY}, which is not set" in res.output
