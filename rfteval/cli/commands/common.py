"""Option types and helpers shared by several commands."""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Callable
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict, TypeVar, Unpack, cast

import typer
import typer.core
import typer.models

from rfteval.limits import (
    ENDPOINT_TIMEOUT_S,
    MAX_TURNS,
    PYTHON_MEMORY_MB,
    PYTHON_TIMEOUT_S,
    TOOL_MEMORY_MB,
    TOOL_OUTPUT_CHARS,
    TOOL_TIMEOUT_S,
)
from rfteval.providers import endpoint as judge_defaults
from rfteval.sandbox.policy import UNSAFE_ENV

if TYPE_CHECKING:
    from rfteval.graders.base import GraderConfig
    from rfteval.graders.loader import GraderFile
    from rfteval.providers.endpoint import JudgeEndpoint
    from rfteval.providers.judge import Judge
    from rfteval.report.console import Console
    from rfteval.sandbox.policy import SandboxPolicy

# A command function: its parameters are the command's options, whatever they are (Typer reads the signature).
Command = TypeVar("Command", bound=Callable[..., object])


class CommandOptions(TypedDict, total=False):
    """The Typer command options commands set (typer.Typer.command's keywords of the same names)."""

    help: str
    epilog: str
    no_args_is_help: bool
    cls: type[typer.core.TyperCommand]


# Every command, in the order its module was imported: (group, name, function, Typer options). rfteval.cli.app attaches
# them, so command modules export plain functions and never import the app (no import cycle).
COMMANDS: list[tuple[str, str, Callable[..., object], CommandOptions]] = []


def command(name: str, group: str = "", **options: Unpack[CommandOptions]) -> Callable[[Command], Command]:
    """Mark a function as the command `rfteval [group] name`, with Typer's command options."""

    def mark(function: Command) -> Command:
        fill_metavars(function)
        COMMANDS.append((group, name, function, options))
        return function

    return mark


# One metavar vocabulary in every --help: what the value is, not the Python type Typer would print (<path>,
# <float>). An option that names its own metavar keeps it.
_STR_METAVARS = (("template", "JSON"), ("url", "URL"), ("env", "VAR"), ("model", "MODEL"), ("label", "LABEL"), ("field", "FIELD"))


def _metavar(param: str, annotation: object) -> str | None:
    kinds = set(typing.get_args(annotation)) - {type(None)} or {annotation}
    kind = typing.get_origin(annotation)
    if kind is list:
        kinds = set(typing.get_args(annotation))
    if len(kinds) != 1:
        return None
    (kind,) = kinds
    if kind is bool:
        return None
    if isinstance(kind, type) and issubclass(kind, Enum):
        return "|".join(str(m.value) for m in kind)
    if kind is Path:
        return "DIR" if param.endswith("dir") else "FILE"
    if kind in (int, float) and param.endswith("timeout"):
        return "SECONDS"
    if kind is int and param.endswith("memory"):
        return "MB"
    if kind is int:
        return "N"
    if kind is float:
        return "X"
    if kind is str:
        return next((meta for word, meta in _STR_METAVARS if param.endswith(word)), "NAME")
    return None


def fill_metavars(function: Callable[..., object]) -> None:
    """Give every option of `function` without a metavar one from the shared vocabulary (FILE, DIR, N, X, ...)."""
    try:
        hints = typing.get_type_hints(function)
    except (NameError, TypeError):  # an annotation only a type checker resolves: leave Typer's default
        return
    for param in inspect.signature(function).parameters.values():
        info = param.default
        if isinstance(info, typer.models.OptionInfo) and info.metavar is None and param.name in hints:
            info.metavar = _metavar(param.name, hints[param.name])


class OutputFormat(str, Enum):
    table = "table"
    json = "json"
    text = "text"  # an alias of table, as readiness and probe-grader once spelled it


def output_format(value: str) -> str:
    """One --format vocabulary for every command: table or json (text is read as table)."""
    from rfteval.errors import InputError

    if value == "text":
        return "table"
    if value not in ("table", "json"):
        raise InputError(f"must be table or json, got {value!r}", field="--format")
    return value


# The judge endpoint flags (score_model, label_model, group_judge): a command takes them as one JudgeEndpoint
# (judge_flags); `rfteval run` has its own, which fall back to its [judge], then its [endpoint].
JUDGE_BASE_URL = typer.Option(None, "--judge-base-url", help="Judge endpoint (OpenAI-compatible); default OpenAI's.")
JUDGE_API_KEY_ENV = typer.Option(judge_defaults.DEFAULT_KEY_ENV, "--judge-api-key-env", help="Env var holding the judge's key.")
JUDGE_API = typer.Option(judge_defaults.DEFAULT_API, "--judge-api", metavar="chat|responses", help="chat or responses.")
JUDGE_MODEL = typer.Option(None, "--judge-model", help="Use this judge model instead of the grader's `model`.")
JUDGE_CONCURRENCY = typer.Option(judge_defaults.JUDGE_CONCURRENCY, "--judge-concurrency",
                                 help="Judge requests in flight at once.")
