"""One trajectory sample for eval and training: ONE recorded transcript (the model calls `add`, the tool answers, the
model answers) played through `rfteval run --tools` (tests/support/fake_openai.py scripting the model, a real tools.py
in the sandbox), then handed to each trainer adapter as that trainer hands over a rollout, through the trainer's own
code where it has a reward path to drive: TRL's GRPOTrainer._calculate_rewards with a tool-mode completion (id-less
calls with dict arguments, tool messages carrying `name` only), verifiers' classic Rubric arguments (a ToolEnv's
completion and state) and a verifiers 0.4 Trace, ART's gather_trajectory_groups, tinker-cookbook's
AgentToolMessageEnv (its own tool call and its `reward_fn(history)`). Each adapter's grader sample equals the run's,
key for key (but sample.rollout.trace_id, which only a run's tool calls carry), and so does its score, for a grader
that reads sample.rollout (it counts tool calls) and one that reads only output_text. verl and OpenRLHF hand over
text only: a grader reading sample.rollout is refused for them, by the factory and by export-reward, in one line.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Iterator
from typing import Any

import pytest
from typer.testing import CliRunner

from rfteval.cli.app import app
from rfteval.errors import InputError
from rfteval.reward.core import Reward
from rfteval.sandbox import host
from tests.support.fake_openai import FakeOpenAI, Reply, Request
from tests.support.optional import require, sandbox_refused
from tests.support.toolboxes import TOOLS_SCHEMA, tool_call

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # ART imports litellm, which fetches prices otherwise

PROMPT = [{"role": "user", "content": "add 2 and 3"}]
ITEM = {"id": "q0", "messages": PROMPT, "tools": TOOLS_SCHEMA[:1], "reference_answer": "sum: 5"}
# Reads the trajectory: one point per tool call that ran without error, one for the answer, out of 3 (2/3 here, a
# score neither 0 nor 1, so a missing rollout or a missing answer shows).
ROLLOUT_GRADER = '''
import json


def grade(sample, item):
    print(json.dumps(sample, sort_keys=True))
    rollout = sample["rollout"]
    ran = sum(1 for r in rollout["tool_results"] if r["error"] is None)
    return (ran + (sample["output_text"] == item["reference_answer"])) / 3
'''
TEXT_GRADER = '''
import json


def grade(sample, item):
    print(json.dumps(sample, sort_keys=True))
    return 1.0 if sample["output_text"] == item["reference_answer"] else 0.25
'''
GRADERS = {"rollout": ROLLOUT_GRADER, "text": TEXT_GRADER}
EXPECTED = {"rollout": 2 / 3, "text": 1.0}


def scripted(request: Request) -> Reply:
    """Turn 1 calls add(2, 3) with no call id (as a server without ids, and as TRL's parser, gives none: the run
    names it call_1_0); turn 2 says the sum the tool answered."""
    last = request.body["messages"][-1]
    if last["role"] == "user":
        return Reply(tool_calls=[tool_call("add", {"a": 2, "b": 3}, "")])
    return Reply(text=f"sum: {last['content']}")


def python_grader(source: str) -> dict[str, Any]:
    return {"type": "python", "name": "traj", "source": source}


@pytest.fixture(scope="module")
def played(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The run of each grader: its record, its grader's sample, the transcript, the files."""
    refused = host().refused
    if refused:
        sandbox_refused(refused, host().bwrap is not None)
    tmp = tmp_path_factory.mktemp("played")
    dataset, tools = tmp / "items.jsonl", tmp / "tools.py"
    dataset.write_text(json.dumps(ITEM) + "\n")
    tools.write_text("def add(a: float, b: float):\n    return a + b\n")
    out: dict[str, Any] = {"dataset": dataset}
    with FakeOpenAI(scripted) as server:
        for name, source in GRADERS.items():
            grader = tmp / f"{name}.json"
            grader.write_text(json.dumps(python_grader(source)))
            res = CliRunner().invoke(app, ["run", "--dataset", str(dataset), "--grader", str(grader), "--tools",
                                           str(tools), "--model", "base=fake-base", "--epochs", "1", "--base-url",
                                           server.base_url, "--out", str(tmp / name), "-q"],
                                     env={"OPENAI_API_KEY": "sk-fake-0001"})
            assert res.exit_code == 0, res.output
            (record,) = [json.loads(x) for x in (tmp / name / "base.jsonl").read_text().splitlines()]
            sample = json.loads(record["grader_stdout"])
            assert sample["rollout"].pop("trace_id").startswith("trace_")  # a run's only: its tool calls carried it
            out[name] = {"record": record, "sample": sample, "grader": grader}
    return out


