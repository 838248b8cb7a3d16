"""`rfteval compare BASELINE CANDIDATE`, or `rfteval compare RUNDIR` (a series): paired statistics, reports, gate."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from rfteval.cli.commands.common import command, output_format, stdout_console
from rfteval.errors import InputError
from rfteval.status import ExitStatus

if TYPE_CHECKING:
    from rfteval.compare.comparison import CompareOptions

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


def _check(value: float | None, name: str, minimum: float = 0.0) -> None:
    if value is not None and not value >= minimum:
        raise InputError(f"must be >= {minimum:g}, got {value:g}", field=name)


def _parse_range(text: str | None) -> tuple[float, float] | None:
    if text is None:
        return None
    try:
        lo, hi = (float(x) for x in text.split(","))
    except ValueError:
        raise InputError(f"must be two numbers LO,HI, got {text!r}", field="--score-range") from None
    if not lo < hi:
        raise InputError(f"LO must be below HI, got {text!r}", field="--score-range")
    return lo, hi


def _inputs(*paths: Path | None) -> list[Path]:
    """Every file this compare reads: the given paths, and a run directory's record files."""
    out: list[Path] = []
    for path in paths:
        if path is None:
            continue
        out.append(path)
        if path.is_dir():
            out += [*path.glob("*.jsonl"), *path.glob("*.parquet")]
    return out


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
    from rfteval.compare.comparison import CompareOptions
    from rfteval.compare.gate import GATE_MODES, Gate
    from rfteval.compare.paths import compare_paths
    from rfteval.stats.passk import parse_metric

    fmt = output_format(fmt)
    if ci not in ("t", "bootstrap"):
        raise InputError(f"must be t or bootstrap, got {ci!r}", field="--ci")
    _check(tie, "--tie")
    _check(top, "--top")
    _check(max_drop, "--max-drop")
    _check(max_item_drop, "--max-item-drop")
    _check(max_error_rate, "--max-error-rate")
    if gate not in GATE_MODES:
        raise InputError(f"must be evidence or strict, got {gate!r}", field="--gate")
    parse_metric(metric)
    from rfteval.data.outfile import check_output

    if candidate is None and len(label) == 2:  # `compare runs/a -l base -l tuned`: two models of one run directory
        candidate = baseline
    inputs = _inputs(baseline, candidate, dataset)
    for flag, path in (("--markdown", markdown), ("--junit", junit), ("--html", html)):
        if path is not None:  # before any work: a bad path is one line, and an input is never overwritten
            check_output(path, inputs, flag)
    options = CompareOptions(tie=tie, ci_method=ci, seed=seed, exclude_errors=exclude_errors, strict=strict,
                             by=tuple(by), errors=errors, score_range=_parse_range(score_range),
                             gate=Gate(fail_under, max_drop, require_improvement, max_item_drop, gate, max_error_rate),
                             metric=metric, pass_threshold=pass_threshold)
    if candidate is None:
        if label:
            raise InputError("a series (one RUNDIR) takes --baseline and --candidate, not --label", field="--label")
        if junit is not None:
            raise InputError("JUnit is per item of one comparison: compare two labels for it", field="--junit")
        _series(baseline, options, series_baseline, series_candidate, dataset, fmt, markdown, html, inputs)
        return
    if series_baseline is not None or series_candidate:
        raise InputError("--baseline and --candidate are for a series: give one RUNDIR and no CANDIDATE",
                         field="--baseline" if series_baseline is not None else "--candidate")
    result = compare_paths(baseline, candidate, label, options, dataset)

    if markdown is not None:
        from rfteval.report.markdown import write_markdown

        _write(markdown, lambda p: write_markdown(result, p, top), "--markdown", inputs)
    if junit is not None:
        from rfteval.report.junit import write_junit

        _write(junit, lambda p: write_junit(result, p), "--junit", inputs)
    if html is not None:
        from rfteval.report.html import write_html

        sections = _readiness_sections(result, dataset)
        _write(html, lambda p: write_html(result, p, max(top, 50), sections), "--html", inputs)

    if fmt == "json":
        # indented for people; past 1,000 items compact (json's C encoder only runs without indent)
        indent = 2 if len(result.items) <= 1000 else None
        typer.echo(json.dumps(result.to_json(), indent=indent, ensure_ascii=False, allow_nan=False))
        for role, ids in (("baseline", result.unpaired["baseline_only"]),
                          ("candidate", result.unpaired["candidate_only"])):
            if ids:
                print(f"rfteval: {len(ids)} item(s) only in the {role}, left out", file=sys.stderr)
        for line in result.gate["failures"]:
            print(f"rfteval: gate failed: {line}", file=sys.stderr)
        for line in result.gate.get("warnings", []):
            print(f"rfteval: warning: {line}", file=sys.stderr)
    else:

        from rfteval.report.terminal import print_compare

        print_compare(result, stdout_console(), top)
    if not result.gate["passed"]:
        raise typer.Exit(ExitStatus.GATE_FAILED)


