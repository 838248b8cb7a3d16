"""What comes back from an OpenAI-compatible endpoint, read: a Chat Completions or Responses body as a Generation
(text, tool calls, JSON, reasoning, usage), the rate-limit and retry-after headers, and an HTTP status as the kind of
error the runner retries by. Pure functions of the answer: the batch path reads its result lines with the same ones.
"""

from __future__ import annotations

import email.utils
import json
import re
from collections.abc import Mapping

from rfteval.data.json_types import JSONObject, JSONValue
from rfteval.data.reasoning import message_reasoning
from rfteval.data.sample import parse_output_json
from rfteval.providers.base import ErrorKind, Generation, ProviderError, RateInfo
from rfteval.providers.openai_request import json_object, json_objects

# ---- headers and status --------------------------------------------------------------------------------------------

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")


def parse_duration(text: str | None) -> float | None:
    """`x-ratelimit-reset-*` durations ("1s", "6m0s", "200ms", "1h2m3.5s") in seconds; None when absent or bad."""
    if not text:
        return None
    text = text.strip()
    try:
        return max(0.0, float(text))
    except ValueError:
        pass
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        return None
    scale = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
    return sum(float(n) * scale[u] for n, u in parts)


def _int(value: str | None) -> int | None:
    try:
        return int(float(value)) if value is not None else None
    except ValueError:
        return None


def rate_info(headers: Mapping[str, str]) -> RateInfo | None:
    """The x-ratelimit-* headers of an answer, or None when it sent none (most local servers)."""
    get = headers.get
    if get("x-ratelimit-remaining-requests") is None and get("x-ratelimit-remaining-tokens") is None:
        return None
    return RateInfo(limit_requests=_int(get("x-ratelimit-limit-requests")),
                    remaining_requests=_int(get("x-ratelimit-remaining-requests")),
                    reset_requests_s=parse_duration(get("x-ratelimit-reset-requests")),
                    limit_tokens=_int(get("x-ratelimit-limit-tokens")),
                    remaining_tokens=_int(get("x-ratelimit-remaining-tokens")),
                    reset_tokens_s=parse_duration(get("x-ratelimit-reset-tokens")))


def status_kind(status: int) -> ErrorKind:
    """HTTP status → error kind; 408/409 are retryable as OpenAI's own SDK treats them."""
    if status == 429:
        return "rate_limit"
    if status in (401, 403):
        return "auth"
    if status == 404:
        return "not_found"
    if status == 408:
        return "timeout"
    if status == 409 or status >= 500:
        return "server"
    return "bad_request"

def parse_retry_after(headers: Mapping[str, str], now: float) -> float | None:
    """Seconds to wait from `retry-after-ms`, or `Retry-After` as seconds or an HTTP date; None if absent/bad."""
    ms = headers.get("retry-after-ms")
    if ms is not None:
        try:
            value = float(ms) / 1000.0
            if value >= 0:
                return value
        except ValueError:
            pass
    raw = headers.get("retry-after")
    if raw is None:
        return None
    try:
        value = float(raw)
        return value if value >= 0 else None
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - now)


# ---- bodies → Generation -------------------------------------------------------------------------------------------


def _output_json(text: str, structured: bool) -> JSONValue:
    """The output's JSON. An output that asked for JSON (`structured`) is also read leniently: any JSON value,
    and raw control characters inside strings (llama.cpp's JSON grammar lets a raw newline into a string, which
    strict JSON forbids); the strict exact parse stays for outputs that did not ask for JSON."""
    parsed = parse_output_json(text)
    if parsed is None and structured and text.strip():
        try:
            return json.loads(text, strict=False)
        except (ValueError, RecursionError):
            return None
    return parsed



def parse_chat(data: JSONObject, structured: bool = False) -> Generation:
    choices = data.get("choices")
    first = choices[0] if isinstance(choices, list) and choices else None
    if not isinstance(choices, list) or not isinstance(first, dict):
        raise ProviderError("malformed", "response has no choices")
    message = first.get("message")
    if not isinstance(message, dict):
        raise ProviderError("malformed", "choices[0] has no message")
    if message.get("refusal"):
        raise ProviderError("refusal", str(message["refusal"]), usage=_chat_usage(data))
    text = message.get("content") or ""
    if not isinstance(text, str):
        raise ProviderError("malformed", "choices[0].message.content is not text")
    tools: list[JSONValue] = []
    calls = message.get("tool_calls")
    for call in json_objects(calls) if calls else ():
        fn = json_object(call.get("function"))
        tools.append(
            {"id": call.get("id"), "type": "function", "function": {"name": fn.get("name"), "arguments": fn.get("arguments")}}
        )
    return Generation(
        output_text=text,
        output_tools=tools,
        output_json=_output_json(text, structured),
        choices=[_compact(c) for c in choices if isinstance(c, dict)],
        usage=_chat_usage(data),
        finish_reason=finish if isinstance(finish := first.get("finish_reason"), str) else None,
        reasoning=_chat_reasoning(message),
    )


