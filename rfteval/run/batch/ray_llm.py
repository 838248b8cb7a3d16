"""Generation past one GPU box, on an engine the user already runs: Ray Data LLM, or sharded `vllm run-batch`.

`rfteval run --export-requests` writes Batch API request lines and `--import-responses` reads Batch API output
lines; everything between is somebody's engine. This module is the plumbing for two ways of spreading that middle
over several nodes, so that neither needs rfteval on the GPU nodes beyond this file's functions:

- Ray Data LLM (`ray.data.llm.build_processor` with vLLM or SGLang): `preprocess` turns a request line into the
  `messages` + `sampling_params` the engine stage reads, `postprocess` turns the engine's row back into an output
  line (a `chat.completion` body with usage) keyed by the same `custom_id`. Ray spreads the rows over the replicas.
- `vllm run-batch` on N nodes: `shard_requests` splits an export into N files by a hash of `custom_id` (stable: a
  re-export of the still-missing cells puts each one on the same shard as before), `merge_outputs` joins the N
  output files, refusing a duplicated or a missing `custom_id` rather than importing half a run silently.

Ray is imported only inside the functions that need it (the `ray` extra), so the sharding and the pure
pre/postprocess functions work, and are tested, without it.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, SupportsInt, TypeAlias, TypedDict

from rfteval.data.json_types import JSONMapping, JSONObject, JSONValue
from rfteval.errors import InputError
from rfteval.run.batch.lines import parse_result_lines, result_key

if TYPE_CHECKING:
    from ray.data import Dataset
    from ray.data.llm import ProcessorConfig

CHAT_URL = "/v1/chat/completions"
ENGINES = ("vllm", "sglang")
# The only column the engine stages must not see under its own name: a `model` column different from the
# processor's model makes vLLM's stage ask for a LoRA adapter of that name. The request travels as one JSON
# string instead, which also keeps Arrow from having to unify the schemas of heterogeneous message lists.
REQUEST_COLUMN = "rfteval_request"
# Body keys the engine path turns into sampling parameters; any other key (tools, reasoning_effort, logprobs...)
# cannot be honoured by a bare engine and is reported, never dropped silently.
SAMPLING_KEYS = frozenset({"model", "messages", "temperature", "top_p", "max_tokens", "max_completion_tokens",
                           "seed", "response_format", "stop"})


@dataclass
class Request:
    """One Batch API input line, checked."""

    custom_id: str
    body: JSONObject
    line: str  # the raw line, written back unchanged by the sharder


class OutputResponse(TypedDict):
    status_code: int
    request_id: str
    body: JSONObject


class OutputLine(TypedDict):
    """One Batch API output line as output_line writes it (`error` is always null: failures are HTTP statuses)."""

    id: str
    custom_id: str
    response: OutputResponse
    error: None


@dataclass
class RequestFile:
    """What was read: the requests in order, and which body keys the engine path cannot honour."""

    requests: list[Request] = field(default_factory=list)
    ignored_keys: dict[str, int] = field(default_factory=dict)

    @property
    def models(self) -> list[str]:
        return sorted({str(r.body.get("model")) for r in self.requests if r.body.get("model")})


def read_requests(paths: Iterable[Path]) -> RequestFile:
    """Request lines of one or more exported files; a bad line or a duplicated custom_id is one InputError."""
    out = RequestFile()
    seen: dict[str, tuple[Path, int]] = {}
    for path in paths:
        path = Path(path)
        if not path.is_file():
            raise InputError("no such file", path)
        # split on newlines only: a request written with ensure_ascii=False may hold U+2028 inside a string
        for n, raw in enumerate(_text(path).split("\n"), 1):
            if not raw.strip():
                continue
            req = _request(raw.rstrip("\r"), path, n)
            if req.custom_id in seen:
                p, m = seen[req.custom_id]
                raise InputError(f"duplicate {req.custom_id!r}, first at {p}:{m}", path, n, "custom_id")
            seen[req.custom_id] = (path, n)
            for key in req.body:
                if key not in SAMPLING_KEYS:
                    out.ignored_keys[key] = out.ignored_keys.get(key, 0) + 1
            out.requests.append(req)
    return out


def _text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8 text ({exc.reason})", path) from None


def _request(raw: str, path: Path, n: int) -> Request:
    try:
        obj = json.loads(raw)
    except ValueError as exc:
        raise InputError(f"invalid JSON: {exc}", path, n) from None
    if not isinstance(obj, dict):
        raise InputError("must be a JSON object (a Batch API request line)", path, n)
    cid = obj.get("custom_id")
    if not isinstance(cid, str) or not cid:
        raise InputError("required, a non-empty string", path, n, "custom_id")
    url = obj.get("url")
    if url != CHAT_URL:
        raise InputError(f"{url!r}: only {CHAT_URL} requests go to an engine (export with --api chat)", path, n, "url")
    body = obj.get("body")
    if not isinstance(body, dict):
        raise InputError("required, an object", path, n, "body")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise InputError("required, a non-empty list", path, n, "body.messages")
    return Request(cid, body, raw)


# ---------------------------------------------------------------- request body → engine row (preprocess)


def max_tokens_of(body: JSONMapping, default: int | None) -> int | None:
    """The output limit as the body gives it: `max_completion_tokens` (what rfteval sends) or `max_tokens`."""
    for key in ("max_completion_tokens", "max_tokens"):
        value = body.get(key)
        if isinstance(value, int):
            return int(value)
    return default


def _schema_text(rf: JSONMapping) -> str | None:
    """The JSON schema of a chat `response_format`, as a string (a string keeps every row's column one type)."""
    if rf.get("type") != "json_schema":
        return None
    js = rf.get("json_schema")
    schema = js.get("schema") if isinstance(js, dict) else None
    return json.dumps(schema if isinstance(schema, dict) else {}, sort_keys=True)


def sampling_params(body: JSONMapping, engine: str, default_max_tokens: int | None) -> JSONObject:
    """A request body's sampling → the engine's per-row `sampling_params`.

    Every row carries the same keys (None where unset; SGLang's seed aside, see below) because Ray Data stores
    the column as one Arrow struct:
    rows with different key sets would be unified with nulls anyway, and the engines accept None for exactly
    these keys. Unset temperature/top_p become OpenAI's defaults (1.0), not the engine's, so a sample means the
    same as it would from the API.
    """
    if engine not in ENGINES:
        raise InputError(f"{engine!r}: one of {', '.join(ENGINES)}", field="--engine")
    given = body.get("response_format")
    rf: JSONMapping = given if isinstance(given, Mapping) else {}
    schema = _schema_text(rf)
    json_mode = rf.get("type") == "json_object"
    t, p, s = body.get("temperature"), body.get("top_p"), body.get("seed")
    temperature = float(t) if isinstance(t, int | float) else 1.0
    top_p = float(p) if isinstance(p, int | float) else 1.0
    seed = int(s) if isinstance(s, int) else None
    stop = body.get("stop")
    stop_list: list[JSONValue] | None = ([stop] if isinstance(stop, str) else [str(s) for s in stop]
                                         if isinstance(stop, list) else None)
    limit = max_tokens_of(body, default_max_tokens)
    if engine == "vllm":
        # vLLM's stage builds StructuredOutputsParams(**structured_outputs) when it is non-empty.
        structured: JSONObject | None = {"json": schema} if schema is not None else {"json_object": True} if json_mode else None
        return {"temperature": temperature, "top_p": top_p, "max_tokens": limit, "seed": seed, "stop": stop_list,
                "structured_outputs": structured}
    # SGLang: its own names (max_new_tokens, json_schema). Its seed (`sampling_seed`) is recent and an older
    # SGLang refuses the unknown key, so it goes only where a seed was asked for (then in every row of a run).
    params: JSONObject = {"temperature": temperature, "top_p": top_p, "max_new_tokens": limit, "stop": stop_list,
              "json_schema": schema if schema is not None else ('{"type": "object"}' if json_mode else None)}
    if seed is not None:
        params["sampling_seed"] = seed
    return params


def _request_of(row: Mapping[str, object]) -> tuple[str, str, JSONObject]:
    """(the request line, its custom_id, its body) of a Ray row: the line this module put in REQUEST_COLUMN, one
    that read_requests checked (a string custom_id, an object body)."""
    raw = row[REQUEST_COLUMN]
    if not isinstance(raw, str):
        raise TypeError(f"{REQUEST_COLUMN} is not a request line but {type(raw).__name__}")
    line = json.loads(raw)
    cid, body = line["custom_id"], line["body"]
    if not isinstance(cid, str) or not isinstance(body, dict):
        raise TypeError(f"{REQUEST_COLUMN} is not a checked request line")
    return raw, cid, body


def preprocess_row(row: Mapping[str, object], engine: str, default_max_tokens: int | None) -> JSONObject:
    """Ray Data's preprocess: a row `{REQUEST_COLUMN: line}` → what the chat-template and engine stages read."""
    raw, _, body = _request_of(row)
    return {REQUEST_COLUMN: raw, "messages": body["messages"],
            "sampling_params": sampling_params(body, engine, default_max_tokens)}


# ---------------------------------------------------------------- engine row → Batch API output line (postprocess)


def error_status(message: str) -> int:
    """A failed row's HTTP status, as `vllm run-batch` would give it: the engines raise ValueError/TypeError for
    a request they refuse (a prompt over the context, a bad schema), which no retry changes: 400, stored as the
    cell's error. Anything else (out of memory, a dead replica) is a 500: import leaves the cell without a
    response, so the next export sends it again."""
    return 400 if message.startswith(("ValueError", "TypeError")) else 500


def _count(value: object) -> int:
    """A token count of an engine row (an int, or numpy's); 0 when absent."""
    return int(value) if isinstance(value, SupportsInt) else 0


def output_line(custom_id: str, body: JSONMapping, engine_row: Mapping[str, object], default_max_tokens: int | None,
                model: str | None) -> OutputLine:
    """One Batch API output line for an engine's answer (or its error) to one request; its ids are derived from
    the custom_id, so a re-run writes the same ones."""
    digest = hashlib.sha256(custom_id.encode()).hexdigest()[:16]
    rid, line_id = f"rfteval-ray-{digest}", f"batch_req_{digest}"
    error = str(engine_row.get("__inference_error__") or "")
    if error:
        status = error_status(error)
        kind = "invalid_request_error" if status == 400 else "server_error"
        return {"id": line_id, "custom_id": custom_id,
                "response": {"status_code": status, "request_id": rid,
                             "body": {"error": {"message": error[:2000], "type": kind}}}, "error": None}
    text = engine_row.get("generated_text")
    text = text if isinstance(text, str) else ""
    prompt_tokens = _count(engine_row.get("num_input_tokens"))
    completion_tokens = _count(engine_row.get("num_generated_tokens"))
    limit = max_tokens_of(body, default_max_tokens)
    # The engine stages do not return vLLM's finish reason; a completion that used the whole limit ran into it
    # (a stop exactly at the limit is the one case this calls "length" wrongly, and it is rare).
    finish = "length" if limit is not None and completion_tokens >= limit else "stop"
    served = body.get("model")
    completion: JSONObject = {
        "id": f"chatcmpl-{rid}", "object": "chat.completion", "created": int(time.time()),
        "model": model or (served if isinstance(served, str) else None) or "",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens},
    }
    return {"id": line_id, "custom_id": custom_id,
            "response": {"status_code": 200, "request_id": rid, "body": completion}, "error": None}


