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
from tests.support.optional import require, require_sandbox
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


# ------------------------------------------------------------------------ verifiers 0.4: vf-eval's traces.jsonl

VF_GRADER = {"type": "string_check", "name": "s", "input": "{{ sample.output_text }}",
             "reference": "{{ item.reference_answer }}", "operation": "eq"}
VF_ITEMS = [{"id": f"q{i}", "messages": [{"role": "user", "content": f"add {i} and {i}"}], "tools": TOOLS_SCHEMA[:1],
             "reference_answer": f"sum: {2 * i}"} for i in range(3)]


def add_call(cid: str, a: int, b: int) -> dict[str, Any]:
    return {"id": cid, "type": "function", "function": {"name": "add", "arguments": json.dumps({"a": a, "b": b})}}


# the rollouts, as OpenAI chat messages after each item's prompt: (item, messages); q0 twice (two epochs)
VF_ROLLOUTS: list[tuple[int, list[dict[str, Any]]]] = [
    (0, [{"role": "assistant", "content": None, "tool_calls": [add_call("c1", 0, 0)]},
         {"role": "tool", "tool_call_id": "c1", "content": "0"}, {"role": "assistant", "content": "sum: 0"}]),
    (1, [{"role": "assistant", "content": "sum: 3"}]),  # wrong
    (2, [{"role": "assistant", "content": None, "tool_calls": [add_call("c1", 2, 2)]},
         {"role": "tool", "tool_call_id": "c1", "content": "4"},
         {"role": "assistant", "content": "let me check", "tool_calls": [add_call("c2", 2, 2)]},
         {"role": "tool", "tool_call_id": "c2", "content": "4"}, {"role": "assistant", "content": "sum: 4"}]),
    (0, [{"role": "assistant", "content": "sum: 1"}]),
]


def vf_episode_trace(row: dict[str, Any], messages: list[dict[str, Any]], retried: bool) -> Any:
    """The rollout as verifiers records it: the row's prompt (verifiers' messages), each generated message a node
    (the assistant ones sampled, their calls flat); `retried`: the first reply was also played once more, a
    second leaf that is not the final branch."""
    import verifiers.v1 as vf
    from verifiers.v1.graph import MessageNode
    from verifiers.v1.task import TaskData
    from verifiers.v1.trace import AgentInfo, Trace, TraceTask

    class Row(TaskData):
        answer: str = ""
        info: dict[str, Any] = {}

    def node(m: dict[str, Any], parent: int | None) -> Any:
        if m["role"] == "assistant":
            calls = [vf.ToolCall(id=c["id"], name=c["function"]["name"], arguments=c["function"]["arguments"])
                     for c in m.get("tool_calls") or []]
            return MessageNode(message=vf.AssistantMessage(content=m["content"], tool_calls=calls or None),
                               parent=parent, sampled=True)
        if m["role"] == "tool":
            return MessageNode(message=vf.ToolMessage(tool_call_id=m["tool_call_id"], content=m["content"]),
                               parent=parent)
        return MessageNode(message=vf.UserMessage(content=m["content"]), parent=parent)

    data = Row(**{k: v for k, v in row.items() if k in ("prompt", "answer", "info")})
    nodes = [node(m, i - 1 if i else None) for i, m in enumerate([*row["prompt"], *messages])]
    if retried:  # the final reply played twice: the first attempt a dead leaf before it
        nodes.insert(len(nodes) - 1, node({"role": "assistant", "content": "sum: 99"}, len(nodes) - 2))
        nodes[-1].parent = len(nodes) - 3
    trace = Trace(task=TraceTask(type="RFT", data=data), agent=AgentInfo(config=vf.AgentConfig()), nodes=nodes)
    trace.ok, trace.stop_condition = True, "agent_completed"
    return trace


