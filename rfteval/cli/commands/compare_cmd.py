"""`rfteval compare BASELINE CANDIDATE`, or `rfteval compare RUNDIR` (a series): paired statistics, reports, gate."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from rfteval.cli.commands.common import command, output_format, stdout_console
from rfteval.status import ExitStatus

if TYPE_CHECKING:
    from rfteval.compare.comparison import CompareResult
    from rfteval.compare.gate_types import GateVerdict
    from rfteval.compare.paths import CompareRequest
    from rfteval.compare.series import SeriesGate

EPILOG = """\b
CI example (exit 0 pass, 1 gate failed, 2 bad input):
  rfteval compare runs/main/tuned.jsonl runs/pr/tuned.jsonl \\
      --max-drop 0.02 --max-item-drop 0.5 \\
      --markdown compare.md --junit compare.xml --html compare.html
  cat compare.md >> "$GITHUB_STEP_SUMMARY"

\b
A checkpoint series (base against every other model of a run, Holm across them):
  rfteval compare runs/exp1 --baseline base --max-drop 0.02 --html series.html

\b
Two models of one run directory:
  rfteval compare runs/exp1 --label base --label tuned --require-improvement
  rfteval compare runs/exp1 runs/exp1 -l base -l tuned --dataset data.jsonl --by difficulty

