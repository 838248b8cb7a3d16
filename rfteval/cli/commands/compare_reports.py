"""The report files `rfteval compare` writes besides its stdout: one table, a format an entry (its flag, its help,
its writers for a comparison and for a series). The compare command takes its flags from the table, its request
checks their paths, and the files are written in the table's order: a new format is its renderer in report/ plus
one entry here (and its flag in the README)."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    from rfteval.compare.paths import CompareRequest, ReportFile
    from rfteval.compare.result import CompareResult
    from rfteval.compare.series import SeriesResult

FileWriter = Callable[[Path], None]  # writes the report to a path (a temporary file, renamed when whole)


@dataclass(frozen=True)
class ReportFormat:
    name: str  # the flag is --NAME
    help: str
    compare: Callable[[CompareResult, CompareRequest], FileWriter]
    series: Callable[[SeriesResult], FileWriter] | None = None  # None: a series has no such report, because:
    no_series: str = ""
    reads_records: bool = False  # it reads the baseline's records beyond the comparison: compare keeps them


def _markdown(result: CompareResult, request: CompareRequest) -> FileWriter:
    from rfteval.report.markdown import write_markdown

    return lambda p: write_markdown(result, p, request.top)


def _markdown_series(series: SeriesResult) -> FileWriter:
    from rfteval.report.markdown import write_series_markdown

    return lambda p: write_series_markdown(series, p)


def _junit(result: CompareResult, request: CompareRequest) -> FileWriter:
    from rfteval.report.junit import write_junit

    return lambda p: write_junit(result, p)


def _html(result: CompareResult, request: CompareRequest) -> FileWriter:
    """The HTML report, with the baseline's readiness when it has 2+ epochs per item and the listed items' samples."""
    from rfteval.baseline_readiness import baseline_readiness
    from rfteval.compare.samples import listed_samples
    from rfteval.report.html import write_html
    from rfteval.report.readiness_render import readiness_sections

    sections = readiness_sections(baseline_readiness(result, request.dataset))
    shown = max(request.top, 50)
    samples = listed_samples([(str(s["path"]), str(s["label"])) for s in (result.baseline, result.candidate)],
                             result.items["item_id"].head(shown).tolist(), held=(result.rows.get("baseline"),))
    return lambda p: write_html(result, p, shown, sections, samples)


def _html_series(series: SeriesResult) -> FileWriter:
    from rfteval.report.html import write_series_html

    return lambda p: write_series_html(series, p)


REPORT_FORMATS = (
    ReportFormat("markdown", "Write a Markdown summary (CI job summary, PR comment).", _markdown, _markdown_series),
    ReportFormat("junit", "Write JUnit XML: one test case per item.", _junit,
                 no_series="JUnit is per item of one comparison: compare two labels for it"),
    ReportFormat("html", "Write one self-contained HTML report with plots.", _html, _html_series, reads_records=True),
)


def report_options(after: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Give a command taking `**reports` one `--NAME FILE` option per format, placed after its option `after`."""

    def add(function: Callable[..., None]) -> Callable[..., None]:
        signature = inspect.signature(function)
        params = [p for p in signature.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
        at = next(i for i, p in enumerate(params) if p.name == after) + 1
        options = [inspect.Parameter(fmt.name, inspect.Parameter.KEYWORD_ONLY, annotation=Path | None,
                                     default=typer.Option(None, f"--{fmt.name}", metavar="FILE", help=fmt.help))
                   for fmt in REPORT_FORMATS]
        kind = inspect.Parameter.KEYWORD_ONLY  # the options after them too: keyword-only must come last
        rest = [p.replace(kind=kind) for p in params[at:]]
        function.__signature__ = signature.replace(parameters=[*params[:at], *options, *rest])  # type: ignore[attr-defined]
        return function

    return add


def report_files(paths: dict[str, Path | None]) -> list[ReportFile]:
    """The report files asked for (the formats' options by name), in the table's order."""
    from rfteval.compare.paths import ReportFile

    return [ReportFile(f"--{fmt.name}", path, fmt.no_series, fmt.reads_records)
            for fmt in REPORT_FORMATS if (path := paths.get(fmt.name)) is not None]


def _write(path: Path, writer: FileWriter, flag: str, inputs: list[Path]) -> None:
    from rfteval.data.outfile import write_output

    write_output(path, writer, inputs, flag)
    typer.echo(f"wrote {path}", err=True)


def write_reports(result: CompareResult, request: CompareRequest) -> None:
    """A comparison's report files, as the request asks."""
    paths = {report.flag: report.path for report in request.reports}
    for fmt in REPORT_FORMATS:
        if (path := paths.get(f"--{fmt.name}")) is not None:
            _write(path, fmt.compare(result, request), f"--{fmt.name}", request.inputs)


def write_series_reports(series: SeriesResult, request: CompareRequest) -> None:
    """A series' report files, as the request asks (it refused the formats a series has none of)."""
    paths = {report.flag: report.path for report in request.reports}
    for fmt in REPORT_FORMATS:
        if fmt.series is not None and (path := paths.get(f"--{fmt.name}")) is not None:
            _write(path, fmt.series(series), f"--{fmt.name}", request.inputs)
