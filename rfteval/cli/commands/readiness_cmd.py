"""`rfteval readiness` and `rfteval probe-grader`: will RFT learn from this dataset and grader?"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from rfteval.cli.commands.common import (
    ALLOW_GRADER_WITHOUT_SAMPLE,
    DEFAULT_JUDGE,
    SKIP_JUDGE_MODEL_CHECK,
    UNSAFE_PYTHON_GRADERS,
    checked_grader,
    command,
    judge_flags,
    make_judge,
    python_sandbox,
)
from rfteval.data.outfile import check_output, write_output
from rfteval.limits import GROUP_SIZE, ThresholdDefaults
from rfteval.status import ExitStatus

if TYPE_CHECKING:
    from rfteval.graders.base import GradeOptions
    from rfteval.providers.endpoint import JudgeEndpoint
    from rfteval.sandbox.policy import SandboxPolicy


def _check_format(fmt: str) -> str:
    from rfteval.cli.commands.common import output_format

    return output_format(fmt)


def _options(python_workers: int | None, sandbox: SandboxPolicy | None = None) -> GradeOptions:
    from rfteval.graders.base import GradeOptions
    from rfteval.sandbox.policy import SandboxPolicy

    return GradeOptions(sandbox=sandbox or SandboxPolicy(), python_workers=python_workers)


@command("readiness", help="Will RFT learn from this dataset and grader? Signals and a verdict from a base run "
                               "with N >= 2 epochs (a run directory or a record file).")
def readiness(
    run: Path = typer.Argument(..., help="Run directory (DIR/<label>.jsonl, DIR/results.parquet) or a record file."),
    label: str | None = typer.Option(None, "--label", help="Model label to assess [default: base, when present]."),
    group_size: int = typer.Option(GROUP_SIZE, "--group-size", min=2, help="Training group size G (samples per prompt)."),
    write_adv: bool = typer.Option(False, "--write-advantages",
                                   help="Write GRPO advantages into the record file(s), atomically."),
    regrade: int = typer.Option(0, "--regrade", min=0, help="Re-grade N stored outputs to check determinism."),
    grader: Path | None = typer.Option(None, "--grader", help="Grader JSON [default: from DIR/spec.resolved.toml]."),
    dataset: Path | None = typer.Option(None, "--dataset", help="Dataset JSONL [default: from the spec]."),
    fmt: str = typer.Option("table", "--format", metavar="table|json", help="table (text is an alias) or json."),
    seed: int = typer.Option(0, "--seed", help="Seed for choosing outputs to re-grade."),
    python_workers: int | None = typer.Option(None, "--python-workers", min=1, help="Python grader workers."),
    zero_signal_not_ready: float = typer.Option(ThresholdDefaults.zero_signal_not_ready,
                                                help="Expected zero-signal share above which: not ready."),
    zero_signal_risky: float = typer.Option(ThresholdDefaults.zero_signal_risky,
                                            help="Expected zero-signal share above which: risky."),
    min_position: float = typer.Option(ThresholdDefaults.min_position, help="Base mean below this share of the range: risky."),
    max_position: float = typer.Option(ThresholdDefaults.max_position, help="Base mean above this share of the range: risky."),
    max_floor_share: float = typer.Option(ThresholdDefaults.max_floor_share,
                                          help="Share of all-minimum items above which: risky."),
    max_ceiling_share: float = typer.Option(ThresholdDefaults.max_ceiling_share,
                                            help="Share of all-maximum items above which: risky."),
    label_skew: float = typer.Option(ThresholdDefaults.label_skew_risky,
                                     help="Majority reference label share at or above which: risky."),
    answer_skew: float = typer.Option(ThresholdDefaults.prediction_skew_risky,
                                      help="Majority answer share at or above which: risky."),
    max_flip_rate: float = typer.Option(ThresholdDefaults.max_flip_rate,
                                        help="Re-graded share that changed above which: not ready."),
    max_grade_errors: float = typer.Option(ThresholdDefaults.max_grade_error_share,
                                           help="Grader error share above which: risky."),
    max_generate_errors: float = typer.Option(ThresholdDefaults.max_generate_error_share,
                                              help="Generation error share above which: risky."),
    html: Path | None = typer.Option(None, "--html", help="Also write the report as one self-contained HTML page."),
    errors: str = typer.Option("exclude", "--errors", metavar="exclude|zero",
                                help="Generation errors: exclude (left out of every signal, counted) or zero (reward 0). "
                                     "Grading errors and model refusals score 0 either way."),
    unsafe_python_graders: bool = UNSAFE_PYTHON_GRADERS,
) -> None:
    from rfteval.readiness.paths import ReadinessRequest, assess_path
    from rfteval.readiness.report import Thresholds
    from rfteval.report.console import plain_console
    from rfteval.report.readiness_render import render_readiness

    fmt = _check_format(fmt)
    if html is not None:  # before any work: one line for a bad path, and never over an input (results.parquet too)
        check_output(html, [run, *(f for pattern in ("*.jsonl", "*.parquet") for f in run.glob(pattern)
                                   if run.is_dir()), grader, dataset], "--html")
    thresholds = Thresholds(
        zero_signal_not_ready=zero_signal_not_ready, zero_signal_risky=zero_signal_risky, min_position=min_position,
        max_position=max_position, max_floor_share=max_floor_share, max_ceiling_share=max_ceiling_share,
        label_skew_risky=label_skew, prediction_skew_risky=answer_skew, max_flip_rate=max_flip_rate,
        max_grade_error_share=max_grade_errors, max_generate_error_share=max_generate_errors,
    )
    assessed = assess_path(ReadinessRequest(
        run, label, grader, dataset, thresholds, group_size=group_size, regrade=regrade, seed=seed,
        options=_options(python_workers), errors=errors, write_advantages=write_adv,
        unsafe_python_graders=unsafe_python_graders))
    report = assessed.report
    if html is not None:
        from rfteval.report.html import write_page
        from rfteval.report.readiness_render import readiness_html

        write_output(html, lambda p: write_page(p, f"rfteval readiness: {run}", readiness_html(report)),
                     [run, assessed.grader, assessed.dataset], "--html")
        typer.echo(f"wrote {html}", err=True)
    if fmt == "json":
        typer.echo(json.dumps(report.to_dict(), indent=2, ensure_ascii=False))
    else:
        render_readiness(report, plain_console(highlight=False))
    for path in assessed.advantages_written:
        typer.echo(f"advantages written: {path}", err=True)


@command("probe-grader", help="Run canned adversarial outputs through a grader for every item: cheats should "
                                  "score the floor, the reference the maximum.")
@judge_flags(developer_as=True)
def probe_grader(
    grader: Path = typer.Argument(..., help="Grader JSON (OpenAI's format)."),
    dataset: Path = typer.Option(..., "--dataset", help="Dataset JSONL."),
    strict: bool = typer.Option(False, "--strict", help="Exit 1 when any probe is flagged."),
    fmt: str = typer.Option("table", "--format", metavar="table|json", help="table (text is an alias) or json."),
    reference_template: str | None = typer.Option(
        None, "--reference-template", help="How a reference becomes an output: a JSON template file or inline JSON "
                                           "with {{item.…}} placeholders [default: inferred from the grader]."),
    margin: float = typer.Option(0.25, "--margin", min=0.0, max=1.0,
                                 help="A cheat is flagged above floor + margin × range (heuristic)."),
    limit: int | None = typer.Option(None, "--limit", min=1, help="Probe only the first N items."),
    seed: int = typer.Option(0, "--seed", help="Seed of the random-text probes."),
    python_workers: int | None = typer.Option(None, "--python-workers", min=1, help="Python grader workers."),
    html: Path | None = typer.Option(None, "--html", help="Also write the probe table as one self-contained HTML page."),
    judge_endpoint: JudgeEndpoint = DEFAULT_JUDGE,
    skip_model_check: bool = SKIP_JUDGE_MODEL_CHECK,
    unsafe_python_graders: bool = UNSAFE_PYTHON_GRADERS,
    allow_grader_without_sample: bool = ALLOW_GRADER_WITHOUT_SAMPLE,
) -> None:
    from rfteval.providers.judge import raise_if_stopped
    from rfteval.readiness.probes import checked_items, run_probes
    from rfteval.readiness.reference import load_reference_template
    from rfteval.report.console import plain_console
    from rfteval.report.readiness_render import render_probes

    fmt = _check_format(fmt)
    if html is not None:
        check_output(html, [grader, dataset], "--html")
    config = checked_grader(grader, allow_grader_without_sample, judge_endpoint.model)
    items = checked_items(config, grader, dataset, limit)
    policy = python_sandbox(config, unsafe_python_graders, judge_endpoint.api_key_env)
    template = load_reference_template(reference_template) if reference_template is not None else None
    judge = make_judge(config, judge_endpoint, skip_model_check)
    try:
        report = run_probes(config, items, reference_template=template, margin=margin, seed=seed,
                            options=_options(python_workers, policy), judge=judge)
        raise_if_stopped(judge, "no probe was judged")  # every probe would read as the floor: "ok"
    finally:
        if judge is not None:
            judge.close()
    if html is not None:
        from rfteval.report.html import write_page
        from rfteval.report.readiness_render import probes_html

        write_output(html, lambda p: write_page(p, f"rfteval probe-grader: {grader}", probes_html(report)),
                     [grader, dataset], "--html")
        typer.echo(f"wrote {html}", err=True)
    if fmt == "json":
        typer.echo(json.dumps(report.to_dict(), indent=2, ensure_ascii=False))
    else:
        render_probes(report, plain_console(highlight=False))
    if report.inconclusive:  # said on stderr too, so that --format json's reader knows why the exit is not 0
        typer.echo(f"rfteval: {len(report.inconclusive)} probe(s) inconclusive, every grade an error: "
                   f"{', '.join(p.name for p in report.inconclusive)}", err=True)
    if (status := report.exit_status(strict)) != ExitStatus.SUCCESS:
        raise typer.Exit(status)
