"""What goes to an OpenAI-compatible endpoint: a GenerationRequest as a Chat Completions or a Responses body.

Pure functions of the request, so the body is also the response cache's key (the provider, openai_provider.py, only
adds what does not change the answer: the service tier, the limit key a server refused). Each API's own shape of
tools, tool choice and messages is written here, whichever shape the dataset gave them in.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence

from rfteval.data.json_types import JSONObject, JSONValue
from rfteval.errors import InputError
from rfteval.providers.base import GenerationRequest

# The output limit's two spellings: OpenAI's current one, and the one llama.cpp's server (and older servers) read
LIMIT_KEYS = ("max_completion_tokens", "max_tokens")


def json_object(value: JSONValue) -> JSONObject:
    """A body's nested object (a request's, and an answer's: openai_response.py), {} when absent or not an object
    (what `x.get(k) or {}` read, narrowed)."""
    return value if isinstance(value, dict) else {}


def json_objects(value: JSONValue) -> list[JSONObject]:
    """The objects of a body's list (`tool_calls`, `content`): none when it is absent or not a list."""
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


# How a `developer` message is sent: as itself (OpenAI's role, the default) or as `system`, for servers whose chat
# schema has no developer role (llama-cpp-python's). The mapped request is the one keyed and cached.
DEVELOPER_AS = ("developer", "system")


def check_developer_as(value: str | None) -> str | None:
    if value is not None and value not in DEVELOPER_AS:
        raise InputError(f"must be developer or system, got {value!r}", field="--developer-as")
    return None if value == "developer" else value


def developer_as_system(messages: Sequence[JSONValue]) -> list[JSONValue]:
    """The messages with each `developer` role renamed `system`, the rest as they are (shallow copies)."""
    return [{**m, "role": "system"} if isinstance(m, dict) and m.get("role") == "developer" else m
            for m in messages]



def _json_schema(rf: JSONObject) -> JSONObject:
    """Sampling.response_format → {name, schema, strict?}; an already-wrapped chat format is unwrapped."""
    wrapped = rf.get("json_schema")
    if rf.get("type") == "json_schema" and isinstance(wrapped, dict):
        rf = wrapped
    out: JSONObject = {"name": rf.get("name") or "response", "schema": rf.get("schema", {})}
    if rf.get("strict") is not None:
        out["strict"] = bool(rf["strict"])
    return out


def chat_body(request: GenerationRequest, copy_messages: bool = True, both_limits: bool = False) -> JSONObject:
    """`copy_messages=False` when the body is encoded at once and never kept (the request path): no deep copy.
    `both_limits`: the output limit goes as `max_tokens` too (endpoints other than OpenAI's)."""
    s = request.sampling
    messages: list[JSONValue] = list(request.messages)  # a list of JSON values (list is invariant), shallow
    if copy_messages:
        messages = copy.deepcopy(messages)
    body: JSONObject = {"model": request.model, "messages": messages}
    if request.tools:
        body["tools"] = [_chat_tool(t) for t in request.tools]
        # OpenAI's default when tools are given, said explicitly: llama.cpp's function-calling format needs it
        body["tool_choice"] = chat_tool_choice(request.tool_choice)
    if s.response_format:
        rf = s.response_format
        if rf.get("type") in ("json_object", "text"):
            body["response_format"] = copy.deepcopy(rf)  # as the user gave it, extra keys included
        else:
            body["response_format"] = {"type": "json_schema", "json_schema": _json_schema(rf)}
    if s.reasoning_effort is not None:
        body["reasoning_effort"] = s.reasoning_effort
    if s.max_output_tokens is not None:
        body["max_completion_tokens"] = s.max_output_tokens
        if both_limits:
            body["max_tokens"] = s.max_output_tokens
    if s.temperature is not None:
        body["temperature"] = s.temperature
    if s.top_p is not None:
        body["top_p"] = s.top_p
    if s.seed is not None:
        body["seed"] = s.seed
    return body