# The python grader's limits (rfteval.limits holds their defaults); `rfteval run` also reads them from its spec.
GRADER_TIMEOUT = typer.Option(PYTHON_TIMEOUT_S, "--grader-timeout", help="Seconds per python grader call.")
GRADER_MEMORY = typer.Option(PYTHON_MEMORY_MB, "--grader-memory", help="MB of memory per python grader worker.")
# The reasoning rule of the exported rewards (export-reward, export-environment): grade's, with grade's defaults.
REWARD_REASONING = typer.Option("strip", "--reasoning", metavar="strip|keep",
                                help="strip: the grader sees the answer after a leading think block, as `rfteval "
                                     "grade` does; keep: the completion as generated [default: strip].")
REWARD_THINK_TAGS = typer.Option(None, "--think-tags", metavar="OPEN,CLOSE",
                                 help="Think-block tags, as `rfteval grade --think-tags` takes them "
                                      "[default: <think>,</think>]; repeat it for more pairs.")
DEVELOPER_AS = typer.Option(
    None, "--developer-as", metavar="developer|system",
    help="Send `developer` messages as `system`, for servers without the developer role (llama-cpp-python's "
         "server refuses it) [default: developer, as written].")
SKIP_JUDGE_MODEL_CHECK = typer.Option(
    False, "--skip-model-check",
    help="Do not check the judge model names against the judge endpoint's GET /models (for gateways that route "
         "names they do not list).")
UNSAFE_PYTHON_GRADERS = typer.Option(
    False, "--unsafe-python-graders", envvar=UNSAFE_ENV,
    help="Run python graders even where their sandbox (bubblewrap, seccomp, limits) cannot be built here: grader "
         "code then runs with no namespaces and no filesystem isolation (docs/sandbox.md).")

# agree's pass threshold and gate, which the viewer's Agree page (`rfteval view`) takes too: the same flags, so the
# advice agree's notes give ("give --pass-threshold X") can be followed on either command.
AGREE_PASS_THRESHOLD = typer.Option(None, "--pass-threshold", metavar="X",
                                    help="A sample passes at score >= X when its grader gives no pass verdict (no "
                                         "pass_threshold).")
AGREE_MIN_KAPPA = typer.Option(None, "--min-kappa", metavar="X",
                               help="Gate: fail when kappa's whole interval lies below X.")
AGREE_MAX_BIAS = typer.Option(None, "--max-bias", metavar="X",
                              help="Gate: fail when the bias interval lies wholly beyond ±X.")

# The lint's and the dataset check's way out (rfteval.graders.lint, rfteval.data.dataset.FormatCheck).
ALLOW_GRADER_WITHOUT_SAMPLE = typer.Option(
    False, "--allow-grader-without-sample",
    help="Accept a model grader whose messages render no sample.* path (its judge never sees the answer, so every "
         "output scores alike): for the rare judge that truly needs none. Without it, such a grader is an error.")
ALLOW_TRAILING_ASSISTANT = typer.Option(
    False, "--allow-trailing-assistant",
    help="Accept dataset lines whose last message is the assistant's (an RFT line is a prompt; the model would be "
         "sent the answer). Without it, each such line is an error naming it.")


# judge_flags' parameters, in the order --help lists them: (name, annotation, option).
_JUDGE_PARAMS: tuple[tuple[str, object, typer.models.OptionInfo], ...] = (
    ("judge_base_url", str | None, JUDGE_BASE_URL), ("judge_api_key_env", str, JUDGE_API_KEY_ENV),
    ("judge_api", str, JUDGE_API), ("judge_model", str | None, JUDGE_MODEL), ("judge_concurrency", int, JUDGE_CONCURRENCY))
DEFAULT_JUDGE = judge_defaults.JudgeEndpoint()


