"""rfteval/data/transcripts.py: another harness's rollout read as the generated messages the loop writes."""

from __future__ import annotations

import json
from typing import Any

import pytest

from rfteval.data.outputs import prompt_index
from rfteval.data.transcripts import read_transcript, without_system
from rfteval.errors import InputError
from tests.support.optional import require
from tests.support.verifiers_traces import P, malformed_episode, tool_graph, vf_trace, vf_traces

CALL = {"id": "c1", "type": "function", "function": {"name": "add", "arguments": {"a": 1, "b": 2}}}


def test_a_plain_output_holds_no_transcript():
    assert read_transcript({"item_id": "q", "output_text": "x"}, P, 1) is None


def test_messages_are_brought_to_the_loops_shape_and_the_stop_reason_derived():
    t = read_transcript({"messages": [{"role": "assistant", "content": "", "tool_calls": [CALL]},
                                      {"role": "tool", "tool_call_id": "c1", "content": 3},
                                      {"role": "assistant", "content": "3"}]}, P, 1)
    assert t is not None and (t.shape, t.stop_reason, t.output_text, t.prompt, t.choices) == (
        "messages", "no_tool_calls", "3", None, None)
    # content null beside the calls, the arguments as JSON text, a tool's content as text: as the run writes them
    assert t.messages[:2] == [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "3"}]
    cut = read_transcript({"messages": [{"role": "assistant", "content": None, "tool_calls": [CALL]}]}, P, 1)
    assert cut is not None and cut.stop_reason == "max_turns"  # still calling tools when the harness stopped it
    given = read_transcript({"messages": [{"role": "assistant", "content": "x"}], "stop_reason": "length"}, P, 1)
    assert given is not None and given.stop_reason == "length"


def test_verifiers_completion_as_messages_or_text_and_its_prompt():
    prompt = [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}]
    t = read_transcript({"prompt": prompt, "completion": "answer", "reward": 1.0}, P, 1)
    assert t is not None and t.messages == [{"role": "assistant", "content": "answer"}] and t.prompt == prompt
    assert without_system(prompt) == prompt[1:]


def test_art_choices_are_the_sampled_turns_after_the_prompt_and_the_final_one_is_kept():
    choice = {"index": 0, "finish_reason": "stop", "logprobs": None,
              "message": {"role": "assistant", "content": "done", "refusal": None, "tool_calls": None}}
    t = read_transcript({"messages_and_choices": [{"role": "user", "content": "q"}, choice], "reward": 0.0}, P, 1)
    assert t is not None and t.prompt == [{"role": "user", "content": "q"}]
    assert t.messages == [{"role": "assistant", "content": "done"}]
    assert t.choices == [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "done"}}]


@pytest.mark.parametrize(("row", "field"), [
    ({"messages": {}}, "messages"), ({"completion": 3}, "completion"), ({"messages": ["x"]}, "messages[0]"),
    ({"messages": [{"role": "developer", "content": "x"}]}, "messages[0].role"),
    ({"messages": [{"role": "assistant", "content": 3}]}, "messages[0].content"),
    ({"messages": [{"role": "assistant", "content": "x", "tool_calls": {}}]}, "messages[0].tool_calls"),
    ({"messages": [{"role": "tool", "content": "x"}, {"role": "assistant", "content": "y"}]},
     "messages[0].tool_call_id"),
    ({"messages": [{"role": "user", "content": "x"}]}, "messages"),
    ({"messages": [{"role": "assistant", "content": "x"}], "stop_reason": "done"}, "stop_reason"),
])
def test_a_malformed_transcript_names_its_field(row, field):
    with pytest.raises(InputError) as err:
        read_transcript(row, P, 7)
    assert (err.value.line, err.value.field) == (7, field)


