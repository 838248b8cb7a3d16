"""The Batch API's JSONL lines: a cell's request line, result lines read and checked, a result line turned into a
store entry. The batch phase, offline export/import and Ray Data all write and read these."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rfteval.data.json_types import JSONMapping, JSONObject
from rfteval.errors import InputError
from rfteval.providers.base import Generation, ProviderError

if TYPE_CHECKING:
    from rfteval.run.store import CellKeys, ResponseEntry

REQUEUE_CODES = frozenset({"batch_expired", "batch_cancelled"})
ENDPOINTS = {"chat": "/v1/chat/completions", "responses": "/v1/responses"}


@dataclass
class CellInfo:
    """What a batch result needs to become a store entry: the cell's coordinates, and how to parse it."""

    label: str
    model: str
    item_id: str
    epoch: int
    api: str
    structured: bool



BatchJob = tuple[str, CellInfo, JSONObject]  # (cell key = custom_id, the cell, its request body)


def request_line(key: str, endpoint: str, body: JSONMapping) -> str:
    """One Batch API input line (what `vllm run-batch` and Ray Data read too)."""
    return json.dumps({"custom_id": key, "method": "POST", "url": endpoint, "body": body},
                      ensure_ascii=False, separators=(",", ":"), default=str)



def entry_from_result(key: str, cell: CellInfo, line: JSONObject, session: str,
                      tier: str = "batch") -> tuple[str, ResponseEntry | None]:
    """One output/error line → ("stored", entry) | ("requeue", None) | ("error", entry).

    A 200 is parsed exactly as a synchronous answer; a 429/5xx line or an expired/cancelled one is re-queued
    (another window may succeed); any other status is the cell's error, as a synchronous 400 would be.
    """
    from rfteval.providers.openai_provider import parse_chat, parse_responses, status_kind
    from rfteval.run.store import new_response_entry

    common: CellKeys = {"key": key, "label": cell.label, "model": cell.model, "item_id": cell.item_id,
                        "epoch": cell.epoch, "session": session}
    err = line.get("error")
    resp = line.get("response")
    if isinstance(err, dict) and err:
        code = str(err.get("code") or "")
        if code in REQUEUE_CODES or not isinstance(resp, dict):
            return "requeue", None
    if not isinstance(resp, dict):
        return "requeue", None
    status = resp.get("status_code")
    body = resp.get("body")
    if status == 200 and isinstance(body, dict):
        parse = parse_chat if cell.api == "chat" else parse_responses
        try:
            gen: Generation = parse(body, structured=cell.structured)
        except ProviderError as exc:
            if exc.kind in ("refusal",):
                return "error", new_response_entry(**common, error=(exc.kind, str(exc)))
            return "error", new_response_entry(**common, error=(exc.kind, str(exc)))
        entry = new_response_entry(**common, generation=gen)
        entry.tier = tier
        return "stored", entry
    if not isinstance(status, int):
        return "requeue", None
    kind = status_kind(status)
    if kind in ("rate_limit", "server", "timeout"):
        return "requeue", None
    message = ""
    if isinstance(body, dict):
        e = body.get("error", body)
        message = str(e.get("message") if isinstance(e, dict) else e)[:300]
    return "error", new_response_entry(**common, error=(kind, f"HTTP {status}: {message}"))


def parse_result_lines(data: bytes | str, source: str | Path | None = None,
                       strict: bool = False) -> Iterator[tuple[int, JSONObject]]:
    """(line number, object) for each line of a Batch API output/error file; with `strict`, a bad line is an
    InputError naming the file and line (an imported file), else it is skipped (a provider's own file)."""
    text = data.decode("utf-8", errors="replace") if isinstance(data, bytes) else data
    for n, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except ValueError as exc:
            if strict:
                raise InputError(f"invalid JSON: {exc}", source, n) from None
            continue
        if not isinstance(obj, dict):
            if strict:
                raise InputError("must be a JSON object", source, n)
            continue
        cid = obj.get("custom_id")  # a non-empty string in every line yielded: result_key() reads it
        if not isinstance(cid, str) or not cid:
            if strict:
                raise InputError("required, a non-empty string (the cell key rfteval wrote)", source, n, "custom_id")
            continue
        resp, err = obj.get("response"), obj.get("error")
        if strict:
            if resp is None and not err:
                raise InputError("a result line needs `response` or `error`", source, n, "response")
            if resp is not None and (not isinstance(resp, dict) or not isinstance(resp.get("status_code"), int)):
                raise InputError("must be an object with an integer status_code", source, n, "response")
            if resp is not None and resp.get("status_code") == 200 and not isinstance(resp.get("body"), dict):
                raise InputError("a 200 response needs a JSON object body", source, n, "response.body")
            if err is not None and not isinstance(err, dict):
                raise InputError("must be an object {code, message} or null", source, n, "error")
        yield n, obj


def result_key(line: JSONMapping) -> str:
    """The custom_id of a line parse_result_lines yielded (which checked it is a non-empty string)."""
    key = line["custom_id"]
    if not isinstance(key, str):
        raise TypeError(f"not a line parse_result_lines yielded: custom_id is {type(key).__name__}")
    return key
