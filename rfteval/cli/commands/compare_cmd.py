"""`rfteval compare BASELINE CANDIDATE`, or `rfteval compare RUNDIR` (a series): paired statistics, reports, gate."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from rfteval.cli.commands.common import command, output_format, stdout_console
from rfteval.cli.commands.compare_reports import report_files, report_options, write_reports, write_series_reports
from rfteval.limits import MAX_ERROR_RATE
from rfteval.status import ExitStatus

if TYPE_CHECKING:
    from collections.abc import Iterable

    from rfteval.compare.gate_types import GateVerdict
    from rfteval.compare.paths import CompareRequest
    from rfteval.compare.series import SeriesGate
    from rfteval.data.sampling_check import NotSampling

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
every gate fails when either side's generation errors pass --max-error-rate. Agent runs (records with
turns and stop_reason) add a paired table of turns, tool calls, tool-error share, tokens, cost and
latency, each side's share of every stop reason, and the score by how rollouts ended:
  rfteval compare runs/agent -l base -l tuned --max-drop 0.02 --max-stop-share max_turns=0.10"""


@command("compare", epilog=EPILOG, no_args_is_help=True)
@report_options(after="fmt")
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
    max_error_rate: float = typer.Option(MAX_ERROR_RATE, "--max-error-rate", metavar="X", help="Gate: fail when either side's "
                                         "share of generation errors is above X."),
    max_stop_share: list[str] = typer.Option([], "--max-stop-share", metavar="REASON=SHARE", help="Gate (agent runs): "
                                             "fail when more than SHARE of the candidate's rollouts ended with "
                                             "REASON (no_tool_calls, max_turns, max_tool_calls, length, "
                                             "rollout_timeout, context), e.g. max_turns=0.10. Repeatable."),
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
    **reports: Path | None,
) -> None:
    """Paired comparison of two models on the same items, with intervals, slices and a CI gate; with one run
    directory, of its baseline against every other model in it (a checkpoint series)."""
    from rfteval.compare.gate import Gate
    from rfteval.compare.paths import CompareRequest, compare_request

    fmt = output_format(fmt)
    request = CompareRequest(
        baseline, candidate, label, dataset, report_files(reports), tie=tie, top=top, ci=ci,
        seed=seed, strict=strict, by=by, errors=errors, exclude_errors=exclude_errors, score_range=score_range,
        gate=Gate(fail_under, max_drop, require_improvement, max_item_drop, gate, max_error_rate), metric=metric,
        pass_threshold=pass_threshold, series_baseline=series_baseline, series_candidates=series_candidate,
        stop_shares=max_stop_share)
    if request.is_series:
        _series(request, fmt)
        return
    result = compare_request(request)
    write_reports(result, request)
    if fmt == "json":
        # indented for people; past 1,000 items compact (json's C encoder only runs without indent)
        indent = 2 if len(result.items) <= 1000 else None
        typer.echo(json.dumps(result.to_json(), indent=indent, ensure_ascii=False, allow_nan=False))
        for role, ids in (("baseline", result.unpaired["baseline_only"]),
                          ("candidate", result.unpaired["candidate_only"])):
            if ids:
                print(f"rfteval: {len(ids)} item(s) only in the {role}, left out", file=sys.stderr)
        _not_sampling_lines(result.not_sampling.values())
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


def _not_sampling_lines(checks: Iterable[NotSampling]) -> None:
    """A JSON run's not-sampling warnings (also under "not_sampling" in the JSON) on stderr."""
    from rfteval.report.terminal import not_sampling_lines

    for line in not_sampling_lines(checks):
        print(f"rfteval: {line}", file=sys.stderr)


def _series(request: CompareRequest, fmt: str) -> None:
    """`rfteval compare RUNDIR`: the baseline against every other model (rfteval.compare.series)."""
    from rfteval.compare.paths import compare_series_request

    series = compare_series_request(request)
    write_series_reports(series, request)
    if fmt == "json":
        typer.echo(json.dumps(series.to_json(), indent=2, ensure_ascii=False, allow_nan=False))
        _not_sampling_lines(series.not_sampling.values())
        _gate_lines(series.gate)
    else:
        from rfteval.report.terminal import print_series

        print_series(series, stdout_console())
    if not series.gate["passed"]:
        raise typer.Exit(ExitStatus.GATE_FAILED)