def _series(run_dir: Path, options: CompareOptions, baseline: str | None, gated: list[str], dataset: Path | None,
            fmt: str, markdown: Path | None, html: Path | None, inputs: list[Path]) -> None:
    """`rfteval compare RUNDIR`: the baseline against every other model (rfteval.compare.series)."""
    from rfteval.compare.comparison import dataset_fields
    from rfteval.compare.series import compare_series

    if options.by and dataset is None:
        raise InputError("--by needs --dataset (the items' fields live in the dataset)", field="--by")
    fields = dataset_fields(dataset, options.by) if dataset is not None and options.by else None
    series = compare_series(run_dir, options, baseline, gated, fields)
    if markdown is not None:
        from rfteval.report.markdown import write_series_markdown

        _write(markdown, lambda p: write_series_markdown(series, p), "--markdown", inputs)
    if html is not None:
        from rfteval.report.html import write_series_html

        _write(html, lambda p: write_series_html(series, p), "--html", inputs)
    if fmt == "json":
        typer.echo(json.dumps(series.to_json(), indent=2, ensure_ascii=False, allow_nan=False))
        for line in series.gate["failures"]:
            print(f"rfteval: gate failed: {line}", file=sys.stderr)
        for line in series.gate.get("warnings", []):
            print(f"rfteval: warning: {line}", file=sys.stderr)
    else:

        from rfteval.report.terminal import print_series

        print_series(series, stdout_console())
    if not series.gate["passed"]:
        raise typer.Exit(ExitStatus.GATE_FAILED)


READINESS_MAX_RECORDS = 50_000


def _readiness_sections(result: object, dataset: Path | None) -> list[tuple[str, str]]:
    """The baseline's RFT-readiness section of the HTML report, when its records have 2+ epochs per item."""
    from html import escape

    from rfteval.data.records import read_records
    from rfteval.errors import InputError
    from rfteval.readiness.assess import assess
    from rfteval.report.readiness_render import readiness_html

    side = result.baseline  # type: ignore[attr-defined]
    if side["records"] > READINESS_MAX_RECORDS:  # re-reading every output costs more than the whole compare
        return [(f"RFT readiness of the baseline ({side['label']})",
                 f"<p>Not computed here for {side['records']:,} records (more than {READINESS_MAX_RECORDS:,}): "
                 f"run <code>rfteval readiness {escape(str(side['path']))} --html FILE</code>.</p>")]
    try:
        df = read_records(side["path"])
        if "model_label" in df and df["model_label"].nunique() > 1:
            df = df[df["model_label"] == side["label"]]
        report = assess(df, dataset=dataset)
    except InputError as exc:  # an optional section: the comparison stands without it, and says why
        return [(f"RFT readiness of the baseline ({side['label']})",
                 f"<p>Not assessed: {escape(str(exc))}.</p>")]
    if report.samples_min < 2:
        return []
    return [(f"RFT readiness of the baseline ({side['label']})", readiness_html(report))]