def _chat_reasoning(message: JSONObject) -> str | None:
    """The thinking a server sent beside the content: `reasoning_content` (SGLang, llama.cpp, DeepSeek, older
    vLLM) or `reasoning` (newer vLLM, OpenRouter); None when neither is text. The rule is data.reasoning's, which
    the reward adapters read a trainer's messages with."""
    return message_reasoning(message)


def _usage(data: JSONObject, input_key: str, output_key: str, details_key: str) -> dict[str, int | None]:
    """Token counts of an answer's usage (each narrowed inline: this runs once per answer)."""
    usage = data.get("usage")
    if not isinstance(usage, dict):
        return {"input_tokens": None, "output_tokens": None, "reasoning_tokens": None}
    details = usage.get(details_key)
    i, o = usage.get(input_key), usage.get(output_key)
    r = details.get("reasoning_tokens") if isinstance(details, dict) else None
    return {"input_tokens": i if isinstance(i, int) else None, "output_tokens": o if isinstance(o, int) else None,
            "reasoning_tokens": r if isinstance(r, int) else None}


def _chat_usage(data: JSONObject) -> dict[str, int | None]:
    return _usage(data, "prompt_tokens", "completion_tokens", "completion_tokens_details")


def _responses_usage(data: JSONObject) -> dict[str, int | None]:
    return _usage(data, "input_tokens", "output_tokens", "output_tokens_details")


def _compact(obj: JSONObject) -> JSONObject:
    """Drop the null fields the SDK fills in, so choices look like what the server sent."""
    return {k: _compact_value(v) for k, v in obj.items() if v is not None}


def _compact_value(obj: JSONValue) -> JSONValue:
    if isinstance(obj, dict):
        return _compact(obj)
    if isinstance(obj, list):
        return [_compact_value(v) for v in obj]
    return obj


def parse_responses(data: JSONObject, structured: bool = False) -> Generation:
    output = data.get("output")
    if not isinstance(output, list):
        raise ProviderError("malformed", "response has no output")
    texts: list[str] = []
    tools: list[JSONValue] = []
    reasoning: list[str] | None = None
    for item in output:
        if not isinstance(item, dict):
            continue
        if item.get("type") == "reasoning":
            reasoning = (reasoning or []) + _reasoning_texts(item)
        elif item.get("type") == "message":
            for part in json_objects(item.get("content")):
                if part.get("type") == "output_text":
                    texts.append(text if isinstance(text := part.get("text"), str) else "")
                elif part.get("type") == "refusal":
                    raise ProviderError("refusal", str(part.get("refusal") or "refused"), usage=_responses_usage(data))
        elif item.get("type") == "function_call":
            tools.append(
                {
                    "id": item.get("call_id"),
                    "type": "function",
                    "function": {"name": item.get("name"), "arguments": item.get("arguments")},
                }
            )
    if data.get("status") == "failed":
        err = data.get("error") or {}
        raise ProviderError("server", f"response failed: {err.get('message') if isinstance(err, dict) else err}")
    text = "".join(texts)
    incomplete = json_object(data.get("incomplete_details"))
    if data.get("status") == "incomplete":
        finish = "length" if incomplete.get("reason") == "max_output_tokens" else "content_filter"
    else:
        finish = "tool_calls" if tools else "stop"
    return Generation(
        output_text=text,
        output_tools=tools,
        output_json=_output_json(text, structured),
        choices=None,
        usage=_responses_usage(data),
        finish_reason=finish,
        reasoning=None if reasoning is None else "\n\n".join(reasoning),
    )


def _reasoning_texts(item: JSONObject) -> list[str]:
    """A reasoning item's text: its summaries (OpenAI shows only those, and only when asked), else its
    reasoning_text parts (open-weight models served with a Responses API show the thinking itself)."""
    texts = [part.get("text") for part in json_objects(item.get("summary")) if part.get("type") == "summary_text"]
    if not texts:
        texts = [part.get("text") for part in json_objects(item.get("content")) if part.get("type") == "reasoning_text"]
    return [t for t in texts if isinstance(t, str) and t]

