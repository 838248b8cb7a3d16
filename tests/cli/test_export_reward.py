"""`rfteval export-reward`: the written module is imported as a TRL script imports it and loaded as verl loads a
custom reward function, and scores what `rfteval grade` scores."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from typer.testing import CliRunner

from rfteval.cli.app import app
from rfteval.data.records import read_records
from tests.support import REPO

GRADER = REPO / "graders" / "chipstack.json"
DATASET = REPO / "datasets" / "chipstack" / "items.jsonl"
RECORDING = REPO / "datasets" / "chipstack" / "recordings" / "base.jsonl"
runner = CliRunner()


def export(grader: str, target: str, out: Path, *extra: str) -> Any:
    return runner.invoke(app, ["export-reward", grader, "--target", target, "--out", str(out), *extra])


def load_like_verl(path: Path) -> ModuleType:
    """verl.utils.import_utils.load_module (volcengine/verl, commit b178a3c): spec_from_file_location under a
    generated name, module_from_spec, exec_module; get_custom_reward_fn then takes getattr(module, name)."""
    spec = importlib.util.spec_from_file_location(f"custom_module_{hash(os.path.abspath(path))}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def graded() -> dict[tuple[str, int], float]:
    """`rfteval grade` on ChipStack's base recording (the reference scores)."""
    out = Path(os.environ.get("TMPDIR", "/tmp")) / f"export-reward-{os.getpid()}.records.jsonl"
    res = runner.invoke(app, ["grade", "-d", str(DATASET), "-g", str(GRADER), "--outputs", str(RECORDING), "--out", str(out)])
    assert res.exit_code == 0, res.output
    try:
        return {(r.item_id, int(r.epoch)): float(r.score) for r in read_records(out).itertuples()}
    finally:
        out.unlink(missing_ok=True)


def items() -> dict[str, dict[str, Any]]:
    rows = [json.loads(line) for line in DATASET.read_text().splitlines() if line.strip()]
    return {row["id"]: row for row in rows}


def outputs() -> list[dict[str, Any]]:
    return [json.loads(line) for line in RECORDING.read_text().splitlines() if line.strip()]


@pytest.mark.slow
def test_trl_module_is_importable_and_scores_as_grade(tmp_path, monkeypatch):
    out = tmp_path / "chipstack_reward.py"
    res = export(str(GRADER), "trl", out)
    assert res.exit_code == 0, res.output
    assert res.output == f"wrote {out}\n"
    assert [p.name for p in tmp_path.iterdir()] == ["chipstack_reward.py"]  # no temporary file left behind
    text = out.read_text()
    assert json.loads(text.split('json.loads(r"""', 1)[1].split('""")', 1)[0]) == json.loads(GRADER.read_text())
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("chipstack_reward")  # what a TRL script does: from chipstack_reward import reward
    try:
        expected = graded()
        its = items()
        outs = outputs()
        got = module.reward(prompts=[its[o["item_id"]]["messages"] for o in outs],
                            completions=[[{"role": "assistant", "content": o["output_text"]}] for o in outs],
                            completion_ids=[[0]] * len(outs), trainer_state=None,
                            **{key: [its[o["item_id"]][key] for o in outs]
                               for key in ("id", "reference_answer", "protocol", "dut", "difficulty")})
        assert got == [expected[o["item_id"], o["epoch"]] for o in outs]
        assert module.reward.__name__ == "rfteval_chipstack_vip_parameter_f1"
    finally:
        module.close()
        sys.modules.pop("chipstack_reward", None)


@pytest.mark.slow
def test_verl_module_loads_by_path_and_scores_as_grade(tmp_path):
    out = tmp_path / "chipstack_verl.py"
    res = export(str(GRADER), "verl", out)
    assert res.exit_code == 0, res.output
    module = load_like_verl(out)
    compute_score = module.compute_score
    try:
        expected = graded()
        its = items()
        for o in outputs():
            it = its[o["item_id"]]
            extra_info = {k: v for k, v in it.items() if k not in ("messages", "reference_answer")}
            extra_info.update(num_turns=None, rollout_reward_scores={})  # as NaiveRewardManager sets them
            score = compute_score(data_source="chipstack", solution_str=o["output_text"],
                                  ground_truth=it["reference_answer"], extra_info=extra_info)
            assert score == expected[o["item_id"], o["epoch"]]
    finally:
        module.close()