def judge_flags(developer_as: bool = False) -> Callable[[Command], Command]:
    """Give a command the --judge-* flags (and --developer-as, for one that opens a judge) in place of its
    `judge_endpoint: JudgeEndpoint` parameter: Typer sees the flags, the command gets the one endpoint they make."""
    params = _JUDGE_PARAMS + ((("developer_as", str | None, DEVELOPER_AS),) if developer_as else ())

    def wrap(function: Command) -> Command:
        signature = inspect.signature(function)
        before = list(signature.parameters.values())
        at = [p.name for p in before].index("judge_endpoint")
        injected = [inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=option, annotation=kind)
                    for name, kind, option in params]

        @functools.wraps(function)
        def with_endpoint(**kwargs: object) -> object:
            fields = {judge_defaults.JUDGE_KEYWORDS.get(name, name): kwargs.pop(name) for name, _, _ in params}
            kwargs["judge_endpoint"] = checked_endpoint(judge_defaults.JudgeEndpoint(**cast("dict[str, Any]", fields)))
            return function(**kwargs)

        with_endpoint.__signature__ = signature.replace(  # type: ignore[attr-defined]
            parameters=before[:at] + injected + before[at + 1:])
        annotations = {k: v for k, v in function.__annotations__.items() if k != "judge_endpoint"}
        with_endpoint.__annotations__ = {**annotations, **{name: kind for name, kind, _ in params}}
        return cast("Command", with_endpoint)

    return wrap


# `rfteval run`'s agent flags, its [tools] keys (rfteval.run.spec.ToolsSpec): the command takes them as one dict of
# the [tools] keys given (tool_flags), which the spec's flag overrides put in its [tools] table.
_TOOL_PARAMS: tuple[tuple[str, str, object, typer.models.OptionInfo], ...] = (
    ("tools_file", "python", Path | None, typer.Option(
        None, "--tools", metavar="FILE", help="An agent run: tools.py holds one function per tool the items declare, "
        "run in the python sandbox; each cell becomes a rollout (model turns, the tool calls run between them).")),
    ("max_turns", "max_turns", int | None, typer.Option(
        None, "--max-turns", metavar="N", help=f"With --tools: model calls per rollout [default: {MAX_TURNS}].")),
    ("max_tool_calls", "max_tool_calls", int | None, typer.Option(
        None, "--max-tool-calls", metavar="N", help="With --tools: tool calls per rollout; a turn asking for more "
        "than remain runs none of them and ends the rollout [default: no limit].")),
    ("tool_timeout", "tool_timeout", float | None, typer.Option(
        None, "--tool-timeout", metavar="SECONDS", help=f"With --tools: seconds per turn's tool calls [default: "
        f"{TOOL_TIMEOUT_S:g}].")),
    ("tool_memory", "tool_memory", int | None, typer.Option(
        None, "--tool-memory", metavar="MB", help=f"With --tools: MB per turn's tool calls; with --mcp, each "
        f"server's address space [default: {TOOL_MEMORY_MB}].")),
    ("tool_output_limit", "tool_output_limit", int | None, typer.Option(
        None, "--tool-output-limit", metavar="CHARS", help=f"With --tools: characters of one result shown to the "
        f"model, the cut marked [default: {TOOL_OUTPUT_CHARS}].")),
    ("rollout_timeout", "rollout_timeout", float | None, typer.Option(
        None, "--rollout-timeout", metavar="SECONDS", help="With --tools: seconds per rollout (its model turns and "
        "tool turns); past it the rollout ends as it stands [default: no limit].")),
    ("tool_endpoints", "endpoints", Path | None, typer.Option(
        None, "--tool-endpoints", metavar="FILE", help="An agent run whose tools are Agent RFT tool endpoints: FILE "
        'is its tools list [{"name", "server_url", "headers"}] (${VAR} in a header read from the environment); each '
        "call is POSTed to its tool's server. With --tools too, both kinds of tools.")),
    ("tool_item_fields", "item_fields", str | None, typer.Option(
        None, "--tool-item-fields", metavar="FIELD,FIELD", help="With --tool-endpoints: send tool servers only these "
        "fields of the dataset line [default: the whole line, references included, as Agent RFT did].")),
    ("tool_endpoint_timeout", "endpoint_timeout", float | None, typer.Option(
        None, "--tool-endpoint-timeout", metavar="SECONDS", help="With --tool-endpoints: seconds per call, then the "
        f"model is shown a ToolTimeout [default and most: {ENDPOINT_TIMEOUT_S:g}, Agent RFT's].")),
    ("mcp_servers", "mcp", list[str] | None, typer.Option(
        None, "--mcp", metavar="COMMAND", help="An agent run whose tools an MCP server serves over stdio: its command "
        "line quoted as one argument, repeat it for more; started in the sandbox, no network, one process per "
        "rollout; its tools offered to items that declare none ([tools] mcp = [{command, env, per, network}]).")),
)