def postprocess_row(row: Mapping[str, object], default_max_tokens: int | None, model: str | None) -> dict[str, str]:
    """Ray Data's postprocess: the engine's row → `{"line": output line as JSON}` (one string) and the request."""
    raw, cid, body = _request_of(row)
    out = output_line(cid, body, row, default_max_tokens, model)
    return {"line": json.dumps(out, ensure_ascii=False, separators=(",", ":")), REQUEST_COLUMN: raw}


def result_line(row: Mapping[str, object], default_max_tokens: int | None, model: str | None) -> OutputLine | None:
    """The output line of one row of the processor's result, or None when the row cannot say which request it
    answers (that request is then missing, and sent again by the next export).

    Ray's processor sends a row whose engine call failed (`should_continue_on_error`) past the postprocess,
    as the engine stage left it: no `line`, but the request column and `__inference_error__`."""
    text = row.get("line")
    if isinstance(text, str) and text:
        obj: OutputLine = json.loads(text)  # what postprocess_row wrote: an output_line(), as JSON
        return obj
    if not isinstance(row.get(REQUEST_COLUMN), str):
        return None
    _, cid, body = _request_of(row)
    error = str(row.get("__inference_error__") or "") or "the engine returned no answer for this row"
    return output_line(cid, body, {"__inference_error__": error}, default_max_tokens, model)


