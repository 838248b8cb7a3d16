"""`rfteval run`: every spec key is also a flag, and flags win; no spec file is needed at all."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from rfteval.cli.commands.common import (
    ALLOW_GRADER_WITHOUT_SAMPLE,
    ALLOW_TRAILING_ASSISTANT,
    DEVELOPER_AS,
    UNSAFE_PYTHON_GRADERS,
    command,
    stdout_console,
    tool_flags,
)
from rfteval.limits import (
    CONCURRENCY,
    EPOCHS,
    MAX_ERROR_RATE,
    MAX_RETRIES,
    PYTHON_MEMORY_MB,
    PYTHON_TIMEOUT_S,
    REQUEST_TIMEOUT_S,
)
from rfteval.providers.endpoint import DEFAULT_API, DEFAULT_KEY_ENV, JUDGE_CONCURRENCY
from rfteval.status import ExitStatus

if TYPE_CHECKING:
    from rfteval.run.monitor import RunMonitor
    from rfteval.run.runner import RunOptions, RunResult
    from rfteval.run.spec import RunSpec
    from rfteval.run.summary import RunSummary

_RUN_HELP = """Generate N epochs per model, grade every output, summarise; resumable.

SPEC is an optional TOML file (see the README); every key in it can be given as a flag, and flags win.
--model repeats: LABEL=MODEL for an OpenAI-compatible endpoint, LABEL=replay:FILE.jsonl for recorded
outputs. Results go to --out (default runs/NAME); running the same command again resumes there.
Exit codes: 0 done (or a --dry-run's plan), 2 bad input or a refused endpoint (401, unknown model), 3 too many
cells in error, an endpoint gone or a judge cap reached (resumable), 130 interrupted (resumable).
"""


@command("run", help=_RUN_HELP, no_args_is_help=True)
@tool_flags
def run_command(
    spec: Path | None = typer.Argument(None, metavar="SPEC.toml", help="Eval spec (TOML). Optional: flags alone are enough."),
    dataset: Path | None = typer.Option(None, "--dataset", metavar="FILE", help="RFT dataset (JSONL)."),
    grader: Path | None = typer.Option(None, "--grader", metavar="FILE", help="Grader config (OpenAI format, JSON)."),
    model: list[str] | None = typer.Option(None, "--model", metavar="LABEL=MODEL", help="LABEL=MODEL or LABEL=replay:FILE.jsonl; "
                                              "repeat it. The label names the output file."),
    epochs: int | None = typer.Option(None, "--epochs", metavar="N", help=f"Generations per item and model [default: {EPOCHS}]."),
    base_url: str | None = typer.Option(None, "--base-url", metavar="URL", help="OpenAI-compatible endpoint [default: OpenAI]."),
    api_key_env: str | None = typer.Option(None, "--api-key-env", metavar="VAR",
                                              help=f"Name of the env var holding the API key [default: {DEFAULT_KEY_ENV}]."),
    api: str | None = typer.Option(None, "--api", metavar="chat|responses", help=f"chat or responses [default: {DEFAULT_API}]."),
    concurrency: int | None = typer.Option(None, "--concurrency", metavar="N",
                                           help=f"Requests in flight [default: {CONCURRENCY}]."),
    max_retries: int | None = typer.Option(None, "--max-retries", metavar="N",
                                              help=f"Retries on 429/5xx/timeouts per request [default: {MAX_RETRIES}]."),
    timeout: float | None = typer.Option(None, "--timeout", metavar="SECONDS",
                                         help=f"Seconds per request [default: {REQUEST_TIMEOUT_S:g}]."),
    out: Path | None = typer.Option(None, "--out", metavar="DIR", help="Run directory [default: runs/NAME]."),
    name: str | None = typer.Option(None, "--name", metavar="NAME",
                                    help="Run name [default: the dataset's file name, or its folder's for items.jsonl]."),
    temperature: float | None = typer.Option(None, "--temperature", metavar="X",
                                             help="Sampling temperature for every model [default: the endpoint's]."),
    top_p: float | None = typer.Option(None, "--top-p", metavar="X",
                                       help="Nucleus sampling for every model [default: the endpoint's]."),
    seed: int | None = typer.Option(None, "--seed", metavar="N",
                                    help="Sampling seed: epoch E sends N + E - 1, so epochs stay independent "
                                         "samples [default: no seed sent]."),
    reasoning_effort: str | None = typer.Option(None, "--reasoning-effort", metavar="LEVEL",
                                                help="none, minimal, low, medium, high, xhigh or max (OpenAI's values; "
                                                     "not every model takes every one)."),
    max_output_tokens: int | None = typer.Option(None, "--max-output-tokens", metavar="N",
                                                 help="Output token limit per request, reasoning included."),
    response_format: Path | None = typer.Option(None, "--response-format", metavar="FILE",
                                                   help="JSON schema file (structured outputs), or a file holding "
                                                        '{"type": "json_object", ...} (JSON mode) or {"type": "text"}, '
                                                        "sent as given."),
    max_error_rate: float | None = typer.Option(None, "--max-error-rate", metavar="X",
                                                   help="Exit 3 above this share of cells in error "
                                                        f"[default: {MAX_ERROR_RATE:g}]."),
    grader_timeout: float | None = typer.Option(None, "--grader-timeout", metavar="SECONDS",
                                                   help=f"Seconds per python grader call [default: {PYTHON_TIMEOUT_S:g}]."),
    grader_memory: int | None = typer.Option(None, "--grader-memory", metavar="MB",
                                                help=f"MB per python grader worker [default: {PYTHON_MEMORY_MB}]."),
    judge_base_url: str | None = typer.Option(None, "--judge-base-url", metavar="URL",
                                                 help="Judge endpoint for model graders [default: the run's]."),
    judge_api_key_env: str | None = typer.Option(None, "--judge-api-key-env", metavar="VAR",
                                                    help="Env var holding the judge's key [default: the run's]."),
    judge_api: str | None = typer.Option(None, "--judge-api", metavar="chat|responses",
                                         help="The judge endpoint's API [default: the run's]."),
    judge_model: str | None = typer.Option(None, "--judge-model", metavar="MODEL",
                                              help="Judge model instead of the grader's `model`."),
    judge_concurrency: int | None = typer.Option(None, "--judge-concurrency", metavar="N",
                                                    help=f"Judge requests in flight [default: {JUDGE_CONCURRENCY}]."),
    group_models: bool | None = typer.Option(None, "--group-models/--no-group-models",
                                                help="A group judge ranks every model's samples of an item together."),
    reasoning: str | None = typer.Option(None, "--reasoning", metavar="strip|keep",
                                         help="Reasoning models: graders see the answer apart from the thinking "
                                              "(strip), or the content as sent (keep) [default: strip]."),
    think_tags: list[str] | None = typer.Option(None, "--think-tags", metavar="OPEN,CLOSE",
                                                help="Think-block tags in the content [default: <think>,</think>]; "
                                                     "repeat it for more pairs."),
    developer_as: str | None = DEVELOPER_AS,
    skip_model_check: bool = typer.Option(False, "--skip-model-check",
                                          help="Do not check --model and judge names against the endpoint's GET "
                                               "/models (for gateways that route names they do not list)."),
    readiness: bool = typer.Option(True, "--readiness/--no-readiness",
                                   help="Print an RFT-readiness verdict for models with 2+ epochs."),
    fresh: bool = typer.Option(False, "--fresh", help="Discard what --out holds and start over."),
    per_item: bool = typer.Option(False, "--per-item", help="Also print each item's mean per model."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bars."),
    fixed: bool = typer.Option(False, "--fixed", help="Keep --concurrency fixed instead of adapting it to the "
                               "endpoint's rate limits (429s, Retry-After, x-ratelimit-* headers)."),
    service_tier: str | None = typer.Option(None, "--service-tier", metavar="auto|default|flex|priority",
                                               help="Sent with every request; flex bills at batch prices, and its "
                                                    "429 'resource unavailable' is retried with longer waits."),
    batch: bool = typer.Option(False, "--batch", help="Send cells without a stored response through the Batch "
                               "API (half price, up to 24 h); re-run the same command to resume or collect."),
    batch_judge: bool = typer.Option(False, "--batch-judge", help="With --batch: model graders' judge calls go "
                                     "out as a second batch phase (filed in the judge cache), then grading runs."),
    batch_tail: str = typer.Option("batch", "--batch-tail", metavar="batch|sync",
                                   help="Cells that come back failed or batch_expired: another batch, or sync "
                                        "requests at once."),
    export_requests: Path | None = typer.Option(None, "--export-requests", metavar="FILE.jsonl",
                                                   help="Write the Batch API request lines of cells without a "
                                                        "response (vllm run-batch, Ray Data) and send nothing."),
    import_responses: Path | None = typer.Option(None, "--import-responses", metavar="FILE.jsonl",
                                                    help="Read Batch API output lines (OpenAI's, vllm run-batch's) "
                                                         "into the run, then grade; sends nothing."),
    limit: int | None = typer.Option(None, "--limit", metavar="N",
                                     help="Only the first N items of the dataset, in file order (a smoke test); the "
                                          "same --out without it continues, re-sending none of them."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Make every check a run makes, then print the planned "
                                 "requests, judge calls, tokens and cost ceiling; send nothing, write nothing."),
    max_judge_calls: int | None = typer.Option(None, "--max-judge-calls", metavar="N",
                                               help="Send at most N judge calls in this invocation: grading stops "
                                                    "there (exit 3), responses are kept; the same command resumes."),
    max_judge_cost: float | None = typer.Option(None, "--max-judge-cost", metavar="USD",
                                                help="Stop grading once this invocation's judge calls cost USD (at "
                                                     "the [pricing] table's prices); as --max-judge-calls."),
    models_in_turn: bool = typer.Option(False, "--models-in-turn", help="All of one model's cells, then the next "
                                        "model's, for servers that hold one model at a time (llama.cpp's aliases); "
                                        "default: interleaved."),
    tools: dict[str, object] | None = None,  # --tools and the rollout limits (common.tool_flags)
    retry_base: float = typer.Option(0.5, "--retry-base-delay", hidden=True),
    checkpoint_s: float = typer.Option(60.0, "--checkpoint-interval", hidden=True),
    batch_poll_s: float = typer.Option(30.0, "--batch-poll-interval", hidden=True),
    batch_max_lines: int = typer.Option(50_000, "--batch-max-lines", hidden=True),
    transport: str | None = typer.Option(None, "--http-transport", hidden=True),
    unsafe_python_graders: bool = UNSAFE_PYTHON_GRADERS,
    allow_grader_without_sample: bool = ALLOW_GRADER_WITHOUT_SAMPLE,
    allow_trailing_assistant: bool = ALLOW_TRAILING_ASSISTANT,
) -> None:
    from rfteval.run.paths import run_paths
    from rfteval.run.runner import FatalRunError, RunOptions
    from rfteval.run.spec import flag_overrides

    overrides = flag_overrides(
        models=model, dataset=_s(dataset), grader=_s(grader), epochs=epochs, base_url=base_url,
        api_key_env=api_key_env, api=api, concurrency=concurrency, max_retries=max_retries, timeout=timeout,
        out=_s(out), name=name, temperature=temperature, top_p=top_p, seed=seed, reasoning_effort=reasoning_effort,
        max_output_tokens=max_output_tokens, response_format=_s(response_format), max_error_rate=max_error_rate,
        grader_timeout=grader_timeout, grader_memory=grader_memory, judge_base_url=judge_base_url,
        judge_api_key_env=judge_api_key_env, judge_api=judge_api, judge_model=judge_model,
        judge_concurrency=judge_concurrency, group_models=group_models, reasoning=reasoning, limit=limit,
        think_tags=think_tags or None, developer_as=developer_as, max_judge_calls=max_judge_calls, max_judge_cost=max_judge_cost,
        skip_model_check=skip_model_check or None,  # not given: the spec's setting stands
        allow_grader_without_sample=allow_grader_without_sample or None,
        allow_trailing_assistant=allow_trailing_assistant or None, tools=tools,
    )
    options = RunOptions(
        fresh=fresh, backoff_base_s=retry_base, checkpoint_s=checkpoint_s, fixed_concurrency=fixed,
        service_tier=service_tier, transport=transport, batch=batch, batch_judge=batch_judge, batch_tail=batch_tail,
        batch_poll_s=batch_poll_s, batch_max_lines=batch_max_lines, export_requests=export_requests,
        import_responses=import_responses, models_in_turn=models_in_turn, dry_run=dry_run)
    started: list[RunSpec] = []
    try:
        result = run_paths(spec, overrides, options, functools.partial(_start, started, quiet, dry_run),
                           unsafe_python_graders, lambda line: typer.echo(line, err=True))
    except FatalRunError as exc:
        typer.echo(f"rfteval: {exc} (run stopped; stored responses are kept in {started[0].out_dir})", err=True)
        raise typer.Exit(ExitStatus.BAD_INPUT) from None
    _finish(result, started[0], options, readiness=readiness, per_item=per_item)


def _start(started: list[RunSpec], quiet: bool, dry_run: bool, run_spec: RunSpec) -> RunMonitor:
    """The run's header (its name, directory and, for an agent run, its tools and limits) and its monitor, once the
    spec is known good."""
    from rfteval.report.console import stderr_console
    from rfteval.report.run_table import RichMonitor
    from rfteval.run.rollout import limits_line

    started.append(run_spec)
    err = stderr_console()
    if not quiet:
        err.print(_header(run_spec, dry_run), highlight=False)
        if (agent := limits_line(run_spec)) is not None:
            err.print(f"rfteval: {agent}", highlight=False, markup=False)
    return _QuietMonitor() if quiet else RichMonitor(err)


def _header(run_spec: RunSpec, dry_run: bool) -> str:
    """The run's first line: where it writes; a dry run writes nothing, so it names no directory as its output."""
    if dry_run:
        return f"dry run: {run_spec.run_name} (nothing is sent or written)"
    return f"rfteval: {run_spec.run_name} -> {run_spec.out_dir}"


def _finish(result: RunResult, run_spec: RunSpec, options: RunOptions, *, readiness: bool, per_item: bool) -> None:
    """What the run ended as: the plan of a dry run, the exported requests, an interrupted or stopped run, or the
    tables, the readiness verdict and the exit code."""
    from rfteval.report.run_table import print_run

    s, out_dir = result.summary, result.out_dir
    if result.plan is not None:
        from rfteval.report.run_table import print_plan

        print_plan(result.plan, stdout_console())
        raise typer.Exit(ExitStatus.SUCCESS)
    if result.exported is not None:
        for path, n in result.exported.items():
            typer.echo(f"wrote {n} request lines to {path}")
        typer.echo("send them with any Batch API engine (vllm run-batch -i FILE -o OUT.jsonl, Ray Data, OpenAI's "
                   "Batch API), then: the same command with --import-responses OUT.jsonl")
        raise typer.Exit(ExitStatus.SUCCESS)
    if result.interrupted:
        done = sum(t.records for t in result.totals.values())
        typer.echo(f"rfteval: interrupted after {done} of {s.cells} cells; every stored response is kept. "
                   f"Resume with the same command (same --out {out_dir}); --fresh starts over.", err=True)
        if result.batches_open:
            typer.echo(f"rfteval: {result.batches_open} batch(es) keep running at the provider (rfteval batches "
                       f"{out_dir}); re-running the same command collects them, paid once.", err=True)
        raise typer.Exit(ExitStatus.INTERRUPTED)
    if result.stopped is not None:  # what was kept and how to resume, in the runner's words (a cap or a dead endpoint)
        typer.echo(f"rfteval: {result.stopped}", err=True)
        raise typer.Exit(ExitStatus.INCOMPLETE)
    if s.batches and s.batches.get("open"):
        typer.echo(f"rfteval: {s.batches['open']} batch(es) still open; re-run the same command to collect them",
                   err=True)
    console = stdout_console()
    print_run(result, console, per_item=per_item)
    if readiness and run_spec.epochs >= 2:
        from rfteval.report.readiness_render import print_run_readiness
        from rfteval.run.paths import run_readiness

        print_run_readiness(run_readiness(result, run_spec), console)
    typer.echo(f"results: {out_dir}/ ({', '.join(f'{lb}.jsonl' for lb in result.totals)}, results.parquet, "
               "summary.json)")
    if result.exit_code == ExitStatus.INCOMPLETE:
        typer.echo(f"rfteval: {s.errors} of {s.cells} cells ({s.error_rate:.1%}) ended in error, above "
                   f"--max-error-rate {s.max_error_rate:.1%}; {rerun_hint(s)}", err=True)
    elif s.missing and (options.batch or options.import_responses is not None):
        how = ("re-running the same command submits them again" if options.batch else
               "import the rest, or run without --import-responses to send them")
        typer.echo(f"rfteval: {s.missing} of {s.cells} cells have no response yet; {how}", err=True)
        raise typer.Exit(ExitStatus.INCOMPLETE)
    raise typer.Exit(result.exit_code)


def rerun_hint(summary: RunSummary) -> str:
    """What re-running does about the errors: failed requests are sent again; grading errors send nothing (a
    grader's server errors are re-graded, its verdicts on outputs stay until the grader changes)."""
    by_type: dict[str, int] = {}
    for m in summary.models.values():
        for kind, n in m.errors.by_type.items():
            by_type[kind] = by_type.get(kind, 0) + n
    failed = sum(n for kind, n in by_type.items() if not kind.startswith("grade:"))
    if failed:
        return f"re-running the same command re-sends the {failed} failed request{'s' if failed > 1 else ''}"
    return ("every error is a grading error: re-running the same command sends no request and re-grades from the "
            "stored responses (a grader fixed in place, or a grader's server errors)")


def _quiet_monitor_class() -> type:
    from rfteval.run.monitor import RunMonitor

    class QuietMonitor(RunMonitor):
        """No progress bars; the one-line messages (a failed batch, an adopted one) still reach stderr."""

        def __init__(self) -> None:
            self.said: set[tuple[str, str]] = set()

        def message(self, text: str) -> None:
            typer.echo(f"rfteval: {text}", err=True)

        def retry(self, label: str, kind: str, reason: str = "") -> None:
            from rfteval.providers.retry import one_line

            reason = one_line(reason, 160)
            if (label, kind) not in self.said:  # once per kind of failure: a stalled run says why
                self.said.add((label, kind))
                self.message(f"{label}: retrying after {kind}" + (f": {reason}" if reason else ""))

    return QuietMonitor


def _QuietMonitor() -> RunMonitor:  # noqa: N802 - built lazily so `rfteval --help` imports no runner
    return _quiet_monitor_class()()


def _s(path: Path | None) -> str | None:
    return None if path is None else str(path)
