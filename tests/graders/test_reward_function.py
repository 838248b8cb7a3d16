"""`--grader FILE.py:FUNCTION`: a TRL-style reward function as a grader (type reward_function), in the sandbox."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from rfteval.cli.app import app
from rfteval.data.records import read_records
from rfteval.data.sample import make_sample
from rfteval.errors import InputError
from rfteval.graders import GradingEngine, load_grader
from rfteval.graders.loader import load_response_format

runner = CliRunner()

REWARDS = '''\
import json
import math


def grade(x):  # the file's own helper named like a python grader's entry point: the wrapper keeps them apart
    return x


def exact(prompts, completions, reference_answer, **kwargs):
    """Standard TRL shape: one reward per completion, reading a column."""
    out = []
    for completion, ref in zip(completions, reference_answer):
        text = completion[-1]["content"] if isinstance(completion, list) else completion
        out.append(grade(1.0 if text.strip() == str(ref) else 0.0))
    return out


def group_size(completions, **kwargs):
    """Sees the item's whole group: every completion scores the group's size / 10."""
    return [len(completions) / 10] * len(completions)


def shape(prompts, completions, completion_ids, trainer_state, **columns):
    """What TRL would pass: conversational prompts and completions, columns as one value per completion."""
    n = len(completions)
    assert completion_ids is None and trainer_state is None
    assert all(isinstance(p, list) and p[0]["role"] == "user" for p in prompts) and len(prompts) == n
    assert all(isinstance(c, list) and c[0]["role"] == "assistant" for c in completions)
    assert callable(columns.pop("log_extra")) and callable(columns.pop("log_metric"))  # as newer TRL passes
    assert "messages" not in columns and "id" in columns and all(len(v) == n for v in columns.values())
    calls = completions[0][0].get("tool_calls") or []
    args = calls[0]["function"]["arguments"] if calls else {}
    return [float(args.get("city") == "Paris") + columns["weight"][0] for _ in completions]


def flags(completions, **kwargs):
    return [c[0]["content"] == "yes" for c in completions]


def broken(completions, **kwargs):
    raise RuntimeError("reward exploded")


def too_few(completions, **kwargs):
    return [1.0]


def maybe(completions, **kwargs):
    return [None if c[0]["content"] == "skip" else 0.5 for c in completions]


async def later(completions, **kwargs):
    return [0.25 for _ in completions]


def no_kwargs(prompts, completions):
    return [1.0] * len(completions)
'''


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    rewards = tmp_path / "rewards.py"
    rewards.write_text(REWARDS)
    ds = tmp_path / "items.jsonl"
    ds.write_text("".join(json.dumps({"id": f"q{i}", "messages": [{"role": "user", "content": f"say {i}"}],
                                      "reference_answer": str(i), "weight": i / 100}) + "\n" for i in range(3)))
    outs = tmp_path / "outputs.jsonl"
    lines = [{"item_id": f"q{i}", "epoch": e, "output_text": str(i) if e != 2 else "wrong"}
             for i in range(3) for e in (1, 2, 3)]
    outs.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return {"rewards": rewards, "dataset": ds, "outputs": outs, "dir": tmp_path}


def grade(files: dict[str, Path], function: str, *extra: str) -> Any:
    out = files["dir"] / f"{function}.records.jsonl"
    res = runner.invoke(app, ["grade", "-d", str(files["dataset"]), "-g", f"{files['rewards']}:{function}",
                              "--outputs", str(files["outputs"]), "--out", str(out), *extra])
    assert res.exit_code == 0, res.output
    return read_records(out)


def test_grade_with_a_reward_function(files):
    df = grade(files, "exact")
    assert {(r.item_id, int(r.epoch)): r.score for r in df.itertuples()} == {
        (f"q{i}", e): (0.0 if e == 2 else 1.0) for i in range(3) for e in (1, 2, 3)}
    assert df["error"].isna().all()


@pytest.mark.slow
def test_called_once_per_item_with_all_its_samples(files):
    df = grade(files, "group_size")
    assert set(df["score"]) == {0.3}  # three epochs per item, one call per item


@pytest.mark.slow
def test_conversational_shape_columns_and_tool_calls(files):
    outs = files["dir"] / "tools.jsonl"
    call = {"id": "c1", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Paris"}'}}
    outs.write_text(json.dumps({"item_id": "q1", "output_text": "", "output_tools": [call]}) + "\n"
                    + json.dumps({"item_id": "q2", "output_text": "no tools"}) + "\n")
    files = {**files, "outputs": outs}
    df = grade(files, "shape")
    assert {r.item_id: r.score for r in df.itertuples()} == {"q1": 1.01, "q2": 0.02}


@pytest.mark.slow
def test_booleans_none_async_and_errors(files):
    config = load_grader(f"{files['rewards']}:flags")
    item = {"id": "a", "messages": [{"role": "user", "content": "?"}]}
    with GradingEngine(config) as engine:
        assert [r.score for r in engine.grade_batch([(make_sample("yes"), item), (make_sample("no"), item)],
                                                    units=["a", "a"])] == [1.0, 0.0]
    for function, check in (
        ("broken", lambda rs: all(r.error.type == "python_grader_runtime_error" and "reward exploded" in r.error.message
                                  for r in rs)),
        ("too_few", lambda rs: all(r.error and "1 rewards for 2 completions" in r.error.message for r in rs)),
        ("maybe", lambda rs: rs[0].error is None and rs[0].score == 0.5 and "None" in rs[1].error.message),
        ("later", lambda rs: [r.score for r in rs] == [0.25, 0.25]),
    ):
        with GradingEngine(load_grader(f"{files['rewards']}:{function}")) as engine:
            results = engine.grade_batch([(make_sample("ok"), item), (make_sample("skip"), item)], units=["a", "a"])
        assert check(results), (function, results)


@pytest.mark.slow
def test_traceback_names_the_reward_file(files):
    with GradingEngine(load_grader(f"{files['rewards']}:broken")) as engine:
        (result,) = engine.grade_batch([(make_sample("x"), {"id": "a"})])
    assert "rewards.py" in result.error.message and "raise RuntimeError" in result.error.message


@pytest.mark.slow
def test_same_scores_as_calling_the_function_directly(files):
    """The sandboxed grader and the function called in this process agree (the function's own contract)."""
    spec = importlib.util.spec_from_file_location("rewards_direct", files["rewards"])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    df = grade(files, "exact")
    for item_id in ("q0", "q1", "q2"):
        rows = df[df["item_id"] == item_id].sort_values("epoch")
        completions = [[{"role": "assistant", "content": t}] for t in rows["output_text"]]
        direct = module.exact(prompts=None, completions=completions, reference_answer=[item_id[1:]] * len(rows))
        assert list(rows["score"]) == direct


@pytest.mark.slow
def test_validate_grader_with_a_reward_function(files):
    ref = f"{files['rewards']}:exact"
    res = runner.invoke(app, ["validate", "grader", ref])
    assert res.exit_code == 0, res.output
    assert "grader 'exact': type reward_function, valid" in res.output
    res = runner.invoke(app, ["validate", "grader", ref, "-d", str(files["dataset"]),
                              "--reference-template", "{{item.reference_answer}}"])
    assert res.exit_code == 0, res.output
    assert "at the maximum (1): 3/3 = 100.0%" in res.output


@pytest.mark.parametrize("ref, message", [
    ("{rewards}:nope", "defines no top-level function nope"),
    ("{rewards}:no_kwargs", "must take **kwargs"),
    ("{rewards}", "grade(sample, item)"),  # a bare .py is a python grader's source: this file is not one
    ("{dir}/missing.py:f", "no such file"),
])
def test_bad_references_are_one_line_exit_2(files, ref, message):
    ref = ref.format(rewards=files["rewards"], dir=files["dir"])
    for args in (["validate", "grader", ref],
                 ["grade", "-d", str(files["dataset"]), "-g", ref, "--outputs", str(files["outputs"])]):
        res = runner.invoke(app, args)
        assert res.exit_code == 2, res.output
        assert message in res.output and "Traceback" not in res.output
        assert len(res.output.strip().splitlines()) == 1


def test_loader_config_and_no_response_format(files):
    ref = f"{files['rewards']}:exact"
    config = load_grader(ref)
    assert (config.type, config.name, config.function) == ("reward_function", "exact", "exact")
    assert config.source == REWARDS
    assert load_response_format(ref) is None
    with pytest.raises(InputError, match="SyntaxError"):
        bad = files["dir"] / "bad.py"
        bad.write_text("def f(**kw):\n  return [\n")
        load_grader(f"{bad}:f")


@pytest.mark.slow
def test_run_with_a_reward_function(files):
    """`rfteval run` takes FILE.py:FUNCTION too (replayed outputs stand in for a model)."""
    replay = files["dir"] / "replay.jsonl"
    replay.write_text(files["outputs"].read_text())
    out = files["dir"] / "run"
    res = runner.invoke(app, ["run", "--dataset", str(files["dataset"]), "--grader", f"{files['rewards']}:group_size",
                              "--model", f"base=replay:{replay}", "--epochs", "3", "--out", str(out), "-q",
                              "--no-readiness"])
    assert res.exit_code == 0, res.output
    scores = {json.loads(line)["score"] for line in (out / "base.jsonl").read_text().splitlines()
              if json.loads(line).get("score") is not None}
    assert scores and scores <= {0.1, 0.2, 0.3}  # run grades cells as they finish: a call holds 1 to 3 epochs
