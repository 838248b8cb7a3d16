"""The store's lines, typed: what responses.jsonl, grades.jsonl, rollouts.jsonl and tools.jsonl hold, the keys
they are filed under, and which of them a resumed run keeps (rfteval.run.store writes, indexes and reads them).
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, ClassVar, TypedDict

import msgspec

from rfteval.data.json_types import JSONField
from rfteval.data.records import now_iso

if TYPE_CHECKING:
    from rfteval.data.json_types import JSONMapping, JSONObject
    from rfteval.graders.base import GradeResult
    from rfteval.providers.base import Generation

# Failures that are a property of the response itself: stored as final, never re-sent on resume.
FINAL_GENERATION_ERRORS = frozenset({"refusal"})
# Grading failures of the grading machinery rather than of the output: re-graded on resume.
# A truncated judge answer too: one cut off by the output limit is re-read from the judge cache at no cost, and a
# prompt past the server's context (never cached) is sent again once the server's context was raised.
# An endpoint grader's failures too: its server is the user's, fixed without the grader config changing.
TRANSIENT_GRADE_ERRORS = frozenset({"python_grader_server_error", "model_grader_server_error",
                                    "model_grader_truncated_error", "endpoint_grader_server_error",
                                    "endpoint_grader_parse_error"})


class EntryError(msgspec.Struct):
    """The failure a stored entry records: `type` is the kind the error policy counts by."""

    type: str
    message: str = ""


class _Entry(msgspec.Struct, kw_only=True):
    """A typed line of a store log. Fields are declared in the order they are written, so `to_dict` gives the
    line exactly as the dict-based code wrote it (old run directories resume, new ones read the same)."""

    # keys written only when set: everything else is always on the line, null or not
    __optional__: ClassVar[frozenset[str]] = frozenset()

    def to_dict(self) -> JSONObject:
        """The line as it goes to disk."""
        out: JSONObject = {}
        for name in self.__struct_fields__:
            value = getattr(self, name)
            if value is None and name in self.__optional__:
                continue
            out[name] = {"type": value.type, "message": value.message} if isinstance(value, EntryError) else value
        return out


class ResponseEntry(_Entry, kw_only=True):
    """One line of responses.jsonl: what the server sent for one cell, or the error that ended it."""

    key: str = ""
    label: str = ""
    model: str = ""
    item_id: str = ""
    epoch: int = 0
    output_text: str | None = None
    output_tools: list[JSONField] | None = None  # Generation's, as the server sent them
    output_json: JSONField = None
    choices: list[JSONField] | None = None
    usage: dict[str, int | None] | None = None  # Generation's token counts
    finish_reason: str | None = None
    error: EntryError | None = None
    reasoning: str | None = None  # what the server sent apart; output_text stays the content as sent
    latency_s: float | None = None
    attempts: int = 1
    session: str = ""
    at: str = ""
    tier: str | None = None  # "flex" (and batch results) bill at batch prices
    turn: int | None = None  # an agent run's model turn: its number in the rollout (1 the first)

    __optional__ = frozenset({"reasoning", "tier", "turn"})

    @property
    def error_type(self) -> str | None:
        return self.error.type if self.error is not None else None


class RolloutEntry(ResponseEntry, kw_only=True):
    """One line of rollouts.jsonl: a finished rollout under its rollout key, or the error that ended it (a turn
    that failed after every retry: re-played on resume, its stored turns read back). The response fields are the
    final turn's (what the grader's sample.output_* are), `usage` is summed over the turns and `latency_s` is the
    rollout's time (its turns' latencies and its tool turns' durations); then the trajectory
    (rfteval.data.rollout.Rollout): its messages, and which calls failed (call id → the error's type)."""

    turns: int = 0
    stop_reason: str | None = None
    tool_calls: int = 0  # calls the model made, run or not
    tool_errors: dict[str, int] = {}  # failed calls by the error's type
    messages: list[JSONField] = []
    call_errors: dict[str, str] = {}
    turn_keys: list[str] = []  # the model turns' keys in responses.jsonl, in order
    trace_id: str | None = None  # the trace id its tool calls carried (an endpoint grader is sent it)

    __optional__ = frozenset({*ResponseEntry.__optional__, "trace_id"})


class ToolTurnEntry(_Entry, kw_only=True):
    """One line of tools.jsonl: one executed tool turn, keyed by the model turn that asked for it and the tool
    box's identity (tool_turn_key). A resumed rollout reads it instead of running the tools again, so a tool with a
    clock or randomness cannot make the replay diverge."""

    key: str = ""
    model_key: str = ""  # the model turn whose calls these are
    rollout: str = ""  # the rollout key
    turn: int = 0
    calls: list[JSONField] = []  # [{"id", "name", "arguments"}]
    results: list[JSONField] = []  # [{"tool_call_id", "name", "content", "error"}]
    state: JSONField = None  # the tools' state after the turn, carried to the next one
    duration_s: float = 0.0
    session: str = ""
    at: str = ""
    trace_id: str | None = None  # the rollout's trace id, which its calls carried

    __optional__ = frozenset({"trace_id"})


class GradeEntry(_Entry, kw_only=True):
    """One line of grades.jsonl: one grader's grade of one stored response."""

    key: str = ""
    grader: str = ""
    score: float = 0.0
    sub_scores: dict[str, float] | None = None  # GradeResult's (floats: msgspec writes them as it reads them)
    error: EntryError | None = None
    passed: bool | None = None
    stdout: str | None = None
    details: JSONField = None
    at: str = ""

    def result(self) -> GradeResult:
        """The grade as graders return it (for rfteval.graders.grading.apply_grade)."""
        from rfteval.graders.base import GradeError, GradeResult

        err, details = self.error, self.details
        return GradeResult(float(self.score), sub_scores=self.sub_scores, passed=self.passed, stdout=self.stdout,
                           details=details if isinstance(details, dict) else None,  # as written: GradeResult's
                           error=GradeError(err.type, err.message) if err else None)

    @property
    def error_type(self) -> str | None:
        return self.error.type if self.error is not None else None


def decode_response(obj: JSONMapping) -> ResponseEntry:
    """A responses.jsonl line (as json.loads read it) as its typed entry; msgspec.ValidationError when it is not one."""
    return msgspec.convert(obj, ResponseEntry)


def decode_grade(obj: JSONMapping) -> GradeEntry:
    return msgspec.convert(obj, GradeEntry)


def decode_rollout(obj: JSONMapping) -> RolloutEntry:
    return msgspec.convert(obj, RolloutEntry)


def decode_tool_turn(obj: JSONMapping) -> ToolTurnEntry:
    return msgspec.convert(obj, ToolTurnEntry)


def cell_key(identity: JSONMapping, body: JSONMapping, epoch: int) -> str:
    """The cache key of one (endpoint, request, epoch): epochs are independent samples, never each other's hit."""
    text = json.dumps({"identity": identity, "body": body, "epoch": int(epoch)}, sort_keys=True,
                      separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def tool_turn_key(model_key: str, tools: str, item_id: str) -> str:
    """The key of the tool turn that answers a model turn's calls: that turn's key (which covers the history
    before it), the tool box's identity (its sources and limits: changed tools run again) and the item, which the
    tools are handed (two items asking alike are not each other's tool results)."""
    text = json.dumps(["tools", model_key, tools, item_id], separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def rollout_key(first_key: str, item_id: str, tools: str, limits: JSONMapping) -> str:
    """The key of a rollout: its first turn's key, its item (the tools and the grader read it), the tool box's
    identity and the rollout's limits. Grades are filed under it; a changed limit is another rollout, played again
    from the stored turns at no cost."""
    text = json.dumps({"first": first_key, "item": item_id, "tools": tools, "limits": limits}, sort_keys=True,
                      separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def final_flag(entry: ResponseEntry) -> int:
    return 1 if entry.error is None or entry.error.type in FINAL_GENERATION_ERRORS else 0



def is_reusable_response(entry: ResponseEntry | None) -> bool:
    """A stored entry that resume keeps: a response, or a failure that re-sending cannot change."""
    return entry is not None and bool(final_flag(entry))


def is_reusable_grade(entry: GradeEntry | None) -> bool:
    """A stored grade that resume keeps: a grade, or a failure that grading again cannot change."""
    return entry is not None and (entry.error is None or entry.error.type not in TRANSIENT_GRADE_ERRORS)



class CellKeys(TypedDict):
    """Who a cell's response entry is for: new_response_entry's keywords a caller builds once and passes on whole."""

    key: str
    label: str
    model: str
    item_id: str
    epoch: int
    session: str


class _EntryCommon(CellKeys):
    """What every response entry carries, answer or error."""

    latency_s: float | None
    attempts: int
    at: str
    tier: str | None


def new_response_entry(
    *, key: str, label: str, model: str, item_id: str, epoch: int, generation: Generation | None = None,
    error: tuple[str, str] | None = None, latency_s: float | None = None, attempts: int = 1, session: str = "",
) -> ResponseEntry:
    """One entry of responses.jsonl: a Generation, or the error that ended the cell."""
    common: _EntryCommon = {"key": key, "label": label, "model": model, "item_id": item_id, "epoch": int(epoch),
                            "latency_s": latency_s, "attempts": attempts, "session": session, "at": now_iso(),
                            "tier": getattr(generation, "tier", None)}
    if generation is not None:
        return ResponseEntry(
            **common, output_text=generation.output_text, output_tools=generation.output_tools or None,
            output_json=generation.output_json, choices=generation.choices, usage=generation.usage,
            finish_reason=generation.finish_reason, reasoning=generation.reasoning,
        )
    kind, message = error if error is not None else ("other", "no generation and no error was given")
    return ResponseEntry(**common, error=EntryError(kind, message))


def new_grade_entry(key: str, grader: str, result: GradeResult) -> GradeEntry:
    err = result.error
    return GradeEntry(
        key=key, grader=grader, score=float(result.score), sub_scores=result.sub_scores,
        error=EntryError(err.type, err.message) if err else None, passed=result.passed,
        stdout=result.stdout or None, details=result.details, at=now_iso(),
    )

