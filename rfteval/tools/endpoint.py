"""Agent RFT's tool endpoints, run as written: the tools a fine-tuning job listed at its own HTTP servers.

`--tool-endpoints tools-config.json` (spec: `[tools] endpoints = "tools-config.json"`) reads Agent RFT's list,
`[{"name", "server_url", "headers"}]` (a fine-tuning job's file is read for its `method.reinforcement.tools`), with
`${VAR}` in a header value (or a URL) read from the environment (rfteval.providers.agent_rft: such a value is
written nowhere, and scrubbed from whatever a server echoes). Each call the model makes to a listed tool is POSTed to
that tool's `server_url` as Agent RFT's service posted it:

    {"type": "function_call", "id": "fc_…", "call_id": "call_…", "name": "…", "arguments": "<the JSON text the
     model sent>", "trace_id": "trace_…", "item": {the whole dataset line, references included}}

and the answer's Responses `function_call_output` `output` is the tool message. As the contract says:

- a 4xx is shown to the model (its `output` when it has one, else its payload) and counted as a tool error of type
  `HTTP<status>`;
- a 5xx or a dropped connection is retried 3 times, then the rollout ends as a generation error
  (tools.base.RolloutToolError: `tool_server_error`, `tool_connection_error`), never scored;
- more than 1 MB either way shows the model a 413 (`HTTP413`): a call that big is not sent, an answer that big is
  not read;
- a call gets 10 minutes at most (`--tool-endpoint-timeout`, lower for tests), then the model is shown a
  `ToolTimeout` (not retried: three more waits of that length would hold the rollout for 40 minutes);
- `trace_id` is the rollout's (tools.base.new_trace_id), the same for all its calls, resumes included.

`item_fields` (`--tool-item-fields`) sends only the named fields of the line (the contract sends all of it, the
references the grader reads included, to the tool server). A turn's calls go out in order, one at a time (Agent RFT
allowed parallel calls; in order, a tool server never sees a rollout's calls race). The tool box keeps no state: a
tool server keeps its own per trace_id. Its identity covers the tools' names and URLs as written, the item fields,
the call timeout and the output limit, never a header.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rfteval.errors import InputError, read_input_text
from rfteval.providers.agent_rft import (
    CALL_TIMEOUT_S,
    MAX_BYTES,
    EndpointFailed,
    Resolved,
    check_placeholders,
    new_client,
    post,
    resolve,
    shown_url,
)
from rfteval.tools.base import (
    TOOL_TIMEOUT,
    UNKNOWN_TOOL,
    RolloutToolError,
    ToolCall,
    ToolLimits,
    ToolResult,
    cut,
    error_result,
)
from rfteval.typos import curly_quotes, did_you_mean

if TYPE_CHECKING:
    import httpx

    from rfteval.data.json_types import JSONObject, JSONValue

BAD_TOOL_OUTPUT = "BadToolOutput"  # a 2xx whose body is no function_call_output with an `output`
KEYS = ("name", "server_url", "headers")
_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # a function name, as OpenAI takes it
_PLACEHOLDER = re.compile(r"^#([A-Za-z_][A-Za-z0-9_]*)#$")  # ZavaRetailAgent's "#TOOLS_SERVER_URL#"
_FAILED_KIND = {"server": "tool_server_error", "connection": "tool_connection_error"}
# A server whose calls could not connect this many times in a row (each after its retries, no answer between them,
# whatever rollouts they came from) is down, not flaky: the run stops (resumable) rather than spend every rollout's
# model turns up to that tool only to count each one a generation error.
GONE_AFTER = 5


@dataclass(frozen=True)
class ToolEndpoint:
    """One entry of Agent RFT's tools list: the tool's name, its server's URL and headers, as written."""

    name: str
    server_url: str
    headers: dict[str, str]


def _line(text: str, needle: str) -> int | None:
    at = text.find(needle)
    return None if at < 0 else text.count("\n", 0, at) + 1


def _tools_list(obj: JSONValue) -> JSONValue:
    """The list inside the shapes people have: the list itself, or a fine-tuning job's method.reinforcement.tools."""
    if isinstance(obj, dict):
        method = obj.get("method")
        rl = method.get("reinforcement") if isinstance(method, dict) else None
        if isinstance(rl, dict) and "tools" in rl:
            return rl["tools"]
    return obj


def read_tools_config(path: str | Path) -> list[ToolEndpoint]:
    """Agent RFT's tools list from `path`, checked: each entry a name, an http(s) server_url and string headers,
    no name twice. A problem is one line naming the file, the entry's line and the field."""
    path = Path(path)
    text = read_input_text(path, "a JSON file")
    try:
        obj: JSONValue = json.loads(text)
    except json.JSONDecodeError as exc:
        curly = curly_quotes(text)
        raise InputError(f"invalid JSON: {exc.msg} (column {exc.colno})" + (f"; {curly}" if curly else ""), path,
                         exc.lineno) from None
    entries = _tools_list(obj)
    if not isinstance(entries, list) or not entries:
        raise InputError('expected Agent RFT\'s tools list, [{"name": ..., "server_url": ..., "headers": {...}}, '
                         "...] (or a fine-tuning job holding it as method.reinforcement.tools)", path)
    out: list[ToolEndpoint] = []
    seen: dict[str, int] = {}
    for i, entry in enumerate(entries):
        out.append(_entry(entry, i, path, text))
        name = out[-1].name
        if name in seen:
            raise InputError(f"tool {name!r} is listed twice (entries {seen[name]} and {i}): each name is one "
                             "tool's", path, _line(text, json.dumps(name)), f"[{i}].name")
        seen[name] = i
    return out


