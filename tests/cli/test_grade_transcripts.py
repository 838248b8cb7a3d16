"""`rfteval grade --outputs` of agent runs made elsewhere: one trajectory played through `rfteval run --tools` (a
real tools.py in the sandbox, a tool call, a follow-up), then the same trajectory written as each harness writes it
(OpenAI chat messages, verifiers' results.jsonl, an ART Trajectory serialised as JSON) and graded with no model:
the grader must see the very sample the run's grader saw (a python grader prints it) and give the same score, and
the records carry the run's agent fields, so `compare` reads them as it reads an agent run's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from openai.types.chat.chat_completion import Choice
from typer.testing import CliRunner

from rfteval.cli.app import app
from tests.support.fake_openai import FakeOpenAI
from tests.support.optional import require_sandbox
from tests.support.toolboxes import ADD_TOOLS_PY, TOOLS_SCHEMA, adding_each_user_message

PROMPT = [{"role": "user", "content": "add 2 and 3"}]
GRADER = '''
import json


def grade(sample, item):
    print(json.dumps(sample, sort_keys=True))
    return 1.0 if sample["output_text"] == item["reference_answer"] and sample["rollout"]["turns"] == 4 else 0.0
'''


def art_line(transcript: list[dict[str, Any]]) -> dict[str, Any]:
    """The trajectory as ART serialises an `art.Trajectory` (trajectory.model_dump(mode="json")): the prompt's
    messages, each sampled turn an openai `Choice`, the tool and user messages between them."""
    turns: list[Any] = [dict(m) for m in PROMPT]
    for message in transcript:
        if message["role"] == "assistant":
            finish = "tool_calls" if message.get("tool_calls") else "stop"
            turns.append(Choice(index=0, finish_reason=finish, message=message).model_dump(mode="json"))
        else:
            turns.append(message)
    return {"messages_and_choices": turns, "tools": TOOLS_SCHEMA[:1], "additional_histories": [], "reward": 0.0,
            "initial_policy_version": None, "final_policy_version": None, "metrics": {}, "metadata": {}, "logs": []}


@pytest.mark.slow
def test_a_transcript_from_each_harness_grades_as_the_run_that_played_it(tmp_path: Path) -> None:
    require_sandbox()
    dataset, grader, tools, out = (tmp_path / n for n in ("items.jsonl", "grader.py", "tools.py", "run"))
    dataset.write_text(json.dumps({"id": "q0", "messages": PROMPT, "tools": TOOLS_SCHEMA[:1],
                                   "reference_answer": "sum: 9", "rfteval_followups": ["now add 4 and 5"]}) + "\n")
    grader.write_text(GRADER)
    tools.write_text(ADD_TOOLS_PY)
    env = {"OPENAI_API_KEY": "sk-fake-0001"}
    with FakeOpenAI(adding_each_user_message) as server:
        res = CliRunner().invoke(app, ["run", "--dataset", str(dataset), "--grader", str(grader), "--tools", str(tools),
                                       "--model", "base=fake-base", "--epochs", "1", "--base-url", server.base_url,
                                       "--out", str(out), "-q"], env=env)
        assert res.exit_code == 0, res.output
        (played,) = [json.loads(x) for x in (out / "base.jsonl").read_text().splitlines()]
        transcript = json.loads(played["transcript"])
        server.reset()
        shapes = {
            "messages": {"item_id": "q0", "model": "fake-base", "messages": transcript},
            # verifiers finds the item by its prompt (no item_id), and its completion's arguments may be objects
            "verifiers": {"example_id": 0, "prompt": PROMPT, "completion": transcript, "answer": "", "task": "default",
                          "reward": 1.0, "info": {}},
            "art": art_line(transcript),
        }
        graded = {}
        for shape, line in shapes.items():
            outputs = tmp_path / f"{shape}.jsonl"
            outputs.write_text(json.dumps(line) + "\n")
            res = CliRunner().invoke(app, ["grade", "-d", str(dataset), "-g", str(grader), "--outputs", str(outputs),
                                           "--out", str(tmp_path / f"{shape}.records.jsonl")], env=env)
            assert res.exit_code == 0, (shape, res.output)
            (graded[shape],) = [json.loads(x) for x in (tmp_path / f"{shape}.records.jsonl").read_text().splitlines()]
        assert server.requests == []  # graded with zero requests
    assert played["score"] == 1.0 and [m["role"] for m in transcript] == [
        "assistant", "tool", "assistant", "user", "assistant", "tool", "assistant"]
    run_sample = json.loads(played["grader_stdout"])
    assert run_sample["rollout"]["messages"] == transcript and run_sample["output_text"] == "sum: 9"
    assert run_sample["rollout"].pop("trace_id").startswith("trace_")
    without_trace = run_sample
    for shape, record in graded.items():
        # the same sample, key for key; but the trace id the run's tool calls carried (Agent RFT's, for an endpoint
        # grader to join its tool server's logs on): no tool of another harness carried one
        assert json.loads(record["grader_stdout"]) == without_trace, shape
        assert record["score"] == played["score"], shape
        agent = ("output_text", "output_tools", "turns", "stop_reason", "tool_calls", "tool_errors", "transcript")
        assert {k: record[k] for k in agent} == {k: played[k] for k in agent}, shape
    # compare reads a transcript's records as an agent run's: the effort table beside the scores
    res = CliRunner().invoke(app, ["compare", str(out / "base.jsonl"), str(tmp_path / "art.records.jsonl"),
                                   "--format", "json"])
    assert res.exit_code == 0, res.output
    compared = json.loads(res.output)
    assert compared["agent"] is not None, sorted(compared)


@pytest.mark.slow
def test_a_malformed_transcript_is_one_line_naming_the_line_and_field(tmp_path: Path) -> None:
    dataset, grader = tmp_path / "items.jsonl", tmp_path / "grader.json"
    dataset.write_text(json.dumps({"id": "q0", "messages": PROMPT, "reference_answer": "x"}) + "\n")
    grader.write_text(json.dumps({"type": "string_check", "name": "s", "input": "{{ sample.output_text }}",
                                  "reference": "{{ item.reference_answer }}", "operation": "eq"}))
    cases = [({"item_id": "q0", "messages": "hi"}, "messages: must be a list of messages"),
             ({"item_id": "q0", "messages": [{"role": "system", "content": "x"}]},
              "messages[0].role: role must be one of assistant, tool, user (the turns after the prompt), got 'system'"),
             ({"item_id": "q0", "messages": [{"role": "tool", "tool_call_id": "c", "content": "1"}]},
              "messages: holds no assistant turn: nothing was generated to grade"),
             ({"prompt": [{"role": "user", "content": "other"}], "completion": "x"},
              "prompt: no item of the dataset has this line's prompt: give the line an item_id"),
             ({"item_id": "q0", "completion": "x", "stop_reason": "tired"},
              "stop_reason: must be one of no_tool_calls, max_turns, max_tool_calls, length, rollout_timeout, "
              "context, got 'tired'")]
    for line, message in cases:
        outputs = tmp_path / "out.jsonl"
        outputs.write_text(json.dumps(line) + "\n")
        res = CliRunner().invoke(app, ["grade", "-d", str(dataset), "-g", str(grader), "--outputs", str(outputs)])
        assert res.exit_code == 2 and res.stderr.strip() == f"rfteval: {outputs}:1: {message}", res.output
        assert not (tmp_path / "out.records.jsonl").exists()
