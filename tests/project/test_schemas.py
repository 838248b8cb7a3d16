"""docs/schemas/: the JSON Schemas of the dataset line, the grader file and the spec, generated from the types that
read them (scripts/make_schemas.py), hold the bundled files, and take and refuse what rfteval takes and refuses."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import tomllib
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from rfteval.errors import InputError
from rfteval.graders.loader import load_grader
from rfteval.run.spec import build_spec
from tests.support import REPO

SCHEMAS = REPO / "docs" / "schemas"
SCRIPT = REPO / "scripts" / "make_schemas.py"


@cache
def validator(name: str) -> Draft202012Validator:
    schema = json.loads((SCHEMAS / f"{name}.schema.json").read_text(encoding="utf-8"))
    Draft202012Validator.check_schema(schema)  # a schema an editor can load
    return Draft202012Validator(schema)


def run_script(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True, cwd=REPO,
                          timeout=120)


@pytest.mark.slow
def test_the_committed_schemas_are_what_the_script_generates() -> None:
    spec = importlib.util.spec_from_file_location("make_schemas", SCRIPT)
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    generated = script.files(SCHEMAS)
    assert sorted(generated) == sorted(SCHEMAS.glob("*.schema.json"))
    for path, text in generated.items():
        assert path.read_text(encoding="utf-8") == text, f"{path} is stale: run scripts/make_schemas.py"


@pytest.mark.slow
def test_the_script_names_a_stale_schema_and_rewrites_it(tmp_path: Path) -> None:
    assert run_script("--out", tmp_path).returncode == 0
    written = sorted(p.name for p in tmp_path.iterdir())
    assert written == ["dataset-line.schema.json", "grader.schema.json", "spec.schema.json"]
    assert all((tmp_path / n).read_text() == (SCHEMAS / n).read_text() for n in written)
    (tmp_path / "grader.schema.json").write_text("{}\n")
    stale = run_script("--check", "--out", tmp_path)
    assert stale.returncode == 1 and "grader.schema.json" in stale.stderr and "spec.schema" not in stale.stderr
    assert run_script("--out", tmp_path).returncode == 0 and run_script("--check", "--out", tmp_path).returncode == 0


@pytest.mark.slow
def test_the_bundled_graders_and_dataset_lines_hold_to_their_schemas() -> None:
    grader, line = validator("grader"), validator("dataset-line")
    graders = sorted((REPO / "graders").glob("*.json")) + sorted((REPO / "datasets").glob("*/grader.json"))
    datasets = sorted(p for name in ("items", "train", "heldout") for p in (REPO / "datasets").glob(f"*/{name}.jsonl"))
    assert len(graders) >= 9 and len(datasets) >= 9
    for path in graders:
        assert [e.message for e in grader.iter_errors(json.loads(path.read_text(encoding="utf-8")))] == [], path
    for path in datasets:
        for n, text in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if text.strip():
                assert [e.message for e in line.iter_errors(json.loads(text))] == [], f"{path}:{n}"


def readme_spec() -> dict[str, Any]:
    """The spec docs/running.md shows (its section on the spec), every key of it."""
    text = (REPO / "docs" / "running.md").read_text(encoding="utf-8")
    return tomllib.loads(text.split("**The spec** (TOML", 1)[1].split("```toml\n", 1)[1].split("```", 1)[0])


@pytest.mark.slow
def test_the_readme_spec_holds_to_the_spec_schema() -> None:
    spec = readme_spec()
    assert {"dataset", "grader", "endpoint", "sampling", "models", "judge", "pricing"} <= set(spec)
    assert list(validator("spec").iter_errors(spec)) == []


SC = {"type": "string_check", "input": "{{ sample.output_text }}", "reference": "{{ item.answer }}", "operation": "eq"}
LABEL = {"type": "label_model", "name": "l", "model": "m", "input": [{"role": "user", "content": "x"}],
         "labels": ["a", "b"], "passing_labels": ["a"]}


@pytest.mark.parametrize("config", [
    SC,  # no name: rfteval names it after its type
    {**SC, "name": "exact", "pass_threshold": 1},
    {"type": "multi", "calculate_output": "a", "graders": {"a": SC}},
    {"type": "multi", "name": "m", "calculate_output": "exact", "graders": {**SC, "name": "exact"}},  # one grader object
    {"grader": SC},
    {"method": {"type": "reinforcement", "reinforcement": {"grader": SC}}},
    LABEL,
    # refused by both:
    {**SC, "refrence": "x"},
    {**SC, "operation": "equals"},
    {"type": "strng_check", "input": "x", "reference": "y", "operation": "eq"},
    {"type": "multi", "calculate_output": "a", "graders": {"a": {"type": "multi", "calculate_output": "b",
                                                                  "graders": {"b": SC}}}},
    {"type": "multi", "calculate_output": "a", "graders": {}},
    {"type": "multi", "calculate_output": "a", "graders": {"bad-key": SC}},
    {"method": {"type": "reinforcement", "reinforcement": {"grader": LABEL}}},
    {"type": "score_model", "name": "j", "model": "m", "input": [{"role": "user", "contnet": "x"}]},
])
def test_the_grader_schema_takes_what_the_loader_takes(tmp_path: Path, config: dict[str, Any]) -> None:
    path = tmp_path / "g.json"
    path.write_text(json.dumps(config))
    try:
        load_grader(path)
        loads = True
    except InputError:
        loads = False
    assert validator("grader").is_valid(config) == loads


@pytest.mark.parametrize("extra, valid", [
    ("", True),
    ("epochs = 0", False),
    ("epoch = 3", False),
    ('api_key = "sk-x"', False),
    ('[endpoint]\napi_key_env = "MY_KEY"\napi = "responses"', True),
    ('[endpoint]\napi = "completions"', False),
    ('[sampling]\nreasoning_effort = "hgih"', False),
    ('[sampling]\nreasoning_effort = "high"\ntemperature = 0.7', True),
    ('[judge]\nconcurrency = 0', False),
    ('[pricing."m"]\ninput = 1.0', False),
])
def test_the_spec_schema_takes_what_the_spec_reader_takes(tmp_path: Path, extra: str, valid: bool) -> None:
    path = tmp_path / "spec.toml"
    path.write_text(f'dataset = "d.jsonl"\ngrader = "g.json"\n{extra}\n[models.base]\nmodel = "m"\n')
    try:
        build_spec(path)
        reads = True
    except InputError:
        reads = False
    assert reads == valid
    assert validator("spec").is_valid(tomllib.loads(path.read_text())) == valid
