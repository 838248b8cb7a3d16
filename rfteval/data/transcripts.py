"""Agent runs made elsewhere, read as rfteval's trajectory: one outputs line holding a transcript, in one of four
shapes, becomes the generated messages `rollout_sample` builds the grader's sample from (rfteval.data.rollout), so
`rfteval grade --outputs` grades another harness's rollouts as `rfteval run --tools` grades its own.

- `messages`: OpenAI chat messages, the assistant, tool (and later user) turns after the item's prompt.
- verifiers' `results.jsonl` (`vf-eval --save-results`): `completion` is the generated message list (a string for
  a single-turn text environment), `prompt` the messages it was sent.
- ART: an `art.Trajectory` serialised as JSON (`trajectory.model_dump(mode="json")`): `messages_and_choices` holds
  the prompt's messages, then each sampled turn as a `Choice` ({"index", "finish_reason", "message"}) among the
  tool and user messages. The generated part starts at the first choice (or assistant message).
- verifiers 0.4's `traces.jsonl` (`vf-eval`'s run directory): one `Episode` per line, its `traces` one per agent; a
  trace's `nodes` are a message graph (each node a message and its `parent`), its messages the final branch's (the
  last leaf, walked back to its root, as `Trace.messages` builds them); the prompt is the nodes before the first
  `sampled` one. verifiers' messages carry a tool call flat (`{"id", "type", "name", "arguments"}`) and a tool
  result's content may be text parts. A trace that failed (`ok` false, or an error recorded) is the generation
  error it recorded, not a rollout to grade (rfteval does not import verifiers: these are its JSON's names).

Each message is brought to the shape the rollout loop writes: an assistant turn's content (null when it only calls
tools), its calls' arguments as JSON text; a tool message's content as text. Pure functions, no I/O.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rfteval.data.rollout import (
    LENGTH,
    MAX_TURNS,
    NO_TOOL_CALLS,
    ROLLOUT_TIMEOUT,
    STOP_REASONS,
    arguments_text,
    assistant_message,
    final_message,
    message_calls,
)
from rfteval.errors import InputError

if TYPE_CHECKING:
    from pathlib import Path

    from rfteval.data.json_types import JSONMapping, JSONObject, JSONValue

MESSAGES, VERIFIERS, ART = "messages", "completion", "messages_and_choices"  # the field that names each shape
SHAPES = (MESSAGES, VERIFIERS, ART)
EPISODE = "traces"  # verifiers 0.4: an Episode line (detected by is_episode, not by the field alone)
TRACES_FILE = "traces.jsonl"  # the file vf-eval writes its episodes to, in its run directory
_ROLES = ("assistant", "tool", "user")
_VF_ROLES = ("system", "user", "assistant", "tool")
# verifiers' stop conditions that mean what one of rfteval's stop reasons means: its turn limit, its agent stage's
# deadline (a rollout's time). Its token budgets (`max_output_tokens`, ...) are no limit rfteval has: the default
# rule reads them, as it reads `agent_completed`.
_VF_STOPS = {"max_turns": MAX_TURNS, "agent_timeout": ROLLOUT_TIMEOUT}


@dataclass(frozen=True)
class Transcript:
    """A rollout another harness made: its generated messages (rfteval's shape), the prompt it was sent when the
    line holds it (the item is then found by it), the final turn's choice as the harness kept it (ART), and how it
    ended (the line's `stop_reason`, else `no_tool_calls` when the last turn called no tool, else `max_turns`)."""

    shape: str
    messages: list[JSONValue]
    prompt: list[JSONValue] | None
    choices: list[JSONValue] | None
    stop_reason: str
    # the items the line names, in the order tried (verifiers: its task's `info.id`, `id`, `item_id`)
    item_ids: tuple[str, ...] = ()
    # a rollout that failed (verifiers: the trace's last error): (type, message), the record's generation error
    error: tuple[str, str] | None = None

    @property
    def output_text(self) -> str:
        final = final_message(self.messages)
        content = final.get("content") if final is not None else None
        return content if isinstance(content, str) else ""


def read_transcript(row: JSONMapping, path: Path, lineno: int) -> Transcript | None:
    """The transcript an outputs line holds (None: a plain output, `output_text`); a malformed one is one line
    naming the file, line and field."""
    if is_episode(row):
        return read_episode(row, path, lineno)
    shape = next((s for s in SHAPES if s in row), None)
    if shape is None:
        return None
    value = row[shape]
    prompt: list[JSONValue] | None = None
    choices: list[JSONValue] | None = None
    if shape == VERIFIERS and isinstance(value, str):  # a single-turn text environment's completion
        value = [{"role": "assistant", "content": value}]
    if not isinstance(value, list):
        raise InputError("must be a list of messages", path, lineno, shape)
    if shape == ART:
        start = next((i for i, m in enumerate(value) if isinstance(m, dict) and _is_generated(m)), len(value))
        prompt, value = list(value[:start]), value[start:]
        generated = [i for i, m in enumerate(value) if isinstance(m, dict) and _is_generated(m)]
        last = value[generated[-1]] if generated else None  # the final turn, kept as a Choice when it is one
        choices = [_compact(last)] if isinstance(last, dict) and "message" in last else None
    elif shape == VERIFIERS:
        given = row.get("prompt")
        prompt = list(given) if isinstance(given, list) else None
    messages: list[JSONValue] = [_message(m, i, shape, path, lineno) for i, m in enumerate(value)]
    if not any(m.get("role") == "assistant" for m in messages if isinstance(m, dict)):
        raise InputError("holds no assistant turn: nothing was generated to grade", path, lineno, shape)
    stop = row.get("stop_reason")
    if stop is not None and stop not in STOP_REASONS:
        raise InputError(f"must be one of {', '.join(STOP_REASONS)}, got {stop!r}", path, lineno, "stop_reason")
    return Transcript(shape, messages, prompt, choices, stop if isinstance(stop, str) else _derived(messages))


def _derived(messages: list[JSONValue]) -> str:
    """How a rollout ended when its harness did not say: answered, or stopped while still calling tools."""
    final = final_message(messages)
    return MAX_TURNS if final is not None and final.get("tool_calls") else NO_TOOL_CALLS


def _is_generated(message: JSONMapping) -> bool:
    return "message" in message or message.get("role") == "assistant"


def _compact(value: JSONValue) -> JSONValue:
    """A choice as a server sent it: the null fields the SDK fills in left out (as the run keeps choices)."""
    if isinstance(value, dict):
        return {k: _compact(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_compact(v) for v in value]
    return value


def _message(value: JSONValue, index: int, shape: str, path: Path, lineno: int) -> JSONObject:
    where = f"{shape}[{index}]"
    if isinstance(value, dict) and "message" in value:  # an ART Choice: the message the model sampled
        value = value["message"]
    if not isinstance(value, dict):
        raise InputError("must be a message object", path, lineno, where)
    role = value.get("role")
    if role not in _ROLES:
        raise InputError(f"role must be one of {', '.join(_ROLES)} (the turns after the prompt), got {role!r}", path,
                         lineno, f"{where}.role")
    content = value.get("content")
    if role == "assistant":
        content, _ = _assistant_parts(value, path, lineno, where)
        return assistant_message(content, message_calls(value))
    if role == "tool":
        call = value.get("tool_call_id")
        if not isinstance(call, str):
            raise InputError("missing or not a string", path, lineno, f"{where}.tool_call_id")
        return {"role": "tool", "tool_call_id": call,
                "content": content if isinstance(content, str) else arguments_text(content)}
    return {"role": "user", "content": content if isinstance(content, (str, list)) else json.dumps(content)}


def prompt_key(messages: object) -> str:
    """A prompt as the index of items by prompt holds it: canonical JSON of its messages."""
    return json.dumps(messages, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def without_system(messages: list[JSONValue]) -> list[JSONValue]:
    """A prompt without its leading system and developer messages (a harness's own system prompt, as verifiers'
    `system_prompt` adds one, does not hide the item it was sent)."""
    i = 0
    while i < len(messages) and isinstance(m := messages[i], dict) and m.get("role") in ("system", "developer"):
        i += 1
    return messages[i:]


# ------------------------------------------------------------------------------- verifiers 0.4: traces.jsonl


def is_episode(row: JSONMapping) -> bool:
    """Whether a line is one of verifiers' Episodes: a `traces` list beside its `task` (or of traces with nodes)."""
    traces = row.get(EPISODE)
    return isinstance(traces, list) and ("task" in row or any(isinstance(t, dict) and "nodes" in t for t in traces))


def read_episode(row: JSONMapping, path: Path, lineno: int) -> Transcript:
    """The rollout one Episode line holds: its one trace's final branch, split into the prompt and the generated
    messages; a failed trace (or an episode that failed before any agent ran) is its last error."""
    traces = row.get(EPISODE)
    if not isinstance(traces, list):
        raise InputError("must be a list of traces", path, lineno, EPISODE)
    if len(traces) > 1:
        raise InputError(f"a multi-agent episode ({len(traces)} traces): rfteval grades one agent's rollout", path,
                         lineno, EPISODE)
    if not traces:  # the env failed before any agent ran: the episode's own error
        error = _last_error(row, path, lineno, "")
        if error is None:
            raise InputError("holds no trace: nothing was generated to grade", path, lineno, EPISODE)
        return Transcript(EPISODE, [], None, None, "", _task_ids(row.get("task")), error)
    trace = traces[0]
    where = f"{EPISODE}[0]"
    if not isinstance(trace, dict):
        raise InputError("must be a trace object", path, lineno, where)
    error = _last_error(trace, path, lineno, f"{where}.")
    if error is None and trace.get("ok") is False:  # failed, and said nothing of why
        error = _last_error(row, path, lineno, "") or ("TraceNotOk", "the trace's ok is false and it recorded no error")
    nodes = trace.get("nodes")
    if not isinstance(nodes, list) or (not nodes and error is None):
        raise InputError("missing or empty: a trace holds its messages as nodes", path, lineno, f"{where}.nodes")
    branch = final_branch(nodes, path, lineno, f"{where}.nodes")
    first = next((k for k, i in enumerate(branch) if nodes[i].get("sampled") is True), None)
    if first is None and error is None:
        raise InputError("no sampled node on the final branch: nothing was generated to grade", path, lineno,
                         f"{where}.nodes")
    split = len(branch) if first is None else first
    converted: list[JSONValue] = [vf_message(nodes[i]["message"], path, lineno, f"{where}.nodes[{i}].message")
                                  for i in branch]
    prompt, messages = converted[:split], converted[split:]
    stop = "" if error is not None else _vf_stop(trace, messages)
    return Transcript(EPISODE, messages, prompt, None, stop, _task_ids(trace.get("task") or row.get("task")), error)


def final_branch(nodes: list[JSONValue], path: Path, lineno: int, where: str) -> list[int]:
    """The node ids of the final branch, root first, as verifiers' `Trace.messages` takes it: the last of the leaves
    (nodes no node names as parent, in node order), walked back through its parents."""
    parents: list[int | None] = []
    for i, node in enumerate(nodes):
        if not isinstance(node, dict) or not isinstance(node.get("message"), dict):
            raise InputError("must be a message node (an object with a message)", path, lineno, f"{where}[{i}]")
        parent = node.get("parent")
        if parent is not None and (isinstance(parent, bool) or not isinstance(parent, int)
                                   or not 0 <= parent < len(nodes) or parent == i):
            raise InputError(f"must be another node's index (0 to {len(nodes) - 1}) or absent for a root, got "
                             f"{parent!r}", path, lineno, f"{where}[{i}].parent")
        parents.append(parent)
    has_child = {p for p in parents if p is not None}
    leaves = [i for i in range(len(nodes)) if i not in has_child]
    branch: list[int] = []
    seen: set[int] = set()
    current = leaves[-1] if leaves else 0 if nodes else None
    while current is not None:
        if current in seen or not leaves:
            raise InputError("the nodes' parents form a cycle: no branch has a root", path, lineno,
                             f"{where}[{current}].parent")
        seen.add(current)
        branch.append(current)
        current = parents[current]
    return branch[::-1]


def _assistant_parts(value: JSONMapping, path: Path, lineno: int, where: str) -> tuple[str | None, list[JSONValue]]:
    """An assistant message's content (text or null) and its tool calls (a list), each checked."""
    content, calls = value.get("content"), value.get("tool_calls")
    if calls is not None and not isinstance(calls, list):
        raise InputError("must be a list of tool calls", path, lineno, f"{where}.tool_calls")
    if content is not None and not isinstance(content, str):
        raise InputError("must be a string or null", path, lineno, f"{where}.content")
    return content, calls or []


def vf_message(value: JSONMapping, path: Path, lineno: int, where: str) -> JSONObject:
    """One of verifiers' messages in the rollout loop's shape: a tool call nested as OpenAI's (`function`), its
    arguments as text; a tool result's text parts joined as verifiers' `content_text` joins them."""
    role = value.get("role")
    if role not in _VF_ROLES:
        raise InputError(f"role must be one of {', '.join(_VF_ROLES)}, got {role!r}", path, lineno, f"{where}.role")
    content = value.get("content")
    if role == "assistant":
        content, calls = _assistant_parts(value, path, lineno, where)
        nested = [{"id": c.get("id"), "function": {"name": _call_name(c), "arguments": c.get("arguments")}}
                  for c in calls if isinstance(c, dict)]
        return assistant_message(content, message_calls({"tool_calls": nested}))
    if role == "tool":
        call = value.get("tool_call_id")
        if not isinstance(call, str):
            raise InputError("missing or not a string", path, lineno, f"{where}.tool_call_id")
        return {"role": "tool", "tool_call_id": call, "content": _text(content)}
    return {"role": role, "content": content if isinstance(content, (str, list)) else json.dumps(content)}


def _call_name(call: JSONMapping) -> object:
    """A call's tool name; a namespaced one (an MCP server's) as verifiers shows it, `namespace.name`."""
    name, namespace = call.get("name"), call.get("namespace")
    return f"{namespace}.{name}" if isinstance(namespace, str) and namespace and isinstance(name, str) else name


def _text(content: object) -> str:
    """A tool result as text: its text parts, newline-joined; any other part (an image) as JSON, kept visible."""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(p, dict) and p.get("type") == "text"
                                         and isinstance(p.get("text"), str) for p in content):
        return "\n".join(str(p["text"]) for p in content if isinstance(p, dict))
    return arguments_text(content)


def _vf_stop(trace: JSONMapping, messages: list[JSONValue]) -> str:
    """How the trace ended, in rfteval's words: its last answered call cut by the output limit (verifiers'
    `is_truncated` reads it so) is `length`, as the run stops at such a turn; its turn limit and its agent stage's
    deadline are `max_turns` and `rollout_timeout`; anything else, the default rule."""
    calls = trace.get("calls")
    answered = [c for c in calls if isinstance(c, dict) and not c.get("error")] if isinstance(calls, list) else []
    if answered and answered[-1].get("finish_reason") == "length":
        return LENGTH
    condition = trace.get("stop_condition")
    return _VF_STOPS.get(condition, _derived(messages)) if isinstance(condition, str) else _derived(messages)


def _last_error(holder: JSONMapping, path: Path, lineno: int, where: str) -> tuple[str, str] | None:
    """The last of the errors a trace (or an episode) recorded: (type, message)."""
    errors = holder.get("errors")
    if errors is None or errors == []:
        return None
    last = errors[-1] if isinstance(errors, list) else None
    if not isinstance(last, dict) or not isinstance(last.get("type"), str):
        raise InputError("must be a list of errors ({\"type\", \"message\"})", path, lineno, f"{where}errors")
    message = last.get("message")
    return str(last["type"]), message if isinstance(message, str) else ""


def _task_ids(task: object) -> tuple[str, ...]:
    """The item ids a trace's task names: `info.id` (what `rfteval export-dataset --target verifiers` writes), then
    the row's own `id` and `item_id`."""
    data = task.get("data") if isinstance(task, dict) else None
    if not isinstance(data, dict):
        return ()
    info = data.get("info")
    found = [info.get("id") if isinstance(info, dict) else None, data.get("id"), data.get("item_id")]
    return tuple(str(i) for i in found if isinstance(i, (str, int)) and not isinstance(i, bool))
