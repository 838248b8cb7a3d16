"""rfteval.cli.app: what the command line itself refuses (an unknown option, a value of the wrong type, a missing
argument) is one line on stderr and exit 2, as the library's bad input is; a bare command still prints its help."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from rfteval.cli.app import app
from rfteval.status import ExitStatus


@pytest.mark.parametrize(("args", "expected"), [
    (["run", "--epochs", "x"],
     "rfteval run: Invalid value for '--epochs': Input should be a valid integer, unable to parse string as an "
     "integer (see 'rfteval run --help')"),
    (["compare", "--nope"], "rfteval compare: No such option: --nope"),
    (["runn"], "rfteval: No such command 'runn'. Did you mean 'run'? (see 'rfteval --help')"),
    (["validate", "dataset"], "rfteval validate dataset: Missing argument 'path'. (see 'rfteval validate dataset "
                              "--help')"),
])
def test_a_command_line_error_is_one_line_and_exit_2(args: list[str], expected: str) -> None:
    res = CliRunner().invoke(app, args, prog_name="rfteval")
    assert res.exit_code == ExitStatus.BAD_INPUT
    assert res.stdout == ""
    lines = res.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(expected), lines


def test_a_bare_command_still_prints_its_help() -> None:
    res = CliRunner().invoke(app, ["compare"], prog_name="rfteval")
    assert "Usage: rfteval compare" in res.output and "BASELINE" in res.output
