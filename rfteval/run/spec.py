"""The eval spec (TOML) merged with flags, validated once, so a run is fully described by one object.

Paths in a spec file are relative to that file; paths given as flags are relative to the working directory.
Flags win over the file key by key. Errors name the spec file, the line of the key when it can be found, and
the key (or the flag).
"""

from __future__ import annotations

import hashlib
import json
import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from rfteval.data.json_types import JSONMapping, JSONObject, JSONValue
from rfteval.errors import InputError, read_input_text
from rfteval.graders.judged import REASONING_EFFORTS
from rfteval.limits import (
    ENDPOINT_TIMEOUT_S,
    MAX_TURNS,
    PYTHON_MEMORY_MB,
    PYTHON_MIN_MEMORY_MB,
    PYTHON_TIMEOUT_S,
    TOOL_MEMORY_MB,
    TOOL_OUTPUT_CHARS,
    TOOL_TIMEOUT_S,
)
from rfteval.providers.base import Sampling
from rfteval.providers.endpoint import JUDGE_CONCURRENCY, JUDGE_KEYWORDS, JudgeApi, JudgeEndpoint
from rfteval.run.response_format import load_response_format_file, normalize_response_format
from rfteval.typos import closest, curly_quotes, model_keys, typo_first, unknown_key

if TYPE_CHECKING:
    from rfteval.data.rollout import RolloutLimits
    from rfteval.providers.base import Provider
    from rfteval.sandbox.policy import SandboxPolicy
    from rfteval.tools.base import ToolLimits

REPLAY_PREFIX = "replay:"
LABEL_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
SAMPLING_KEYS = ("temperature", "top_p", "seed", "reasoning_effort", "max_output_tokens", "response_format")
GENERIC_STEMS = frozenset({"items", "data", "dataset", "eval", "evals", "test", "valid", "validation"})
JUDGE_KEYS = tuple(JUDGE_KEYWORDS.values())  # the [judge] table's keys
# The [tools] table's keys and their flags (an agent run: rfteval.run.rollout)
TOOL_FLAGS = {"python": "--tools", "max_turns": "--max-turns", "max_tool_calls": "--max-tool-calls",
              "tool_timeout": "--tool-timeout", "tool_memory": "--tool-memory",
              "tool_output_limit": "--tool-output-limit", "rollout_timeout": "--rollout-timeout",
              "endpoints": "--tool-endpoints", "item_fields": "--tool-item-fields",
              "endpoint_timeout": "--tool-endpoint-timeout", "mcp": "--mcp"}

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


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _check_url(value: str | None) -> str | None:
    if value is not None and not re.match(r"^https?://[^\s/]+", value):
        raise ValueError(f"must be an http(s) URL, got {value!r}")
    return value.rstrip("/") if value else value


def _check_env_name(value: str | None) -> str | None:
    if value is not None and not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", value):
        raise ValueError("must be the NAME of an environment variable (the key itself never goes in a file)")
    return value


class EndpointSpec(_Strict):
    base_url: str | None = None  # None: OpenAI's
    api_key_env: str = "OPENAI_API_KEY"  # the name of the variable; the key itself never goes in a file
    api: Literal["chat", "responses"] = "chat"

    _url = field_validator("base_url")(_check_url)
    _env = field_validator("api_key_env")(_check_env_name)


class SamplingSpec(_Strict):
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    seed: int | None = None
    reasoning_effort: str | None = None
    max_output_tokens: int | None = Field(None, gt=0)
    # a file: a JSON schema (structured outputs), or {"type": "json_schema" | "json_object" | "text", ...}
    response_format: str | None = None

    @field_validator("reasoning_effort")
    @classmethod
    def _effort(cls, value: str | None) -> str | None:
        if value is not None and value not in REASONING_EFFORTS:
            raise ValueError(f"must be one of {', '.join(REASONING_EFFORTS)}, got {value!r}")
        return value


class ModelSpec(SamplingSpec):
    """One model under test; endpoint and sampling keys here override the shared ones (README: "Per-model keys")."""

    model: str | None = Field(None, min_length=1)  # a model name, or "replay:PATH" for recorded outputs
    replay: str | None = None  # recorded outputs (JSONL) served in place of the endpoint
    base_url: str | None = None
    api_key_env: str | None = None
    api: Literal["chat", "responses"] | None = None
    # sent as a `system` message before each item's own messages, to this model only (a base model told the
    # answer format its tuned checkpoint learned); it is part of the request, so of the cell's cache key
    system_prompt: str | None = Field(None, min_length=1)

    _url = field_validator("base_url")(_check_url)
    _env = field_validator("api_key_env")(_check_env_name)

    @model_validator(mode="after")
    def _model_or_replay(self) -> ModelSpec:
        if self.model is None and self.replay is None:
            raise ValueError("needs `model` (a model name or replay:PATH) or `replay` (a recordings file)")
        return self


