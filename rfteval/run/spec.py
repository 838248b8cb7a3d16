"""The eval spec (TOML) merged with flags, validated once, so a run is fully described by one object.

Paths in a spec file are relative to that file; paths given as flags are relative to the working directory.
Flags win over the file key by key. Errors name the spec file, the line of the key when it can be found, and
the key (or the flag). The tables themselves (keys, defaults, bounds) are in rfteval.run.spec_tables, each model
resolved for the runner in rfteval.run.model_runs; their names are importable from here too.
"""

from __future__ import annotations

import hashlib
import json
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path

from pydantic import ValidationError

from rfteval.data.json_types import JSONMapping, JSONObject, JSONValue
from rfteval.errors import InputError, read_input_text
from rfteval.providers.endpoint import JUDGE_KEYWORDS
from rfteval.run.model_runs import ModelRun, build_providers, resolve_models
from rfteval.run.response_format import load_response_format_file, normalize_response_format
from rfteval.run.spec_tables import (
    JUDGE_KEYS,
    LABEL_RE,
    REPLAY_PREFIX,
    SAMPLING_KEYS,
    TOOL_FLAGS,
    EndpointSpec,
    JudgeSpec,
    MCPSpec,
    ModelSpec,
    PriceSpec,
    RunSpec,
    SamplingSpec,
    ToolsSpec,
)
from rfteval.typos import closest, curly_quotes, model_keys, typo_first, unknown_key

__all__ = ["REPLAY_PREFIX", "SAMPLING_KEYS", "EndpointSpec", "JudgeSpec", "MCPSpec", "ModelRun", "ModelSpec",
           "PriceSpec", "RunSpec", "SamplingSpec", "ToolsSpec", "build_providers", "build_spec", "config_hash",
           "flag_overrides", "load_response_format_file", "normalize_response_format", "resolve_models", "to_toml"]

# Flag spelling of every spec key, for error messages about values that came from the command line.
FLAG_NAMES: dict[tuple[str, ...], str] = {
    ("name",): "--name", ("dataset",): "--dataset", ("grader",): "--grader", ("epochs",): "--epochs",
    ("out",): "--out", ("concurrency",): "--concurrency", ("max_retries",): "--max-retries",
    ("timeout",): "--timeout", ("max_error_rate",): "--max-error-rate", ("grader_timeout",): "--grader-timeout",
    ("grader_memory",): "--grader-memory", ("endpoint", "base_url"): "--base-url",
    ("endpoint", "api_key_env"): "--api-key-env", ("endpoint", "api"): "--api",
    **{("sampling", k): "--" + k.replace("_", "-") for k in SAMPLING_KEYS},
    **{("judge", k): "--judge-" + k.replace("_", "-") for k in JUDGE_KEYS},
    ("group_models",): "--group-models", ("skip_model_check",): "--skip-model-check",
    ("reasoning",): "--reasoning", ("think_tags",): "--think-tags", ("developer_as",): "--developer-as",
    ("allow_grader_without_sample",): "--allow-grader-without-sample",
    ("allow_trailing_assistant",): "--allow-trailing-assistant",
    ("limit",): "--limit", ("max_judge_calls",): "--max-judge-calls", ("max_judge_cost",): "--max-judge-cost",
    ("tools",): "--tools", **{("tools", k): f for k, f in TOOL_FLAGS.items()},
}


def to_toml(spec: RunSpec) -> str:
    """The merged spec as TOML (absolute paths, defaults filled in); it re-runs the same evaluation."""
    from rfteval.run.resolved import toml_text

    data = spec.model_dump(mode="json", exclude_none=True)
    data["name"] = spec.run_name
    data["out"] = str(spec.out_dir.resolve())
    return toml_text(data)


# ---------------------------------------------------------------- reading and merging


_HEADER = re.compile(r"^\s*\[\s*([^\[\]]+?)\s*\]\s*(?:#.*)?$")
_KEYLINE = re.compile(r"^\s*([A-Za-z0-9_\-.\"' :]+?)\s*=")


def _split_key(text: str) -> list[str]:
    parts = re.findall(r'"([^"]*)"|\'([^\']*)\'|([^.\s]+)', text)
    return [a or b or c for a, b, c in parts]


def _line_of_key(text: str, loc: tuple[int | str, ...]) -> int | None:
    """The TOML line defining `loc` (table headers followed), or of its table when the key is absent."""
    want = [str(p) for p in loc if not isinstance(p, int)]
    table: list[str] = []
    best = None
    for lineno, line in enumerate(text.splitlines(), 1):
        m = _HEADER.match(line)
        if m:
            table = _split_key(m.group(1))
            if want and table[: len(want)] == want:  # `loc` is a table: its (first) header defines it
                return lineno
            if table == want[: len(table)] and best is None and len(table) == len(want) - 1:
                best = lineno  # fall back to the table's header
            continue
        m = _KEYLINE.match(line)
        if m and table + _split_key(m.group(1)) == want:
            return lineno
    return best


