"""Each exit code, through the real CLI."""

import json

from typer.testing import CliRunner

from rfteval.cli.app import app
from rfteval.status import ExitStatus

runner = CliRunner()


def test_codes_are_stable():
    assert [int(s) for s in ExitStatus] == [0, 1, 2, 3, 130]


def test_success_and_bad_input(tmp_path):
    good = tmp_path / "d.jsonl"
    good.write_text(json.dumps({"messages": [{"role": "user", "content": "x"}]}) + "\n")
    assert runner.invoke(app, ["validate", "dataset", str(good)]).exit_code == ExitStatus.SUCCESS
    bad = tmp_path / "b.jsonl"
    bad.write_text("{oops\n")
    res = runner.invoke(app, ["validate", "dataset", str(bad)])
    assert res.exit_code == ExitStatus.BAD_INPUT


def test_usage_error_is_bad_input():
    assert runner.invoke(app, ["grade", "--nope"]).exit_code == ExitStatus.BAD_INPUT
