"""The eval spec's tables (TOML) as pydantic models: every key, its default and its bounds, in one place; the
flags of `rfteval run` read their defaults from here. Validated once by rfteval.run.spec.build_spec."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from rfteval.graders.judged import REASONING_EFFORTS
from rfteval.limits import (
    CONCURRENCY,
    ENDPOINT_TIMEOUT_S,
    EPOCHS,
    MAX_ERROR_RATE,
    MAX_RETRIES,
    MAX_TURNS,
    PYTHON_MEMORY_MB,
    PYTHON_MIN_MEMORY_MB,
    PYTHON_TIMEOUT_S,
    REQUEST_TIMEOUT_S,
    TOOL_MEMORY_MB,
    TOOL_OUTPUT_CHARS,
    TOOL_TIMEOUT_S,
)
from rfteval.providers.endpoint import (
    DEFAULT_API,
    DEFAULT_KEY_ENV,
    JUDGE_CONCURRENCY,
    JUDGE_KEYWORDS,
    JudgeApi,
    JudgeEndpoint,
)

if TYPE_CHECKING:
    from rfteval.data.rollout import RolloutLimits
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
    api_key_env: str = DEFAULT_KEY_ENV  # the name of the variable; the key itself never goes in a file
    api: JudgeApi = DEFAULT_API

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
    epochs: int = Field(EPOCHS, ge=1, le=1000)
    out: str | None = None  # default runs/<name>
    endpoint: EndpointSpec = Field(default_factory=EndpointSpec)
    sampling: SamplingSpec = Field(default_factory=SamplingSpec)
    models: dict[str, ModelSpec] = Field(min_length=1)
    concurrency: int = Field(CONCURRENCY, ge=1, le=4096)
    max_retries: int = Field(MAX_RETRIES, ge=0, le=100)
    timeout: float = Field(REQUEST_TIMEOUT_S, gt=0)
    max_error_rate: float = Field(MAX_ERROR_RATE, ge=0, le=1)
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