def read_spec_file(path: str | Path) -> tuple[JSONObject, str]:
    """The raw spec table with its paths made absolute; InputError naming file and line."""
    path = Path(path)
    text = read_input_text(path, "a TOML spec")
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        m = re.search(r"line (\d+)", str(exc))
        curly = curly_quotes(text)
        raise InputError(f"invalid TOML: {exc}" + (f"; {curly}" if curly else ""), path,
                         int(m.group(1)) if m else None) from None
    return absolutize(raw, path.resolve().parent), text


def _abs_path(value: str, base: Path) -> str:
    if not value:
        return value
    return str((base / value).resolve()) if not Path(value).is_absolute() else value


def _abs(value: JSONValue, base: Path) -> JSONValue:
    return _abs_path(value, base) if isinstance(value, str) else value


def _abs_model(value: JSONValue, base: Path) -> JSONValue:
    if isinstance(value, str) and value.startswith(REPLAY_PREFIX):
        return REPLAY_PREFIX + _abs_path(value[len(REPLAY_PREFIX):], base)
    return value


def _abs_command(server: JSONValue, base: Path) -> JSONValue:
    """An MCP server's entry with its executable made absolute when it is a relative path (`.venv-mcp/bin/x`); a
    bare name (`mcp-server-time`) stays, found on PATH when it starts."""
    import shlex

    if isinstance(server, str):
        try:
            server = {"command": list(shlex.split(server))}
        except ValueError:
            return server  # the spec's check says why, naming the flag
    command = server.get("command") if isinstance(server, dict) else None
    if isinstance(server, dict) and isinstance(command, list) and command and isinstance(command[0], str) \
            and "/" in command[0] and not Path(command[0]).is_absolute():
        server = {**server, "command": [_abs_path(command[0], base), *command[1:]]}
    return server


def absolutize(raw: Mapping[str, object], base: Path) -> JSONObject:
    """Make the path-valued keys of a raw spec (or of flag overrides) absolute against `base`. Any plain data
    goes in (flag values: paths, numbers); JSON comes out."""
    out: JSONObject = json.loads(json.dumps(raw, default=str))  # a deep copy of plain data
    for key in ("dataset", "grader", "out"):
        if key in out:
            out[key] = _abs(out[key], base)
    sampling = out.get("sampling")
    if isinstance(sampling, dict) and "response_format" in sampling:
        sampling["response_format"] = _abs(sampling["response_format"], base)
    tools = out.get("tools")
    for key in ("python", "endpoints"):
        if isinstance(tools, dict) and key in tools:
            tools[key] = _abs(tools[key], base)
    if isinstance(tools, dict) and isinstance(servers := tools.get("mcp"), list):
        tools["mcp"] = [_abs_command(s, base) for s in servers]  # a relative command: relative to the spec (or cwd)
    models = out.get("models")
    for m in models.values() if isinstance(models, dict) else ():
        if isinstance(m, dict):
            if "model" in m:
                m["model"] = _abs_model(m["model"], base)
            if "replay" in m:
                m["replay"] = _abs(m["replay"], base)
            if "response_format" in m:
                m["response_format"] = _abs(m["response_format"], base)
    return out


def deep_merge(base: JSONObject, over: JSONObject) -> JSONObject:
    out = dict(base)
    for k, v in over.items():
        prev = out.get(k)
        if isinstance(v, dict) and isinstance(prev, dict):
            out[k] = deep_merge(prev, v)
        else:
            out[k] = v
    return out


def parse_model_flag(value: str) -> tuple[str, str]:
    """`LABEL=MODEL` (or `LABEL=replay:PATH`) from a --model flag."""
    label, sep, model = value.partition("=")
    label, model = label.strip(), model.strip()
    if not sep or not label or not model:
        raise InputError(f"expected LABEL=MODEL (e.g. base=gpt-4o-mini or tuned=replay:FILE.jsonl), got {value!r}",
                         field="--model")
    if not LABEL_RE.match(label):
        raise InputError(f"label {label!r}: use letters, digits, '_', '-', '.' (it names the output file)",
                         field="--model")
    return label, model


