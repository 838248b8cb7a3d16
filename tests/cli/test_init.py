"""`rfteval init DIR` end to end: the starter passes `rfteval validate`, runs against a server, and its CI gate gates."""

from __future__ import annotations

import json
import shlex
import tomllib
from pathlib import Path

import pytest
import yaml
from jsonschema import Draft202012Validator
from typer.testing import CliRunner

from rfteval.cli.app import app
from tests.support import REPO
from tests.support.fake_openai import FakeOpenAI, Reply, Request

runner = CliRunner()
FILES = ["README.md", "ci-gate.yml", "dataset.jsonl", "grader.json", "spec.toml"]


def init(directory: Path) -> None:
    res = runner.invoke(app, ["init", str(directory)])
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in directory.iterdir()) == FILES


@pytest.mark.slow
def test_the_starter_passes_validate(tmp_path: Path) -> None:
    d = tmp_path / "evals"
    init(d)
    for args in (["dataset", str(d / "dataset.jsonl"), "--grader", str(d / "grader.json")],
                 ["grader", str(d / "grader.json"), "--dataset", str(d / "dataset.jsonl")],
                 ["spec", str(d / "spec.toml")]):
        res = runner.invoke(app, ["validate", *args])
        assert res.exit_code == 0, res.output
        assert "warning" not in res.output and "note:" not in res.output, res.output
    # every reference answer, graded as the output, scores the maximum: the grader reads the field the items hold
    assert "8/8 = 100.0%" in runner.invoke(app, ["validate", "grader", str(d / "grader.json"), "--dataset",
                                                 str(d / "dataset.jsonl")]).output


@pytest.mark.slow
def test_the_starter_holds_to_the_published_schemas(tmp_path: Path) -> None:
    init(tmp_path / "evals")
    schema = {name: Draft202012Validator(json.loads((REPO / "docs" / "schemas" / f"{name}.schema.json").read_text()))
              for name in ("dataset-line", "grader", "spec")}
    d = tmp_path / "evals"
    assert schema["grader"].is_valid(json.loads((d / "grader.json").read_text()))
    assert schema["spec"].is_valid(tomllib.loads((d / "spec.toml").read_text()))
    assert all(schema["dataset-line"].is_valid(json.loads(line)) for line in (d / "dataset.jsonl").open())


def test_init_overwrites_nothing(tmp_path: Path) -> None:
    d = tmp_path / "evals"
    d.mkdir()
    (d / "spec.toml").write_text("# mine\n")
    res = runner.invoke(app, ["init", str(d)])
    assert res.exit_code == 2
    assert res.stderr.splitlines() == [f"rfteval: {d / 'spec.toml'}: already exists: rfteval init overwrites nothing "
                                       "(give a new folder, or move it away)"]
    assert sorted(p.name for p in d.iterdir()) == ["spec.toml"] and (d / "spec.toml").read_text() == "# mine\n"


def answering(right: set[str], answers: dict[str, str]):
    """A server where the models in `right` answer every question correctly and the others do not."""
    def respond(req: Request) -> Reply:
        answer = answers[req.last_user_text()]
        return Reply(text=f"The answer is {answer}." if req.model in right else "I am not sure.")

    return respond


def gate_commands(directory: Path, base_url: str) -> list[list[str]]:
    """The rfteval commands of the starter's workflow, in order, with the server's address for the variable."""
    steps = yaml.safe_load((directory / "ci-gate.yml").read_text())["jobs"]["eval"]["steps"]
    runs = [s["run"] for s in steps if str(s.get("run", "")).startswith("rfteval ")]
    return [shlex.split(r.replace("${{ vars.RFTEVAL_BASE_URL }}", base_url))[1:] for r in runs]


@pytest.mark.slow
@pytest.mark.parametrize("right, gate_exit", [({"tuned-model"}, 0), ({"base-model"}, 1)])
def test_the_starter_runs_and_its_ci_gate_gates(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                fake_openai: FakeOpenAI, right: set[str], gate_exit: int) -> None:
    monkeypatch.chdir(tmp_path)
    d = Path("evals")  # as a user types it, from the repository's root, where the workflow runs
    init(d)
    answers = {json.loads(line)["messages"][-1]["content"]: json.loads(line)["answer"]
               for line in (d / "dataset.jsonl").open()}
    fake_openai.responder = answering(right, answers)
    commands = gate_commands(d, fake_openai.base_url)
    assert [c[:2] for c in commands] == [["validate", "spec"], ["run", "evals/spec.toml"], ["compare", "evals/runs/evals"]]
    *setup, gate = commands
    for args in setup:
        res = runner.invoke(app, args, env={"OPENAI_API_KEY": ""})
        assert res.exit_code == 0, res.output
    records = [json.loads(x) for x in (d / "runs" / "evals" / "tuned.jsonl").read_text().splitlines()]
    assert len(records) == 8 * 3 and {r["score"] for r in records} == ({1.0} if "tuned-model" in right else {0.0})
    res = runner.invoke(app, gate)
    assert res.exit_code == gate_exit, res.output
    assert Path("compare.md").is_file()
    assert {r.model for r in fake_openai.requests if r.api == "chat"} == {"base-model", "tuned-model"}


def test_the_workflow_installs_rfteval_from_where_the_user_says(tmp_path: Path) -> None:
    """rfteval is not on PyPI: a bare `pip install rfteval` would install nothing of ours (or someone else's)."""
    init(tmp_path / "evals")
    steps = yaml.safe_load((tmp_path / "evals" / "ci-gate.yml").read_text())["jobs"]["eval"]["steps"]
    installs = [s["run"] for s in steps if str(s.get("run", "")).startswith("pip install")]
    assert installs == ['pip install "${{ vars.RFTEVAL_PIP_SPEC }}"']
    assert "RFTEVAL_PIP_SPEC" in (tmp_path / "evals" / "README.md").read_text()