def test_verl_options_travel_in_the_module(tmp_path):
    grader = tmp_path / "g.json"
    grader.write_text(json.dumps({"type": "python", "name": "g", "source": (
        "def grade(sample, item):\n    return float(sample['output_json'] == item['truth'])\n")}))
    out = tmp_path / "g_verl.py"
    res = export(str(grader), "verl", out, "--reference-field", "truth", "--ground-truth-json", "--grader-timeout", "30")
    assert res.exit_code == 0, res.output
    module = load_like_verl(out)
    try:
        assert module.OPTIONS == {"grader_timeout": 30.0, "reference_field": "truth", "ground_truth_json": True}
        assert module.compute_score("d", '{"a": 1}', '{"a": 1}', None) == 1.0
        assert module.compute_score("d", '{"a": 2}', '{"a": 1}', {}) == 0.0
    finally:
        module.close()


def test_reasoning_and_end_token_options_travel_in_the_module(tmp_path):
    """--reasoning and --think-tags as `rfteval grade` takes them, --eos-token and --tokenizer for OpenRLHF: stored
    in the module and used by the reward it builds."""
    grader = tmp_path / "sc.json"
    grader.write_text(json.dumps({"type": "string_check", "name": "sc", "input": "{{sample.output_text}}",
                                  "reference": "{{item.reference_answer}}", "operation": "eq"}))
    out = tmp_path / "sc_orl.py"
    res = export(str(grader), "openrlhf", out, "--think-tags", "<r>,</r>", "--think-tags", "<a>,</a>",
                 "--eos-token", "<|x|>", "--eos-token", "<|y|>")
    assert res.exit_code == 0, res.output
    module = load_like_verl(out)
    try:
        assert module.OPTIONS == {"think_tags": ["<r>,</r>", "<a>,</a>"], "eos_tokens": ["<|x|>", "<|y|>"]}
        got = module.reward_func(["p <r>hm</r>4<|y|><|x|>", "p <a>hm</a> 4", "p <think>hm</think>4"], ["p "] * 3,
                                 ["4"] * 3)
        assert [float(v) for v in got["rewards"]] == [1.0, 1.0, 0.0]
    finally:
        module.close()
    out = tmp_path / "sc_trl.py"
    res = export(str(grader), "trl", out, "--reasoning", "keep")
    assert res.exit_code == 0, res.output
    module = load_like_verl(out)
    try:
        assert module.OPTIONS == {"reasoning": "keep"}
        assert module.reward(completions=["<think>x</think>4", "4"], reference_answer=["4", "4"]) == [0.0, 1.0]
    finally:
        module.close()
    res = export(str(grader), "openrlhf", tmp_path / "t.py", "--tokenizer", str(tmp_path / "tok"))
    assert res.exit_code == 0 and load_like_verl(tmp_path / "t.py").OPTIONS == {"tokenizer": str(tmp_path / "tok")}


@pytest.mark.slow
def test_a_reward_function_exports_too(tmp_path):
    rewards = tmp_path / "rewards.py"
    rewards.write_text("def exact(completions, answer, **kwargs):\n"
                       "    return [float(c[0]['content'] == a) for c, a in zip(completions, answer)]\n")
    out = tmp_path / "exported.py"
    assert export(f"{rewards}:exact", "trl", out).exit_code == 0
    module = load_like_verl(out)
    try:
        assert module.reward(prompts=[[{"role": "user", "content": "?"}]] * 2,
                             completions=[[{"role": "assistant", "content": "x"}]] * 2, answer=["x", "y"]) == [1.0, 0.0]
    finally:
        module.close()


