"""The taskset package `rfteval export-environment --target prime-rl` writes, loaded and scored the way prime-rl does
it (PrimeIntellect-ai/prime-rl, src/prime_rl/orchestrator/envs.py and verifiers' serve/server.py, read at commit
559b447): the env block of a prime-rl TOML config narrowed by `vf.resolve_env_config`, the tasks from
`vf.load_taskset(config.taskset)` (the orchestrator), the env from `vf.load_environment(config)` (the env server),
each task shipped as its `model_dump()` and rebuilt by the server's `task_type().data_type().model_validate` with
the config's task subtree, and a finished trace scored by verifiers 0.4's own `Task.score`. Every bundled milo,
chipstack and math completion, in each shape (tests/support/trainer_shapes.py) and as the second of two turns, gets
`rfteval grade`'s score."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from rfteval.cli.app import app
from tests.support.optional import require
from tests.support.trainer_cases import DATASETS, GRADERS, REPO, grade_cli, runner
from tests.support.trainer_shapes import CASES, FIRST_TURN, FOLLOW_UP, Completion, completions

vf = require("verifiers.v1", "trainers")

CONFIG = '''
[orchestrator.train.source.env.taskset]
id = "{name}"
{extra}
'''


def export(tmp_path: Path, case: str, name: str, *extra: str) -> Path:
    out = tmp_path / f"{name}-pkg"
    res = runner.invoke(app, ["export-environment", str(GRADERS / f"{case}.json"), "--dataset",
                              str(DATASETS / case / "items.jsonl"), "--target", "prime-rl", "--out", str(out),
                              "--name", name, *extra])
    assert res.exit_code == 0, res.output
    return out


def env_config(name: str, extra: str = "") -> Any:
    """The env block of a prime-rl config, narrowed as prime-rl's EnvConfig narrows it."""
    data = tomllib.loads(CONFIG.format(name=name, extra=extra))
    return vf.resolve_env_config(data["orchestrator"]["train"]["source"]["env"])


def served(env: Any, task: Any) -> Any:
    """The task as the env server rebuilds it from the request's task_data (EnvServer._build_task)."""
    task_cls = type(env.taskset).task_type()
    wire = json.loads(json.dumps(task.data.model_dump(mode="json")))
    return task_cls(task_cls.data_type().model_validate(wire), env.config.taskset.task)


def trace_of(task: Any, turns: list[Any]) -> Any:
    """A finished trace: the task's prompt, then `turns`; the assistant turns are the model calls' nodes."""
    from verifiers.v1.graph import MessageNode
    from verifiers.v1.trace import AgentInfo, ModelCall, Trace, TraceTask

    messages = [*task.data.prompt, *turns]
    nodes = [MessageNode(message=m, parent=i - 1 if i else None) for i, m in enumerate(messages)]
    calls = [ModelCall(node=i) for i in range(len(task.data.prompt), len(nodes)) if messages[i].role == "assistant"]
    return Trace(task=TraceTask(type=type(task).__name__, data=task.data), agent=AgentInfo(config=vf.AgentConfig()),
                 nodes=nodes, calls=calls)


def reply(c: Completion) -> Any:
    return vf.AssistantMessage(content=c.content, reasoning_content=c.reasoning)


async def score(task: Any, turns: list[Any]) -> float:
    trace = trace_of(task, turns)
    await task.score(trace)
    return trace.rewards["rfteval"].score


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES)
def test_task_score_of_the_exported_taskset_equals_rfteval_grade(case, tmp_path, monkeypatch):
    name = f"rft-{case}-shapes"
    monkeypatch.syspath_prepend(str(export(tmp_path, case, name)))
    cases = completions(tmp_path, case)
    config = env_config(name)
    tasks = {t.data.id: t for t in vf.load_taskset(config.taskset)}  # the orchestrator's side
    env = vf.load_environment(config)  # the env server's
    assert type(env.taskset).__name__ == "RftCaseShapesTaskset".replace("Case", case.capitalize())

    async def run() -> list[tuple[float, float, str]]:
        out = []
        for c in cases:
            task = served(env, tasks[c.item_id])
            out.append((await score(task, [reply(c)]), c.expected, f"{c.item_id}/{c.model}/{c.epoch}/{c.shape}"))
            if c.shape == "plain":
                turns = [vf.AssistantMessage(content=FIRST_TURN), vf.UserMessage(content=FOLLOW_UP), reply(c)]
                out.append((await score(task, turns), c.expected, f"{c.item_id}/{c.model}/{c.epoch}/two turns"))
        return out

    got = asyncio.run(run())
    wrong = [(what, g, e) for g, e, what in got if g != e]
    assert not wrong, f"{len(wrong)} of {len(got)} differ, e.g. {wrong[:3]}"
    assert len(got) == len(cases) + len(cases) // 5