def _entry(entry: JSONValue, i: int, path: Path, text: str) -> ToolEndpoint:
    def fail(message: str, field: str, near: str | None = None) -> InputError:
        return InputError(message, path, _line(text, near) if near else None, f"[{i}].{field}" if field else f"[{i}]")

    if not isinstance(entry, dict):
        raise fail('each tool is an object: {"name", "server_url", "headers"}', "")
    name = entry.get("name")
    near = json.dumps(name) if isinstance(name, str) else None
    for key in entry:
        if key not in KEYS:
            hint = did_you_mean(key, KEYS)
            raise fail(f"unknown key {key!r} (an Agent RFT tool has {', '.join(KEYS)}){' ' + hint if hint else ''}",
                       key, near)
    if not isinstance(name, str) or not _NAME.match(name):
        raise fail(f"must be a function name (letters, digits, _ and -, at most 64), got {name!r}", "name", near)
    url = entry.get("server_url")
    if not isinstance(url, str):
        raise fail("each tool needs its server's URL (a string)", "server_url", near)
    placeholder = _PLACEHOLDER.match(url)
    if placeholder:  # the notebook that ships this file fills the placeholder in from the environment first
        var = placeholder.group(1)
        raise fail(f"{url!r} is a placeholder, not a URL: fill it in first, as Microsoft's ZavaRetailAgent notebook "
                   f"does from ${var} (sed 's|{url}|'\"${var}\"'|g' {path.name} > tools-config.json), or write "
                   f"${{{var}}}", "server_url", near)
    try:
        check_placeholders(url)
    except ValueError as exc:
        raise fail(str(exc), "server_url", near) from None
    if not re.match(r"^(https?://[^\s/]+|\$\{)", url):
        raise fail(f"must be an http(s) URL, got {shown_url(url)!r}", "server_url", near)
    headers = entry.get("headers")
    if headers is None:
        headers = {}
    if not isinstance(headers, dict):
        raise fail("must be an object of header names and string values", "headers", near)
    out: dict[str, str] = {}
    for key, value in headers.items():
        if not isinstance(value, str):
            raise fail("must be an object of header names and string values", "headers", near)
        try:
            out[key] = check_placeholders(value)
        except ValueError:
            raise fail("a ${...} must name an environment variable (letters, digits, _)", f"headers.{key}",
                       near) from None
    return ToolEndpoint(name, url, out)


def open_tool_endpoints(path: str | Path, limits: ToolLimits, *, item_fields: Sequence[str] | None = None,
                        timeout_s: float = CALL_TIMEOUT_S, retry_base_s: float = 0.5,
                        environ: Mapping[str, str] | None = None) -> EndpointTools:
    """The tools `path` lists, ready to call: every `${VAR}` read now (an unset one is one line, before anything is
    sent). Nothing is sent to a server until a model calls its tool."""
    if not 0 < timeout_s <= CALL_TIMEOUT_S:
        raise InputError(f"must be seconds in (0, {CALL_TIMEOUT_S:g}] (Agent RFT waits 10 minutes at most), got "
                         f"{timeout_s:g}", field="--tool-endpoint-timeout")
    path = Path(path)
    endpoints = read_tools_config(path)
    resolved = {e.name: resolve(e.server_url, e.headers, path, f"[{i}]", environ) for i, e in enumerate(endpoints)}
    return EndpointTools(path, endpoints, resolved, limits, item_fields=item_fields, timeout_s=timeout_s,
                         retry_base_s=retry_base_s)


class ToolServerGone(Exception):
    """A tool server refused or dropped GONE_AFTER calls in a row, each after its retries: the run stops (its stored
    turns kept; the same command resumes once the server answers). The message is one line with no secret."""