class JudgeSpec(_Strict):
    """The judge endpoint of model graders; each key left out falls back to the run's [endpoint]."""

    base_url: str | None = None
    api_key_env: str | None = None
    api: JudgeApi | None = None
    model: str | None = Field(None, min_length=1)  # replaces the grader config's `model`
    concurrency: int = Field(JUDGE_CONCURRENCY, ge=1, le=1024)

    _url = field_validator("base_url")(_check_url)
    _env = field_validator("api_key_env")(_check_env_name)


class MCPSpec(_Strict):
    """One MCP server of [tools] mcp (rfteval.tools.mcp): its argv, the environment it adds (`${VAR}` read from
    rfteval's), one process per rollout (its state cannot leak between rollouts) or one for the run (a stateless
    server), and whether it keeps the network (none by default: it runs in the sandbox's namespaces)."""

    command: list[str] = Field(min_length=1)
    env: dict[str, str] = Field(default_factory=dict)
    per: Literal["rollout", "run"] = "rollout"
    network: bool = False


class ToolsSpec(_Strict):
    """[tools]: an agent run's tools and its rollouts' limits (rfteval.run.rollout). Each item is played as a
    rollout: the model's turns, the tools it calls run between them, until it answers or a limit stops it."""

    python: str | None = None  # tools.py: one function per tool the items declare, run in the python sandbox
    max_turns: int = Field(MAX_TURNS, ge=1, le=10_000)  # model calls per rollout (Agent RFT's max_episode_steps)
    max_tool_calls: int | None = Field(None, ge=0)  # tool calls per rollout; none: no limit
    tool_timeout: float = Field(TOOL_TIMEOUT_S, gt=0)  # seconds per turn's tool calls (one sandbox unit)
    tool_memory: int | None = Field(TOOL_MEMORY_MB, ge=PYTHON_MIN_MEMORY_MB)  # MB per tool unit
    tool_output_limit: int = Field(TOOL_OUTPUT_CHARS, ge=1)  # characters of one result shown to the model
    rollout_timeout: float | None = Field(None, gt=0)  # seconds per rollout; none: no limit
    # Agent RFT's tools list ([{"name", "server_url", "headers"}]): each call POSTed to its tool's server
    # (rfteval.tools.endpoint); beside python tools or alone
    endpoints: str | None = None
    item_fields: list[str] | None = None  # the dataset line's fields sent to tool servers; none: all of it
    endpoint_timeout: float = Field(ENDPOINT_TIMEOUT_S, gt=0, le=ENDPOINT_TIMEOUT_S)  # seconds per endpoint call
    # MCP servers over stdio ([{command = [...], env = {...}, per, network}]; --mcp "CMD ARGS"): their tools listed
    # and called through the official SDK (rfteval.tools.mcp); beside the others or alone
    mcp: list[MCPSpec] | None = None

    @field_validator("mcp", mode="before")
    @classmethod
    def _mcp(cls, value: object) -> object:
        """--mcp "CMD ARGS" (repeatable): each a server's command line, split as a shell splits it."""
        import shlex

        if isinstance(value, list):
            return [{"command": shlex.split(v)} if isinstance(v, str) else v for v in value]
        return value

    @field_validator("item_fields", mode="before")
    @classmethod
    def _fields(cls, value: object) -> object:
        """--tool-item-fields id,messages: one comma-separated flag value, or the spec's list."""
        if isinstance(value, str):
            value = [f.strip() for f in value.split(",") if f.strip()]
        if isinstance(value, list) and not value:
            raise ValueError("name at least one field of the dataset line (or leave it out: the whole line is sent)")
        return value

    @model_validator(mode="after")
    def _has_tools(self) -> ToolsSpec:
        if self.python is None and self.endpoints is None and not self.mcp:
            raise ValueError("the rollout limits need tools: pass --tools FILE, --tool-endpoints FILE or --mcp \"CMD "
                             "ARGS\" (or python = \"tools.py\", endpoints = \"tools-config.json\" or mcp = [...] in "
                             "[tools])")
        if self.endpoints is None and self.item_fields is not None:
            raise ValueError("item_fields (--tool-item-fields) is what tool endpoints are sent: it needs "
                             "--tool-endpoints FILE")
        return self


class PriceSpec(_Strict):
    """USD per million tokens; reasoning tokens are billed as output tokens."""

    input: float = Field(ge=0)
    output: float = Field(ge=0)
    batch_input: float | None = Field(None, ge=0)  # the Batch API's (and flex's) prices; default half
    batch_output: float | None = Field(None, ge=0)


