"""`rfteval agree A B` or `rfteval agree A --regrade GRADER`: does a new judge (or grader) grade like the old one?"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from rfteval.cli.commands.common import (
    AGREE_MAX_BIAS,
    AGREE_MIN_KAPPA,
    AGREE_PASS_THRESHOLD,
    ALLOW_GRADER_WITHOUT_SAMPLE,
    DEFAULT_JUDGE,
    SKIP_JUDGE_MODEL_CHECK,
    UNSAFE_PYTHON_GRADERS,
    command,
    judge_flags,
    make_judge,
    output_format,
    python_sandbox,
    stdout_console,
)
from rfteval.errors import InputError
from rfteval.limits import MAX_ERROR_RATE
from rfteval.status import ExitStatus

if TYPE_CHECKING:
    from rfteval.providers.endpoint import JudgeEndpoint

EPILOG = """\b
Recorded grades of an old judge against a new one's (exit 0 pass, 1 gate failed, 2 bad input):
  rfteval agree runs/old runs/new --min-kappa 0.6 --max-bias 0.05 --require-same-verdict
Re-grade A's outputs with a new judge (answers cached in A's directory, judge usage shown):
  rfteval agree runs/old --regrade same --judge-model gpt-5-mini

\b
Samples pair on model label, item id and epoch. Intervals resample whole items. A grading error is no
grade: a sample with an error record on either side is left out and counted (--errors zero scores it 0).
Gates fail only when the data show the threshold is crossed (compare's evidence semantics), and every
gate fails when either side's error records pass --max-error-rate."""


@command("agree", epilog=EPILOG)
@judge_flags(developer_as=True)
def agree(
    a: Path = typer.Argument(..., metavar="A", help="The reference grades: a records file or run directory."),
    b: Path | None = typer.Argument(None, metavar="B", help="The other grades (records or a run directory); "
                                    "omit with --regrade."),
    regrade: Path | None = typer.Option(None, "--regrade", metavar="GRADER",
                                        help="Make B by grading A's outputs with this grader file; `same`: A's own "
                                             "grader (its run directory's), to swap only the judge with --judge-model."),
    dataset: Path | None = typer.Option(None, "--dataset", "-d", help="Dataset JSONL for --regrade (default: the "
                                        "one A's run directory names)."),
    judge_cache: Path | None = typer.Option(None, "--judge-cache", help="Judge answer cache for --regrade "
                                            "(default: judge_cache.jsonl in A's directory)."),
    out: Path | None = typer.Option(None, "--out", help="Write --regrade's records (B) to this file."),
    pass_threshold: float | None = AGREE_PASS_THRESHOLD,
    min_kappa: float | None = AGREE_MIN_KAPPA,
    max_bias: float | None = AGREE_MAX_BIAS,
    require_same_verdict: bool = typer.Option(False, "--require-same-verdict",
                                              help="Gate: fail when the graders' base-vs-tuned deltas are shown to "
                                                   "differ, or point opposite ways."),
    errors: str = typer.Option("exclude", "--errors", metavar="exclude|zero", help="exclude: a sample with an "
                               "error record on either side (a grading error, a refusal, a generation error) is left "
                               "out of the statistics and counted by type; zero: every error record scores 0."),
    max_error_rate: float = typer.Option(MAX_ERROR_RATE, "--max-error-rate", metavar="X", help="Gate: fail when either side's "
                                         "share of error records is above X (a warning when no gate is given)."),
    top: int = typer.Option(10, "--top", help="Items listed where A and B disagree most."),
    seed: int = typer.Option(0, "--seed", help="Seed of the bootstrap and permutation resampling."),
    fmt: str = typer.Option("table", "--format", metavar="table|json", help="table (text is an alias) or json."),
    html: Path | None = typer.Option(None, "--html", metavar="FILE",
                                     help="Write an HTML report with a scatter and a Bland–Altman plot."),
    judge_endpoint: JudgeEndpoint = DEFAULT_JUDGE,
    skip_model_check: bool = SKIP_JUDGE_MODEL_CHECK,
    unsafe_python_graders: bool = UNSAFE_PYTHON_GRADERS,
    allow_grader_without_sample: bool = ALLOW_GRADER_WITHOUT_SAMPLE,
) -> None:
    """Measure how well grader B agrees with grader A on the same samples, and whether the verdict survives."""
    from rfteval.compare.agree import AgreeOptions, agree_paths
    from rfteval.compare.gate_types import AgreeGate
    from rfteval.compare.regrade import Regrade, agree_inputs, load_regrade_grader, regrade_grader_path
    from rfteval.data.outfile import check_output, write_output
    from rfteval.report.agree_render import render_terminal, write_html

    fmt = output_format(fmt)
    # every flag checked before a judge is opened (AgreeGate, AgreeOptions; agree_paths checks what A and B's
    # grader already tell): a bad combination is one line, exit 2, and no --regrade call is paid for
    options = AgreeOptions(pass_threshold, seed=seed, top=top, errors=errors,
                           gate=AgreeGate(min_kappa, max_bias, require_same_verdict, max_error_rate))
    if regrade is not None:
        regrade = regrade_grader_path(regrade, a)
    inputs = agree_inputs(a, b, regrade, dataset)
    for flag, path in (("--html", html), ("--out", out), ("--judge-cache", judge_cache)):  # cache: appended to
        if path is not None:
            check_output(path, inputs, flag)
    spec = None
    if regrade is not None:
        config = load_regrade_grader(regrade, lambda line: typer.echo(line, err=True),
                                     allow_without_sample=allow_grader_without_sample, judge_model=judge_endpoint.model)
        spec = Regrade(regrade, dataset, judge_endpoint, judge_cache, out, allow_grader_without_sample,
                       python_sandbox(config, unsafe_python_graders, judge_endpoint.api_key_env), config)
    elif out is not None or dataset is not None or judge_cache is not None:
        raise InputError("only with --regrade", field="--out" if out else "--dataset" if dataset else "--judge-cache")
    # --regrade's judge model checked against the endpoint's list before its first call, as grade's and validate's
    result = agree_paths(a, b, options, spec, lambda config, cache: make_judge(config, judge_endpoint,
                                                                               skip_model_check, cache))
    if html is not None:
        write_output(html, lambda p: write_html(result, p), inputs, "--html")
    if fmt == "json":
        typer.echo(json.dumps(result.to_json(), allow_nan=False))
    else:
        render_terminal(stdout_console(), result)
    for line in result.gate["failures"]:
        print(f"rfteval: gate failed: {line}", file=sys.stderr)
    for line in result.gate["warnings"]:
        print(f"rfteval: gate warning: {line}", file=sys.stderr)
    if not result.gate["passed"]:
        raise typer.Exit(ExitStatus.GATE_FAILED)