def test_the_prompt_index_finds_an_item_by_its_prompt_and_marks_a_shared_one():
    a, b = [{"role": "user", "content": "a"}], [{"role": "system", "content": "s"}, {"role": "user", "content": "b"}]
    index = prompt_index([("i1", a), ("i2", b), ("i3", a)])
    from rfteval.data.transcripts import prompt_key

    assert index[prompt_key(a)] is None  # two items share it: the line must say which
    assert index[prompt_key(b)] == "i2" and index[prompt_key(b[1:])] == "i2"


# ------------------------------------------------------------ verifiers 0.4: traces.jsonl, written by verifiers itself


def vf_rebuilt(line: dict[str, Any]) -> list[Any]:
    """verifiers' own final branch of the line's trace (Trace.messages), each message brought to rfteval's shape."""
    from verifiers.v1.trace import Trace

    from rfteval.data.transcripts import vf_message

    return [vf_message(m.model_dump(mode="json", exclude_none=True), P, 1, "m")
            for m in Trace.model_validate(line["traces"][0]).messages]


@pytest.mark.slow
def test_a_verifiers_single_turn_trace(tmp_path):
    vf = require("verifiers.v1", "trainers")
    (line,) = vf_traces(tmp_path, [vf_trace([(vf.UserMessage(content="capital of France?"), None, False),
                                             (vf.AssistantMessage(content="Paris"), 0, True)], info={"id": "q0"})])
    t = read_transcript(line, P, 1)
    assert t is not None and (t.shape, t.messages, t.prompt, t.stop_reason, t.item_ids, t.error, t.output_text) == (
        "traces", [{"role": "assistant", "content": "Paris"}], [{"role": "user", "content": "capital of France?"}],
        "no_tool_calls", ("q0",), None, "Paris")


@pytest.mark.slow
def test_a_verifiers_tool_calling_trace_is_its_final_branch_as_verifiers_builds_it(tmp_path):
    vf = require("verifiers.v1", "trainers")
    compacted = tool_graph() + [  # a compaction: a new root, the summary, the answer (nodes 8-10; leaves 4, 7, 10)
        (vf.SystemMessage(content="be brief"), None, False), (vf.UserMessage(content="summary: 3 and 7"), 8, False),
        (vf.AssistantMessage(content="10"), 9, True)]
    lines = vf_traces(tmp_path, [vf_trace(tool_graph()), vf_trace(compacted)])
    t = read_transcript(lines[0], P, 1)
    assert t is not None and t.prompt is not None and t.prompt + t.messages == vf_rebuilt(lines[0])
    assert t.prompt == [{"role": "system", "content": "be brief"}, {"role": "user", "content": "add 1 and 2"}]
    assert t.messages == [  # content null beside the calls, arguments as text, the namespace shown, tool text joined
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "3"},
        {"role": "assistant", "content": "checking", "tool_calls": [
            {"id": "c2", "type": "function", "function": {"name": "calc.add", "arguments": '{"a": 3, "b": 4}'}}]},
        {"role": "tool", "tool_call_id": "c2", "content": "7"},
        {"role": "assistant", "content": "3 and 7"}]
    assert t.stop_reason == "no_tool_calls"
    c = read_transcript(lines[1], P, 2)  # the compacted branch is the final one: its own prompt, one turn
    assert c is not None and c.prompt is not None and c.prompt + c.messages == vf_rebuilt(lines[1])
    assert c.messages == [{"role": "assistant", "content": "10"}]


@pytest.mark.slow
def test_a_verifiers_stop_condition_read_as_rfteval_stop_reasons(tmp_path):
    vf = require("verifiers.v1", "trainers")
    from verifiers.v1.trace import ModelCall

    calling = tool_graph()[:3]  # stopped after a turn that called a tool
    answered = [(vf.UserMessage(content="q"), None, False), (vf.AssistantMessage(content="a"), 0, True)]
    cases = [(calling, "max_turns", None, "max_turns"), (calling, "agent_timeout", None, "rollout_timeout"),
             (calling, "max_output_tokens", None, "max_turns"), (answered, "max_total_tokens", None, "no_tool_calls"),
             (answered, "agent_completed", [ModelCall(node=1, finish_reason="length")], "length")]
    lines = vf_traces(tmp_path, [vf_trace(n, stop=s, calls=c) for n, s, c, _ in cases])
    got = [t.stop_reason for line in lines if (t := read_transcript(line, P, 1)) is not None]
    assert got == [want for *_, want in cases]