def tool_flags(function: Command) -> Command:
    """Give `rfteval run` the agent flags (--tools, --max-turns, ...) in place of its `tools` parameter: Typer sees
    the flags, the command gets one dict of the [tools] keys they set (None: not given)."""
    signature = inspect.signature(function)
    before = list(signature.parameters.values())
    at = [p.name for p in before].index("tools")
    injected = [inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=option, annotation=kind)
                for name, _, kind, option in _TOOL_PARAMS]

    @functools.wraps(function)
    def with_tools(**kwargs: object) -> object:
        given = {key: kwargs.pop(name) for name, key, _, _ in _TOOL_PARAMS}
        for key in ("python", "endpoints"):
            given[key] = None if given[key] is None else str(given[key])
        if not given["mcp"]:  # Typer gives an unused repeatable option as an empty list
            given["mcp"] = None
        kwargs["tools"] = given
        return function(**kwargs)

    with_tools.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=before[:at] + injected + before[at + 1:])
    annotations = {k: v for k, v in function.__annotations__.items() if k != "tools"}
    with_tools.__annotations__ = {**annotations, **{name: kind for name, _, kind, _ in _TOOL_PARAMS}}
    return cast("Command", with_tools)


def checked_endpoint(endpoint: JudgeEndpoint) -> JudgeEndpoint:
    """The --judge-* flags checked as `rfteval run` checks its own (run.spec.JudgeSpec) and --developer-as, when the
    endpoint is built: one line naming the flag before the command body runs, so before any judge call is paid for
    (a URL that is not one used to be tried three times, a --judge-concurrency 0 ended in a traceback)."""
    from pydantic import ValidationError

    from rfteval.errors import InputError
    from rfteval.providers.openai_provider import check_developer_as
    from rfteval.run.spec import JudgeSpec

    try:
        JudgeSpec(base_url=endpoint.base_url, api_key_env=endpoint.api_key_env, api=endpoint.api,
                  model=endpoint.model, concurrency=endpoint.concurrency)
    except ValidationError as exc:
        error = exc.errors()[0]
        flag = "--judge-" + str(error["loc"][0]).replace("_", "-")
        raise InputError(error["msg"].removeprefix("Value error, "), field=flag) from None
    check_developer_as(endpoint.developer_as)
    return endpoint


def grader_file(path: Path) -> GraderFile:
    """The grader file a command reads once and hands down (rfteval.graders.loader.GraderFile)."""
    from rfteval.graders.loader import GraderFile

    return GraderFile(path)


def checked_grader(path: Path | GraderFile, allow_without_sample: bool, judge_model: str | None) -> GraderConfig:
    """The grader a command grades with: loaded (or taken from the GraderFile the command read), linted
    (rfteval.graders.lint), its warnings on stderr."""
    from rfteval.graders.lint import load_checked_grader

    return load_checked_grader(path, lambda line: typer.echo(line, err=True),
                               allow_without_sample=allow_without_sample, judge_model=judge_model)


def python_sandbox(config: GraderConfig, unsafe: bool, *key_envs: str | None,
                   timeout_s: float = PYTHON_TIMEOUT_S) -> SandboxPolicy:
    """The sandbox policy from the flags, for the command to grade with (rfteval.graders.paths.require_sandbox:
    one line, exit 2, when a python grader cannot be sandboxed here and --unsafe-python-graders was not given)."""
    from rfteval.graders.paths import require_sandbox
    from rfteval.sandbox.policy import SandboxPolicy

    policy = SandboxPolicy.from_flags(unsafe, key_envs, timeout_s)
    require_sandbox(config, policy)
    return policy


def make_judge(config: GraderConfig, endpoint: JudgeEndpoint, skip_model_check: bool,
               cache_path: Path | None = None) -> Judge | None:
    """The judge client the grader calls (providers.judge.open_judge: None without a model grader), its models
    checked against the endpoint before the first call is paid for (check_judge)."""
    from rfteval.providers.judge import open_judge

    judge = open_judge(endpoint, config, cache_path)
    check_judge(judge, config, skip_model_check)
    return judge


def check_judge(judge: Judge | None, config: GraderConfig, skip_model_check: bool) -> None:
    """Before the first judge call is paid for, as `rfteval run` does (rfteval.run.preflight): every judge
    model the grader names (or --judge-model) must be one the judge endpoint lists, and --judge-api responses needs
    its Responses API. One line, exit 2; the judge is closed then, as nothing else will close it."""
    if judge is None:
        return
    from rfteval.errors import InputError
    from rfteval.run.preflight import judge_check, judge_models, preflight

    models = judge_models(config, judge.model_override)
    if not models:
        return
    try:
        preflight([judge_check(judge.provider, models, overridden=bool(judge.model_override))],
                  check_models=not skip_model_check)
    except InputError:
        judge.close()
        raise


def stdout_console() -> Console:
    """The console for a command's tables (report.console builds it: nothing outside report/ imports rich)."""
    from rfteval.report.console import stdout_console as make

    return make()