@pytest.mark.slow
def test_config_names_dataset_and_grader_and_a_reply_less_trace_scores_the_empty_answer(tmp_path, monkeypatch):
    """The config's dataset and grader replace the bundled copies on both sides (the grader reaches the server's
    task config); a trace with no sampled turn grades the empty answer, not a few-shot assistant turn of the
    prompt."""
    name = "rft-override"
    monkeypatch.syspath_prepend(str(export(tmp_path, "chipstack", name)))
    lines = [{"id": "a", "messages": [{"role": "user", "content": "Say yes."}, {"role": "assistant", "content": "yes"},
                                      {"role": "user", "content": "Again."}], "reference_answer": "yes"}]
    dataset = tmp_path / "mine.jsonl"
    dataset.write_text("".join(json.dumps(line) + "\n" for line in lines))
    grader = tmp_path / "exact.json"
    grader.write_text(json.dumps({"type": "string_check", "name": "exact", "operation": "eq",
                                  "input": "{{ sample.output_text }}", "reference": "{{ item.reference_answer }}"}))
    config = env_config(name, f'dataset = "{dataset}"\ngrader = "{grader}"')
    (task,) = list(vf.load_taskset(config.taskset))
    env = vf.load_environment(config)
    task = served(env, task)
    assert task.config.grader == str(grader)
    empty = grade_cli(tmp_path, dataset, str(grader), [{"item_id": "a", "epoch": 1, "output_text": "", "model": "m"}])
    assert asyncio.run(score(task, [])) == empty["m", "a", 1] == 0.0
    assert asyncio.run(score(task, [vf.AssistantMessage(content="yes")])) == 1.0
    # the answer after a reasoning field keeps its newlines; exact match as `rfteval grade` strips it
    assert asyncio.run(score(task, [vf.AssistantMessage(content="\n\nyes", reasoning_content="hm")])) == 1.0


