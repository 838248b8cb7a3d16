"""Tool turns through the sandbox: a WorkerPool that also runs a tools module's turns, one fresh unit each.

A turn (one rollout's calls of one model turn) goes to one sandbox as one unit: a child forked from the template
that loaded the tools module once, given the item, the state as JSON text and the calls, and killed with
everything it started before the next unit; the state comes back as JSON text, the only thing that outlives the
unit. The supervisor and the child are _worker.py's (with its modules) and _tool_unit.py's (which says what crosses
the wire); here the rows are read back, bounded once more, and every call gets an outcome: its content, or its
error type and message. A call left without a row by a unit that failed is "not run", of the type that ended the
turn; a supervisor that dies or goes silent costs the turn it was running, never the pool.
"""

from __future__ import annotations

import marshal
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from rfteval.data.grades import PYTHON_MEMORY, PYTHON_TIMEOUT, GradeResult
from rfteval.sandbox._tool_unit import (
    MARKER_CHARS,
    MAX_OUTPUT_CHARS,
    STATE_CHARS,
    TOOL_CRASH,
    TOOL_MEMORY,
    TOOL_TIMEOUT,
    TURN_ENDING,
)
from rfteval.sandbox.host_probe import sandbox_problem
from rfteval.sandbox.policy import SandboxUnavailable
from rfteval.sandbox.pool import SILENCE_S, WorkerPool, _Sandbox, _StartError, _Task
from rfteval.sandbox.wire import Failure, TurnRow, decode_turn_reply, encode

if TYPE_CHECKING:
    from rfteval.data.json_types import JSONObject
    from rfteval.sandbox._tool_unit import Unit
    from rfteval.sandbox.wire import Outcome


@dataclass(frozen=True)
class CallOutcome:
    """One call's outcome: `error` None and `text` the content shown to the model (cut in the sandbox), or `error`
    its type and `text` the error's message."""

    error: str | None
    text: str


@dataclass(frozen=True)
class TurnOutcome:
    """A turn's outcome: one per call, in order; the state after as JSON text (None: as it was before the turn);
    and, when the tools module did not load (so no call ran), why: (type, message) in the grading path's types."""

    calls: list[CallOutcome]
    state: str | None
    load_error: tuple[str, str] | None = None


@dataclass(eq=False)
class _Turn(_Task):
    """A turn for a pool thread: the unit as the supervisor takes it, and the future its outcome goes to."""

    unit: Unit | None = None
    names: list[str] = field(default_factory=list)
    outcome: Future[TurnOutcome] = field(default_factory=Future)


class ToolPool(WorkerPool):
    """A WorkerPool whose sandboxes also run tool turns: `turn()` (a future) and `load()`. Grading through it works
    as through any pool; a tools module and a grader source never share a template."""

    def turn(self, source: str, item: JSONObject, state: str, calls: list[tuple[str, JSONObject]],
             output_chars: int) -> Future[TurnOutcome]:
        """Run `calls` [(tool name, arguments)] in order in one fresh unit of the module `source`, from `state` (a
        JSON object as text), each result cut at `output_chars`. Never raises for what the tools do; raises
        SandboxUnavailable when the sandbox cannot be built here and the pool is not unsafe."""
        problem = sandbox_problem(self.policy)
        if problem is not None:
            raise SandboxUnavailable(problem)
        unit: Unit = (encode(item), state, [(name, marshal.dumps(args)) for name, args in calls], output_chars)
        return self._turn(source, unit, [name for name, _ in calls])

    def init_state(self, source: str, item: JSONObject) -> Future[TurnOutcome]:
        """The module's init_state(item), as a turn of one call: its outcome's state is the rollout's first."""
        unit: Unit = (encode(item), "{}", [("init_state", None)], MAX_OUTPUT_CHARS)
        return self._turn(source, unit, ["init_state"])

    def load(self, source: str) -> tuple[str, str] | None:
        """Whether the module loads in the sandbox: None, or (type, message) of why not. A turn of no calls."""
        outcome = self._turn(source, (encode({}), "{}", [], MAX_OUTPUT_CHARS), []).result()
        return outcome.load_error

    def _turn(self, source: str, unit: Unit, names: list[str]) -> Future[TurnOutcome]:
        task = _Turn(self._key("tools\n" + source), source, [], [], unit=unit, names=names)
        self._submit(task).add_done_callback(lambda done: task.outcome.cancel() if done.cancelled() else None)
        return task.outcome

    def _run_task(self, box: _Sandbox, task: _Task) -> list[Outcome]:
        if not isinstance(task, _Turn):
            return super()._run_task(box, task)
        if task.outcome.set_running_or_notify_cancel():
            try:
                task.outcome.set_result(self._run_turn(box, task))
            except BaseException as exc:  # noqa: BLE001  (a bug here must reach the caller, not kill the thread)
                task.outcome.set_exception(exc)
        return []

    def _run_turn(self, box: _Sandbox, task: _Turn) -> TurnOutcome:
        assert task.unit is not None
        rows: list[TurnRow] = []
        try:
            if box.proc is None:
                box.start()
            elif box.cgroup is not None:  # OOM kills of earlier units are theirs
                box.oom_seen = box.cgroup.oom_kills()
            if task.key not in box.sources:
                box.prepare(task.key, task.source, "tools")
            box.send(marshal.dumps(("tools", task.key, None, [task.unit])))
            done = False
            while not done:
                part, done = decode_turn_reply(box.receive(SILENCE_S))
                rows += part
        except _StartError as exc:
            return turn_outcome(rows, task.names, task.unit[3], (TOOL_CRASH, str(exc)))
        except Failure as failure:
            charged = box.memory_killed(GradeResult.failed(failure.error.type, failure.error.message))
            kind = tool_error_type(charged.error.type if charged.error is not None else failure.error.type)
            box.stop()
            return turn_outcome(rows, task.names, task.unit[3], (kind, sandbox_failure(kind, self.policy.memory_mb)))
        except OSError:  # the request pipe broke: the supervisor is gone
            box.stop()
            return turn_outcome(rows, task.names, task.unit[3], (TOOL_CRASH, sandbox_failure(TOOL_CRASH, None)))
        return turn_outcome(rows, task.names, task.unit[3], None)