@pytest.mark.slow
def test_a_verifiers_traces_file_grades_as_the_same_rollouts_as_chat_messages(tmp_path: Path) -> None:
    """vf-eval's traces.jsonl (written by verifiers' own write_episode over a dataset exported for verifiers), graded
    with no model: the scores and agent fields of the same rollouts given as OpenAI `messages` lines; the run
    directory may be given for the file; a failed trace is a generation error, counted."""
    require("verifiers.v1", "trainers")
    from verifiers.v1.episode import Episode
    from verifiers.v1.utils.trace_store import write_episode

    dataset, grader, run = tmp_path / "items.jsonl", tmp_path / "grader.json", tmp_path / "vf-run"
    dataset.write_text("".join(json.dumps(it) + "\n" for it in VF_ITEMS))
    grader.write_text(json.dumps(VF_GRADER))
    res = CliRunner().invoke(app, ["export-dataset", str(dataset), "--target", "verifiers", "--out",
                                   str(tmp_path / "vf")])
    assert res.exit_code == 0, res.output
    rows = [json.loads(x) for x in (tmp_path / "vf" / "train.jsonl").read_text().splitlines()]
    by_id = {row["info"]["id"]: row for row in rows}
    run.mkdir()
    for n, (i, messages) in enumerate(VF_ROLLOUTS):
        trace = vf_episode_trace(by_id[f"q{i}"], messages, retried=n == 2)
        write_episode(run, Episode(task=trace.task, traces=[trace], ok=True))
    chat = tmp_path / "chat.jsonl"
    chat.write_text("".join(json.dumps({"item_id": f"q{i}", "messages": m}) + "\n" for i, m in VF_ROLLOUTS))

    def graded(outputs: Path, out: Path) -> list[dict[str, Any]]:
        res = CliRunner().invoke(app, ["grade", "-d", str(dataset), "-g", str(grader), "--outputs", str(outputs),
                                       "--out", str(out), "--format", "json"])
        assert res.exit_code == 0, res.output
        return [json.loads(x) for x in out.read_text().splitlines()]

    vf_records = graded(run / "traces.jsonl", tmp_path / "vf.records.jsonl")
    chat_records = graded(chat, tmp_path / "chat.records.jsonl")
    keys = ("item_id", "epoch", "score", "error", "output_text", "output_tools", "turns", "stop_reason", "tool_calls",
            "tool_errors", "transcript")
    assert [r["score"] for r in vf_records] == [1.0, 0.0, 1.0, 0.0]
    assert [{k: r[k] for k in keys} for r in vf_records] == [{k: r[k] for k in keys} for r in chat_records]
    assert [(r["item_id"], r["epoch"], r["turns"]) for r in vf_records] == [("q0", 1, 2), ("q1", 1, 1), ("q2", 1, 3),
                                                                           ("q0", 2, 1)]

    failed = vf_episode_trace(by_id["q1"], VF_ROLLOUTS[1][1], retried=False)
    failed.record_error(TimeoutError("the sandbox went away"))
    write_episode(run, Episode(task=failed.task, traces=[failed]))
    res = CliRunner().invoke(app, ["grade", "-d", str(dataset), "-g", str(grader), "--outputs", str(run),
                                   "--format", "json", "--max-error-rate", "0.5"])
    assert res.exit_code == 0, res.output
    records = [json.loads(x) for x in (run / "traces.records.jsonl").read_text().splitlines()]  # beside the file
    assert [r["score"] for r in records[:4]] == [1.0, 0.0, 1.0, 0.0]
    assert records[4]["error"] == {"stage": "generate", "type": "TimeoutError", "message": "the sandbox went away"}
    assert (records[4]["item_id"], records[4]["epoch"], records[4]["stop_reason"]) == ("q1", 2, "")
    (model,) = json.loads(res.stdout)["models"]
    # counted, and left out of the mean as a generation failure is (not a score of 0)
    assert (model["records"], model["errors_by_type"], model["excluded"]) == (5, {"TimeoutError": 1}, 1), model


@pytest.mark.slow
@pytest.mark.parametrize("case", ["agents", "no_nodes", "parent", "role", "unsampled", "prompt"])
def test_a_malformed_verifiers_episode_is_one_line_and_exit_2(tmp_path: Path, case: str) -> None:
    require("verifiers.v1", "trainers")
    from tests.support.verifiers_traces import malformed_episode, vf_trace, vf_traces

    dataset, grader = tmp_path / "items.jsonl", tmp_path / "grader.json"
    dataset.write_text(json.dumps({"id": "q0", "messages": PROMPT, "reference_answer": "x"}) + "\n")
    grader.write_text(json.dumps(VF_GRADER))
    if case == "prompt":  # no item has its prompt, and its task names none
        import verifiers.v1 as vf

        line = vf_traces(tmp_path, [vf_trace([(vf.UserMessage(content="other"), None, False),
                                              (vf.AssistantMessage(content="x"), 0, True)])])[0]
        message = "traces[0].nodes: no item of the dataset has this line's prompt: give its task an info.id"
    else:
        line = malformed_episode(tmp_path, case)
        message = {"agents": "traces: a multi-agent episode (2 traces): rfteval grades one agent's rollout",
                   "no_nodes": "traces[0].nodes: missing or empty: a trace holds its messages as nodes",
                   "parent": "traces[0].nodes[2].parent: must be another node's index (0 to 7) or absent for a "
                             "root, got 9",
                   "role": "traces[0].nodes[1].message.role: role must be one of system, user, assistant, tool, "
                           "got 'developer'",
                   "unsampled": "traces[0].nodes: no sampled node on the final branch: nothing was generated to "
                                "grade"}[case]
    outputs = tmp_path / "out.jsonl"
    outputs.write_text(json.dumps(line) + "\n")
    res = CliRunner().invoke(app, ["grade", "-d", str(dataset), "-g", str(grader), "--outputs", str(outputs)])
    assert res.exit_code == 2 and res.stderr.strip() == f"rfteval: {outputs}:1: {message}", res.output
    assert not (tmp_path / "out.records.jsonl").exists()
