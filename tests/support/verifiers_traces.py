"""verifiers 0.4's traces.jsonl written by verifiers itself, for the tests of rfteval.data.transcripts and of
`rfteval grade --outputs traces.jsonl`: a Trace over given message nodes, each as an Episode line appended by
verifiers' own write_episode, and real lines malformed one way. verifiers is imported lazily (the `trainers` target
installs it; `require` says so when it is absent)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.support.optional import require

P = Path("out.jsonl")  # the outputs file an InputError names


def vf_traces(tmp_path: Path, traces: list[Any], episodes: list[list[Any]] | None = None) -> list[dict[str, Any]]:
    """Each trace as its own Episode (or the episodes given, as lists of traces), appended to traces.jsonl by
    verifiers' own write_episode; the lines read back as JSON."""
    from verifiers.v1.episode import Episode
    from verifiers.v1.utils.trace_store import TRACES_FILE, write_episode

    for group in episodes if episodes is not None else [[t] for t in traces]:
        write_episode(tmp_path, Episode(task=group[0].task, traces=group, ok=all(t.ok for t in group)))
    return [json.loads(x) for x in (tmp_path / TRACES_FILE).read_text().splitlines()]


def vf_trace(nodes: list[tuple[Any, int | None, bool]], info: dict[str, Any] | None = None, ok: bool = True,
             stop: str | None = "agent_completed", calls: list[Any] | None = None, **data: Any) -> Any:
    """A verifiers Trace over (message, parent, sampled) nodes, its task a row as rfteval's export writes one."""
    vf = require("verifiers.v1", "trainers")
    from verifiers.v1.graph import MessageNode
    from verifiers.v1.task import TaskData
    from verifiers.v1.trace import AgentInfo, Trace, TraceTask

    class Row(TaskData):
        answer: str = ""
        info: dict[str, Any] = {}

    prompt = [m for m, _, sampled in nodes if not sampled][:1]
    row = Row(prompt=prompt, answer="", info=info or {}, **data)
    trace = Trace(task=TraceTask(type="RFT", data=row), agent=AgentInfo(config=vf.AgentConfig()),
                  nodes=[MessageNode(message=m, parent=p, sampled=s) for m, p, s in nodes], calls=calls or [])
    trace.ok, trace.stop_condition = ok, stop
    return trace


def tool_graph() -> list[tuple[Any, int | None, bool]]:
    """A tool-calling rollout whose turn 2 was played twice: the first reply (node 4) a dead leaf, the retry (node 5)
    calling a tool again before the final answer. Two leaves, 4 and 7: the final branch is 0-1-2-3-5-6-7."""
    vf = require("verifiers.v1", "trainers")
    call = vf.ToolCall(id="c1", name="add", arguments='{"a": 1, "b": 2}')
    again = vf.ToolCall(id="c2", name="add", namespace="calc", arguments='{"a": 3, "b": 4}')
    return [(vf.SystemMessage(content="be brief"), None, False), (vf.UserMessage(content="add 1 and 2"), 0, False),
            (vf.AssistantMessage(content=None, tool_calls=[call]), 1, True),
            (vf.ToolMessage(tool_call_id="c1", content=[vf.TextContentPart(text="3")]), 2, False),
            (vf.AssistantMessage(content="abandoned"), 3, True),
            (vf.AssistantMessage(content="checking", reasoning_content="hmm", tool_calls=[again]), 3, True),
            (vf.ToolMessage(tool_call_id="c2", content="7"), 5, False),
            (vf.AssistantMessage(content="3 and 7"), 6, True)]


def malformed_episode(tmp_path: Path, case: str) -> dict[str, Any]:
    """A real line verifiers wrote, malformed one way (by verifiers itself where it can write it so)."""
    if case == "agents":
        return vf_traces(tmp_path, [], episodes=[[vf_trace(tool_graph()), vf_trace(tool_graph())]])[0]
    if case == "no_nodes":
        return vf_traces(tmp_path, [vf_trace([])])[0]
    if case == "unsampled":
        return vf_traces(tmp_path, [vf_trace(tool_graph()[:2])])[0]
    (line,) = vf_traces(tmp_path, [vf_trace(tool_graph())])
    nodes = line["traces"][0]["nodes"]
    if case == "parent":
        nodes[2]["parent"] = 9
    else:
        nodes[1]["message"]["role"] = "developer"
    return line