def flag_overrides(
    *, models: list[str] | None = None, cwd: Path | None = None, **flags: object
) -> JSONObject:
    """Turn CLI flag values (None = not given) into a raw-spec-shaped dict of overrides. The values are plain
    data of any kind (paths, numbers, strings), only carried: absolutize() makes JSON of them."""
    over: dict[str, object] = {}
    sections: dict[str, dict[str, object]] = {}  # over's tables, typed; each goes into `over` where it first appears

    def section(name: str) -> dict[str, object]:
        if name not in sections:
            sections[name] = over[name] = {}
        return sections[name]

    for key, value in flags.items():
        if value is None:
            continue
        if key in ("base_url", "api_key_env", "api"):
            section("endpoint")[key] = value
        elif key in JUDGE_KEYWORDS:
            section("judge")[JUDGE_KEYWORDS[key]] = value
        elif key in SAMPLING_KEYS:
            section("sampling")[key] = value
        elif key == "tools" and isinstance(value, dict):  # the [tools] keys given as flags (cli: tool_flags)
            given = {k: v for k, v in value.items() if v is not None}
            if given:
                section("tools").update(given)
        else:
            over[key] = value
    if models:
        table: dict[str, object] = {}
        for spec in models:
            label, model = parse_model_flag(spec)
            if label in table:
                raise InputError(f"label {label!r} given twice", field="--model")
            table[label] = {"model": model}
        over["models"] = table
    return absolutize(over, cwd or Path.cwd())


def build_spec(
    spec_path: str | Path | None = None, overrides: JSONObject | None = None
) -> RunSpec:
    """Read the spec file (if any), apply flag overrides, validate once; errors name the key or flag."""
    raw: JSONObject = {}
    text = ""
    if spec_path is not None:
        raw, text = read_spec_file(spec_path)
    overrides = overrides or {}
    merged = deep_merge(raw, overrides)
    _refuse_api_keys(merged, spec_path, text)
    known = model_keys(RunSpec, ()) or []
    for req, flag in (("dataset", "--dataset"), ("grader", "--grader"), ("models", "--model")):
        if req not in merged:
            # `[model.base]` or `datset = ...`: the misspelt key is named, as pydantic's check would have named it
            typos = [k for k in merged if k not in known and closest(k, known) == req]
            if typos and spec_path is not None:
                raise InputError(unknown_key(RunSpec, (typos[0],)), spec_path, _line_of_key(text, (typos[0],)),
                                 typos[0])
            hint = f"set `{req}` in the spec or pass {flag}" if spec_path else f"pass {flag} (or a spec file)"
            raise InputError(f"missing: {hint}", spec_path, field=req)
    try:
        return RunSpec.model_validate(merged)
    except ValidationError as exc:
        err = typo_first(RunSpec, exc.errors())
        loc = tuple(err["loc"])
        msg = unknown_key(RunSpec, loc) if err["type"] == "extra_forbidden" else err["msg"].removeprefix("Value error, ")
        if _from_flags(overrides, loc) or spec_path is None:
            flag_name = FLAG_NAMES.get(tuple(map(str, loc))) or ("--model" if loc[:1] == ("models",) else None)
            field = flag_name or ".".join(map(str, loc))
            raise InputError(msg, field=field) from None
        dotted = ".".join(map(str, loc))
        raise InputError(msg, spec_path, _line_of_key(text, loc), dotted) from None


def _is_api_key(key: str) -> bool:
    """A key that holds a key: api_key, apiKey, openai_api_key, api-key (api_key_env, a variable's name, is not)."""
    return re.sub(r"[-_]", "", key.lower()).endswith("apikey")


def _refuse_api_keys(raw: JSONMapping, spec_path: str | Path | None, text: str) -> None:
    """A key written into the spec (at the top, in [endpoint], [judge] or a [models.LABEL]) is refused before
    anything else is read, pointing to `api_key_env`; the value is never repeated, so it reaches no terminal or log."""
    tables: list[tuple[tuple[str, ...], object]] = [((), raw), (("endpoint",), raw.get("endpoint")),
                                                    (("judge",), raw.get("judge"))]
    models = raw.get("models")
    if isinstance(models, dict):
        tables += [(("models", str(label)), table) for label, table in models.items()]
    for where, table in tables:
        for key in table if isinstance(table, dict) else ():
            if _is_api_key(key):
                loc = (*where, key)
                env = ".".join((*where, "api_key_env")) if where else "endpoint.api_key_env"  # no top-level one
                raise InputError(f"an API key does not go in a spec file: put the NAME of the environment variable "
                                 f"holding it in `{env}` (e.g. api_key_env = \"OPENAI_API_KEY\") and remove this key",
                                 spec_path, _line_of_key(text, loc) if text else None, ".".join(loc))


def _from_flags(overrides: JSONMapping, loc: tuple[int | str, ...]) -> bool:
    node: object = overrides
    for part in loc:
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


def config_hash(obj: object) -> str:
    """A short stable hash of plain data (canonical JSON; what JSON has no spelling for is hashed as its str)."""
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]