@pytest.mark.slow
def test_a_failed_verifiers_trace_is_its_last_error(tmp_path):
    failed = vf_trace(tool_graph()[:3], info={"id": "q0"})
    failed.record_error(RuntimeError("first"))
    failed.record_error(TimeoutError("the sandbox went away"))
    quiet = vf_trace(tool_graph()[:2], ok=False)  # failed before any turn, saying nothing of why
    lines = vf_traces(tmp_path, [failed, quiet])
    t, q = (read_transcript(line, P, 1) for line in lines)
    assert t is not None and (t.error, t.stop_reason, t.item_ids) == (
        ("TimeoutError", "the sandbox went away"), "", ("q0",))
    assert q is not None and q.error is not None and q.error[0] == "TraceNotOk" and q.messages == []
    # the env failed before any agent ran: an episode with no trace, its own error (and its task's item)
    from verifiers.v1.episode import Episode
    from verifiers.v1.trace import Error
    from verifiers.v1.utils.trace_store import write_episode

    write_episode(tmp_path, Episode(task=failed.task, errors=[Error(type="SandboxError", message="no box")]))
    bare = json.loads((tmp_path / "traces.jsonl").read_text().splitlines()[-1])
    e = read_transcript(bare, P, 3)
    assert e is not None and (e.error, e.messages, e.item_ids) == (("SandboxError", "no box"), [], ("q0",))


@pytest.mark.slow
def test_a_verifiers_trace_finds_its_item_by_info_id_else_by_its_prompt(tmp_path):
    vf = require("verifiers.v1", "trainers")
    from rfteval.data.outputs import iter_outputs

    def trace(question: str, **task: Any) -> Any:
        return vf_trace([(vf.SystemMessage(content="harness says hi"), None, False),
                         (vf.UserMessage(content=question), 0, False), (vf.AssistantMessage(content="x"), 1, True)],
                        **task)

    items = {"q1": [{"role": "user", "content": "one"}], "q2": [{"role": "user", "content": "two"}]}
    vf_traces(tmp_path, [trace("one", info={"id": "q1"}), trace("two"), trace("one", info={"id": "q1"}),
                         trace("two", id="hf-0042")])  # a foreign id, no item's: the prompt finds it
    outs = list(iter_outputs(tmp_path / "traces.jsonl", set(items), prompts=prompt_index(items.items())))
    assert [(o.item_id, o.epoch) for o in outs] == [("q1", 1), ("q2", 1), ("q1", 2), ("q2", 2)]


@pytest.mark.slow
@pytest.mark.parametrize(("case", "field", "message"), [
    ("agents", "traces", "a multi-agent episode (2 traces): rfteval grades one agent's rollout"),
    ("no_nodes", "traces[0].nodes", "missing or empty: a trace holds its messages as nodes"),
    ("parent", "traces[0].nodes[2].parent", "must be another node's index (0 to 7) or absent for a root, got 9"),
    ("role", "traces[0].nodes[1].message.role",
     "role must be one of system, user, assistant, tool, got 'developer'"),
    ("unsampled", "traces[0].nodes", "no sampled node on the final branch: nothing was generated to grade"),
])
def test_a_malformed_verifiers_episode_names_its_field(tmp_path, case, field, message):
    line = malformed_episode(tmp_path, case)
    with pytest.raises(InputError) as err:
        read_transcript(line, P, 7)
    assert (err.value.line, err.value.field, err.value.message) == (7, field, message)