@pytest.fixture
def seen(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[dict[str, Any]]]:
    """Every sample an adapter hands its engine, as JSON (what the grader would print)."""
    samples: list[dict[str, Any]] = []
    grade = Reward.grade

    def recording(self: Reward, pairs: Any, units: Any) -> Any:
        samples.extend(json.loads(json.dumps(s, sort_keys=True)) for s, _ in pairs)
        return grade(self, pairs, units)

    monkeypatch.setattr(Reward, "grade", recording)
    yield samples


def transcript(played: dict[str, Any]) -> list[dict[str, Any]]:
    messages = json.loads(played["rollout"]["record"]["transcript"])
    assert [m["role"] for m in messages] == ["assistant", "tool", "assistant"]
    assert messages[0]["tool_calls"][0]["id"] == "call_1_0" and messages[2]["content"] == "sum: 5"
    return messages


def check(played: dict[str, Any], name: str, samples: list[dict[str, Any]], scores: list[float]) -> None:
    run = played[name]
    assert run["record"]["score"] == pytest.approx(EXPECTED[name])
    assert samples == [run["sample"]], name
    assert scores == [pytest.approx(run["record"]["score"])], name


# ------------------------------------------------------------------ TRL: tool mode


def trl_completion(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The completion as TRL's tool loop builds it (grpo_trainer._tool_call_loop): parse_response's assistant message
    ("" content, calls without ids, arguments a dict), then {"role": "tool", "name", "content": str(result)}."""
    out: list[dict[str, Any]] = []
    for m in messages:
        if m["role"] == "assistant" and m.get("tool_calls"):
            calls = [{"type": "function", "function": {"name": c["function"]["name"],
                                                       "arguments": json.loads(c["function"]["arguments"])}}
                     for c in m["tool_calls"]]
            out.append({"role": "assistant", "content": "", "tool_calls": calls})
        elif m["role"] == "tool":
            out.append({"role": "tool", "name": "add", "content": m["content"]})
        else:
            out.append({"role": "assistant", "content": m["content"]})
    return out


@pytest.mark.slow
@pytest.mark.parametrize("name", list(GRADERS))
def test_trl_tool_mode_scores_as_the_run(played, seen, name):
    require("trl", "trainers")
    require("torch", "trainers")
    from trl import GRPOConfig, GRPOTrainer

    import datasets
    from rfteval.reward import for_trl
    from tests.reward.test_trl import tiny_model_and_tokenizer

    model, tokenizer = tiny_model_and_tokenizer()
    rows = [{"prompt": PROMPT, "id": "q0"}] * 2
    with for_trl(played[name]["grader"], items=str(played["dataset"])) as reward:
        args = GRPOConfig(output_dir=str(played["dataset"].parent / "grpo"), per_device_train_batch_size=2,
                          num_generations=2, report_to=[], use_cpu=True, max_completion_length=4, save_strategy="no")
        trainer = GRPOTrainer(model=model, reward_funcs=[reward], args=args,
                              train_dataset=datasets.Dataset.from_list(rows), processing_class=tokenizer)
        completion = trl_completion(transcript(played))
        got = trainer._calculate_rewards(rows, [r["prompt"] for r in rows], [completion, completion], [[4], [4]])
    scores = [row[0] for row in got.tolist()]
    assert scores[0] == scores[1]
    check(played, name, seen[:1], scores[:1])
    assert seen[1] == seen[0]


# ------------------------------------------------------------------ verifiers: the classic Rubric's arguments, 0.4's trace


@pytest.mark.slow
@pytest.mark.parametrize("name", list(GRADERS))
def test_verifiers_classic_tool_env_completion_scores_as_the_run(played, seen, name):
    """A legacy ToolEnv's completion (the assistant turns and tool messages as OpenAI chat messages, the server's
    ids) and state, as the Rubric passes them by name."""
    from rfteval.reward import for_verifiers

    messages = transcript(played)
    with for_verifiers(played[name]["grader"], asynchronous=False, items=str(played["dataset"])) as reward:
        score = reward(completion=messages, answer="", info={"id": "q0"}, prompt=PROMPT,
                       state={"trajectory": [], "responses": []}, task="default")
    check(played, name, seen, [float(score)])


@pytest.mark.slow
@pytest.mark.parametrize("name", list(GRADERS))
def test_verifiers_04_trace_scores_as_the_run(played, seen, name):
    """A verifiers.v1 Trace as a rollout leaves it: the prompt's nodes, then the sampled replies (flat ToolCalls) and
    the ToolMessage between them."""
    vf = require("verifiers.v1", "trainers")
    from verifiers.v1.graph import MessageNode
    from verifiers.v1.trace import AgentInfo, Trace, TraceTask
    from verifiers.v1.types import ToolCall, ToolMessage

    from rfteval.reward import for_verifiers

    messages = transcript(played)
    call = messages[0]["tool_calls"][0]
    sent = [vf.AssistantMessage(content=None, tool_calls=[ToolCall(id=call["id"], name="add",
                                                                   arguments=call["function"]["arguments"])]),
            ToolMessage(tool_call_id=call["id"], content=messages[1]["content"]),
            vf.AssistantMessage(content=messages[2]["content"])]
    nodes = [MessageNode(message=vf.UserMessage(content=PROMPT[0]["content"]))]
    for message in sent:
        nodes.append(MessageNode(message=message, parent=len(nodes) - 1, sampled=message.role == "assistant"))
    trace = Trace(task=TraceTask(type="RFT", data={"info": {"id": "q0"}}), agent=AgentInfo(config=vf.AgentConfig()),
                  nodes=nodes)
    with for_verifiers(played[name]["grader"], asynchronous=False, items=str(played["dataset"])) as reward:
        score = reward(task={"info": {"id": "q0"}, "prompt": PROMPT, "answer": ""}, trace=trace)
    check(played, name, seen, [float(score)])


# ------------------------------------------------------------------ ART


@pytest.mark.slow
@pytest.mark.parametrize("name", list(GRADERS))
def test_art_trajectory_scores_as_the_run(played, seen, name):
    art = require("art", "trainers")
    from openai.types.chat.chat_completion import Choice

    from rfteval.reward.art import for_art

    turns: list[Any] = [dict(m) for m in PROMPT]
    for m in transcript(played):
        if m["role"] == "assistant":
            finish = "tool_calls" if m.get("tool_calls") else "stop"
            turns.append(Choice.model_validate({"index": 0, "finish_reason": finish, "message": m}))
        else:
            turns.append(m)
    trajectory = art.Trajectory(messages_and_choices=turns, tools=TOOLS_SCHEMA[:1], metadata={"id": "q0"})

    async def rollout() -> Any:
        return trajectory

    with for_art(played[name]["grader"], items=str(played["dataset"])) as reward:
        (group,) = asyncio.run(art.gather_trajectory_groups([art.TrajectoryGroup([rollout()])], after_each=reward,
                                                            pbar_desc=None))
    check(played, name, seen, [group.trajectories[0].reward])


# ------------------------------------------------------------------ tinker-cookbook: tool_use


@pytest.mark.slow
@pytest.mark.parametrize("name", list(GRADERS))
@pytest.mark.parametrize("suffix_only", [False, True], ids=["history", "completion-suffix"])
def test_tinker_tool_env_reward_fn_scores_as_the_run(played, seen, name, suffix_only):
    """tinker-cookbook's AgentToolMessageEnv (what build_agent_tool_env wraps) runs its own `add` tool on the model's
    call and calls reward_fn at the episode's end, with its whole history, or with only what the rollout generated
    (a termination policy's default)."""
    require("tinker_cookbook", "trainers")
    from tinker_cookbook.renderers.base import Message, ToolCall
    from tinker_cookbook.rl.rollout_limits import TerminationRewardPolicy
    from tinker_cookbook.tool_use.agent_tool_message_env import AgentToolMessageEnv
    from tinker_cookbook.tool_use.tools import simple_tool_result, tool

    from rfteval.reward.tinker import for_tinker_agent

    @tool
    async def add(a: int, b: int) -> Any:
        """Add two numbers."""
        return simple_tool_result(str(a + b))

    messages = transcript(played)
    call = messages[0]["tool_calls"][0]["function"]
    replies = [Message(role="assistant", content="",
                       tool_calls=[ToolCall(function=ToolCall.FunctionBody(name="add", arguments=call["arguments"]))]),
               Message(role="assistant", content=messages[2]["content"])]
    policy = TerminationRewardPolicy(pass_all_messages_to_grader=False) if suffix_only else None
    with for_tinker_agent(played[name]["grader"]) as reward:
        env = AgentToolMessageEnv(tools=[add], initial_messages=[Message(role="user", content=PROMPT[0]["content"])],
                                  max_turns=5, reward_fn=reward.reward_fn(ITEM), termination_policy=policy)

        async def episode() -> list[Any]:
            await env.initial_observation()
            return [await env.step(r) for r in replies]

        steps = asyncio.run(episode())
    assert [s.episode_done for s in steps] == [False, True]
    assert steps[1].metrics["rfteval/grading_error"] == 0.0
    check(played, name, seen, [steps[1].reward])


# ------------------------------------------------------------------ verl and OpenRLHF: text only, refused


@pytest.mark.parametrize("target", ["verl", "openrlhf"])
def test_a_grader_reading_the_rollout_is_refused_for_text_only_trainers(tmp_path, target):
    from rfteval.reward import for_openrlhf, for_verl

    grader = python_grader(ROLLOUT_GRADER)
    factory = {"verl": for_verl, "openrlhf": for_openrlhf}[target]
    trainer = {"verl": "verl", "openrlhf": "OpenRLHF"}[target]
    with pytest.raises(InputError, match=f"reads sample.rollout .* but {trainer} hands the reward text only") as e:
        factory(grader)
    assert e.value.field == "sample.rollout"
    path, out = tmp_path / "g.json", tmp_path / "reward_mod.py"
    path.write_text(json.dumps(grader))
    res = CliRunner().invoke(app, ["export-reward", str(path), "--target", target, "--out", str(out)])
    assert res.exit_code == 2, res.output
    *_, refusal = res.stderr.splitlines()  # after the grader lint's warning that such a grader is not uploadable
    assert refusal == (f"rfteval: sample.rollout: grader 'traj' reads sample.rollout (an agent run's trajectory), but "
                       f"{trainer} hands the reward text only, no messages: train it where the reward gets the "
                       "messages (TRL's tool mode, verifiers, ART, tinker-cookbook's tool_use)")
    assert not out.exists()
    text = tmp_path / "t.json"  # a grader reading only output_text still exports
    text.write_text(json.dumps(python_grader(TEXT_GRADER)))
    res = CliRunner().invoke(app, ["export-reward", str(text), "--target", target, "--out", str(out)])
    assert res.exit_code == 0, res.output
