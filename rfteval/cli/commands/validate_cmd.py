"""`rfteval validate dataset|grader|spec|tools`: check inputs without running any model."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from rfteval.cli.commands.common import (
    ALLOW_GRADER_WITHOUT_SAMPLE,
    ALLOW_TRAILING_ASSISTANT,
    DEFAULT_JUDGE,
    GRADER_TIMEOUT,
    SKIP_JUDGE_MODEL_CHECK,
    UNSAFE_PYTHON_GRADERS,
    checked_grader,
    command,
    grader_file,
    judge_flags,
    make_judge,
    python_sandbox,
)
from rfteval.limits import EPOCHS, JUDGE_SD_THRESHOLD, MAX_TURNS, TOOL_MEMORY_MB, TOOL_TIMEOUT_S
from rfteval.status import ExitStatus

if TYPE_CHECKING:
    from rfteval.data.dataset import Dataset
    from rfteval.data.json_types import JSONMapping, JSONValue
    from rfteval.graders.base import GradeOptions, GraderConfig
    from rfteval.graders.loader import GraderFile
    from rfteval.providers.endpoint import JudgeEndpoint
    from rfteval.providers.judge import Judge


@command("dataset", group="validate")
def validate_dataset(
    path: Path = typer.Argument(..., help="Dataset JSONL."),
    grader: Path | None = typer.Option(None, "--grader", "-g",
                                       help="Also name the lines holding no field this grader reads as a reference."),
    allow_trailing_assistant: bool = ALLOW_TRAILING_ASSISTANT,
) -> None:
    """List every problem in a dataset (file:line: field: what is wrong); exit 2 when there is one. The RFT
    format's rules too: a line ending with the assistant's message is an error; system messages and lines without
    a reference field are warnings."""
    from rfteval.data.dataset import inspect_dataset, iter_items
    from rfteval.graders.checks import check_item_paths, reference_fields
    from rfteval.graders.loader import load_grader

    config = load_grader(grader) if grader is not None else None
    # the grader's templates on every line first: a misspelt field is one line, not one per line, and not a
    # second time as lines holding no reference
    templates = [] if config is None else check_item_paths(
        config, iter_items(path, skip_invalid=True, check_duplicates=False), path, grader=grader)
    checked = inspect_dataset(path, allow_trailing_assistant,
                              reference_fields(config, templates) if config is not None else None)
    checked.template_problems = templates
    for e in checked.problems:
        typer.echo(str(e), err=True)
    for warning in checked.format.warnings():
        typer.echo(f"warning: {warning}", err=True)
    if checked.with_problems or checked.template_problems or not checked.lines:
        typer.echo(checked.summary(), err=True)
        raise typer.Exit(ExitStatus.BAD_INPUT)
    typer.echo(checked.summary())


@command("grader", group="validate")
@judge_flags(developer_as=True)
def validate_grader(
    path: Path = typer.Argument(..., help="Grader JSON (a grader, {\"grader\": ...} or a fine-tuning job), a python "
                                "grader as FILE.py, or a reward function as FILE.py:FUNCTION."),
    dataset: Path | None = typer.Option(None, "--dataset", "-d",
                                        help="Also grade each item's reference answer as if it were the output."),
    reference_template: str | None = typer.Option(
        None, "--reference-template",
        help='How a reference becomes an output: a JSON template (inline or a file), e.g. '
             '\'{"predicted": "{{item.reference_answer}}"}\'; inferred from the grader when absent.'),
    grader_timeout: float = GRADER_TIMEOUT,
    outputs: Path | None = typer.Option(None, "--outputs",
                                        help="With --repeat: outputs JSONL to grade repeatedly with a model grader."),
    repeat: int | None = typer.Option(None, "--repeat", help="Grade the outputs K times: is the judge stable?"),
    threshold: float = typer.Option(JUDGE_SD_THRESHOLD, "--threshold",
                                    help="Flag a judge whose score sd (0..1 scale) exceeds this."),
    judge_endpoint: JudgeEndpoint = DEFAULT_JUDGE,
    skip_model_check: bool = SKIP_JUDGE_MODEL_CHECK,
    unsafe_python_graders: bool = UNSAFE_PYTHON_GRADERS,
    emit_json: bool = typer.Option(False, "--emit-json", help="Print the grader in OpenAI's JSON form (what to "
                                   "upload; a .py grader wrapped with its source) and nothing else."),
    allow_without_sample: bool = ALLOW_GRADER_WITHOUT_SAMPLE,
) -> None:
    """Check a grader config; with --dataset, report the share of reference answers that score the maximum;
    with --outputs and --repeat, measure how much a model grader's scores move on the same outputs (exit 1 when
    flagged)."""
    # every flag checked before the grader is even described, so before any judge call (one line, exit 2)
    template = _checked_flags(dataset, outputs, repeat, threshold, grader_timeout, reference_template)
    source = grader_file(path)  # read once: the grader, and whether its samples get an output_json
    config = checked_grader(source, allow_without_sample, judge_endpoint.model)
    if emit_json:
        import json

        typer.echo(json.dumps(config.model_dump(exclude_none=True), indent=2, ensure_ascii=False))
        return
    if dataset is None:
        return _describe(config, notes=True)
    _notes(config)  # what loading noticed may be why a refusal follows; "valid" waits for the refusals
    # every refusal first (templates on the items, the sandbox, the judge's model): "valid" is never followed by one
    data = _preflight(config, source, dataset)
    from rfteval.graders import GradeOptions

    options = GradeOptions(sandbox=python_sandbox(config, unsafe_python_graders, judge_endpoint.api_key_env,
                                                  timeout_s=grader_timeout))
    judge = make_judge(config, judge_endpoint, skip_model_check)
    _describe(config, notes=False)
    try:
        if repeat is None:
            _reference(config, data, options, template, judge, judge_endpoint)
            return
        from rfteval.readiness.judge_stability import run_stability

        assert outputs is not None  # checked above: --repeat and --outputs go together
        report = run_stability(source, dataset, outputs, judge, repeat, threshold, options)
        from rfteval.providers.judge import raise_if_stopped

        raise_if_stopped(judge, "the judge's stability was not measured")
    finally:
        if judge is not None:
            judge.close()
    from rfteval.report.judge_stability_render import render_report

    typer.echo(render_report(report))
    if report["overall"]["flagged"]:
        raise typer.Exit(ExitStatus.GATE_FAILED)
    if report["overall"]["inconclusive"]:  # no output scored twice: errors are no "stable"
        raise typer.Exit(ExitStatus.INCOMPLETE)


def _describe(config: GraderConfig, *, notes: bool) -> None:
    """What the grader is ("valid"): said only once nothing is left to refuse; then, unless said already, what
    loading it noticed."""
    from rfteval.readiness.reference import describe_grader

    for line in describe_grader(config):
        typer.echo(line)
    if notes:
        _notes(config)


def _notes(config: GraderConfig) -> None:
    """What loading the grader noticed (a missing name, OpenAI's limits)."""
    from rfteval.graders.base import load_notes

    for note in load_notes(config):
        typer.echo(f"note: {note}")


def _checked_flags(dataset: Path | None, outputs: Path | None, repeat: int | None, threshold: float,
                   grader_timeout: float, reference_template: str | None) -> JSONValue:
    """Every flag of `validate grader` that can be wrong on its own (one line, exit 2); the reference template."""
    import math

    from rfteval.errors import InputError
    from rfteval.readiness.reference import load_reference_template
    from rfteval.sandbox.policy import SandboxPolicy

    SandboxPolicy.from_flags(False, timeout_s=grader_timeout)  # --grader-timeout's check

    if (repeat is None) != (outputs is None):
        raise InputError("--repeat and --outputs go together (and need --dataset)", field="--repeat")
    if dataset is None and repeat is not None:
        raise InputError("--repeat needs --dataset", field="--dataset")
    if repeat is not None and repeat < 2:  # run_stability's own check, made before the judge is opened
        raise InputError("must be at least 2 to measure a spread", field="--repeat")
    if not (math.isfinite(threshold) and threshold >= 0):
        raise InputError(f"must be a score sd >= 0 (0..1 scale), got {threshold:g}", field="--threshold")
    return load_reference_template(reference_template) if reference_template is not None else None


def _preflight(config: GraderConfig, source: GraderFile, dataset: Path) -> Dataset:
    """The dataset, once every item can fill the grader's templates: each failing item named, before any grading
    (or judge call) is spent."""
    from rfteval.data.dataset import load_dataset
    from rfteval.graders.checks import output_json_warning, preflight

    data = load_dataset(dataset)
    if (warning := output_json_warning(config, source.has_response_format)) is not None:
        typer.echo(f"warning: {warning}", err=True)
    problems = preflight(config, data, source.path)
    if problems:
        for problem in problems:
            typer.echo(f"rfteval: {problem}", err=True)
        raise typer.Exit(ExitStatus.BAD_INPUT)
    return data


def _reference(config: GraderConfig, data: Dataset, options: GradeOptions, template: JSONValue,
               judge: Judge | None, endpoint: JudgeEndpoint) -> None:
    """The share of reference answers that score the maximum (rfteval.readiness.reference); the judge calls are
    announced when the references are known, with the count made, and not at all when none is graded."""
    from rfteval.readiness.reference import judge_calls_note, reference_check

    def announce(calls: int) -> None:
        note = judge_calls_note(calls, endpoint.base_url, endpoint.api_key_env)
        typer.echo(f"the references go to the judge model: {note}")

    checked = reference_check(data, config, options, template, judge, before_calls=announce)
    from rfteval.providers.judge import raise_if_stopped

    raise_if_stopped(judge, "no reference was judged")
    typer.echo(checked["text"])
    if checked["summary"]["inconclusive"]:  # every reference's grade an error: no share, and never a pass
        typer.echo("rfteval: every reference answer's grade is an error: the check is inconclusive", err=True)
        raise typer.Exit(ExitStatus.INCOMPLETE)


@command("spec", group="validate")
def validate_spec(path: Path = typer.Argument(..., help="Eval spec (TOML).")) -> None:
    """Check an eval spec and everything it names (dataset, grader, response format) without calling a model,
    as `rfteval run` checks them first (the grader's lint, its templates on every item, the RFT format)."""
    from rfteval.data.dataset import check_dataset
    from rfteval.graders.loader import GraderFile
    from rfteval.run.paths import check_run_inputs
    from rfteval.run.spec import build_spec, resolve_models

    spec = build_spec(path)
    grader = GraderFile(spec.grader)  # read once, as `rfteval run` reads it
    runs = resolve_models(spec, grader)
    count, errors = check_dataset(spec.dataset)
    if errors:  # every unreadable line counted, as `validate dataset` lists them
        from rfteval.errors import InputErrors

        raise InputErrors(errors)
    config = check_run_inputs(spec, lambda line: typer.echo(line, err=True), grader)
    items = f"first {spec.limit} of {count}" if spec.limit is not None and spec.limit < count else str(count)
    typer.echo(f"{path}: valid; {items} items x {spec.epochs} epochs, grader {config.name!r} ({config.type}), "
               f"out {spec.out_dir}")
    for run in runs:
        where = run.settings.get("path") if run.provider == "replay" else (run.settings.get("base_url") or "OpenAI")
        typer.echo(f"  {run.label}: {run.model} via {run.provider} {where}{_format_label(run.sampling.response_format)}")


def _format_label(response_format: JSONMapping | None) -> str:
    """What the response format asks the server for, in the words servers' docs use: JSON mode (json_object, which
    llama.cpp and Ollama have where they lack structured outputs) is not structured outputs, and text asks nothing."""
    kind = (response_format or {}).get("type")
    if response_format is None or kind == "text":
        return ""
    return " (JSON mode)" if kind == "json_object" else " (structured outputs)"


@command("tools", group="validate")
def validate_tools(
    dataset: Path = typer.Option(..., "--dataset", "-d", help="Dataset JSONL whose items declare the tools."),
    tools: Path | None = typer.Option(None, "--tools", metavar="FILE",
                                      help="The python tools module (tools.py): one function per tool."),
    tool_endpoints: Path | None = typer.Option(None, "--tool-endpoints", metavar="FILE",
                                               help="Agent RFT's tools list, as for run: its ${VAR}s must be set; no "
                                               "server is contacted."),
    mcp: list[str] | None = typer.Option(None, "--mcp", metavar="COMMAND", help="An MCP server's command line, as "
                                         "for run (repeat for more): started once in the sandbox to list its tools."),
    max_turns: int = typer.Option(MAX_TURNS, "--max-turns", metavar="N", help="Model calls per rollout, as for run."),
    epochs: int = typer.Option(EPOCHS, "--epochs", metavar="N", help="Rollouts per item and model, as for run."),
    tool_timeout: float = typer.Option(TOOL_TIMEOUT_S, "--tool-timeout", metavar="SECONDS",
                                       help="Seconds a turn's tool calls may take, loading the module too."),
    tool_memory: int = typer.Option(TOOL_MEMORY_MB, "--tool-memory", metavar="MB",
                                    help="Memory of a tool unit (MB), loading the module too."),
    unsafe_python_graders: bool = UNSAFE_PYTHON_GRADERS,
) -> None:
    """Check that every tool the items declare is one of the run's tools (a function of the tools module, an Agent
    RFT endpoint, an MCP server's tool) and fits its schema, that the module loads and the servers start in the
    sandbox, and say the most requests a run can send; each misfit is one FILE:LINE line (exit 2)."""
    from rfteval.sandbox.policy import SandboxPolicy
    from rfteval.tools.check import ToolsCheckRequest, check_tools

    request = ToolsCheckRequest(dataset, tools, max_turns, epochs, tool_timeout, tool_memory, tool_endpoints,
                                tuple(mcp or ()))
    checked = check_tools(request, SandboxPolicy(unsafe=unsafe_python_graders))
    for problem in checked.problems:
        typer.echo(str(problem), err=True)
    if checked.problems:
        raise typer.Exit(ExitStatus.BAD_INPUT)
    for line in checked.lines:
        typer.echo(line)