def responses_body(request: GenerationRequest) -> JSONObject:
    """The Responses API has no `seed`; it is left out rather than rejected by the server."""
    s = request.sampling
    body: JSONObject = {"model": request.model, "input": responses_input(request.messages)}
    if request.tools:
        body["tools"] = [responses_tool(t) for t in request.tools]
        body["tool_choice"] = responses_tool_choice(request.tool_choice)
    if s.response_format:
        rf = s.response_format
        fmt: JSONObject = (copy.deepcopy(rf) if rf.get("type") in ("json_object", "text")
                           else {"type": "json_schema", **_json_schema(rf)})
        body["text"] = {"format": fmt}
    if s.reasoning_effort is not None:
        body["reasoning"] = {"effort": s.reasoning_effort}
    if s.max_output_tokens is not None:
        body["max_output_tokens"] = s.max_output_tokens
    if s.temperature is not None:
        body["temperature"] = s.temperature
    if s.top_p is not None:
        body["top_p"] = s.top_p
    body["store"] = False  # an eval must not fill the account's stored responses
    return body


def chat_tool_choice(choice: JSONValue) -> JSONValue:
    """An item's tool_choice in chat's shape ("auto" when it has none); a Responses-shaped named function
    {"type": "function", "name"} is wrapped as {"type": "function", "function": {"name"}}."""
    if choice is None:
        return "auto"
    if isinstance(choice, dict) and choice.get("type") == "function" and "function" not in choice:
        return {"type": "function", "function": {"name": choice.get("name")}}
    return copy.deepcopy(choice)


def responses_tool_choice(choice: JSONValue) -> JSONValue:
    """An item's tool_choice in Responses' flat shape ("auto" when it has none)."""
    if choice is None:
        return "auto"
    fn = choice.get("function") if isinstance(choice, dict) else None
    if isinstance(choice, dict) and choice.get("type") == "function" and isinstance(fn, dict):
        return {"type": "function", "name": fn.get("name")}
    return copy.deepcopy(choice)


def _chat_tool(tool: JSONValue) -> JSONValue:
    """A Responses-shaped function tool given to a chat model is wrapped back into chat's shape; anything else
    goes as the item gave it."""
    if isinstance(tool, dict) and tool.get("type") == "function" and "function" not in tool and "name" in tool:
        fn = {k: v for k, v in tool.items() if k != "type"}
        return {"type": "function", "function": fn}
    return copy.deepcopy(tool)


def responses_tool(tool: JSONValue) -> JSONValue:
    """Chat's {"type":"function","function":{name, description, parameters, strict}} → Responses' flat shape;
    anything else goes as the item gave it."""
    fn = tool.get("function") if isinstance(tool, dict) else None
    if isinstance(tool, dict) and tool.get("type") == "function" and isinstance(fn, dict):
        out: JSONObject = {"type": "function", "name": fn.get("name")}
        for key in ("description", "parameters", "strict"):
            if key in fn:
                out[key] = copy.deepcopy(fn[key])
        return out
    return copy.deepcopy(tool)


def _responses_parts(content: JSONValue, role: str) -> JSONValue:
    if not isinstance(content, list):
        return content
    text_type = "output_text" if role == "assistant" else "input_text"
    parts: list[JSONValue] = []
    for part in content:
        if not isinstance(part, dict):
            parts.append(part)
        elif part.get("type") == "text":
            parts.append({"type": text_type, "text": part.get("text", "")})
        elif part.get("type") == "image_url":
            image = part.get("image_url")
            url = image.get("url") if isinstance(image, dict) else image
            parts.append({"type": "input_image", "image_url": url})
        else:
            parts.append(copy.deepcopy(part))
    return parts


def responses_input(messages: Sequence[JSONValue]) -> list[JSONValue]:
    """Chat messages → Responses input items; assistant tool calls and tool results become function items."""
    items: list[JSONValue] = []
    for msg in messages:
        if not isinstance(msg, dict):  # never from a dataset (iter_items checked its messages): sent as given
            items.append(copy.deepcopy(msg))
            continue
        role = msg.get("role")
        if role == "tool":
            output = msg.get("content")
            if not isinstance(output, str):
                output = json.dumps(output)
            items.append({"type": "function_call_output", "call_id": msg.get("tool_call_id"), "output": output})
            continue
        content = msg.get("content")
        if content is not None and content != "":
            items.append({"role": role, "content": _responses_parts(content, str(role))})
        for call in json_objects(msg.get("tool_calls")):
            fn = json_object(call.get("function"))
            items.append(
                {"type": "function_call", "call_id": call.get("id"), "name": fn.get("name"), "arguments": fn.get("arguments", "")}
            )
    return items

