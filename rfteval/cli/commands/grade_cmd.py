"""`rfteval grade`: grade outputs that already exist, with no model calls."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from rfteval.cli.commands.common import (
    JUDGE_API,
    JUDGE_API_KEY_ENV,
    JUDGE_BASE_URL,
    JUDGE_CONCURRENCY,
    JUDGE_MODEL,
    SKIP_JUDGE_MODEL_CHECK,
    UNSAFE_PYTHON_GRADERS,
    OutputFormat,
    check_judge,
    command,
    make_judge,
    python_sandbox,
)
from rfteval.status import ExitStatus


@command("grade")
def grade(
    dataset: Path = typer.Option(..., "--dataset", "-d", help="Dataset JSONL (OpenAI RFT format)."),
    grader: Path = typer.Option(..., "--grader", "-g", help="Grader JSON (OpenAI format)."),
    outputs: Path = typer.Option(..., "--outputs",
                                 help='Outputs JSONL: {"item_id", "output_text", "epoch"?, "model"?, "output_tools"?, '
                                      '"finish_reason"?, "reasoning_content"? | "reasoning"?} per line.'),
    out: Path | None = typer.Option(None, "--out", help="Records file to write (default: OUTPUTS.records.jsonl)."),
    skip_invalid: bool = typer.Option(False, "--skip-invalid", help="Skip bad dataset lines, and the outputs of "
                                      "items that are then missing, with a warning."),
    grader_timeout: float = typer.Option(120.0, "--grader-timeout", help="Seconds per python grader call."),
    grader_memory: int = typer.Option(2048, "--grader-memory", help="MB of memory per python grader worker."),
    items_limit: int = typer.Option(50, "--top", help="Rows of the per-item table."),
    max_error_rate: float = typer.Option(0.05, "--max-error-rate", metavar="X",
                                         help="Exit 3 when more than this share of records failed to grade."),
    fmt: OutputFormat = typer.Option(OutputFormat.table, "--format", metavar="table|json",
                                     help="table (text is an alias) or json."),
    reasoning: str = typer.Option("strip", "--reasoning", metavar="strip|keep",
                                  help="strip: graders see the answer after a leading think block (the thinking "
                                       "goes to reasoning_text); keep: the output as written [default: strip]."),
    think_tags: list[str] | None = typer.Option(None, "--think-tags", metavar="OPEN,CLOSE",
                                                help="Think-block tags in the output [default: <think>,</think>]; "
                                                     "repeat it for more pairs."),
    judge_base_url: str | None = JUDGE_BASE_URL,
    judge_api_key_env: str = JUDGE_API_KEY_ENV,
    judge_api: str = JUDGE_API,
    judge_model: str | None = JUDGE_MODEL,
    judge_concurrency: int = JUDGE_CONCURRENCY,
    skip_model_check: bool = SKIP_JUDGE_MODEL_CHECK,
    unsafe_python_graders: bool = UNSAFE_PYTHON_GRADERS,
) -> None:
    """Grade existing outputs with a grader; write records and print per-item and overall means."""
    from rfteval.data.dataset import load_dataset
    from rfteval.data.outfile import check_output, write_output
    from rfteval.data.outputs import Output, iter_outputs
    from rfteval.data.reasoning import REASONING_MODES, parse_tags
    from rfteval.data.records import json_safe, write_jsonl
    from rfteval.errors import InputError, InputErrors
    from rfteval.graders import GradeOptions, load_grader
    from rfteval.graders.base import load_notes
    from rfteval.graders.checks import output_json_warning, preflight
    from rfteval.graders.grading import default_records_path, grade_outputs
    from rfteval.graders.loader import has_response_format
    from rfteval.report.console import plain_console
    from rfteval.report.grade_table import render_items, render_models
    from rfteval.run.summary import records_frame, summarize_models

    if reasoning not in REASONING_MODES:
        raise InputError(f"expected strip or keep, got {reasoning!r}", field="--reasoning")
    try:
        tags = parse_tags(think_tags)
    except ValueError as exc:
        raise InputError(str(exc), field="--think-tags") from None
    path = check_output(out or default_records_path(outputs), inputs=[dataset, grader, outputs], flag="--out")
    data = load_dataset(dataset, skip_invalid=skip_invalid)
    if data.skipped:
        typer.echo(f"warning: skipped {len(data.skipped)} invalid dataset lines (first: {data.skipped[0]})", err=True)
    config = load_grader(grader)
    for note in load_notes(config):
        typer.echo(f"note: {note}", err=True)
    problems = preflight(config, data, grader)
    if problems:
        raise InputErrors(problems)
    parse_json = has_response_format(grader)
    if (warning := output_json_warning(config, parse_json)) is not None:
        typer.echo(f"warning: {warning}", err=True)
    python_sandbox(config, unsafe_python_graders, judge_api_key_env)
    # Read (and check) every outputs line before grading: bad input never leaves a half-written result.
    set_aside: list[Output] = []
    outs = list(iter_outputs(outputs, known_items={it.id for it in data}, unknown=set_aside if skip_invalid else None))
    if set_aside:
        typer.echo(f"warning: skipped {len(set_aside)} output(s) of items not in the dataset (skipped lines; first: "
                  f"{outputs}:{set_aside[0].line}, item {set_aside[0].item_id!r})", err=True)
    options = GradeOptions(python_timeout_s=grader_timeout, python_memory_mb=grader_memory)
    judge = make_judge(config, judge_base_url, judge_api_key_env, judge_api, judge_model, judge_concurrency)
    check_judge(judge, config, skip_model_check)
    try:
        records = grade_outputs(data, config, outs, options, judge=judge, parse_json=parse_json, reasoning=reasoning,
                                tags=tags)
    finally:
        if judge is not None:
            judge.close()
    write_output(path, lambda tmp: write_jsonl(records, tmp), inputs=[dataset, grader, outputs], flag="--out")
    errors = sum(1 for r in records if r.error)
    summaries = summarize_models(records_frame(records)) if records else []
    if fmt is OutputFormat.json:
        payload = [{k: v for k, v in s.items() if k != "per_item"} | {
            "per_item": s["per_item"].to_dict(orient="records")} for s in summaries]
        typer.echo(json.dumps(json_safe({"records_file": str(path), "models": payload}), allow_nan=False))
        _exit_when_incomplete(errors, len(records), max_error_rate)
        return
    console = plain_console()
    for s in summaries:
        render_items(console, s, limit=items_limit)
    render_models(console, summaries, title=f"Grader {config.name!r} ({config.type})")
    console.print(f"wrote {path}", markup=False, highlight=False, soft_wrap=True)
    _exit_when_incomplete(errors, len(records), max_error_rate)


def _exit_when_incomplete(errors: int, records: int, max_error_rate: float) -> None:
    """Exit 3, as `run` does, when more records failed to grade than allowed: a broken grade never passes."""
    if records and errors / records > max_error_rate:
        typer.echo(f"rfteval: {errors} of {records} records failed to grade ({errors / records:.1%} > "
                  f"--max-error-rate {max_error_rate:g})", err=True)
        raise typer.Exit(ExitStatus.INCOMPLETE)