@pytest.mark.slow
def test_the_module_runs_in_a_fresh_interpreter(tmp_path):
    """Imported by a separate process (as a training script is), it imports rfteval itself and exits cleanly."""
    out = tmp_path / "fresh_reward.py"
    assert export(str(GRADER), "trl", out).exit_code == 0
    code = ("import fresh_reward, json\n"
            "print(fresh_reward.reward(prompts=['p', 'p'], completions=[json.dumps({'predicted': [{'name': 'A', "
            "'value': '1'}]}), 'no'], reference_answer=[[{'name': 'A', 'value': '1'}]] * 2))\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[1.0, 0.0]"


@pytest.mark.parametrize("args, message", [
    (["--target", "trl", "--out", "{rewards}"], "is also an input of this command"),
    (["--target", "trl", "--out", "{dir}/reward.txt"], "must name a Python file"),
    (["--target", "trl", "--out", "{rewards}/r.py"], "it is a file, not a directory"),
    (["--target", "trl", "--out", "{dir}/r.py", "--reference-field", "x"], "is for --target verl or openrlhf"),
    (["--target", "openrlhf", "--out", "{dir}/r.py", "--ground-truth-json"], "--ground-truth-json is for --target verl"),
    (["--target", "verl", "--out", "{dir}/r.py", "--eos-token", "<|x|>"], "--eos-token is for --target openrlhf"),
    (["--target", "trl", "--out", "{dir}/r.py", "--tokenizer", "t"], "--tokenizer is for --target openrlhf"),
    (["--target", "trl", "--out", "{dir}/r.py", "--think-tags", "<r>"], "--think-tags: think_tags: expected OPEN,CLOSE"),
    (["--target", "trl", "--out", "{dir}/r.py", "--reasoning", "drop"], "--reasoning: reasoning must be"),
    (["--target", "sklearn", "--out", "{dir}/r.py"], "sklearn"),
])
def test_bad_input_is_one_line_exit_2(tmp_path, args, message):
    rewards = tmp_path / "rewards.py"
    rewards.write_text("def f(completions, **kwargs):\n    return [1.0] * len(completions)\n")
    before = rewards.read_text()
    args = [a.format(rewards=rewards, dir=tmp_path) for a in args]
    res = runner.invoke(app, ["export-reward", f"{rewards}:f", *args])
    assert res.exit_code == 2, res.output
    assert message in res.output and "Traceback" not in res.output
    assert rewards.read_text() == before


def test_missing_directories_are_made_and_no_temp_file_is_left(tmp_path):
    out = tmp_path / "new" / "dir" / "reward.py"
    res = export(str(GRADER), "trl", out)
    assert res.exit_code == 0, res.output
    assert f"wrote {out}" in res.output and out.is_file()
    assert [p.name for p in out.parent.iterdir()] == ["reward.py"]


def test_bad_grader_is_one_line_exit_2(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"type": "string_check", "name": "x", "input": "a", "reference": "b",
                               "operation": "equals"}))
    res = export(str(bad), "verl", tmp_path / "out.py")
    assert res.exit_code == 2 and "operation" in res.output and len(res.output.strip().splitlines()) == 1
    assert not (tmp_path / "out.py").exists()


@pytest.mark.slow
def test_trl_module_has_an_async_reward_named_for_the_grader(tmp_path, monkeypatch):
    import asyncio
    import inspect

    out = tmp_path / "chip_async_reward.py"
    res = export(str(GRADER), "trl", out, "--on-error", "zero")
    assert res.exit_code == 0, res.output
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("chip_async_reward")
    try:
        assert inspect.iscoroutinefunction(module.reward_async) and not inspect.iscoroutinefunction(module.reward)
        assert module.reward_async.__name__ == module.reward.__name__ == "rfteval_chipstack_vip_parameter_f1"
        assert module.OPTIONS == {"on_error": "zero"}
        its = items()
        first = next(iter(its.values()))
        got = asyncio.run(module.reward_async(prompts=[first["messages"]], completions=["no"],
                                              reference_answer=[first["reference_answer"]]))
        assert got == [0.0]
    finally:
        module.close()


def test_the_exported_reward_is_built_once_when_threads_call_it_together(tmp_path, monkeypatch):
    """OpenRLHF calls reward_func from several threads at once (asyncio.to_thread): the module builds one reward,
    not one per thread (each with its own python workers; on CPython 3.11.7 their concurrent source parsing also
    raised SystemError: AST constructor recursion depth mismatch)."""
    import threading
    import time

    import rfteval.reward as reward_pkg

    out = tmp_path / "exported.py"
    res = export(str(REPO / "graders" / "milo.json"), "openrlhf", out)
    assert res.exit_code == 0, res.output
    built: list[int] = []

    def slow_factory(grader, **options):  # noqa: ANN001, ANN003, ANN202
        built.append(threading.get_ident())
        time.sleep(0.2)  # every thread arrives while the first is still building
        return object()

    monkeypatch.setattr(reward_pkg, "for_openrlhf", slow_factory)
    spec = importlib.util.spec_from_file_location("exported_reward", out)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    got: list[object] = []
    threads = [threading.Thread(target=lambda: got.append(module._get())) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(built) == 1 and len(got) == 8 and all(g is got[0] for g in got)
