"""Recorded outputs served as a provider: re-grade or re-run a past generation without calling any model."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TypedDict

from rfteval.data.dataset import iter_jsonl
from rfteval.data.json_types import JSONObject, JSONValue
from rfteval.data.sample import parse_output_json
from rfteval.errors import InputError
from rfteval.providers.base import Generation, GenerationRequest, ProviderError, ServerlessProvider

USAGE_KEYS = ("input_tokens", "output_tokens", "reasoning_tokens")
Key = tuple[str | None, str, int]  # (model or None for "any model", item_id, epoch)


class Recording(TypedDict):
    """One validated line of a recording file."""

    model: str | None
    item_id: str
    epoch: int
    output_text: str
    output_tools: list[JSONObject] | None
    usage: dict[str, int | None] | None


class ReplayProvider(ServerlessProvider):
    """Serves lines {"item_id", "epoch", "output_text", "model"?, "output_tools"?, "usage"?} of a JSONL file.

    A line with a `model` answers only that model; one without answers any. A record file from an earlier run
    is a valid recording: its failed cells (output_text null with an error) are skipped, so they come out missing.
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._recordings, self._sha256 = load_recordings(self.path)
        self._models = {model for model, _, _ in self._recordings if model is not None}
        # the highest epoch recorded for any item: a run asking for more would only record missing cells
        self.max_epoch = max((epoch for _, _, epoch in self._recordings), default=0)

    def __repr__(self) -> str:
        return f"ReplayProvider(path={str(self.path)!r}, recordings={len(self._recordings)})"

    def __len__(self) -> int:
        return len(self._recordings)

    def identity(self) -> JSONObject:
        return {"provider": "replay", "path": str(self.path.resolve()), "sha256": self._sha256}

    def request_body(self, request: GenerationRequest) -> JSONObject:
        """Nothing is sent; the cell coordinates are what selects the answer."""
        return {"model": request.model, "item_id": request.item_id, "epoch": request.epoch}

    async def generate(self, request: GenerationRequest, timeout_s: float) -> Generation:
        rec = self._recordings.get((request.model, request.item_id, request.epoch))
        if rec is None:
            rec = self._recordings.get((None, request.item_id, request.epoch))
        if rec is None and request.model.startswith("replay:") and len(self._models) == 1:
            # `--model base=replay:FILE` names no model of its own: a file recorded for one model answers it
            rec = self._recordings.get((next(iter(self._models)), request.item_id, request.epoch))
        if rec is None:
            raise ProviderError(
                "missing",
                f"{self.path}: no recording for item {request.item_id!r} epoch {request.epoch} (model {request.model!r})",
            )
        text = rec["output_text"]
        tools: list[JSONValue] = [dict(t) for t in rec["output_tools"] or []]
        return Generation(
            output_text=text,
            output_tools=tools,
            output_json=parse_output_json(text),
            usage=dict(rec["usage"] or {}),
            finish_reason="tool_calls" if tools else "stop",
        )

    async def aclose(self) -> None:
        return None


def _file_sha256(path: Path) -> str:
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def check_recording(obj: JSONValue, path: Path, lineno: int) -> Recording | None:
    """The validated recording of one line, None for a failed cell of a record file; InputError when bad."""
    if not isinstance(obj, dict):
        raise InputError("must be a JSON object", path, lineno)
    item_id = obj.get("item_id")
    if not isinstance(item_id, str) or not item_id:
        raise InputError("required, a non-empty string", path, lineno, "item_id")
    epoch = obj.get("epoch")
    if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 1:
        raise InputError("required, an integer >= 1", path, lineno, "epoch")
    text = obj.get("output_text")
    if text is None and obj.get("error"):
        return None
    if not isinstance(text, str):
        raise InputError("required, a string", path, lineno, "output_text")
    model = obj.get("model")
    if model is not None and not isinstance(model, str):
        raise InputError("must be a string", path, lineno, "model")
    raw_tools = obj.get("output_tools")
    tools: list[JSONObject] | None = None
    if raw_tools is not None:
        if not isinstance(raw_tools, list) or not all(isinstance(t, dict) for t in raw_tools):
            raise InputError("must be a list of objects", path, lineno, "output_tools")
        tools = [t for t in raw_tools if isinstance(t, dict)]  # all of them: the narrowing the check made
    raw_usage = obj.get("usage")
    usage: dict[str, int | None] | None = None
    if raw_usage is not None:
        if not isinstance(raw_usage, dict):
            raise InputError("must be an object", path, lineno, "usage")
        counts: dict[str, int | None] = {}
        for key, value in raw_usage.items():
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise InputError("must be a non-negative integer or null", path, lineno, f"usage.{key}")
            counts[key] = value
        usage = {k: counts.get(k) for k in USAGE_KEYS}
    return {"model": model, "item_id": item_id, "epoch": epoch, "output_text": text, "output_tools": tools, "usage": usage}


def load_recordings(path: Path) -> tuple[dict[Key, Recording], str]:
    """All recordings by (model, item_id, epoch), and the file's sha256; the first bad line is an InputError."""
    recordings: dict[Key, Recording] = {}
    first_line: dict[Key, int] = {}
    for lineno, value in iter_jsonl(path):
        if isinstance(value, InputError):
            raise value
        rec = check_recording(value, path, lineno)
        if rec is None:
            continue
        key: Key = (rec["model"], rec["item_id"], rec["epoch"])
        if key in recordings:
            raise InputError(
                f"duplicate recording for item {key[1]!r} epoch {key[2]}"
                + (f" model {key[0]!r}" if key[0] else "")
                + f" (first on line {first_line[key]})",
                path,
                lineno,
                "item_id",
            )
        recordings[key] = rec
        first_line[key] = lineno
    if not recordings:
        raise InputError("no recordings in the file", path)
    return recordings, _file_sha256(path)
