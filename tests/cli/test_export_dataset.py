"""`rfteval export-dataset`: each target's file, every field exact through the reader that target's trainer uses,
the id added where a line has none (rfteval's content hash), and bad input as one line with exit 2."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from rfteval.cli.app import app
from rfteval.data.dataset import load_dataset
from rfteval.reward import META, decode_exported, for_openrlhf, for_trl, for_verifiers, for_verl
from rfteval.reward.export_dataset import _through_json, _through_parquet

runner = CliRunner()
# Lines Arrow changes: a date-like string (top level and nested), a key only some rows have, ints and floats in one
# column, structs with different keys, a line without id, and a number too big for a float.
LINES = [
    {"messages": [{"role": "developer", "content": "be brief"}, {"role": "user", "content": "when?"}],
     "reference_answer": {"date": "2025-03-14", "n": 1}, "today": "2025-03-14", "score": 1, "big": 2 ** 70},
    {"id": "b", "messages": [{"role": "user", "content": "what?"}], "reference_answer": {"text": "x"},
     "today": "2025-03-15 08:00:00", "score": 2.5, "extra": [1, {"k": None}]},
]
GRADER = {"type": "python", "name": "exact", "source": (
    "import json\n"
    "def grade(sample, item):\n"
    "    return float(sample['output_text'] == json.dumps(item, sort_keys=True))\n")}


def write_items(tmp_path: Path) -> Path:
    path = tmp_path / "items.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in LINES))
    return path


def invoke(*args: str) -> Any:
    return runner.invoke(app, ["export-dataset", *args])


@pytest.mark.parametrize("target", ["trl", *(pytest.param(t, marks=pytest.mark.slow) for t in ("verl", "verifiers",
                                                                                              "openrlhf"))])
def test_every_field_comes_back_exactly_through_the_trainers_reader(target, tmp_path):
    items = write_items(tmp_path)
    res = invoke(str(items), "--target", target, "--out", str(tmp_path / "out"))
    assert res.exit_code == 0, res.output
    path = tmp_path / "out" / ("train.parquet" if target == "verl" else "train.jsonl")
    assert res.output.startswith(f"wrote {path} (2 rows") and "id added" in res.output
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary file left
    if target == "verl":
        import pyarrow.parquet as pq

        rows = pq.read_table(path).to_pylist()
    else:
        rows = _through_json([json.loads(line) for line in path.read_text().splitlines()])
    assert rows is not None
    ids = [it.id for it in load_dataset(items)]  # the ids `rfteval grade` gives these lines
    want = [json.dumps(line, sort_keys=True) for line in LINES]
    # the reward on each row, called as the trainer calls it, sees exactly the line
    if target == "trl":
        with for_trl(GRADER) as reward:
            got = reward(prompts=[r["prompt"] for r in rows], completions=want,
                         **{k: [r[k] for r in rows] for k in rows[0] if k != "prompt"})
        assert rows[0]["id"] == ids[0] and META in rows[0]
    elif target == "verl":
        with for_verl(GRADER) as compute_score:
            got = [compute_score("d", w, r["reward_model"]["ground_truth"], r["extra_info"]) for r, w in zip(rows, want)]
        assert [r["extra_info"]["id"] for r in rows] == ids and rows[0]["data_source"] == f"rfteval/{tmp_path.name}"
    elif target == "verifiers":
        with for_verifiers(GRADER, asynchronous=False) as reward:
            got = [reward(completion=w, answer=r["answer"], info=r["info"], prompt=r["prompt"]) for r, w in zip(rows, want)]
    else:
        with for_openrlhf(GRADER) as reward:
            got = [float(v) for v in reward(["p" + w for w in want], ["p", "p"], [r["label"] for r in rows])["rewards"]]
        assert [r["id"] for r in rows] == ids
    assert got == [1.0, 1.0]
    assert rows[0]["prompt"][0] == {"role": "system", "content": "be brief"}  # the item keeps "developer"


@pytest.mark.parametrize("role", ["system", "keep"])
@pytest.mark.parametrize("target", ["trl", "verl", "verifiers", "openrlhf"])
def test_developer_role_in_the_prompt_and_the_item(target, role, tmp_path):
    """The prompt a trainer renders has `system` for OpenAI's `developer` (or keeps it); the line the reward rebuilds
    from the row is the original, its developer role included, either way."""
    from rfteval.reward.export_dataset import build_rows

    lines = [dict(line, id=str(i)) for i, line in enumerate(LINES)]
    rows, _, _ = build_rows(lines, ["0", "1"], target, data_source="d", developer_role=role)
    back = (_through_parquet if target == "verl" else _through_json)(rows)
    assert back is not None
    first = back[0]
    assert first["prompt"][0]["role"] == ("developer" if role == "keep" else "system")
    assert first["prompt"][1:] == LINES[0]["messages"][1:] and back[1]["prompt"] == LINES[1]["messages"]
    if target == "openrlhf":
        assert json.loads(first["label"])["rfteval_item"] == lines[0]
    else:
        fields = {"trl": first, "verl": first.get("extra_info"), "verifiers": first.get("info")}[target]
        assert isinstance(fields, dict)
        assert decode_exported(fields, first["prompt"]) == lines[0]
    with pytest.raises(ValueError, match="developer_role"):
        build_rows(lines, ["0", "1"], target, data_source="d", developer_role="user")


def test_the_loader_really_changes_these_lines():
    """Without the JSON-text columns, the readers would change the item (so the test above can fail)."""
    back = _through_json([{"today": line["today"]} for line in LINES])
    assert back is None or back[0]["today"] != "2025-03-14"
    assert _through_json([{"score": line["score"]} for line in LINES]) == [{"score": 1.0}, {"score": 2.5}]
    structs = _through_parquet([{"r": line["reference_answer"]} for line in LINES])
    assert structs is not None and structs[1]["r"] == {"date": None, "n": None, "text": "x"}


def test_items_option_finds_lines_by_the_added_content_hash_id(tmp_path):
    items = write_items(tmp_path)
    ids = [it.id for it in load_dataset(items)]
    want = json.dumps(LINES[0], sort_keys=True)
    with for_trl(GRADER, items=str(items)) as reward:
        assert reward(prompts=["p"], completions=[want], id=[ids[0]]) == [1.0]


@pytest.mark.parametrize("args, message", [
    (["{missing}", "--target", "trl", "--out", "{dir}/o"], "no such file"),
    (["{bad}", "--target", "trl", "--out", "{dir}/o"], "missing"),
    (["{items}", "--target", "trl", "--out", "{items}"], "not a directory"),
    (["{items}", "--target", "nemo", "--out", "{dir}/o"], "nemo"),
])
def test_bad_input_is_one_line_exit_2(tmp_path, args, message):
    items = write_items(tmp_path)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"reference_answer": 1}\n')
    args = [a.format(missing=tmp_path / "none.jsonl", bad=bad, items=items, dir=tmp_path) for a in args]
    res = invoke(*args)
    assert res.exit_code == 2, res.output
    assert message in res.output and "Traceback" not in res.output
    assert not (tmp_path / "o").exists()
