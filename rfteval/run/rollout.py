"""One cell of a run played as a rollout: the model's turns and, in an agent run, the tool turns between them.

A cell (model, item, epoch) is a rollout of one or more turns. Without tools it is exactly one turn: the item's
request, sent once, its answer (or the error it ended in) stored under the cell's key as it always was.

With a tool box (`rfteval run --tools`), the item's messages go out with its `tools`; while the reply calls tools,
the turn's calls run through the tool box, in order, in one `run_turn`; the assistant message (with its
`tool_calls`) and one `tool` message per call are appended, and the history is sent again. An item's forced
`tool_choice` applies to the first turn only, then "auto". An item's scripted user turns (`rfteval_followups`)
are appended one at a time, each when the agent answers without a tool call, and the history sent again; the
rollout ends on the answer to the last (`no_tool_calls`), and --max-turns counts model calls over all of them.
The rollout ends with one stop reason (rfteval.data.rollout.STOP_REASONS); a limited rollout is graded as it
stands, and a turn that failed after every retry makes the cell a generation error (left out of the means and
counted, as a failed single answer is).

Everything is stored before it is used, so a rollout cut at turn 7 (a kill, Ctrl-C) goes on at turn 7: each model
turn is in responses.jsonl under the key of its own request (which holds the history, so turn k's key covers turns
1..k-1), each tool turn in tools.jsonl under its model turn's key and the tool box's identity, the finished rollout
in rollouts.jsonl under the rollout key. Replayed turns send no request and run no tool; a tool with a clock or
randomness cannot make the replay diverge.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from rfteval.data import rollout as traj
from rfteval.data.reasoning import DEFAULT_MODE, DEFAULT_TAGS, entry_sample
from rfteval.data.records import now_iso
from rfteval.data.rollout import RolloutLimits
from rfteval.errors import InputError
from rfteval.providers.base import exceeds_context
from rfteval.run.entries import (
    EntryError,
    RolloutEntry,
    ToolTurnEntry,
    is_reusable_response,
    tool_turn_key,
)

if TYPE_CHECKING:
    from rfteval.data.dataset import Item
    from rfteval.data.json_types import JSONObject, JSONValue
    from rfteval.data.sample import Sample
    from rfteval.providers.base import GenerationRequest
    from rfteval.run.entries import CellKeys, ResponseEntry
    from rfteval.run.spec import ModelRun, RunSpec
    from rfteval.run.store import RunStore
    from rfteval.sandbox.policy import SandboxPolicy
    from rfteval.tools.base import ToolBox, ToolResult

# How a turn goes out (rfteval.run.turns.TurnSender.send): the model run, its request, the keys its entry is stored
# under, the turn's number; the answer or the error it ended in after every retry.
SendTurn = Callable[["ModelRun", "GenerationRequest", "CellKeys", int], Awaitable["ResponseEntry"]]


class RolloutCell(Protocol):
    """What a rollout is played for (the runner's job): one (model, item, epoch), its first request and that
    request's key. Read-only properties, so the runner's own attribute types satisfy them."""

    @property
    def run(self) -> ModelRun: ...

    @property
    def item(self) -> Item: ...

    @property
    def epoch(self) -> int: ...

    @property
    def request(self) -> GenerationRequest: ...

    @property
    def key(self) -> str: ...  # the cell's key: an agent run's rollout key, else the first turn's

    @property
    def first_key(self) -> str: ...  # the first turn's cache key (rfteval.run.store.cell_key over its request body)


@dataclass(frozen=True)
class Agent:
    """What makes a cell a rollout of many turns: the tool box, the limits, and how a turn's request is keyed (the
    model's provider and identity: rfteval.run.store.cell_key over the request body)."""

    tools: ToolBox
    limits: RolloutLimits
    turn_key: Callable[[ModelRun, GenerationRequest, int], str]  # (model run, request, epoch) → the turn's key


class ToolsFailed(Exception):
    """The tool box itself failed (its sandbox gone, a result missing): no call's error, the machinery's. The run
    stops (the runner raises rfteval.run.turns.ToolsStopped); stored turns are kept and a re-run resumes."""


def open_tools(spec: RunSpec, policy: SandboxPolicy, retry_base_s: float = 0.5) -> ToolBox | None:
    """The run's tool box: its [tools] python module (--tools FILE) opened in the python sandbox under the tools'
    limits (--tool-timeout, --tool-memory, --tool-output-limit), its Agent RFT tool endpoints (--tool-endpoints
    FILE, their 5xx retried after `retry_base_s`-based waits), its MCP servers (--mcp, each started once in the
    sandbox to list its tools), or several as one box; None for a run without tools. With MCP servers, every tool
    an item declares must be one of the box's (one line naming the line, else)."""
    if spec.tools is None:
        return None
    t = spec.tools
    boxes: list[tuple[str, ToolBox]] = []
    try:
        if t.python is not None:
            path = Path(t.python)
            if not path.is_file():
                raise InputError("no such file (the tools module)", path, field="--tools")
            from rfteval.tools.python import open_python_tools

            boxes.append((str(path), open_python_tools(path, spec.tool_limits(), policy)))
        if t.endpoints is not None:
            from rfteval.tools.endpoint import open_tool_endpoints

            boxes.append((t.endpoints, open_tool_endpoints(t.endpoints, spec.tool_limits(), item_fields=t.item_fields,
                                                           timeout_s=t.endpoint_timeout, retry_base_s=retry_base_s)))
        if t.mcp:
            from rfteval.tools.mcp import check_declared, open_mcp_tools

            boxes.append(("[tools] mcp", open_mcp_tools([m.model_dump() for m in t.mcp], spec.tool_limits(), policy)))
        if len(boxes) == 1:
            box = boxes[0][1]
        else:
            from rfteval.tools.composite import CompositeTools

            box = CompositeTools(boxes)
        if t.mcp:
            check_declared(spec.dataset, box.names(), spec.limit)
        return box
    except BaseException:
        for _, box in boxes:  # a python box opened before the endpoints were refused: its sandbox stopped
            close = getattr(box, "close", None)
            if callable(close):
                close()
        raise


def cell_sample(entry: ResponseEntry, mode: str = DEFAULT_MODE,
                tags: Sequence[tuple[str, str]] = DEFAULT_TAGS) -> Sample:
    """The grader's sample of a cell's stored entry: a rollout's from its trajectory (data.rollout.rollout_sample:
    the final turn's output fields and sample["rollout"]), a single answer's as it always was."""
    if isinstance(entry, RolloutEntry):
        sample = traj.rollout_sample(entry.messages, stop_reason=entry.stop_reason or "", errors=entry.call_errors,
                                     output_json=entry.output_json, choices=entry.choices, reasoning=entry.reasoning,
                                     finish_reason=entry.finish_reason, mode=mode, tags=tags)
        rollout = sample.get("rollout")
        if entry.trace_id is not None and isinstance(rollout, dict):  # what the rollout's tool calls carried
            rollout["trace_id"] = entry.trace_id
        return sample
    return entry_sample(entry, mode=mode, tags=tags)


def tools_summary(spec: RunSpec, tools: ToolBox) -> JSONObject:
    """What summary.json says of an agent run: its tools (the module, the tool box's identity) and its limits; with
    tool endpoints, the tools config and the item fields sent too (never a header)."""
    limits, rollout = spec.tool_limits(), spec.rollout_limits()
    out: JSONObject = {
        "python": spec.tools.python if spec.tools is not None else None, "identity": tools.identity,
        "max_turns": rollout.max_turns, "max_tool_calls": rollout.max_tool_calls, "tool_timeout": limits.timeout_s,
        "tool_memory": limits.memory_mb, "tool_output_limit": limits.output_chars,
        "rollout_timeout": rollout.timeout_s}
    if spec.tools is not None and spec.tools.endpoints is not None:
        fields: JSONValue = list(spec.tools.item_fields) if spec.tools.item_fields is not None else None
        out.update({"endpoints": spec.tools.endpoints, "item_fields": fields,
                    "endpoint_timeout": spec.tools.endpoint_timeout})
    if spec.tools is not None and spec.tools.mcp:
        out["mcp"] = _mcp_shown(spec)
    return out


def _mcp_shown(spec: RunSpec) -> JSONValue:
    """The run's MCP servers as summary.json holds them: command, the environment's names, per, network."""
    from rfteval.tools.mcp import server_from

    assert spec.tools is not None and spec.tools.mcp
    return [server_from(m.model_dump(), "[tools] mcp").summary() for m in spec.tools.mcp]


def limits_line(spec: RunSpec) -> str | None:
    """The run's header line for an agent run: its tools and every limit (None without tools); the same words as
    the line under its table, which reads them from summary.json."""
    if spec.tools is None:
        return None
    t = spec.tools
    out: dict[str, object] = {
        "python": t.python, "max_turns": t.max_turns, "max_tool_calls": t.max_tool_calls,
        "rollout_timeout": t.rollout_timeout, "tool_timeout": t.tool_timeout, "tool_memory": t.tool_memory,
        "tool_output_limit": t.tool_output_limit}
    if t.endpoints is not None:
        out.update({"endpoints": t.endpoints, "item_fields": t.item_fields, "endpoint_timeout": t.endpoint_timeout})
    if t.mcp:
        out["mcp"] = _mcp_shown(spec)
    return "agent run: " + limits_text(out)


def limits_text(tools: Mapping[str, object]) -> str:
    """An agent run's tools and limits (summary.json's `tools`) in words, each limit by its flag's name."""

    def limit(name: str, unit: str = "") -> str:
        value = tools.get(name)
        return "none" if value is None else f"{value:g}{unit}" if isinstance(value, float) else f"{value}{unit}"

    named = [str(tools[k]) for k in ("python", "endpoints") if tools.get(k) is not None]
    servers = tools.get("mcp")
    if isinstance(servers, list) and servers:
        named.append("MCP " + ", ".join(_server_words(s) for s in servers))
    names = " and ".join(named)
    text = (f"tools {names}; limits: max turns {limit('max_turns')}, max tool calls {limit('max_tool_calls')}, "
            f"rollout timeout {limit('rollout_timeout', ' s')}, tool timeout {limit('tool_timeout', ' s')}, tool "
            f"memory {limit('tool_memory', ' MB')}, tool output limit {limit('tool_output_limit', ' characters')}")
    if tools.get("endpoints") is not None:
        fields = tools.get("item_fields")
        sent = "the whole line" if not isinstance(fields, list) else "item fields " + ",".join(map(str, fields))
        text += f", endpoint call timeout {limit('endpoint_timeout', ' s')} ({sent} sent)"
    return text


def _server_words(server: object) -> str:
    """An MCP server as the header and the table say it: `mcp-server-time (per rollout, no network)`."""
    import shlex

    if not isinstance(server, dict):
        return str(server)
    command = server.get("command")
    words = shlex.join(map(str, command)) if isinstance(command, list) else str(command)
    env = server.get("env")
    more = f", env {','.join(map(str, env))}" if isinstance(env, list) and env else ""
    return f"{words} (per {server.get('per')}, {'NETWORK' if server.get('network') else 'no network'}{more})"


async def play(cell: RolloutCell, send: SendTurn, store: RunStore, agent: Agent | None = None) -> ResponseEntry:
    """Play `cell`: its turns sent through `send`, each stored (and flushed) before anything uses it; the entry
    the cell is graded from (an agent run's: the finished rollout, rollouts.jsonl's line)."""
    if agent is None:
        keys: CellKeys = {"key": cell.key, "label": cell.run.label, "model": cell.run.model,
                          "item_id": cell.item.id, "epoch": cell.epoch, "session": store.session}
        entry = await send(cell.run, cell.request, keys, 1)
        store.put_response(entry)  # stored (and flushed) before it is graded
        return entry
    played = _Rollout(cell, send, store, agent)
    try:
        rollout = await played.play()
    finally:  # a tool box that keeps a process per rollout (MCP servers) stops this rollout's
        end = getattr(agent.tools, "end_rollout", None)
        if end is not None and played.trace is not None:
            await end(played.trace)
    store.put_rollout(rollout)
    return rollout


class _Rollout:
    """One rollout being played: its history so far, the turns behind it, and its time."""

    def __init__(self, cell: RolloutCell, send: SendTurn, store: RunStore, agent: Agent):
        self.cell, self.send, self.store, self.agent = cell, send, store, agent
        self.limits = agent.limits
        self.history: list[JSONValue] = []  # the generated messages
        self.turns: list[ResponseEntry] = []  # the answered model turns, in order
        self.errors: dict[str, str] = {}  # call id → the failed call's error type
        self.calls_run = 0
        self.spent = 0.0  # the rollout's time (RolloutLimits.timeout_s)
        self.state: JSONObject | None = None  # the tools' state after the last tool turn (None: none ran yet)
        self.trace: str | None = None  # the trace id its tool calls carry (providers.agent_rft.new_trace_id)
        self.tool_failure: EntryError | None = None  # a tool that gave no answer after its retries

    def remaining(self) -> float | None:
        return None if self.limits.timeout_s is None else self.limits.timeout_s - self.spent

    async def play(self) -> RolloutEntry:
        cell = self.cell
        request, key = cell.request, cell.first_key
        stop = ""
        failed: ResponseEntry | None = None
        followups: list[JSONValue] = list(cell.item.followups)  # the user's scripted turns still to come
        for turn in range(1, self.limits.max_turns + 1):
            entry = await self._model_turn(request, key, turn)
            if entry is None:
                stop = traj.ROLLOUT_TIMEOUT
                break
            if entry.error is not None:
                if turn > 1 and exceeds_context(entry.error.type, entry.error.message):
                    stop = traj.CONTEXT  # the history outgrew the server's context: graded as it stands
                else:
                    failed = entry  # a turn that failed after every retry: the cell's generation error
                    stop = ""
                break
            self.turns.append(entry)
            calls = traj.turn_calls(entry.output_tools, turn)
            self.history.append(traj.assistant_message(entry.output_text, calls))
            if entry.finish_reason == "length":
                stop = traj.LENGTH
                break
            if not calls and not followups:
                stop = traj.NO_TOOL_CALLS
                break
            if turn == self.limits.max_turns:
                stop = traj.MAX_TURNS
                break
            if not calls:  # the agent answered: the user's next scripted turn follows
                self.history.append(followups.pop(0))
            elif self.limits.max_tool_calls is not None and self.calls_run + len(calls) > self.limits.max_tool_calls:
                stop = traj.MAX_TOOL_CALLS
                break
            elif not await self._tool_turn(key, turn, calls):
                stop = traj.ROLLOUT_TIMEOUT if self.tool_failure is None else ""
                break
            # the next turn: the whole history, and the tool choice left to the model (a forced one is the first's)
            request = dataclasses.replace(cell.request, messages=[*cell.request.messages, *self.history],
                                          tool_choice=None)
            key = self.agent.turn_key(cell.run, request, cell.epoch)
        return self._entry(stop, failed)

    async def _model_turn(self, request: GenerationRequest, key: str, turn: int) -> ResponseEntry | None:
        """Turn `turn`'s answer: stored, else sent and stored; None when the rollout's time ran out first."""
        entry = self.store.get_response(key)
        if is_reusable_response(entry):
            assert entry is not None
            self.spent += entry.latency_s or 0.0
            return entry
        remaining = self.remaining()
        if remaining is not None and remaining <= 0:
            return None
        cell = self.cell
        keys: CellKeys = {"key": key, "label": cell.run.label, "model": cell.run.model, "item_id": cell.item.id,
                          "epoch": cell.epoch, "session": self.store.session}
        async with asyncio.timeout(remaining) as deadline:
            try:
                entry = await self.send(cell.run, request, keys, turn)
            except TimeoutError:
                if deadline.expired():
                    return None  # the rollout's time ran out mid-turn: nothing stored, a longer timeout sends it
                raise
        entry.turn = turn
        self.store.put_response(entry)  # stored (and flushed) before the rollout goes on from it
        self.spent += entry.latency_s or 0.0
        return entry

    def _trace_id(self) -> str:
        """The trace id of the rollout's calls: a rollout played before in this run directory keeps its own (its
        tool server's state is filed under it), any other gets a new one."""
        if self.trace is None:
            from rfteval.providers.agent_rft import new_trace_id

            before = self.store.get_rollout(self.cell.key)
            self.trace = before.trace_id if before is not None and before.trace_id else new_trace_id()
        return self.trace

    async def _tool_turn(self, model_key: str, turn: int, calls: list[traj.ToolCallJSON]) -> bool:
        """Run (or read back) the turn's calls and append their tool messages; False when the rollout's time ran
        out first, or a tool gave no answer after its retries (`tool_failure`)."""
        from rfteval.tools.base import RolloutToolError, ToolCall
        from rfteval.tools.endpoint import ToolServerGone

        tools = self.agent.tools
        key = tool_turn_key(model_key, tools.identity, self.cell.item.id)
        stored = self.store.get_tool_turn(key)
        if stored is None:
            remaining = self.remaining()
            if remaining is not None and remaining <= 0:
                return False
            if self.state is None:  # the first tool turn run live: the tools' state starts here
                self.state = await tools.init_state(self.cell.item.data)
            started = time.perf_counter()
            wanted = [ToolCall(c["id"], c["name"], c["arguments"]) for c in calls]
            async with asyncio.timeout(remaining) as deadline:
                try:
                    results, state = await tools.run_turn(self._trace_id(), self.cell.item.data, wanted, self.state)
                except TimeoutError:
                    if deadline.expired():
                        return False
                    raise ToolsFailed("the tool turn timed out outside its own limit") from None
                except RolloutToolError as exc:  # this rollout's generation error; the run goes on
                    self.tool_failure = EntryError(exc.kind, str(exc)[:1000])
                    return False
                except ToolServerGone as exc:  # not this rollout's error: every rollout's; the run stops
                    raise ToolsFailed(str(exc)[:500]) from None
                except Exception as exc:  # noqa: BLE001 - the machinery failed, not a call (those are results)
                    raise ToolsFailed(f"{type(exc).__name__}: {exc}"[:500]) from None
            if len(results) != len(calls):
                raise ToolsFailed(f"{len(results)} results for {len(calls)} calls")
            stored = ToolTurnEntry(key=key, model_key=model_key, rollout=self.cell.key, turn=turn,
                                   calls=[_call_json(c) for c in calls],
                                   results=[_result_json(c, r) for c, r in zip(calls, results)], state=state,
                                   duration_s=round(time.perf_counter() - started, 4),
                                   session=self.store.session, at=now_iso(), trace_id=self.trace)
            self.store.put_tool_turn(stored)  # stored (and flushed) before the model sees it
        elif self.trace is None and stored.trace_id is not None:
            self.trace = stored.trace_id  # a resumed rollout's later calls carry the trace its first ones did
        self.spent += stored.duration_s
        self.state = stored.state if isinstance(stored.state, dict) else {}
        self.calls_run += len(calls)
        for result in stored.results:
            if not isinstance(result, dict):
                continue
            message = traj.tool_message(_as_result(result))
            self.history.append(message)
            error = result.get("error")
            if isinstance(error, str):
                self.errors[str(message["tool_call_id"])] = error
        return True

    def _entry(self, stop: str, failed: ResponseEntry | None) -> RolloutEntry:
        """The rollout's line: the final turn's output fields, the turns' usage summed, its time, the trajectory."""
        cell = self.cell
        final = self.turns[-1] if self.turns else None
        trajectory = traj.Rollout(self.history, stop or "", self.errors)
        calls = trajectory.tool_calls()
        entry = RolloutEntry(
            key=cell.key, label=cell.run.label, model=cell.run.model, item_id=cell.item.id, epoch=cell.epoch,
            session=self.store.session, at=now_iso(), latency_s=round(self.spent, 4),
            usage=_summed_usage(self.turns + ([failed] if failed is not None else [])),
            attempts=sum(t.attempts for t in self.turns) + (failed.attempts if failed is not None else 0),
            turns=len(self.turns), stop_reason=stop or None, tool_calls=len(calls),
            tool_errors=trajectory.tool_errors(), messages=list(self.history), call_errors=dict(self.errors),
            turn_keys=[t.key for t in self.turns], trace_id=self.trace)
        error = failed.error if failed is not None else self.tool_failure
        if error is not None:
            entry.error = error
        elif final is None:  # the time ran out before the first answer: an empty answer, graded as such
            entry.output_text = ""
        else:
            entry.output_text, entry.output_tools, entry.output_json = (final.output_text, final.output_tools,
                                                                         final.output_json)
            entry.choices, entry.finish_reason = final.choices, final.finish_reason
            entry.reasoning, entry.tier = final.reasoning, final.tier
        return entry


def _call_json(call: traj.ToolCallJSON) -> JSONValue:
    return {"id": call["id"], "name": call["name"], "arguments": call["arguments"]}


def _result_json(call: traj.ToolCallJSON, result: ToolResult) -> JSONValue:
    """A result as tools.jsonl keeps it, answering the call by the model's own id."""
    return {"tool_call_id": call["id"], "name": call["name"], "content": result.content, "error": result.error}


def _as_result(value: JSONObject) -> traj.ToolResultJSON:
    cid, name, content, error = (value.get(k) for k in ("tool_call_id", "name", "content", "error"))
    return {"tool_call_id": str(cid or ""), "name": str(name or ""),
            "content": content if isinstance(content, str) else traj.arguments_text(content),
            "error": error if isinstance(error, str) else None}


def _summed_usage(turns: list[ResponseEntry]) -> dict[str, int | None]:
    """Token counts over the turns (each turn's input is its whole history, as it was billed); a count no turn
    reported stays None, not 0."""
    out: dict[str, int | None] = {}
    for name in ("input_tokens", "output_tokens", "reasoning_tokens"):
        counts = [v for t in turns if t.usage and isinstance(v := t.usage.get(name), int)]
        out[name] = sum(counts) if counts else None
    return out