def sandbox_failure(kind: str, memory_mb: int | None) -> str:
    """The message of a turn whose sandbox (not only its unit) failed."""
    if kind == TOOL_TIMEOUT:
        return (f"the tool sandbox stopped answering during the call (no heartbeat for {SILENCE_S:g} s: its "
                "supervisor was stopped or is stuck); it was killed")
    if kind == TOOL_MEMORY:
        limit = f"{memory_mb} MB" if memory_mb else "the sandbox's memory"
        return (f"the call ran out of memory (limit {limit} for the unit and every process it started): the "
                "kernel's OOM killer ended the tool sandbox")
    return "the tool sandbox ended during the call"


def tool_error_type(grading_type: str) -> str:
    """A failure in the grading path's types (the sandbox's own) as a tool error type."""
    return {PYTHON_TIMEOUT: TOOL_TIMEOUT, PYTHON_MEMORY: TOOL_MEMORY}.get(grading_type, TOOL_CRASH)


def turn_outcome(rows: list[TurnRow], names: list[str], limit: int, failure: tuple[str, str] | None) -> TurnOutcome:
    """The outcome of a turn of calls `names` from the supervisor's rows: one per call that ran, then the state
    row, unless the sandbox failed (`failure`: the type and message for the call it was on). Checked again here:
    the supervisor shares its sandbox with the tools' code."""
    finished = failure is None
    if finished and (not rows or len(rows) > len(names) + 1):
        finished, failure = False, (TOOL_CRASH, "the tool sandbox garbled its reply")
    if finished and rows[-1][0] is not None:  # the module did not load: no call ran
        load_error = (rows[-1][0], rows[-1][1] or "")
        text = f"the tools module did not load: {load_error[1]}"
        kind = tool_error_type(load_error[0])
        return TurnOutcome([CallOutcome(kind, text) for _ in names], None, load_error)
    state = rows[-1][2] if finished else None
    outcomes: list[CallOutcome] = []
    for etype, message, content in rows[:-1] if finished else rows[:len(names)]:
        if etype is None:
            outcomes.append(CallOutcome(None, (content or "")[:min(limit, MAX_OUTPUT_CHARS) + MARKER_CHARS]))
        else:
            outcomes.append(CallOutcome(etype, message or ""))
    if failure is not None and len(outcomes) < len(names):
        outcomes.append(CallOutcome(*failure))
    if len(outcomes) < len(names):  # the calls after the one that ended the turn
        ended = len(outcomes) - 1
        last = outcomes[ended] if outcomes else None
        kind = last.error if last is not None and last.error in TURN_ENDING else TOOL_CRASH
        reason = (f"the turn ended with {kind} in an earlier call ({names[ended]})" if last is not None
                  else "the turn ended before any call ran")
        outcomes += [CallOutcome(kind, f"not run: {reason}") for _ in range(len(outcomes), len(names))]
    return TurnOutcome(outcomes, state if state is None or len(state) <= STATE_CHARS else None)

