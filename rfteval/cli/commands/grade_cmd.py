"""`rfteval grade`: grade outputs that already exist, with no model calls."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from rfteval.cli.commands.common import (
    ALLOW_GRADER_WITHOUT_SAMPLE,
    ALLOW_TRAILING_ASSISTANT,
    DEFAULT_JUDGE,
    GRADER_MEMORY,
    GRADER_TIMEOUT,
    SKIP_JUDGE_MODEL_CHECK,
    UNSAFE_PYTHON_GRADERS,
    OutputFormat,
    command,
    judge_flags,
    make_judge,
)
from rfteval.limits import MAX_ERROR_RATE
from rfteval.status import ExitStatus

if TYPE_CHECKING:
    from rfteval.graders.base import GraderConfig
    from rfteval.graders.paths import GradedFile
    from rfteval.providers.endpoint import JudgeEndpoint
    from rfteval.providers.judge import Judge


@command("grade")
@judge_flags(developer_as=True)
def grade(
    dataset: Path = typer.Option(..., "--dataset", "-d", help="Dataset JSONL (OpenAI RFT format)."),
    grader: Path = typer.Option(..., "--grader", "-g", help="Grader JSON (OpenAI format)."),
    outputs: Path = typer.Option(..., "--outputs",
                                 help='Outputs JSONL: {"item_id", "output_text", "epoch"?, "model"?, "output_tools"?, '
                                      '"finish_reason"?, "reasoning_content"? | "reasoning"?} per line; or '
                                      "agent transcripts (OpenAI messages, verifiers' results.jsonl or traces.jsonl, "
                                      "ART trajectories); or a vf-eval run directory."),
    out: Path | None = typer.Option(None, "--out", help="Records file to write (default: OUTPUTS.records.jsonl)."),
    skip_invalid: bool = typer.Option(False, "--skip-invalid", help="Skip bad dataset lines, and the outputs of "
                                      "items that are then missing, with a warning."),
    grader_timeout: float = GRADER_TIMEOUT,
    grader_memory: int = GRADER_MEMORY,
    items_limit: int = typer.Option(50, "--top", help="Rows of the per-item table."),
    max_error_rate: float = typer.Option(MAX_ERROR_RATE, "--max-error-rate", metavar="X",
                                         help="Exit 3 when more than this share of records failed to grade."),
    fmt: OutputFormat = typer.Option(OutputFormat.table, "--format", metavar="table|json",
                                     help="table (text is an alias) or json."),
    reasoning: str = typer.Option("strip", "--reasoning", metavar="strip|keep",
                                  help="strip: graders see the answer after a leading think block (the thinking "
                                       "goes to reasoning_text); keep: the output as written."),
    think_tags: list[str] | None = typer.Option(None, "--think-tags", metavar="OPEN,CLOSE",
                                                help="Think-block tags in the output [default: <think>,</think>]; "
                                                     "repeat it for more pairs."),
    judge_cache: Path | None = typer.Option(None, "--judge-cache", metavar="FILE",
                                            help="Judge answer cache: a re-run sends no judge call twice "
                                                 "(default: judge_cache.jsonl beside the records)."),
    judge_endpoint: JudgeEndpoint = DEFAULT_JUDGE,
    skip_model_check: bool = SKIP_JUDGE_MODEL_CHECK,
    unsafe_python_graders: bool = UNSAFE_PYTHON_GRADERS,
    allow_grader_without_sample: bool = ALLOW_GRADER_WITHOUT_SAMPLE,
    allow_trailing_assistant: bool = ALLOW_TRAILING_ASSISTANT,
) -> None:
    """Grade existing outputs with a grader; write records and print per-item and overall means."""
    from rfteval.graders.paths import GradeRequest, grade_paths

    request = GradeRequest(dataset, grader, outputs, out, skip_invalid, grader_timeout, grader_memory, reasoning,
                           think_tags, unsafe_python_graders, (judge_endpoint.api_key_env,), judge_cache,
                           allow_grader_without_sample, allow_trailing_assistant, judge_endpoint.model,
                           max_error_rate=max_error_rate, top=items_limit)

    def open_judge(config: GraderConfig) -> Judge | None:
        return make_judge(config, judge_endpoint, skip_model_check, request.judge_cache_path)

    graded = grade_paths(request, lambda line: typer.echo(line, err=True), open_judge)
    _print(graded, fmt, request.top)
    _exit_when_incomplete(sum(1 for r in graded.records if r.error), len(graded.records), request.max_error_rate)


def _print(graded: GradedFile, fmt: OutputFormat, items_limit: int) -> None:
    """The per-model summaries as JSON on stdout, or the per-item and per-model tables."""
    from rfteval.data.records import json_safe, records_frame
    from rfteval.report.console import plain_console
    from rfteval.report.grade_table import render_items, render_models
    from rfteval.run.summary import summarize_models

    summaries = summarize_models(records_frame(graded.records), grader=graded.config) if graded.records else []
    if fmt is OutputFormat.json:
        payload = [{k: v for k, v in s.items() if k != "per_item"} | {
            "per_item": s["per_item"].to_dict(orient="records")} for s in summaries]
        typer.echo(json.dumps(json_safe({"records_file": str(graded.path), "models": payload}), allow_nan=False))
        return
    console = plain_console()
    for s in summaries:
        render_items(console, s, limit=items_limit)
    config = graded.config
    render_models(console, summaries, title=f"Grader {config.name!r} ({config.type})")
    console.print(f"wrote {graded.path}", markup=False, highlight=False, soft_wrap=True)


def _exit_when_incomplete(errors: int, records: int, max_error_rate: float) -> None:
    """Exit 3, as `run` does, when more records failed to grade than allowed: a broken grade never passes."""
    if records and errors / records > max_error_rate:
        typer.echo(f"rfteval: {errors} of {records} records failed to grade ({errors / records:.1%} > "
                  f"--max-error-rate {max_error_rate:g})", err=True)
        raise typer.Exit(ExitStatus.INCOMPLETE)