class RunSpec(_Strict):
    name: str | None = None
    dataset: str
    grader: str
    epochs: int = Field(3, ge=1, le=1000)
    out: str | None = None  # default runs/<name>
    endpoint: EndpointSpec = Field(default_factory=EndpointSpec)
    sampling: SamplingSpec = Field(default_factory=SamplingSpec)
    models: dict[str, ModelSpec] = Field(min_length=1)
    concurrency: int = Field(32, ge=1, le=4096)
    max_retries: int = Field(10, ge=0, le=100)
    timeout: float = Field(600.0, gt=0)
    max_error_rate: float = Field(0.05, ge=0, le=1)
    grader_timeout: float = Field(PYTHON_TIMEOUT_S, gt=0)
    grader_memory: int = Field(PYTHON_MEMORY_MB, ge=PYTHON_MIN_MEMORY_MB)
    pricing: dict[str, PriceSpec] = Field(default_factory=dict)
    judge: JudgeSpec = Field(default_factory=JudgeSpec)
    group_models: bool = False  # a group judge ranks every model's samples of an item together
    # reasoning models: graders see the answer apart from the thinking ("strip"), or the content as sent ("keep")
    reasoning: Literal["strip", "keep"] = "strip"
    think_tags: list[str] | None = None  # "OPEN,CLOSE" tag pairs; none given: <think>,</think>
    # do not check the model names against the endpoint's GET /models (gateways route names they do not list);
    # None (unset) is off, and stays out of spec.resolved.toml
    skip_model_check: bool | None = None
    # the grader lint's and the RFT format check's ways out (graders/lint.py, data/dataset.py FormatCheck): a model
    # grader whose judge sees no sample.* path, dataset lines ending with the assistant's turn; None (unset) is off
    allow_grader_without_sample: bool | None = None
    allow_trailing_assistant: bool | None = None
    # how `developer` messages go to the models and the judge: as themselves, or as `system` for servers without
    # the developer role (llama-cpp-python's); None (unset) is "developer", and stays out of spec.resolved.toml
    developer_as: Literal["developer", "system"] | None = None
    # the first N items of the dataset, in file order: a smoke test; the same directory without it continues
    limit: int | None = Field(None, ge=1)
    # caps on what one invocation's judge sends (providers.judge.JudgeBudget): grading stops there, resumable
    max_judge_calls: int | None = Field(None, ge=1)
    max_judge_cost: float | None = Field(None, gt=0)  # USD, at the [pricing] table's prices of the judge model
    # an agent run: each cell a rollout whose tool calls run in the sandbox; None (no [tools]): one request per cell
    tools: ToolsSpec | None = None

    @field_validator("think_tags")
    @classmethod
    def _tags(cls, value: list[str] | None) -> list[str] | None:
        from rfteval.data.reasoning import parse_tags

        parse_tags(value)  # ValueError: the key or flag is named by build_spec
        return value

    @property
    def reasoning_tags(self) -> tuple[tuple[str, str], ...]:
        from rfteval.data.reasoning import parse_tags

        return parse_tags(self.think_tags)

    @field_validator("models")
    @classmethod
    def _labels(cls, value: dict[str, ModelSpec]) -> dict[str, ModelSpec]:
        for label in value:
            if not LABEL_RE.match(label):
                raise ValueError(f"label {label!r}: use letters, digits, '_', '-', '.' (it names the output file)")
        return value

    @property
    def run_name(self) -> str:
        """`name`, else the dataset's file name, or its folder's when the file is items.jsonl or alike."""
        if self.name:
            return self.name
        path = Path(self.dataset)
        return path.parent.name if path.stem in GENERIC_STEMS and path.parent.name else path.stem

    @property
    def out_dir(self) -> Path:
        return Path(self.out) if self.out else Path("runs") / self.run_name

    def sandbox_policy(self, unsafe: bool | None = None) -> SandboxPolicy:
        """The python grader sandbox's: the grader limits, every key variable of the run kept from grader code,
        unsafe mode as --unsafe-python-graders says (None: as RFTEVAL_UNSAFE_PYTHON_GRADERS=1 says)."""
        from rfteval.sandbox.policy import SandboxPolicy, unsafe_from_env

        keys = (self.endpoint.api_key_env, self.judge.api_key_env, *(m.api_key_env for m in self.models.values()))
        return SandboxPolicy.from_flags(unsafe_from_env() if unsafe is None else unsafe, keys, self.grader_timeout,
                                        self.grader_memory)

    def tool_limits(self) -> ToolLimits:
        """What one turn's tool calls may use (the tool box's limits, part of its identity)."""
        from rfteval.tools.base import ToolLimits

        t = self.tools or ToolsSpec.model_construct()
        return ToolLimits(timeout_s=t.tool_timeout, memory_mb=t.tool_memory, output_chars=t.tool_output_limit)

    def rollout_limits(self) -> RolloutLimits:
        """What one rollout may play: its model turns, tool calls and time."""
        from rfteval.data.rollout import RolloutLimits

        t = self.tools or ToolsSpec.model_construct()
        return RolloutLimits(max_turns=t.max_turns, max_tool_calls=t.max_tool_calls, timeout_s=t.rollout_timeout)

    def judge_endpoint(self) -> JudgeEndpoint:
        """The judge of model graders: [judge] keys, else the run's [endpoint] ones; its requests are timed out
        and retried as the models' are, and take the run's --developer-as."""
        return JudgeEndpoint(base_url=self.judge.base_url or self.endpoint.base_url,
                             api_key_env=self.judge.api_key_env or self.endpoint.api_key_env,
                             api=self.judge.api or self.endpoint.api, model=self.judge.model,
                             concurrency=self.judge.concurrency, timeout_s=self.timeout, max_retries=self.max_retries,
                             developer_as=self.developer_as)


