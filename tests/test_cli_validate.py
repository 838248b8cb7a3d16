"""`rfteval validate spec` end to end."""

from pathlib import Path

from typer.testing import CliRunner

from rfteval.cli import app

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
