"""Each command reads its grader file once (graders/loader.py's GraderFile): the config, a fine-tuning job's
hyperparameters and response_format, and whether samples get an output_json all come from that one read, handed
down from the command's edge. Reading it again was four to six reads per `rfteval run`, and a file edited between
two of them could grade with one grader and lint, fill the sampling or assess readiness with another."""

from __future__ import annotations

import builtins
import io
import json
import pathlib
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rfteval.cli.app import app
from tests.support.cli_run_files import write_run_files

runner = CliRunner()
N_ITEMS, EPOCHS = 3, 2


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> Callable[[Path], int]:
    return _counting(monkeypatch)


def _counting(monkeypatch: pytest.MonkeyPatch) -> Callable[[Path], int]:
    """How many times a file was opened (Path.open: read_text and read_bytes too; open(); io.open) since the fixture
    started: `counted(path)`."""
    opened: list[Path] = []
    real_path_open, real_open, real_io_open = pathlib.Path.open, builtins.open, io.open

    def note(file: object) -> None:
        if isinstance(file, (str, Path)):
            try:
                opened.append(Path(file).resolve())
            except OSError:
                pass

    def path_open(self: Path, *args: object, **kwargs: object) -> object:
        note(self)
        return real_path_open(self, *args, **kwargs)  # type: ignore[call-overload]

    def plain_open(file: object, *args: object, **kwargs: object) -> object:
        note(file)
        return real_open(file, *args, **kwargs)  # type: ignore[call-overload]

    def plain_io_open(file: object, *args: object, **kwargs: object) -> object:
        if not isinstance(file, Path):  # Path.open calls io.open: counted there already
            note(file)
        return real_io_open(file, *args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(pathlib.Path, "open", path_open)
    monkeypatch.setattr(builtins, "open", plain_open)
    monkeypatch.setattr(io, "open", plain_io_open)
    return lambda path: opened.count(path.resolve())


def _job(grader: Path) -> Path:
    """The grader file as a fine-tuning job: its hyperparameters and response_format are read from it too."""
    job = grader.with_name("job.json")
    job.write_text(json.dumps({"model": "o4-mini", "method": {"type": "reinforcement", "reinforcement": {
        "grader": json.loads(grader.read_text()), "hyperparameters": {"reasoning_effort": "low", "n_epochs": 2},
        "response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": {
            "type": "object", "properties": {"answer": {"type": "string"}}}}}}}}))
    return job


def _replays(tmp_path: Path) -> list[str]:
    rec = tmp_path / "rec"
    rec.mkdir()
    flags = []
    for label, text in (("base", "no"), ("tuned", "fake-tuned")):
        (rec / f"{label}.jsonl").write_text("".join(
            json.dumps({"item_id": f"q{i}", "epoch": e, "output_text": text}) + "\n"
            for i in range(N_ITEMS) for e in range(1, EPOCHS + 1)))
        flags += ["--model", f"{label}=replay:{rec / label}.jsonl"]
    return flags


@pytest.fixture(params=["grader", "job"])
def files(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, Path]:
    made = write_run_files(tmp_path, N_ITEMS)
    if request.param == "job":
        made["grader"] = _job(made["grader"])
    return made


@pytest.mark.slow
def test_run_reads_its_grader_file_once(files: dict[str, Path], tmp_path: Path,
                                        counted: Callable[[Path], int]) -> None:
    res = runner.invoke(app, ["run", "--dataset", str(files["dataset"]), "--grader", str(files["grader"]),
                              *_replays(tmp_path), "--epochs", str(EPOCHS), "--out", str(files["out"]), "-q"])
    assert res.exit_code == 0, res.output
    assert (files["out"] / "summary.json").is_file()
    assert counted(files["grader"]) == 1


def test_validate_spec_and_dry_run_read_the_grader_file_once(files: dict[str, Path], tmp_path: Path,
                                                             counted: Callable[[Path], int]) -> None:
    res = runner.invoke(app, ["run", "--dataset", str(files["dataset"]), "--grader", str(files["grader"]),
                              *_replays(tmp_path), "--epochs", str(EPOCHS), "--out", str(files["out"]), "-q",
                              "--dry-run"])
    assert res.exit_code == 0, res.output
    assert counted(files["grader"]) == 1


COMMANDS = {  # each command that loads a grader, as a user would call it on the files below
    "grade": ["grade", "--dataset", "{dataset}", "--grader", "{grader}", "--outputs", "{outputs}", "--out",
              "{tmp}/again.jsonl"],
    "readiness": ["readiness", "{records}", "--grader", "{grader}", "--dataset", "{dataset}", "--regrade", "2"],
    "agree": ["agree", "{records}", "--regrade", "{grader}", "--dataset", "{dataset}", "--out", "{tmp}/b.jsonl"],
    "probe-grader": ["probe-grader", "{grader}", "--dataset", "{dataset}"],
    "validate grader": ["validate", "grader", "{grader}", "--dataset", "{dataset}"],
    "validate dataset": ["validate", "dataset", "{dataset}", "--grader", "{grader}"],
    "export-reward": ["export-reward", "{grader}", "--target", "trl", "--out", "{tmp}/reward.py"],
}


@pytest.mark.slow
@pytest.mark.parametrize("command", list(COMMANDS))
def test_each_grading_command_reads_the_grader_file_once(command: str, files: dict[str, Path], tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    outputs, records = tmp_path / "outputs.jsonl", tmp_path / "graded.jsonl"
    outputs.write_text("".join(json.dumps({"item_id": f"q{i}", "epoch": e, "output_text": "fake-tuned" if i else "x"})
                               + "\n" for i in range(N_ITEMS) for e in (1, 2)))
    made = runner.invoke(app, ["grade", "--dataset", str(files["dataset"]), "--grader", str(files["grader"]),
                               "--outputs", str(outputs), "--out", str(records)])
    assert made.exit_code == 0, made.output
    names = {"dataset": files["dataset"], "grader": files["grader"], "outputs": outputs, "records": records,
             "tmp": tmp_path}
    args = [a.format(**names) for a in COMMANDS[command]]
    counted = _counting(monkeypatch)
    res = runner.invoke(app, args)
    assert res.exit_code in (0, 1), res.output
    assert counted(files["grader"]) == 1
