"""The trainer registry (rfteval.reward.targets): a trainer registered from outside rfteval, as a new trainer's
module would register itself, is a --target of export-reward, export-dataset and export-environment, listed in
their --help, and each export writes through its entry; nothing else in rfteval names it."""

from __future__ import annotations

import importlib
import json
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rfteval.cli.app import app
from rfteval.data.json_types import JSONObject, JSONValue
from rfteval.graders.base import GraderConfig
from rfteval.reward import META
from rfteval.reward.targets import (
    TRAINERS,
    DatasetShape,
    EnvironmentPackage,
    ExportedEnvironment,
    ModuleRequest,
    ModuleText,
    RewardModule,
    RowParts,
    Trainer,
    register,
    targets,
)

runner = CliRunner()
GRADER = {"type": "string_check", "name": "exact", "input": "{{sample.output_text}}",
          "reference": "{{item.reference_answer}}", "operation": "eq"}
LINES = [{"id": "a", "messages": [{"role": "user", "content": "2+2?"}], "reference_answer": "4"},
         {"id": "b", "messages": [{"role": "user", "content": "3+3?"}], "reference_answer": "6", "topic": "sums"}]

TOY_TAIL = '''

def toy_reward(completions: Any = None, **columns: Any) -> list[Any]:
    """The toy trainer's contract: TRL's, under another name."""
    return _get()(completions=completions, **columns)
'''


def _module_text(request: ModuleRequest) -> ModuleText:
    return ModuleText(f"Toy reward for grader {request.grader!r}.", f"    from {request.stem} import toy_reward",
                      TOY_TAIL)


def _row(parts: RowParts) -> JSONObject:
    return {"question": parts.prompt, "answer": parts.reference, **parts.fields, META: parts.meta}


def _write(config: GraderConfig, items: Path, out: Path, *, grader_source: str, name: str | None,
           reference_field: str, options: Mapping[str, JSONValue]) -> ExportedEnvironment:
    out.mkdir(parents=True)
    (out / "grader.json").write_text(json.dumps(config.model_dump(mode="json", exclude_unset=True)))
    (out / "items.jsonl").write_bytes(items.read_bytes())
    return ExportedEnvironment(out, name or "toy-env", "toy_env", len(items.read_text().splitlines()))


@pytest.fixture
def toy() -> Iterator[Trainer]:
    trainer = register(Trainer(
        "toy",
        reward=RewardModule("toy (toy_reward)", "for_trl", _module_text, keys=("reference_field",)),
        dataset=DatasetShape("toy", row=_row),
        environment=EnvironmentPackage("toy: a folder", _write)))
    try:
        yield trainer
    finally:
        del TRAINERS["toy"]


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    grader = tmp_path / "exact.json"
    grader.write_text(json.dumps(GRADER))
    items = tmp_path / "items.jsonl"
    items.write_text("".join(json.dumps(line) + "\n" for line in LINES))
    return grader, items


@pytest.mark.parametrize("command, listed", [
    ("export-reward", "--target trl|verl|openrlhf|toy"),
    ("export-dataset", "--target trl|verl|verifiers|openrlhf|toy"),
    ("export-environment", "--target prime-rl|toy"),
])
def test_a_registered_trainer_is_a_target_of_each_export(toy, command, listed):
    res = runner.invoke(app, [command, "--help"])
    assert res.exit_code == 0, res.output
    assert listed in res.output
    assert "toy" in res.output.split(listed, 1)[1].split("--", 1)[0]  # its summary in the option's help
    bad = runner.invoke(app, [command, "x", "--target", "nope", "--out", "y"])
    assert bad.exit_code == 2
    assert "'nope' is not one of" in bad.output and "'toy'" in bad.output


def test_without_it_the_targets_are_the_built_in_ones():
    assert targets("reward") == ["trl", "verl", "openrlhf"]
    assert targets("dataset") == ["trl", "verl", "verifiers", "openrlhf"]
    assert targets("environment") == ["prime-rl"]
    res = runner.invoke(app, ["export-reward", "x", "--target", "toy", "--out", "y.py"])
    assert res.exit_code == 2 and "'toy' is not one of 'trl', 'verl', 'openrlhf'." in res.output


def test_export_reward_writes_its_module_through_the_registry(toy, files, tmp_path, monkeypatch):
    grader, _ = files
    out = tmp_path / "toy_module.py"
    res = runner.invoke(app, ["export-reward", str(grader), "--target", "toy", "--out", str(out)])
    assert res.exit_code == 0, res.output
    text = out.read_text()
    assert text.startswith(f'"""Toy reward for grader \'exact\'.\n\nWritten by `rfteval export-reward` from {grader}')
    assert "from rfteval.reward import for_trl" in text and text.endswith(TOY_TAIL)
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("toy_module")
    try:
        scores = module.toy_reward(completions=[[{"role": "assistant", "content": "4"}],
                                                [{"role": "assistant", "content": "5"}]],
                                   reference_answer=["4", "4"])
        assert scores == [1.0, 0.0]
    finally:
        module.close()
    # a flag only some trainers take names them all, the registered one too
    res = runner.invoke(app, ["export-reward", str(grader), "--target", "trl", "--reference-field", "ans",
                              "--out", str(tmp_path / "other.py")])
    assert res.exit_code == 2 and "--reference-field is for --target verl or openrlhf or toy" in res.output


def test_export_dataset_writes_its_rows_through_the_registry(toy, files, tmp_path):
    _, items = files
    res = runner.invoke(app, ["export-dataset", str(items), "--target", "toy", "--out", str(tmp_path / "out")])
    assert res.exit_code == 0, res.output
    rows = [json.loads(line) for line in (tmp_path / "out" / "train.jsonl").read_text().splitlines()]
    assert [list(r) for r in rows] == [["question", "answer", "id", "messages", "reference_answer", "topic", META]] * 2
    assert [r["answer"] for r in rows] == ["4", "6"]
    # a key one line lacks would come back padded with null: JSON text, and META names the line's own keys
    assert rows[1]["topic"] == '"sums"' and rows[0]["topic"] is None
    assert json.loads(rows[0][META]) == {"fields": ["id", "messages", "reference_answer"], "json": []}
    assert json.loads(rows[1][META])["json"] == ["topic"]


def test_export_environment_writes_its_package_through_the_registry(toy, files, tmp_path):
    grader, items = files
    res = runner.invoke(app, ["export-environment", str(grader), "-d", str(items), "--target", "toy",
                              "--out", str(tmp_path / "env")])
    assert res.exit_code == 0, res.output
    assert "taskset 'toy-env', module toy_env, 2 tasks" in res.output
    assert (tmp_path / "env" / "items.jsonl").read_bytes() == items.read_bytes()