\b
Records pair by item_id; each item's epochs are averaged first, then items. A generation error (the
endpoint never answered) is left out and counted; grading errors and refusals score 0 (OpenAI's rule).
Gates fail on evidence of a drop, not on noise (--gate strict asks for proof of no drop instead), and
every gate fails when either side's generation errors pass --max-error-rate."""


def _write(path: Path, writer: object, flag: str, inputs: list[Path]) -> None:
    from rfteval.data.outfile import write_output

    write_output(path, writer, inputs, flag)  # type: ignore[arg-type]
    typer.echo(f"wrote {path}", err=True)


@command("compare", epilog=EPILOG, no_args_is_help=True)
def compare(
    baseline: Path = typer.Argument(..., help="Baseline records: a JSONL or Parquet record file, or a run directory.",
                                    show_default=False, metavar="BASELINE"),
    candidate: Path | None = typer.Argument(None, help="Candidate records, same forms as BASELINE. Left out: "
                                               "BASELINE is a run directory and every model in it is compared with "
                                               "its baseline (a checkpoint series).", show_default=False,
                                               metavar="CANDIDATE"),
    label: list[str] = typer.Option([], "--label", "-l", metavar="LABEL", help="Model label: once for both sides, or twice "
                                    "(baseline, then candidate). Picks DIR/<label>.jsonl or filters model_label."),
    dataset: Path | None = typer.Option(None, "--dataset", metavar="FILE", help="The dataset JSONL, for --by fields."),
    by: list[str] = typer.Option([], "--by", metavar="FIELD", help="Slice by a dataset field: top-level, else metadata.FIELD; "
                                 "dots walk into objects (metadata.topic). Repeatable."),
    strict: bool = typer.Option(False, "--strict", help="Items on one side only are an error (exit 2)."),
    errors: str = typer.Option("exclude", "--errors", metavar="exclude|zero", help="exclude: generation errors "
                               "are left out of the means (grading errors and refusals score 0); zero: every error "
                               "record scores 0."),
    exclude_errors: bool = typer.Option(False, "--exclude-errors", help="Leave every error record out, grading "
                                        "errors too."),
    score_range: str | None = typer.Option(None, "--score-range", metavar="LO,HI", help="The grader's range; "
                                              "intervals never pass it. Default: 0,1 when every score lies in it."),
    tie: float = typer.Option(1e-9, "--tie", metavar="X", help="Per-item |delta| up to this counts as a tie."),
    ci: str = typer.Option("t", "--ci", metavar="t|bootstrap",
                           help="Interval method: t or bootstrap (10,000 resamples of items)."),
    seed: int = typer.Option(0, "--seed", metavar="N", help="Seed of the permutation test and the bootstrap."),
    top: int = typer.Option(10, "--top", metavar="N", help="Items shown per table, lowest delta first."),
    fmt: str = typer.Option("table", "--format", metavar="table|json", help="table (text is an alias) or json on "
                            "stdout."),
    markdown: Path | None = typer.Option(None, "--markdown", metavar="FILE", help="Write a Markdown summary (CI job summary, "
                                            "PR comment)."),
    junit: Path | None = typer.Option(None, "--junit", metavar="FILE", help="Write JUnit XML: one test case per item."),
    html: Path | None = typer.Option(None, "--html", metavar="FILE", help="Write one self-contained HTML report with plots."),
    fail_under: float | None = typer.Option(None, "--fail-under", metavar="X", help="Gate: fail when the candidate's "
                                               "whole interval lies below X (strict: when any of it does)."),
    max_drop: float | None = typer.Option(None, "--max-drop", metavar="X", help="Gate: fail on a drop shown by the test "
                                             "(interval below 0) whose mean passes -X (strict: when the interval's "
                                             "lower bound passes -X)."),
    require_improvement: bool = typer.Option(False, "--require-improvement", help="Gate: fail unless the candidate is "
                                             "shown better (interval above 0 and p < 0.05)."),
    max_item_drop: float | None = typer.Option(None, "--max-item-drop", metavar="X", help="Gate: fail when an item drops "
                                                  "by more than X and that drop is significant over its epochs after "
                                                  "Holm across items (the JUnit failures)."),
    gate: str = typer.Option("evidence", "--gate", metavar="evidence|strict", help="evidence: fail on evidence of a "
                             "regression; strict: pass only on proof of none (non-inferiority)."),
    max_error_rate: float = typer.Option(0.05, "--max-error-rate", metavar="X", help="Gate: fail when either side's "
                                         "share of generation errors is above X."),
    metric: str = typer.Option("mean", "--metric", metavar="mean|pass@K|pass^K", help="What each item contributes: "
                               "its mean score, or its unbiased pass@K (any of K samples passes) or pass^K (all K "
                               "pass) estimate from its epochs. Intervals, p, slices and gates all follow it."),
    pass_threshold: float | None = typer.Option(None, "--pass-threshold", metavar="X", help="A sample passes when "
                                                   "its record's `passed` says so, else when its score reaches X "
                                                   "[default: the grader's maximum; 1.0 without grader info]."),
    series_baseline: str | None = typer.Option(None, "--baseline", metavar="LABEL", help="Series (one RUNDIR): the "
                                                  "model the others are compared with [default: base, else the "
                                                  "first in the spec]."),
    series_candidate: list[str] = typer.Option([], "--candidate", metavar="LABEL", help="Series: gate only this "
                                               "candidate (repeatable) [default: every candidate]."),
) -> None:
    """Paired comparison of two models on the same items, with intervals, slices and a CI gate; with one run
    directory, of its baseline against every other model in it (a checkpoint series)."""
    from rfteval.compare.gate import Gate
    from rfteval.compare.paths import CompareRequest, ReportPaths, compare_request

    fmt = output_format(fmt)
    request = CompareRequest(
        baseline, candidate, label, dataset, ReportPaths(markdown, junit, html), tie=tie, top=top, ci=ci,
        seed=seed, strict=strict, by=by, errors=errors, exclude_errors=exclude_errors, score_range=score_range,
        gate=Gate(fail_under, max_drop, require_improvement, max_item_drop, gate, max_error_rate), metric=metric,
        pass_threshold=pass_threshold, series_baseline=series_baseline, series_candidates=series_candidate)
    if request.is_series:
        _series(request, fmt)
        return
    result = compare_request(request)
    _write_reports(result, request)
    if fmt == "json":
        # indented for people; past 1,000 items compact (json's C encoder only runs without indent)
        indent = 2 if len(result.items) <= 1000 else None
        typer.echo(json.dumps(result.to_json(), indent=indent, ensure_ascii=False, allow_nan=False))
        for role, ids in (("baseline", result.unpaired["baseline_only"]),
                          ("candidate", result.unpaired["candidate_only"])):
            if ids:
                print(f"rfteval: {len(ids)} item(s) only in the {role}, left out", file=sys.stderr)
        _gate_lines(result.gate)
    else:
        from rfteval.report.terminal import print_compare

        print_compare(result, stdout_console(), top)
    if not result.gate["passed"]:
        raise typer.Exit(ExitStatus.GATE_FAILED)


def _gate_lines(gate: GateVerdict | SeriesGate) -> None:
    """A JSON run's gate failures and warnings on stderr, so stdout stays the JSON alone."""
    for line in gate["failures"]:
        print(f"rfteval: gate failed: {line}", file=sys.stderr)
    for line in gate.get("warnings", []):
        print(f"rfteval: warning: {line}", file=sys.stderr)


def _write_reports(result: CompareResult, request: CompareRequest) -> None:
    """The Markdown, JUnit and HTML files asked for; the HTML one with the baseline's readiness when it has 2+
    epochs per item."""
    reports, top, inputs = request.reports, request.top, request.inputs
    if reports.markdown is not None:
        from rfteval.report.markdown import write_markdown

        _write(reports.markdown, lambda p: write_markdown(result, p, top), "--markdown", inputs)
    if reports.junit is not None:
        from rfteval.report.junit import write_junit

        _write(reports.junit, lambda p: write_junit(result, p), "--junit", inputs)
    if reports.html is not None:
        from rfteval.baseline_readiness import baseline_readiness
        from rfteval.compare.samples import listed_samples
        from rfteval.report.html import write_html
        from rfteval.report.readiness_render import readiness_sections

        sections = readiness_sections(baseline_readiness(result, request.dataset))
        shown = max(top, 50)
        samples = listed_samples([(str(s["path"]), str(s["label"])) for s in (result.baseline, result.candidate)],
                                 result.items["item_id"].head(shown).tolist())
        _write(reports.html, lambda p: write_html(result, p, shown, sections, samples), "--html", inputs)


def _series(request: CompareRequest, fmt: str) -> None:
    """`rfteval compare RUNDIR`: the baseline against every other model (rfteval.compare.series)."""
    from rfteval.compare.paths import compare_series_request

    series = compare_series_request(request)
    reports, inputs = request.reports, request.inputs
    if reports.markdown is not None:
        from rfteval.report.markdown import write_series_markdown

        _write(reports.markdown, lambda p: write_series_markdown(series, p), "--markdown", inputs)
    if reports.html is not None:
        from rfteval.report.html import write_series_html

        _write(reports.html, lambda p: write_series_html(series, p), "--html", inputs)
    if fmt == "json":
        typer.echo(json.dumps(series.to_json(), indent=2, ensure_ascii=False, allow_nan=False))
        _gate_lines(series.gate)
    else:
        from rfteval.report.terminal import print_series

        print_series(series, stdout_console())
    if not series.gate["passed"]:
        raise typer.Exit(ExitStatus.GATE_FAILED)