class EndpointTools:
    """Agent RFT's tool endpoints as a run's ToolBox (tools.base): each call POSTed to its tool's server."""

    def __init__(self, path: Path, endpoints: list[ToolEndpoint], resolved: dict[str, Resolved], limits: ToolLimits,
                 *, item_fields: Sequence[str] | None = None, timeout_s: float = CALL_TIMEOUT_S,
                 retry_base_s: float = 0.5):
        self.path, self.endpoints, self.limits = path, endpoints, limits
        self.item_fields = tuple(item_fields) if item_fields is not None else None
        self.timeout_s, self.retry_base_s = timeout_s, retry_base_s
        self._resolved = resolved
        self._client: httpx.AsyncClient | None = None
        self._unreached: dict[str, int] = {}  # a server's URL -> its calls in a row that could not connect
        what = {"endpoints": sorted([e.name, e.server_url] for e in endpoints), "item_fields": self.item_fields,
                "timeout_s": timeout_s, "output_chars": limits.output_chars}
        self._identity = hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()

    @property
    def identity(self) -> str:
        """A hash of the tools' names and URLs as written, the item fields sent, the timeout and the output limit:
        whatever could change a result (never a header's value)."""
        return self._identity

    def names(self) -> frozenset[str]:
        return frozenset(e.name for e in self.endpoints)

    def shown(self) -> list[dict[str, str]]:
        """The tools and where they are, as a summary may write them (URLs without their query; no header)."""
        return [{"name": e.name, "server_url": shown_url(e.server_url)} for e in self.endpoints]

    async def init_state(self, item: JSONObject) -> JSONObject:
        return {}  # a tool server keeps a rollout's state itself, by its trace_id

    async def run_turn(self, rollout_id: str, item: JSONObject, calls: Sequence[ToolCall],
                       state: JSONObject) -> tuple[list[ToolResult], JSONObject]:
        """The turn's calls, in order, each POSTed with `rollout_id` as its trace_id; the state as it came."""
        sent = item if self.item_fields is None else {k: item[k] for k in self.item_fields if k in item}
        return [await self._call(call, sent, rollout_id) for call in calls], state

    async def _call(self, call: ToolCall, item: JSONObject, trace_id: str) -> ToolResult:
        endpoint = self._resolved.get(call.name)
        if endpoint is None:
            known = ", ".join(sorted(self._resolved))
            return error_result(call, UNKNOWN_TOOL, f"no tool named {call.name!r} (the tools are: {known})")
        body = {"type": "function_call", "id": "fc_" + call.id.removeprefix("call_"), "call_id": call.id,
                "name": call.name, "arguments": call.arguments, "trace_id": trace_id, "item": item}
        payload = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
        if len(payload) > MAX_BYTES:
            return self._error(call, "HTTP413", f"the call is {len(payload):,} bytes, over the 1 MB limit "
                               f"({MAX_BYTES:,} bytes) of a tool endpoint; it was not sent")
        if self._client is None:  # made in the event loop that uses it
            self._client = new_client(self.timeout_s)
        try:
            answer = await post(self._client, endpoint, payload, timeout_s=self.timeout_s,
                                base_s=self.retry_base_s)
        except EndpointFailed as exc:
            if exc.kind == "timeout":
                return self._error(call, TOOL_TIMEOUT, f"no answer within {self.timeout_s:g} s")
            where = f"tool {call.name!r} at {shown_url(endpoint.url)}"
            if exc.kind == "connection":
                missed = self._unreached[endpoint.url] = self._unreached.get(endpoint.url, 0) + 1
                if missed >= GONE_AFTER:
                    raise ToolServerGone(f"{where}: {missed} calls in a row could not connect, each after its "
                                         f"retries ({exc}): the tool server is down") from None
            raise RolloutToolError(_FAILED_KIND.get(exc.kind, "tool_server_error"), f"{where}: {exc}") from None
        self._unreached.pop(endpoint.url, None)  # it answered: the calls before were not a server down
        scrub = endpoint.secrets.scrub
        if answer.over:
            return self._error(call, "HTTP413", f"the answer is over the 1 MB limit ({MAX_BYTES:,} bytes) of a tool "
                               "endpoint; it was not read")
        text = answer.body.decode("utf-8", "replace")
        if 400 <= answer.status < 500:  # the contract: shown to the model
            output = _output(text)
            return self._error(call, f"HTTP{answer.status}", scrub(output if output is not None else _payload(text)))
        if not 200 <= answer.status < 300:
            return self._error(call, f"HTTP{answer.status}", scrub(_payload(text)))
        output = _output(text)
        if output is None:
            return self._error(call, BAD_TOOL_OUTPUT, "the server answered without a function_call_output's "
                               f"`output`: {scrub(_payload(text))[:500]}")
        return ToolResult(call.id, call.name, cut(scrub(output), self.limits.output_chars))

    def _error(self, call: ToolCall, kind: str, message: str) -> ToolResult:
        result = error_result(call, kind, message)
        return ToolResult(result.call_id, result.name, cut(result.content, self.limits.output_chars), result.error)

    async def aclose(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            await client.aclose()


def _output(text: str) -> str | None:
    """A function_call_output's `output` as the model's text: a string as it is, a list of content parts as their
    text (anything else as JSON); None when the body has none."""
    try:
        obj = json.loads(text)
    except ValueError:
        return None
    if not isinstance(obj, dict) or "output" not in obj:
        return None
    output = obj["output"]
    if isinstance(output, str):
        return output
    if isinstance(output, list) and all(isinstance(p, dict) and isinstance(p.get("text"), str) for p in output):
        return "".join(str(p["text"]) for p in output if isinstance(p, dict))
    return json.dumps(output, ensure_ascii=False)


def _payload(text: str) -> str:
    """An answer's body serialized for the model: JSON compactly, anything else as it came."""
    try:
        return json.dumps(json.loads(text), ensure_ascii=False, separators=(",", ":"))
    except ValueError:
        return text
