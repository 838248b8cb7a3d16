"""rfteval.data.starter: the starter `rfteval init` writes, whole or not at all, never over a file."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from rfteval.data import starter as starter_module
from rfteval.data.dataset import load_dataset
from rfteval.data.starter import starter_name, write_starter
from rfteval.errors import InputError

FILES = ["dataset.jsonl", "grader.json", "spec.toml", "ci-gate.yml", "README.md"]


def test_the_starter_names_its_files_and_its_spec_names_the_others(tmp_path: Path) -> None:
    done = write_starter(tmp_path / "evals" / "my-task")
    assert [p.name for p in done.files] == FILES and done.name == "my-task"
    spec = tomllib.loads((done.directory / "spec.toml").read_text())
    assert (spec["dataset"], spec["grader"], spec["out"]) == ("dataset.jsonl", "grader.json", "runs/my-task")
    assert spec["endpoint"]["api_key_env"] == "OPENAI_API_KEY" and "api_key" not in spec["endpoint"]
    assert set(spec["models"]) == {"base", "tuned"}
    items = load_dataset(done.directory / "dataset.jsonl")
    grader = json.loads((done.directory / "grader.json").read_text())
    assert len(items) >= 8 and all(isinstance(it.data["answer"], str) for it in items)
    assert grader["reference"] == "{{ item.answer }}"


@pytest.mark.parametrize("folder, name", [("my-task", "my-task"), ("two words", "starter"), ("évals", "starter")])
def test_the_run_is_named_after_a_plain_folder_name(tmp_path: Path, folder: str, name: str) -> None:
    assert starter_name(tmp_path / folder) == name


def test_an_existing_file_stops_it_before_anything_is_written(tmp_path: Path) -> None:
    (tmp_path / "grader.json").write_text("mine")
    with pytest.raises(InputError) as err:
        write_starter(tmp_path)
    assert err.value.file == tmp_path / "grader.json" and "overwrites nothing" in err.value.message
    assert sorted(p.name for p in tmp_path.iterdir()) == ["grader.json"]
    assert (tmp_path / "grader.json").read_text() == "mine"
    (tmp_path / "plain").write_text("")
    with pytest.raises(InputError, match="is a file"):
        write_starter(tmp_path / "plain")


def test_a_write_that_fails_halfway_leaves_no_starter(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = starter_module.write_text_atomic

    def failing(path: str | Path, text: str) -> Path:
        if Path(path).name == "spec.toml":
            raise OSError(28, "No space left on device")
        return real(path, text)

    monkeypatch.setattr(starter_module, "write_text_atomic", failing)
    with pytest.raises(InputError) as err:
        write_starter(tmp_path / "d")
    assert str(err.value) == f"{tmp_path / 'd'}: cannot write (No space left on device)"
    assert list((tmp_path / "d").iterdir()) == []