# ---------------------------------------------------------------- the Ray Data pipeline


@dataclass
class EngineOptions:
    """What the processor is built from; engine_kwargs go to vLLM/SGLang as they are (tensor_parallel_size...)."""

    model: str
    engine: str = "vllm"
    engine_kwargs: JSONObject = field(default_factory=dict)
    concurrency: int = 1
    batch_size: int = 64
    default_max_tokens: int | None = 4096
    served_model: str | None = None  # the `model` written in the bodies; default: the request's own
    # to the chat template, e.g. {"enable_thinking": false} for Qwen3: a reasoning model's thinking otherwise
    # arrives inside the answer, as from a server without a reasoning parser
    chat_template_kwargs: JSONObject | None = None


Processor: TypeAlias = "Callable[[Dataset], Dataset]"  # a ray.data Dataset → Dataset, as ray.data.llm's Processor is


class _ProcessorArgs(TypedDict):
    """The keywords both engines' processor configs take alike."""

    model_source: str
    engine_kwargs: JSONObject
    concurrency: int
    batch_size: int
    should_continue_on_error: bool


def processor_config(opts: EngineOptions) -> ProcessorConfig:
    """The engine processor's config: `vLLMEngineProcessorConfig` or `SGLangEngineProcessorConfig`. Failed rows
    are kept (`should_continue_on_error`): one bad request must not fail the whole dataset."""
    from ray.data import llm as rllm

    common: _ProcessorArgs = {"model_source": opts.model, "engine_kwargs": dict(opts.engine_kwargs),
                              "concurrency": opts.concurrency, "batch_size": opts.batch_size,
                              "should_continue_on_error": True}
    config: ProcessorConfig
    if opts.engine == "vllm":
        config = rllm.vLLMEngineProcessorConfig(**common)
    elif opts.engine == "sglang":
        config = rllm.SGLangEngineProcessorConfig(**common)
    else:
        raise InputError(f"{opts.engine!r}: one of {', '.join(ENGINES)}", field="--engine")
    return config


