"""`rfteval validate spec` end to end."""

from pathlib import Path

import pytest
from typer.testing import CliRunner

from rfteval.cli.app import app

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()


def spec(tmp_path: Path, extra: str = "") -> Path:
    p = tmp_path / "eval.toml"
    p.write_text(f'''dataset = "{ROOT}/datasets/chipstack/items.jsonl"
grader = "{ROOT}/graders/chipstack.json"
epochs = 2
{extra}
[models.base]
model = "replay:{ROOT}/datasets/chipstack/recordings/base.jsonl"
[models.tuned]
model = "o4-mini"
base_url = "http://127.0.0.1:9/v1"
''')
    return p


def test_valid_spec_is_described(tmp_path):
    res = runner.invoke(app, ["validate", "spec", str(spec(tmp_path))])
    assert res.exit_code == 0, res.output
    assert "24 items x 2 epochs" in res.output
    assert "tuned: o4-mini via openai http://127.0.0.1:9/v1" in res.output


def test_bad_key_names_file_line_and_key(tmp_path):
    p = spec(tmp_path, "concurrency = 0")
    res = runner.invoke(app, ["validate", "spec", str(p)])
    assert res.exit_code == 2
    assert f"{p}:4: concurrency: " in res.output and "Traceback" not in res.output


def test_missing_dataset(tmp_path):
    p = spec(tmp_path)
    p.write_text(p.read_text().replace("chipstack/items.jsonl", "nope/items.jsonl"))
    res = runner.invoke(app, ["validate", "spec", str(p)])
    assert res.exit_code == 2 and "no such file" in res.output


def _judge_files(tmp_path: Path) -> tuple[Path, Path, Path]:
    import json

    grader = tmp_path / "judge.json"
    grader.write_text(json.dumps({"type": "score_model", "name": "j", "model": "judge-1", "range": [0, 1],
                                  "input": [{"role": "user", "content": "{{ item.id }}: {{ sample.output_text }}"}]}))
    dataset = tmp_path / "items.jsonl"
    dataset.write_text("".join(json.dumps({"id": f"q{i}", "messages": [{"role": "user", "content": "x"}]}) + "\n"
                               for i in range(4)))
    outputs = tmp_path / "outputs.jsonl"
    outputs.write_text("".join(json.dumps({"item_id": f"q{i}", "output_text": f"answer {i}"}) + "\n"
                               for i in range(4)))
    return grader, dataset, outputs


@pytest.mark.slow
def test_validate_grader_repeat_flags_a_random_judge(tmp_path, fake_openai, monkeypatch):
    """Through the CLI and the real openai client: a judge answering at random is flagged (exit 1), a
    consistent one is not (exit 0); every repeat is a real call."""
    import json
    import random

    grader, dataset, outputs = _judge_files(tmp_path)
    monkeypatch.setenv("JUDGE_KEY", "sk-test")
    args = ["validate", "grader", str(grader), "--dataset", str(dataset), "--outputs", str(outputs), "--repeat", "3",
            "--judge-base-url", fake_openai.base_url, "--judge-api-key-env", "JUDGE_KEY"]
    fake_openai.responder = lambda req: json.dumps({"steps": [], "result": 0.8})
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    assert len(fake_openai.requests) == 4 * 3
    rng = random.Random(7)
    fake_openai.responder = lambda req: json.dumps({"steps": [], "result": rng.random()})
    res = runner.invoke(app, args)
    assert res.exit_code == 1, res.output
    assert "flag" in res.output.lower()


def test_validate_grader_repeat_needs_outputs(tmp_path):
    grader, dataset, _ = _judge_files(tmp_path)
    res = runner.invoke(app, ["validate", "grader", str(grader), "--dataset", str(dataset), "--repeat", "3"])
    assert res.exit_code == 2 and "--repeat" in res.output


def test_validate_grader_dataset_names_every_failing_item(tmp_path):
    import json

    from typer.testing import CliRunner

    from rfteval.cli.app import app

    ds = tmp_path / "items.jsonl"
    rows = [{"id": "a", "answer": "1"}, {"id": "b", "reference_answer": "2"}, {"id": "c"}]
    ds.write_text("\n".join(json.dumps({"messages": [{"role": "user", "content": "q"}], **r}) for r in rows) + "\n")
    grader = tmp_path / "g.json"
    grader.write_text(json.dumps({"type": "string_check", "input": "{{ sample.output_text }}",
                                  "reference": "{{ item.answer }}", "operation": "eq"}))
    res = CliRunner().invoke(app, ["validate", "grader", str(grader), "--dataset", str(ds)])
    assert res.exit_code == 2
    assert "note: no name given" in res.stdout
    assert res.stderr.splitlines() == [
        f"rfteval: {ds}:2: item b: {{{{ item.answer }}}} (grader reference): no key 'answer'",
        f"rfteval: {ds}:3: item c: {{{{ item.answer }}}} (grader reference): no key 'answer'"]


def test_a_python_grader_as_a_py_file_and_its_json_form(tmp_path):
    import json

    from typer.testing import CliRunner

    from rfteval.cli.app import app
    from rfteval.graders.loader import load_grader

    source = 'def grade(sample, item) -> float:\n    return 1.0 if "\\\\" not in sample["output_text"] else 0.0\n'
    py = tmp_path / "my_grader.py"
    py.write_text(source)
    config = load_grader(py)
    assert (config.type, config.name, config.source) == ("python", "my_grader", source)
    res = CliRunner().invoke(app, ["validate", "grader", str(py), "--emit-json"])
    assert res.exit_code == 0
    assert json.loads(res.stdout) == {"type": "python", "name": "my_grader", "source": source}
    bad = tmp_path / "bad.py"
    bad.write_text("def score(sample, item):\n    return 1\n")
    res = CliRunner().invoke(app, ["validate", "grader", str(bad)])
    assert res.exit_code == 2 and "grade" in res.stderr


SCHEMA = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}


@pytest.mark.parametrize("given, label", [
    (SCHEMA, " (structured outputs)"),  # a bare schema: the json_schema request
    ({"type": "json_schema", "json_schema": {"name": "a", "schema": SCHEMA}}, " (structured outputs)"),
    ({"type": "json_object"}, " (JSON mode)"),
    ({"type": "json_object", "schema": SCHEMA}, " (JSON mode)"),  # llama.cpp's JSON mode with a schema
    ({"type": "text"}, ""),
])
def test_the_response_format_is_named_by_what_it_asks_the_server(tmp_path: Path, given: dict, label: str) -> None:
    import json

    (tmp_path / "format.json").write_text(json.dumps(given))
    res = runner.invoke(app, ["validate", "spec", str(spec(tmp_path, f'[sampling]\nresponse_format = "{tmp_path}/format.json"'))])
    assert res.exit_code == 0, res.output
    line = next(x for x in res.output.splitlines() if x.startswith("  tuned: "))
    assert line == f"  tuned: o4-mini via openai http://127.0.0.1:9/v1{label}"