@pytest.mark.slow
def test_the_package_installs_and_loads_by_id_in_a_fresh_interpreter(tmp_path):
    """pip installs the written package (setuptools, no network); a fresh interpreter with it installed loads the
    taskset by id, as prime-rl's env server does, and scores one trace. Building without network means building
    without isolation, with this interpreter's setuptools: its absence is the one cause of a skip; any failure of
    pip's after that (a pyproject.toml the export wrote wrong, whatever pip says) fails the test."""
    require("setuptools.build_meta", "setup")  # the venv's own (`make setup`'s venv has it)
    pkg = export(tmp_path, "milo", "rft-installed")
    site = tmp_path / "site"
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                          "--no-index", "--target", str(site), str(pkg)], capture_output=True, text=True)
    assert pip.returncode == 0, pip.stderr
    script = (
        "import asyncio, verifiers.v1 as vf\n"
        "from verifiers.v1.graph import MessageNode\n"
        "from verifiers.v1.trace import AgentInfo, ModelCall, Trace, TraceTask\n"
        "config = vf.resolve_env_config({'taskset': {'id': 'rft-installed'}})\n"
        "env = vf.load_environment(config)\n"
        "task = next(iter(env.taskset))\n"
        "msgs = [*task.data.prompt, vf.AssistantMessage(content='not json')]\n"
        "nodes = [MessageNode(message=m, parent=i - 1 if i else None) for i, m in enumerate(msgs)]\n"
        "trace = Trace(task=TraceTask(type='t', data=task.data), agent=AgentInfo(config=vf.AgentConfig()),\n"
        "              nodes=nodes, calls=[ModelCall(node=len(nodes) - 1)])\n"
        "asyncio.run(task.score(trace))\n"
        "print(type(env.taskset).__module__, task.data.id, trace.rewards['rfteval'].score)\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(REPO)])}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    module, item_id, value = done.stdout.split()
    assert module.startswith("rft_installed") and item_id == "mi-001" and float(value) == 0.0
    assert (site / "rft_installed" / "items.jsonl").read_bytes() == (DATASETS / "milo" / "items.jsonl").read_bytes()


@pytest.mark.parametrize("args, message", [
    (["--name", "Not a name!"], "is not a package name"),
    (["--target", "verl"], "verl"),
])
def test_bad_input_is_one_line_exit_2(tmp_path, args, message):
    base = ["export-environment", str(GRADERS / "milo.json"), "--dataset", str(DATASETS / "milo" / "items.jsonl"),
            "--target", "prime-rl", "--out", str(tmp_path / "pkg")]
    res = runner.invoke(app, base + args)
    assert res.exit_code == 2 and message in res.output
    assert not (tmp_path / "pkg").exists()


def test_a_group_judge_is_refused(tmp_path):
    grader = tmp_path / "rank.json"
    grader.write_text(json.dumps({"type": "group_judge", "name": "rank", "model": "judge-m"}))
    res = runner.invoke(app, ["export-environment", str(grader), "--dataset", str(DATASETS / "milo" / "items.jsonl"),
                              "--target", "prime-rl", "--out", str(tmp_path / "pkg")])
    assert res.exit_code == 2 and "scores each trace alone" in res.output and not (tmp_path / "pkg").exists()


def test_an_existing_folder_is_never_overwritten(tmp_path):
    out = tmp_path / "pkg"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    res = runner.invoke(app, ["export-environment", str(GRADERS / "milo.json"), "--dataset",
                              str(DATASETS / "milo" / "items.jsonl"), "--target", "prime-rl", "--out", str(out)])
    assert res.exit_code == 2 and "not an empty folder" in res.output
    assert [p.name for p in out.iterdir()] == ["keep.txt"] and not list(tmp_path.glob(".pkg.*"))


def test_the_readmes_config_loads(tmp_path, monkeypatch):
    """The README's prime-rl block, its commented keys set, names the exported taskset and nothing else."""
    from tests.support.trainer_shapes import readme_block

    monkeypatch.syspath_prepend(str(export(tmp_path, "milo", "rfteval-milo")))
    block = readme_block("**prime-rl**", "toml")
    text = block.replace("#", "\n").replace(", grader", "\ngrader").replace('"datasets/', f'"{REPO}/datasets/') \
        .replace('"graders/', f'"{REPO}/graders/')
    env = vf.resolve_env_config(tomllib.loads(text)["orchestrator"]["train"]["source"]["env"])
    assert env.taskset.dataset.endswith("datasets/milo/items.jsonl") and env.taskset.task.grader.endswith("milo.json")
    assert len(list(vf.load_taskset(env.taskset))) == 11


@pytest.mark.slow
def test_custom_think_tags_score_as_rfteval_grade_does(tmp_path, monkeypatch):
    """`export-environment --think-tags` strips what `rfteval grade --think-tags` strips, through Task.score of the
    loaded taskset; exported without it, the rewards are grade's without the flag."""
    from tests.support.trainer_cases import THINK_TAGS, custom_tag_probes

    outs, tagged, plain = custom_tag_probes(tmp_path)
    for name, flags, expected in (("rft-plain-tags", (), plain), ("rft-custom-tags", ("--think-tags", THINK_TAGS),
                                                                   tagged)):
        monkeypatch.syspath_prepend(str(export(tmp_path, "milo", name, *flags)))
        config = env_config(name)
        env = vf.load_environment(config)
        tasks = {t.data.id: t for t in vf.load_taskset(config.taskset)}

        async def run(env: Any = env, tasks: Any = tasks) -> list[float]:
            return [await score(served(env, tasks[o["item_id"]]), [vf.AssistantMessage(content=o["output_text"])])
                    for o in outs]

        assert asyncio.run(run()) == expected, name
    assert tagged != plain
    res = runner.invoke(app, ["export-environment", str(GRADERS / "milo.json"), "--dataset",
                              str(DATASETS / "milo" / "items.jsonl"), "--target", "prime-rl", "--out",
                              str(tmp_path / "bad"), "--think-tags", "<r>"])
    assert res.exit_code == 2 and "think_tags" in res.output and not (tmp_path / "bad").exists()


@pytest.mark.slow
def test_flat_tool_calls_score_as_rfteval_grade(tmp_path, monkeypatch):
    """verifiers 0.4's flat tool calls ({id, type, name, arguments}) in a prime-rl trace: the grader reads them in
    OpenAI's shape, as `rfteval grade` reads output_tools (the probe of tests/reward/test_verifiers.py)."""
    from verifiers.v1.types import ToolCall

    from tests.support.trainer_shapes import FLAT_CALLS, FLAT_CALLS_AS_OPENAI, FLAT_TOOL_GRADER

    grader, openai = FLAT_TOOL_GRADER, FLAT_CALLS_AS_OPENAI
    line = {"id": "paris", "messages": [{"role": "user", "content": "Weather in the capital of France?"}],
            "tool": "get_weather", "arguments": '{"city": "Paris"}'}
    dataset, grader_path = tmp_path / "tools.jsonl", tmp_path / "tools.json"
    dataset.write_text(json.dumps(line) + "\n")
    grader_path.write_text(json.dumps(grader))
    name = "rft-tools"
    monkeypatch.syspath_prepend(str(export(tmp_path, "milo", name)))
    config = env_config(name, f'dataset = "{dataset}"\ngrader = "{grader_path}"')
    env = vf.load_environment(config)
    (task,) = list(vf.load_taskset(config.taskset))
    flat = [ToolCall(**c) for c in FLAT_CALLS]
    graded = grade_cli(tmp_path, dataset, str(grader_path), [
        {"item_id": "paris", "epoch": i + 1, "model": "m", "output_text": "", "output_tools": [o]}
        for i, o in enumerate(openai)])

    async def run() -> list[float]:
        return [await score(served(env, task), [vf.AssistantMessage(content="", tool_calls=[c])]) for c in flat]

    assert [graded["m", "paris", i + 1] for i in range(3)] == [1.0, 0.5, 0.0]
    assert asyncio.run(run()) == [graded["m", "paris", i + 1] for i in range(3)]


def probe_taskset(tmp_path: Path, monkeypatch: Any, name: str, lines: list[dict[str, Any]], grader: dict[str, Any]
                  ) -> tuple[Any, dict[str, Any], Path, Path]:
    """An exported taskset whose config names the probe's dataset and grader: (env, tasks by id, dataset, grader)."""
    dataset, grader_path = tmp_path / f"{name}.jsonl", tmp_path / f"{name}.json"
    dataset.write_text("".join(json.dumps(line) + "\n" for line in lines))
    grader_path.write_text(json.dumps(grader))
    monkeypatch.syspath_prepend(str(export(tmp_path, "milo", name)))
    config = env_config(name, f'dataset = "{dataset}"\ngrader = "{grader_path}"')
    return (vf.load_environment(config), {t.data.id: t for t in vf.load_taskset(config.taskset)}, dataset,
            grader_path)


@pytest.mark.slow
def test_a_grader_that_raises_scores_zero_and_is_counted(tmp_path, monkeypatch):
    """A grading error in Task.score of the taskset: 0.0 (OpenAI's rule, as `rfteval grade` scores it), recorded
    as the reward instead of failing the trace, and counted in the trace's error metric."""
    grader = {"type": "python", "name": "boom", "source": (
        "def grade(sample, item):\n"
        "    if sample['output_text'] == 'boom':\n"
        "        raise ValueError('boom')\n"
        "    return float(sample['output_text'] == item['reference_answer'])\n")}
    line = {"id": "paris", "messages": [{"role": "user", "content": "The capital of France?"}],
            "reference_answer": "Paris"}
    env, tasks, dataset, grader_path = probe_taskset(tmp_path, monkeypatch, "rft-boom", [line], grader)
    texts = ["boom", "Paris", "boom"]
    graded = grade_cli(tmp_path, dataset, str(grader_path), [
        {"item_id": "paris", "epoch": i + 1, "model": "m", "output_text": t} for i, t in enumerate(texts)])

    async def run() -> list[Any]:
        traces = []
        for t in texts:
            trace = trace_of(served(env, tasks["paris"]), [vf.AssistantMessage(content=t)])
            await served(env, tasks["paris"]).score(trace)
            traces.append(trace)
        return traces

    traces = asyncio.run(run())
    assert [graded["m", "paris", i + 1] for i in range(3)] == [0.0, 1.0, 0.0]
    assert [t.rewards["rfteval"].score for t in traces] == [0.0, 1.0, 0.0]
    assert [t.metrics["rfteval_error"] for t in traces] == [1.0, 0.0, 1.0]  # before: no metric, a silent 0


@pytest.mark.slow
def test_a_developer_turn_is_system_in_the_prompt_and_developer_to_the_grader(tmp_path, monkeypatch):
    """OpenAI's `developer` role (the SDK's and Azure's RFT datasets write it): the taskset's prompt has it as
    `system` (verifiers 0.4 has no developer message), and the grader still reads the item's own role, as `rfteval
    grade` hands it over."""
    grader = {"type": "python", "name": "role", "source": (
        "def grade(sample, item):\n"
        "    roles = [m['role'] for m in item['messages']]\n"
        "    return 0.5 * (roles == ['developer', 'user']) + 0.5 * (sample['output_text'] == item['reference_answer'])\n")}
    line = {"id": "paris", "messages": [{"role": "developer", "content": "Answer with one word."},
                                        {"role": "user", "content": "The capital of France?"}],
            "reference_answer": "Paris"}
    env, tasks, dataset, grader_path = probe_taskset(tmp_path, monkeypatch, "rft-developer", [line], grader)
    task = served(env, tasks["paris"])
    assert [(m.role, m.content) for m in task.data.prompt] == [("system", "Answer with one word."),
                                                              ("user", "The capital of France?")]
    texts = ["Paris", "Lyon"]
    graded = grade_cli(tmp_path, dataset, str(grader_path), [
        {"item_id": "paris", "epoch": i + 1, "model": "m", "output_text": t} for i, t in enumerate(texts)])
    assert [graded["m", "paris", i + 1] for i in range(2)] == [1.0, 0.5]

    async def run() -> list[float]:
        return [await score(served(env, tasks["paris"]), [vf.AssistantMessage(content=t)]) for t in texts]

    assert asyncio.run(run()) == [1.0, 0.5]
