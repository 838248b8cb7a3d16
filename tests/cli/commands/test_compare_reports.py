"""cli/commands/compare_reports.py: the one table of compare's report files is the command's report options (in
its order, with their help), the request's path checks and refusals, and what gets written."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
import typer

from rfteval.cli.app import app
from rfteval.cli.commands.compare_cmd import compare
from rfteval.cli.commands.compare_reports import REPORT_FORMATS, report_files


def test_each_format_is_a_compare_option_after_format():
    names = list(inspect.signature(compare).parameters)
    at = names.index("fmt") + 1
    assert names[at:at + len(REPORT_FORMATS)] == [fmt.name for fmt in REPORT_FORMATS]
    command = typer.main.get_command(app).commands["compare"]
    options = {p.opts[0]: p for p in command.params}
    for fmt in REPORT_FORMATS:
        option = options[f"--{fmt.name}"]
        assert option.help == fmt.help and option.metavar == "FILE" and option.default is None


def test_report_files_follow_the_table_and_carry_the_series_refusal(tmp_path: Path):
    files = report_files({"html": tmp_path / "c.html", "markdown": tmp_path / "c.md", "junit": None})
    assert [(f.flag, f.path.name) for f in files] == [("--markdown", "c.md"), ("--html", "c.html")]
    assert all(not f.no_series for f in files)
    (junit,) = report_files({"junit": tmp_path / "c.xml"})
    assert junit.no_series.startswith("JUnit is per item")


@pytest.mark.parametrize("fmt", REPORT_FORMATS, ids=lambda f: f.name)
def test_a_format_without_a_series_writer_says_why(fmt):
    assert (fmt.series is None) == bool(fmt.no_series)