def build_processor(opts: EngineOptions) -> Processor:
    """`ray.data.llm.build_processor` over vLLM or SGLang with this module's pre/postprocess (needs a GPU node)."""
    from ray.data import llm as rllm

    engine, limit, served = opts.engine, opts.default_max_tokens, opts.served_model
    return rllm.build_processor(
        processor_config(opts),
        preprocess=lambda row: preprocess_row(row, engine, limit),
        postprocess=lambda row: postprocess_row(row, limit, served),
        builder_kwargs={"chat_template_kwargs": dict(opts.chat_template_kwargs)} if opts.chat_template_kwargs else None,
    )


@dataclass
class GenerateReport:
    written: int
    errors: int
    missing: list[str]
    ignored_keys: dict[str, int]
    first_error: str = ""


def generate(inputs: list[Path], output: Path, processor: Processor, default_max_tokens: int | None = 4096,
             served_model: str | None = None) -> GenerateReport:
    """Run the requests of `inputs` through `processor` on the Ray cluster this process is connected to, and
    write the output lines to `output` (whole or not at all: a temporary file renamed at the end).

    `default_max_tokens` and `served_model` are the processor's own (EngineOptions), for the lines written
    here for rows that failed in the engine. Lines come back in any order (import matches on custom_id). A
    request whose row never came back is listed in `missing` and not written: the next `--export-requests`
    sends it again.
    """
    import ray.data

    reqs = read_requests(inputs)
    if not reqs.requests:
        raise InputError("no request lines", inputs[0] if inputs else None)
    ds = ray.data.from_items([{REQUEST_COLUMN: r.line} for r in reqs.requests])
    wanted = {r.custom_id for r in reqs.requests}
    seen: set[str] = set()
    errors = 0
    first_error = ""
    output.parent.mkdir(parents=True, exist_ok=True)
    tmp = output.with_name(f".{output.name}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            for row in processor(ds).iter_rows():
                obj = result_line(row, default_max_tokens, served_model)
                cid = obj["custom_id"] if obj is not None else None
                if obj is None or cid not in wanted or cid in seen:  # a replica's retried batch: the first answer
                    continue
                seen.add(cid)
                if obj["response"]["status_code"] != 200:
                    errors += 1
                    err = obj["response"]["body"].get("error")
                    first_error = first_error or str(err.get("message") if isinstance(err, dict) else err)
                fh.write(json.dumps(obj, ensure_ascii=False, separators=(",", ":")) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        tmp.replace(output)
    finally:
        tmp.unlink(missing_ok=True)
    missing = [r.custom_id for r in reqs.requests if r.custom_id not in seen]
    return GenerateReport(len(seen), errors, missing, reqs.ignored_keys, first_error)


# ---------------------------------------------------------------- sharding for N `vllm run-batch` nodes


def shard_of(custom_id: str, n: int) -> int:
    """The shard of a custom_id: a hash, so it does not depend on the file's order or on the other lines."""
    return int.from_bytes(hashlib.sha256(custom_id.encode()).digest()[:8], "big") % n


def shard_paths(path: Path, n: int, out_dir: Path | None = None) -> list[Path]:
    d = out_dir or path.parent
    return [d / f"{path.stem}.shard-{i + 1:02d}-of-{n:02d}{path.suffix or '.jsonl'}" for i in range(n)]


def shard_requests(path: Path, n: int, out_dir: Path | None = None) -> list[tuple[Path, int]]:
    """Split one exported request file into n files (path, lines), every line unchanged on the shard of its
    custom_id. All are checked before any is written; each is written whole (temporary file, then renamed)."""
    if n < 1:
        raise InputError(f"{n}: at least 1", field="--shards")
    reqs = read_requests([path]).requests
    buckets: list[list[str]] = [[] for _ in range(n)]
    for r in reqs:
        buckets[shard_of(r.custom_id, n)].append(r.line)
    paths = shard_paths(path, n, out_dir)
    for p, lines in zip(paths, buckets):
        _write_whole(p, lines)
    return [(p, len(lines)) for p, lines in zip(paths, buckets)]


def _write_whole(path: Path, lines: Iterable[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            for line in lines:
                fh.write(line + "\n")
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)


def _output_lines(path: Path) -> Iterator[tuple[int, str, str]]:
    """(line number, custom_id, raw line) of a Batch API output file, each line checked as import checks it."""
    if not path.is_file():
        raise InputError("no such file", path)
    raw_lines = _text(path).splitlines()
    for n, obj in parse_result_lines("\n".join(raw_lines), path, strict=True):
        yield n, result_key(obj), raw_lines[n - 1]


def merge_outputs(outputs: list[Path], dest: Path, requests: list[Path] | None = None) -> int:
    """Join the output files of the shards into one (returns its line count). A custom_id in two files, or
    (given the request files) one asked for and in none, or one in none of the requests, is an InputError;
    nothing is written then."""
    if not outputs:
        raise InputError("no output files to merge")
    seen: dict[str, tuple[Path, int]] = {}
    lines: list[str] = []
    for path in outputs:
        for n, cid, raw in _output_lines(Path(path)):
            if cid in seen:
                p, m = seen[cid]
                raise InputError(f"duplicate {cid!r}, also at {p}:{m}", path, n, "custom_id")
            seen[cid] = (Path(path), n)
            lines.append(raw)
    if requests:
        asked = read_requests(requests).requests
        missing = [r.custom_id for r in asked if r.custom_id not in seen]
        if missing:
            raise InputError(f"{len(missing)} of {len(asked)} requests have no output line (first: {missing[0]!r}); "
                             "run their shard again, or import the outputs as they are and re-export the rest",
                             field="--requests")
        asked_ids = {r.custom_id for r in asked}
        foreign = [cid for cid in seen if cid not in asked_ids]
        if foreign:
            p, m = seen[foreign[0]]
            raise InputError(f"{foreign[0]!r} is in none of the request files ({len(foreign)} such lines)", p, m,
                             "custom_id")
    _write_whole(dest, lines)
    return len(lines)