@dataclass(frozen=True)
class ModelRun:
    """One model resolved for the runner: how to reach it and how to sample it."""

    label: str
    model: str  # as recorded in each record's `model`
    provider: Literal["openai", "replay"]
    settings: dict[str, str | None]  # make_provider(provider, **settings): base_url, api_key_env, api; or a replay path
    sampling: Sampling
    system_prompt: str | None = None  # [models.LABEL] system_prompt: a system message before the item's own


def to_toml(spec: RunSpec) -> str:
    """The merged spec as TOML (absolute paths, defaults filled in); it re-runs the same evaluation."""
    from rfteval.run.resolved import toml_text

    data = spec.model_dump(mode="json", exclude_none=True)
    data["name"] = spec.run_name
    data["out"] = str(spec.out_dir.resolve())
    return toml_text(data)


def build_providers(runs: Sequence[ModelRun], service_tier: str | None = None,
                    transport: str | None = None) -> dict[str, Provider]:
    """One provider per model run, by label; tier and transport go to OpenAI endpoints. Those that reach one
    endpoint share what is learned of it (openai_provider.share_endpoint_state)."""
    from rfteval.providers import make_provider
    from rfteval.providers.openai_provider import share_endpoint_state

    extra: dict[str, object] = {}
    if service_tier is not None:
        extra["service_tier"] = service_tier
    if transport is not None:
        extra["transport"] = transport
    providers = {run.label: make_provider(run.provider, **run.settings, **(extra if run.provider == "openai" else {}))
                 for run in runs}
    share_endpoint_state(providers.values())
    return providers


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


# ---------------------------------------------------------------- resolution


def resolve_models(spec: RunSpec) -> list[ModelRun]:
    """Per model: provider kind and settings, and the shared sampling with this model's overrides."""
    formats: dict[str, JSONObject] = {}
    job_format = None
    if spec.sampling.response_format is None:
        from rfteval.graders.loader import load_response_format

        job_format = load_response_format(spec.grader)  # a fine-tuning job file carries its own
    from rfteval.graders.loader import load_job_settings

    # the job's hyperparameters.reasoning_effort is what the trained model samples with: the run's own wins
    job_effort = load_job_settings(spec.grader).reasoning_effort if spec.sampling.reasoning_effort is None else None
    runs = []
    for label, m in spec.models.items():
        values = {k: getattr(spec.sampling, k) for k in SAMPLING_KEYS}
        values.update({k: getattr(m, k) for k in SAMPLING_KEYS if k in m.model_fields_set})
        if values["reasoning_effort"] is None and job_effort is not None:
            values["reasoning_effort"] = job_effort
        rf_path = values.pop("response_format")
        rf = None
        if rf_path:
            if rf_path not in formats:
                formats[rf_path] = load_response_format_file(rf_path)
            rf = formats[rf_path]
        elif job_format is not None:
            rf = normalize_response_format(job_format, spec.grader)
        sampling = Sampling(response_format=rf, **values)
        replay, model = m.replay, m.model
        if model is not None and model.startswith(REPLAY_PREFIX):
            replay = model[len(REPLAY_PREFIX):]
            if not replay:
                raise InputError("replay: needs a path (replay:FILE.jsonl)", field=f"models.{label}.model")
            model = REPLAY_PREFIX + Path(replay).name
        if replay is not None:
            runs.append(ModelRun(label, model or REPLAY_PREFIX + Path(replay).name, "replay", {"path": replay},
                                 sampling))
            continue
        assert model is not None
        settings = {
            "base_url": m.base_url or spec.endpoint.base_url,
            "api_key_env": m.api_key_env or spec.endpoint.api_key_env,
            "api": m.api or spec.endpoint.api,
        }
        if spec.developer_as is not None:
            settings["developer_as"] = spec.developer_as
        runs.append(ModelRun(label, model, "openai", settings, sampling, m.system_prompt))
    return runs


def config_hash(obj: object) -> str:
    """A short stable hash of plain data (canonical JSON; what JSON has no spelling for is hashed as its str)."""
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]
