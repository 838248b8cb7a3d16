"""PrimeIntellect verifiers scores with rfteval's reward through its own code, both contracts.

verifiers 0.4 (installed in the venv): a `verifiers.v1` Task with the reward plugged by file path
(`TaskConfig.rewards`, verifiers' loader), scored by `Task.score` on a real Trace, for every local dataset exported
with `rfteval export-dataset --target verifiers` and read back with `load_dataset("json")`.

verifiers 0.1.9 (the legacy Rubric, which environments written for 0.1–0.3 and tinker-cookbook's verifiers recipe
use; installed by `make trainers` into its own directory, `.venv/verifiers-0.1.9`, run in a subprocess with that
directory first on PYTHONPATH: tests/support/legacy_verifiers.py): `SingleTurnEnv` and a two-turn `MultiTurnEnv` roll out
against tests/support/fake_openai.py, whose replies are the bundled recordings in every shape of trainer_cases.SHAPES, and
`Rubric.score_group` scores each example's group."""

from __future__ import annotations

import asyncio
import functools
import json
import os
import subprocess
import sys
from collections import Counter, defaultdict, deque
from pathlib import Path
from typing import Any

import pytest

from rfteval.cli.app import app
from rfteval.reward import for_verifiers
from tests.support import REPO
from tests.support.fake_openai import FakeOpenAI, Reply, Request
from tests.support.optional import missing, require
from tests.support.trainer_cases import (
    DATASETS,
    FIRST_TURN,
    FOLLOW_UP,
    GRADERS,
    LOCAL_CASES,
    RECORDING_CASES,
    THINK_TAGS,
    custom_tag_probes,
    expected_scores,
    export,
    grade_cli,
    hf_json,
    items,
    runner,
    shaped_scores,
)

vf = require("verifiers.v1", "trainers")
pytestmark = pytest.mark.slow
LEGACY = Path(sys.prefix) / "verifiers-0.1.9"  # `make trainers`: pip install --target .venv/verifiers-0.1.9
LEGACY_SCRIPT = REPO / "tests" / "support" / "legacy_verifiers.py"  # run with verifiers 0.1.9 first on the path


def plug(tmp_path: Path, case: str, form: str = "") -> str:
    """A module holding the reward, plugged as verifiers plugs rewards: `path/to/file.py:function`."""
    module = tmp_path / f"vf_{case}_reward.py"
    module.write_text(f"from rfteval.reward import for_verifiers\n\n"
                      f"reward = for_verifiers({str(GRADERS / f'{case}.json')!r}{form})\n")
    return f"{module}:reward"


@functools.cache
def rft_task() -> tuple[type, type]:
    """A verifiers.v1 task over an exported row (prompt, answer, info), as a taskset would declare it."""
    from verifiers.v1.task import Task, TaskData

    class RFTTask(TaskData):
        answer: str = ""
        info: dict[str, Any] = {}

    class RFT(Task[RFTTask]):
        pass

    return RFTTask, RFT


def task_data(row: dict[str, Any], prompt: list[dict[str, Any]] | None = None) -> Any:
    return rft_task()[0](prompt=prompt or [{"role": m["role"], "content": m["content"]} for m in row["prompt"]],
                         answer=row["answer"], info=row["info"])


def trace_of(data: Any, replies: list[Any]) -> Any:
    """A Trace as a rollout leaves it: the prompt's messages (not sampled), then each reply the model sampled, an
    environment turn (FOLLOW_UP) between two replies."""
    from verifiers.v1.graph import MessageNode
    from verifiers.v1.trace import AgentInfo, Trace, TraceTask

    nodes = [MessageNode(message=m, parent=i - 1 if i else None) for i, m in enumerate(data.prompt)]
    for i, message in enumerate(replies):
        if i:
            nodes.append(MessageNode(message=vf.UserMessage(content=FOLLOW_UP), parent=len(nodes) - 1))
        nodes.append(MessageNode(message=message, parent=len(nodes) - 1, sampled=True))
    return Trace(task=TraceTask(type="RFT", data=data), agent=AgentInfo(config=vf.AgentConfig()), nodes=nodes)


def replies_of(shape: str, r: dict[str, str]) -> list[Any]:
    last = vf.AssistantMessage(content=r["content"], reasoning_content=r.get("reasoning_content"))
    return [vf.AssistantMessage(content=FIRST_TURN), last] if shape == "two_turns" else [last]


async def task_scores(fn: str | Any, rows: list[tuple[Any, list[Any]]]) -> list[Any]:
    """Task.score over (task data, replies), the reward plugged as `fn` (or a TaskConfig): the scored traces."""
    from verifiers.v1.configs.task import RewardFunctionConfig, TaskConfig

    config = TaskConfig(rewards={"rfteval": RewardFunctionConfig(fn=fn)}) if isinstance(fn, str) else fn
    traces = [trace_of(data, replies) for data, replies in rows]
    await asyncio.gather(*(rft_task()[1](data, config).score(t) for (data, _), t in zip(rows, traces)))
    return traces


@pytest.mark.parametrize("case", LOCAL_CASES)
def test_task_score_equals_rfteval_grade(case, tmp_path):
    outs, expected = expected_scores(tmp_path, case)
    ds = hf_json(export(case, "verifiers", tmp_path / "vf"), tmp_path)
    by_id = {row["info"]["id"]: row for row in ds}
    rows = [(task_data(by_id[o["item_id"]]), [vf.AssistantMessage(content=o["output_text"])]) for o in outs]
    traces = asyncio.run(task_scores(plug(tmp_path, case), rows))
    assert [t.rewards["rfteval"].score for t in traces] == expected


@pytest.mark.parametrize("case", RECORDING_CASES)
def test_task_score_every_shape_equals_rfteval_grade(case, tmp_path):
    """Every recorded completion in every shape (the reasoning field as verifiers' AssistantMessage carries it,
    two turns as two sampled replies) scored by Task.score: `rfteval grade`'s score, and no grading error."""
    scored = shaped_scores(tmp_path, case)
    ds = hf_json(export(case, "verifiers", tmp_path / "vf"), tmp_path)
    by_id = {row["info"]["id"]: row for row in ds}
    rows = [(task_data(by_id[o["item_id"]]), replies_of(shape, r)) for shape, o, r, _ in scored]
    traces = asyncio.run(task_scores(plug(tmp_path, case), rows))
    got = [t.rewards["rfteval"].score for t in traces]
    wrong = [(shape, o["item_id"], g, score) for (shape, o, _, score), g in zip(scored, got) if g != score]
    assert not wrong, f"{len(got) - len(wrong)} of {len(got)} agree; first disagreements: {wrong[:5]}"
    assert {t.metrics["rfteval_" + json.loads((GRADERS / f"{case}.json").read_text())["name"] + "_error"]
            for t in traces} == {0.0}


def test_rubric_names_through_verifiers_keyword_injection(tmp_path):
    from verifiers.v1.utils.decorators import invoke_all

    outs, expected = expected_scores(tmp_path, "chipstack")
    ds = hf_json(export("chipstack", "verifiers", tmp_path / "vf"), tmp_path)
    by_id = {row["info"]["id"]: row for row in ds}
    sync = for_verifiers(GRADERS / "chipstack.json", asynchronous=False)
    reward = for_verifiers(GRADERS / "chipstack.json")
    assert asyncio.iscoroutinefunction(reward)

    async def run(fn: Any, o: dict[str, Any]) -> Any:
        row = by_id[o["item_id"]]
        available = {"completion": [{"role": "assistant", "content": o["output_text"]}], "prompt": row["prompt"],
                     "answer": row["answer"], "info": row["info"], "state": {}}
        return (await invoke_all([fn], available))[0]

    try:
        assert [asyncio.run(run(reward, o)) for o in outs] == expected
        assert [asyncio.run(run(sync, o)) for o in outs[:6]] == expected[:6]  # invoke_all gathers: it awaits them
    finally:
        sync.close()
        reward.args[0].close()


def test_custom_think_tags_score_as_rfteval_grade_does(tmp_path):
    """for_verifiers(think_tags=...) strips what `rfteval grade --think-tags` strips, plugged into verifiers 0.4's
    Task by file path and scored by Task.score; without it, grade's scores without the flag."""
    from verifiers.v1.configs.task import RewardFunctionConfig, TaskConfig
    from verifiers.v1.graph import MessageNode
    from verifiers.v1.task import Task, TaskData
    from verifiers.v1.trace import AgentInfo, Trace, TraceTask

    class RFTTask(TaskData):
        answer: str = ""
        info: dict[str, Any] = {}

    class RFT(Task[RFTTask]):
        pass

    outs, tagged, plain = custom_tag_probes(tmp_path)
    ds = hf_json(export("milo", "verifiers", tmp_path / "vf"), tmp_path)
    by_id = {row["info"]["id"]: row for row in ds}
    for options, expected in (("", plain), (f", think_tags={THINK_TAGS!r}", tagged)):
        module = tmp_path / f"vf_tags_{len(options)}.py"
        module.write_text(f"from rfteval.reward import for_verifiers\n\n"
                          f"reward = for_verifiers({str(GRADERS / 'milo.json')!r}{options})\n")
        config = TaskConfig(rewards={"rfteval": RewardFunctionConfig(fn=f"{module}:reward")})

        async def score_all(config: TaskConfig) -> list[float]:
            scores = []
            for o in outs:
                row = by_id[o["item_id"]]
                data = RFTTask(prompt=[{"role": m["role"], "content": m["content"]} for m in row["prompt"]],
                               answer=row["answer"], info=row["info"])
                nodes = [MessageNode(message=m, parent=i - 1 if i else None) for i, m in enumerate(data.prompt)]
                # sampled: the model's reply (only sampled messages are graded, never a prompt's)
                nodes.append(MessageNode(message=vf.AssistantMessage(content=o["output_text"]),
                                         parent=len(nodes) - 1, sampled=True))
                trace = Trace(task=TraceTask(type="RFT", data=data), agent=AgentInfo(config=vf.AgentConfig()),
                              nodes=nodes)
                await RFT(data, config).score(trace)
                scores.append(trace.rewards["rfteval"].score)
            return scores

        assert asyncio.run(score_all(config)) == expected, options


def test_readme_verifiers_snippet(tmp_path, monkeypatch):
    """The README's verifiers lines as written (export-dataset, the reward module, verifiers 0.4's TaskConfig), run
    from a folder laid out as the README's: Task.score gives `rfteval grade`'s scores."""
    readme = (REPO / "docs" / "rewards.md").read_text(encoding="utf-8")
    section = readme[readme.index("**verifiers** (and prime-rl"):readme.index("**OpenRLHF**")]
    bash = section.split("```bash\n", 1)[1].split("```", 1)[0].strip().splitlines()
    code = section.split("```python\n", 1)[1].split("```", 1)[0].splitlines()
    reward_line = next(line.split("#")[0].strip() for line in code if line.startswith("reward = "))
    config_line = next(line for line in code if line.startswith("config = "))
    assert any(line.startswith("env = vf.SingleTurnEnv(") for line in code)  # the legacy form: the 0.1.9 tests
    monkeypatch.chdir(tmp_path)
    (tmp_path / "graders").symlink_to(GRADERS)
    (tmp_path / "datasets").symlink_to(DATASETS)
    export_args = bash[0].split("#")[0].split()
    assert export_args[:2] == ["rfteval", "export-dataset"]
    res = runner.invoke(app, export_args[1:])
    assert res.exit_code == 0, res.output
    (tmp_path / "milo_vf_reward.py").write_text(f"from rfteval.reward import for_verifiers\n\n{reward_line}\n")
    namespace: dict[str, Any] = {"vf": vf}
    exec(config_line, namespace)
    outs, expected = expected_scores(tmp_path, "milo")
    by_id = {row["info"]["id"]: row for row in hf_json(tmp_path / "milo_vf" / "train.jsonl", tmp_path)}
    rows = [(task_data(by_id[o["item_id"]]), [vf.AssistantMessage(content=o["output_text"])]) for o in outs]
    traces = asyncio.run(task_scores(namespace["config"], rows))
    assert [t.rewards["rfteval"].score for t in traces] == expected


# ------------------------------------------------------------------ verifiers 0.4 probes, each against `rfteval grade`

CAPITAL = {"type": "string_check", "name": "capital", "input": "{{sample.output_text}}",
           "reference": "{{item.reference_answer}}", "operation": "eq"}
PARIS = {"id": "paris", "messages": [{"role": "user", "content": "The capital of France?"}],
         "reference_answer": "Paris", "tool": "get_weather", "arguments": '{"city": "Paris"}'}


def probe(tmp_path: Path, grader: dict[str, Any], lines: list[dict[str, Any]], replies: list[tuple[str, list[Any]]],
          outputs: list[dict[str, Any]], form: str = "") -> tuple[list[float | None], list[float], list[Any]]:
    """The probe's replies (item id, the model's sampled messages) scored by Task.score with the reward plugged from
    a file, and the same answers as `rfteval grade`'s outputs lines: (rewards, grade's scores, traces)."""
    items_path, grader_path = tmp_path / "items.jsonl", tmp_path / "probe.json"
    items_path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    grader_path.write_text(json.dumps(grader))
    res = runner.invoke(app, ["export-dataset", str(items_path), "--target", "verifiers", "--out", str(tmp_path / "vf")])
    assert res.exit_code == 0, res.output
    by_id = {row["info"]["id"]: row for row in hf_json(tmp_path / "vf" / "train.jsonl", tmp_path)}
    module = tmp_path / "vf_probe_reward.py"
    module.write_text(f"from rfteval.reward import for_verifiers\n\nreward = for_verifiers({str(grader_path)!r}{form})\n")
    traces = asyncio.run(task_scores(f"{module}:reward", [(task_data(by_id[rid]), sent) for rid, sent in replies]))
    outs = [{"model": "m", "epoch": i + 1, **o} for i, o in enumerate(outputs)]
    graded = grade_cli(tmp_path, items_path, str(grader_path), outs)
    rewards = [t.rewards["rfteval"].score if t.rewards.get("rfteval") else None for t in traces]
    return rewards, [graded["m", o["item_id"], o["epoch"]] for o in outs], traces


def test_probe_flat_tool_calls(tmp_path):
    """verifiers 0.4's traces hold tool calls flat ({id, type, name, namespace, arguments}); a grader reading
    OpenAI's `function.name` gets OpenAI's shape (before: a template error, 0, where grade gives 1.0)."""
    from verifiers.v1.types import ToolCall

    from tests.support.trainer_shapes import FLAT_CALLS, FLAT_CALLS_AS_OPENAI, FLAT_TOOL_GRADER

    grader, openai = FLAT_TOOL_GRADER, FLAT_CALLS_AS_OPENAI
    calls = [ToolCall(**c) for c in FLAT_CALLS]
    rewards, graded, _ = probe(
        tmp_path, grader, [PARIS], [("paris", [vf.AssistantMessage(content="", tool_calls=[c])]) for c in calls],
        [{"item_id": "paris", "output_text": "", "output_tools": [o]} for o in openai])
    assert graded == [1.0, 0.5, 0.0]  # a custom tool's call has no `function`: an error in grade, scored 0
    assert rewards == graded


def test_probe_reasoning_field_whitespace(tmp_path):
    """A server with a reasoning parser: the thinking in reasoning_content, the content "\n\nParis". `rfteval
    grade` strips the answer beside a reasoning field; so does the reward (before: 0.0 on an exact match)."""
    sent = [vf.AssistantMessage(content="\n\nParis", reasoning_content="France's capital is Paris."),
            vf.AssistantMessage(content="\n\nParis")]  # no field: graded as sent, in both
    rewards, graded, _ = probe(tmp_path, CAPITAL, [PARIS], [("paris", [m]) for m in sent], [
        {"item_id": "paris", "output_text": "\n\nParis", "reasoning_content": "France's capital is Paris."},
        {"item_id": "paris", "output_text": "\n\nParis"}])
    assert graded == [1.0, 0.0] and rewards == graded


def test_probe_prompt_only_assistant_turn(tmp_path):
    """A trace stopped before the model's first reply holds only the prompt, here with a few-shot assistant turn
    that is the right answer: no sampled reply is an empty answer (before: the few-shot turn graded, 1.0)."""
    few_shot = {**PARIS, "messages": [{"role": "user", "content": "The capital of Italy?"},
                                      {"role": "assistant", "content": "Paris"},  # a (wrong) few-shot turn
                                      {"role": "user", "content": "The capital of France?"}]}
    rewards, graded, traces = probe(tmp_path, CAPITAL, [few_shot], [("paris", []), ("paris", [
        vf.AssistantMessage(content="Paris")])], [{"item_id": "paris", "output_text": ""},
                                                  {"item_id": "paris", "output_text": "Paris"}])
    assert [len(t.assistant_messages) for t in traces] == [0, 1]
    assert graded == [0.0, 1.0] and rewards == graded


def test_probe_errors_score_zero_counted(tmp_path):
    """A grading error: Task.score records the reward (0.0, OpenAI's rule, as `rfteval grade` scores it) instead of
    failing on float(None); the error is counted in the trace's metric and on the reward. on_error="none", which
    verifiers cannot record, is refused when the reward is built."""
    from verifiers.v1.utils.loaders import file_module

    grader = {"type": "python", "name": "boom", "source": (
        "def grade(sample, item):\n"
        "    if sample['output_text'] == 'boom':\n"
        "        raise ValueError('boom')\n"
        "    return float(sample['output_text'] == item['reference_answer'])\n")}
    rewards, graded, traces = probe(tmp_path, grader, [PARIS], [("paris", [vf.AssistantMessage(content=t)])
                                                                 for t in ("boom", "Paris")],
                                    [{"item_id": "paris", "output_text": t} for t in ("boom", "Paris")])
    assert graded == [0.0, 1.0] and rewards == graded
    assert [t.metrics["rfteval_boom_error"] for t in traces] == [1.0, 0.0]
    counts = file_module(str(tmp_path / "vf_probe_reward.py")).reward.args[0].error_counts
    assert sum(counts.values()) == 1, counts
    with pytest.raises(ValueError, match="on_error='none' cannot be a verifiers reward"):
        for_verifiers(CAPITAL, on_error="none")


def test_probe_sync_form_in_task_score(tmp_path):
    """asynchronous=False plugged into Task.score, which gathers what every reward returns: its float result is
    awaitable, so the synchronous form scores as the async one (before: a TypeError inside Task.score)."""
    sent = [vf.AssistantMessage(content=t) for t in ("Paris", "<think>hmm</think>\n\nParis", "Lyon")]
    rewards, graded, _ = probe(tmp_path, CAPITAL, [PARIS], [("paris", [m]) for m in sent],
                               [{"item_id": "paris", "output_text": m.content} for m in sent],
                               form=", asynchronous=False")
    assert graded == [1.0, 1.0, 0.0] and rewards == graded


# The probes together, for vf-replay: one python grader reading what each probe varies (a shape that grade and the
# reward both see; "boom" raises, a custom tool's call has no `function`: errors, scored 0).
PROBE_GRADER = {"type": "python", "name": "probes", "source": (
    "def grade(sample, item):\n"
    "    if sample['output_text'] == 'boom':\n"
    "        raise ValueError('boom')\n"
    "    if sample['output_tools']:\n"
    "        f = sample['output_tools'][0]['function']\n"
    "        return 0.5 * (f['name'] == item['tool']) + 0.5 * (f['arguments'] == item['arguments'])\n"
    "    return float(sample['output_text'] == item['reference_answer'])\n")}
TASKSET = """from typing import Any

from verifiers.v1.task import Task, TaskData
from verifiers.v1.taskset import Taskset


class RFTTask(TaskData):
    answer: str = ""
    info: dict[str, Any] = {}


class RFT(Task[RFTTask]):
    pass


class RFTTaskset(Taskset[RFT]):
    def load(self):
        return []


__all__ = ["RFTTaskset"]
"""


def probe_traces() -> tuple[list[dict[str, Any]], list[tuple[str, list[Any]]], list[dict[str, Any]]]:
    """(items, the replies each trace holds, `rfteval grade`'s outputs lines) of every probe."""
    from verifiers.v1.types import ToolCall

    few_shot = {**PARIS, "id": "few-shot", "messages": [
        {"role": "user", "content": "The capital of Italy?"}, {"role": "assistant", "content": "Paris"},
        {"role": "user", "content": "The capital of France?"}]}
    right = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
    wrong = {"id": "c2", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Lyon"}'}}
    custom = {"id": "c3", "type": "custom", "custom": {"name": "get_weather", "input": "Paris"}}
    flat = [ToolCall(id="c1", name="get_weather", arguments='{"city": "Paris"}'),
            ToolCall(id="c2", name="get_weather", arguments='{"city": "Lyon"}'),
            ToolCall(id="c3", type="custom", name="get_weather", arguments="Paris")]
    replies = [("paris", [vf.AssistantMessage(content="", tool_calls=[c])]) for c in flat] + [
        ("paris", [vf.AssistantMessage(content="\n\nParis", reasoning_content="It is Paris.")]),
        ("paris", [vf.AssistantMessage(content="\n\nParis")]),
        ("few-shot", []),
        ("few-shot", [vf.AssistantMessage(content="Paris")]),
        ("paris", [vf.AssistantMessage(content="boom")]),
        ("paris", [vf.AssistantMessage(content="<think>hmm</think>\n\nParis")])]
    outputs = [{"item_id": "paris", "output_text": "", "output_tools": [c]} for c in (right, wrong, custom)] + [
        {"item_id": "paris", "output_text": "\n\nParis", "reasoning_content": "It is Paris."},
        {"item_id": "paris", "output_text": "\n\nParis"},
        {"item_id": "few-shot", "output_text": ""},
        {"item_id": "few-shot", "output_text": "Paris"},
        {"item_id": "paris", "output_text": "boom"},
        {"item_id": "paris", "output_text": "<think>hmm</think>\n\nParis"}]
    return [PARIS, few_shot], replies, outputs


@pytest.mark.parametrize("form", ["", ", asynchronous=False"], ids=["async", "sync"])
def test_vf_replay_probes_equal_rfteval_grade(tmp_path, form):
    """`vf-replay` (verifiers 0.4's offline re-scoring CLI, run as a command) over a saved run of every probe's
    trace, the reward plugged from a file in the taskset's task config: each re-scored reward is `rfteval grade`'s
    score, errors included (0, counted in the trace's metric), and no trace fails."""
    from verifiers.v1.episode import Episode
    from verifiers.v1.trace import TraceTask
    from verifiers.v1.utils.trace_store import write_episode

    lines, replies, outputs = probe_traces()
    items_path, grader_path = tmp_path / "items.jsonl", tmp_path / "probes.json"
    items_path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    grader_path.write_text(json.dumps(PROBE_GRADER))
    graded = grade_cli(tmp_path, items_path, str(grader_path),
                       [{"model": "m", "epoch": i + 1, **o} for i, o in enumerate(outputs)])
    expected = [graded["m", o["item_id"], i + 1] for i, o in enumerate(outputs)]
    assert expected == [1.0, 0.5, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 1.0]

    res = runner.invoke(app, ["export-dataset", str(items_path), "--target", "verifiers", "--out", str(tmp_path / "vf")])
    assert res.exit_code == 0, res.output
    by_id = {row["info"]["id"]: row for row in hf_json(tmp_path / "vf" / "train.jsonl", tmp_path)}
    package = tmp_path / "pkg" / "rfteval_probe_taskset"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(TASKSET)
    module = tmp_path / "vf_probe_reward.py"
    module.write_text(f"from rfteval.reward import for_verifiers\n\nreward = for_verifiers({str(grader_path)!r}{form})\n")
    run = tmp_path / "run"
    (run / "configs" / "resolved").mkdir(parents=True)
    (run / "configs" / "resolved" / "eval.json").write_text(json.dumps({"taskset": {
        "id": "rfteval_probe_taskset", "task": {"rewards": {"rfteval": {"fn": f"{module}:reward"}}}}}))
    for i, (rid, sent) in enumerate(replies):
        trace = trace_of(task_data(by_id[rid]).model_copy(update={"idx": i}), sent)
        trace.is_completed = trace.ok = True
        write_episode(run, Episode(task=TraceTask(type="RFT", data=trace.task.data), ok=True, traces=[trace]))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "pkg"),
                                                        *filter(None, [os.environ.get("PYTHONPATH")])])}
    proc = subprocess.run([str(Path(sys.executable).parent / "vf-replay"), str(run), "--output-dir",
                           str(tmp_path / "replayed"), "--rich", "false"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    traces = [t for line in (tmp_path / "replayed" / "traces.jsonl").read_text().splitlines() if line.strip()
              for t in json.loads(line)["traces"]]
    traces.sort(key=lambda t: t["task"]["data"]["idx"])
    assert [t.get("errors", []) for t in traces] == [[]] * len(replies)
    assert [t["rewards"]["rfteval"]["score"] for t in traces] == expected
    assert [t["metrics"]["rfteval_probes_error"] for t in traces] == [0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0]


# ------------------------------------------------------------------ verifiers 0.1.9: SingleTurnEnv, Rubric.score_group


def legacy_or_skip() -> None:
    if not (LEGACY / "verifiers" / "__init__.py").is_file():
        missing(f"verifiers 0.1.9 is not installed in {LEGACY}", "trainers")


def run_legacy(tmp_path: Path, case: str, scored: list[tuple[str, dict[str, Any], dict[str, str], float]],
               with_items: bool, asynchronous: bool = True) -> list[dict[str, Any]]:
    """Every scored reply rolled out and scored by verifiers 0.1.9 (tests/support/legacy_verifiers.py): the fake server
    answers each example's requests of a shape with that example's replies in turn (a two-turn rollout's first
    request with FIRST_TURN), so each reply is served once."""
    by_prompt = {json.dumps([m["content"] for m in it["messages"] if m["role"] == "user"]): it["id"]
                 for it in items(case)}
    queues: dict[tuple[str, str], deque[dict[str, str]]] = defaultdict(deque)
    for shape, o, r, _ in scored:
        queues[shape, o["item_id"]].append(r)

    def respond(req: Request) -> Reply:
        messages = req.body["messages"]
        if req.model == "two_turns" and not any(m["role"] == "assistant" for m in messages):
            return Reply(text=FIRST_TURN)
        rid = by_prompt[json.dumps([t for t in req.user_texts() if t != FOLLOW_UP])]
        r = queues[req.model, rid].popleft()
        return Reply(text=r["content"], reasoning_content=r.get("reasoning_content"))

    rollouts: dict[str, Counter[str]] = defaultdict(Counter)
    for shape, o, _, _ in scored:
        rollouts[shape][o["item_id"]] += 1
    spec_path, out_path = tmp_path / "legacy-spec.json", tmp_path / "legacy-out.json"
    with FakeOpenAI(respond) as server:
        spec_path.write_text(json.dumps({
            "dataset": str(export(case, "verifiers", tmp_path / "vf")), "grader": str(GRADERS / f"{case}.json"),
            "items": str(DATASETS / case / "items.jsonl") if with_items else None, "asynchronous": asynchronous,
            "base_url": server.base_url, "cache": str(tmp_path / ".hf-cache"), "rollouts": rollouts}))
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(LEGACY), *filter(None, [os.environ.get("PYTHONPATH")])])}
        proc = subprocess.run([sys.executable, str(LEGACY_SCRIPT), str(spec_path), str(out_path)],
                              env=env, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert not any(queues.values()), "every reply is served once"
    return json.loads(out_path.read_text())


def agreement(scored: list[tuple[str, dict[str, Any], dict[str, str], float]], rows: list[dict[str, Any]]
              ) -> tuple[int, list[tuple[Any, ...]]]:
    """How many rollouts got `rfteval grade`'s score for their reply, and the ones that did not. A rollout is known
    by its example and reply (the group's rollouts run concurrently); equal replies of an example have one score."""
    expected: dict[tuple[str, str, str, str | None], float] = {}
    for shape, o, r, score in scored:
        key = (shape, o["item_id"], r["content"], r.get("reasoning_content"))
        assert expected.setdefault(key, score) == score, key
    assert len(rows) == len(scored)
    wrong = [(row["shape"], row["id"], row["reward"], expected[row["shape"], row["id"], row["content"],
                                                                row["reasoning"]]) for row in rows
             if row["metric"] != expected[row["shape"], row["id"], row["content"], row["reasoning"]]
             or row["reward"] != row["metric"] or row["error"]]
    return len(rows) - len(wrong), wrong


@pytest.mark.parametrize("with_items", [False, True], ids=["exported", "items"])
@pytest.mark.parametrize("case", RECORDING_CASES)
def test_legacy_rubric_equals_rfteval_grade(case, with_items, tmp_path):
    """Every recorded completion of the case in every shape (plain, think block, template-opened block, unclosed
    block, reasoning field, two turns), rolled out and group-scored by verifiers 0.1.9: each reward is `rfteval
    grade`'s score. The Rubric passes `task` as a string (the env id) and `info` as the exported line; with items=
    the item is the line named by info's id."""
    legacy_or_skip()
    scored = shaped_scores(tmp_path, case)
    rows = run_legacy(tmp_path, case, scored, with_items)
    assert {row["task"] for row in rows} == {f"rfteval-{shape}" for shape, *_ in scored}  # a string, every time
    assert {row["turns"] for row in rows if row["shape"] == "two_turns"} == {2}
    agreed, wrong = agreement(scored, rows)
    assert not wrong, f"{agreed} of {len(rows)} agree; first disagreements: {wrong[:5]}"


def test_legacy_rubric_sync_form(tmp_path):
    """The synchronous form in the legacy Rubric (it awaits what is awaitable and calls float() on the rest)."""
    legacy_or_skip()
    scored = [s for s in shaped_scores(tmp_path, "milo", ("plain", "reasoning_field"))]
    agreed, wrong = agreement(scored, run_legacy(tmp_path, "milo", scored, False, asynchronous=False))
    assert not wrong and agreed == len(scored) == 132


def run_legacy_probe(tmp_path: Path, grader: dict[str, Any] | Path, lines: list[dict[str, Any]] | Path,
                     replies: list[tuple[str, Reply]], options: dict[str, Any] | None = None
                     ) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """The replies (item id, what the server sends) rolled out by verifiers 0.1.9's SingleTurnEnv and scored by
    Rubric.score_group with for_verifiers(grader, **options): its rows (tests/support/legacy_verifiers.py) and the reward's
    error_counts. An item's requests get its replies in turn."""
    items_path = lines if isinstance(lines, Path) else tmp_path / "items.jsonl"
    if not isinstance(lines, Path):
        items_path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    grader_path = grader if isinstance(grader, Path) else tmp_path / "probe.json"
    if not isinstance(grader, Path):
        grader_path.write_text(json.dumps(grader))
    res = runner.invoke(app, ["export-dataset", str(items_path), "--target", "verifiers", "--out", str(tmp_path / "vf")])
    assert res.exit_code == 0, res.output
    rows_in = [json.loads(line) for line in items_path.read_text().splitlines() if line.strip()]
    by_prompt = {json.dumps([m["content"] for m in it["messages"] if m["role"] == "user"]): it["id"] for it in rows_in}
    queues: dict[str, deque[Reply]] = defaultdict(deque)
    for rid, r in replies:
        queues[rid].append(r)

    def respond(req: Request) -> Reply:
        return queues[by_prompt[json.dumps(req.user_texts())]].popleft()

    spec_path, out_path, counts = tmp_path / "legacy-spec.json", tmp_path / "legacy-out.json", tmp_path / "counts.json"
    with FakeOpenAI(respond) as server:
        spec_path.write_text(json.dumps({
            "dataset": str(tmp_path / "vf" / "train.jsonl"), "grader": str(grader_path), "items": None,
            "asynchronous": True, "options": options, "counts": str(counts), "base_url": server.base_url,
            "cache": str(tmp_path / ".hf-cache"), "rollouts": {"plain": Counter(rid for rid, _ in replies)}}))
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(LEGACY), *filter(None, [os.environ.get("PYTHONPATH")])])}
        proc = subprocess.run([sys.executable, str(LEGACY_SCRIPT), str(spec_path), str(out_path)],
                              env=env, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert not any(queues.values()), "every reply is served once"
    rows = json.loads(out_path.read_text())
    assert not [row["error"] for row in rows if row["error"]]
    assert all(row["reward"] == row["metric"] for row in rows)
    return rows, json.loads(counts.read_text())


def probe_items(n: int) -> list[dict[str, Any]]:
    """PARIS n times, each with a prompt of its own (the fake server knows an example by its prompt): one rollout
    per example, so each row is known by its id."""
    return [{**PARIS, "id": f"p{i}", "messages": [{"role": "user", "content": f"The capital of France? ({i})"}]}
            for i in range(n)]


def test_legacy_probe_tool_calls(tmp_path):
    """The model's tool calls as verifiers 0.1.9 keeps them (the client's `tool_call.model_dump()`, OpenAI's shape,
    a custom tool's call included): each reward is `rfteval grade`'s score for the same calls."""
    from tests.support.trainer_shapes import FLAT_CALLS_AS_OPENAI, FLAT_TOOL_GRADER

    lines = probe_items(len(FLAT_CALLS_AS_OPENAI))
    rows, _ = run_legacy_probe(tmp_path, FLAT_TOOL_GRADER, lines,
                               [(it["id"], Reply(text="", tool_calls=[c])) for it, c in zip(lines, FLAT_CALLS_AS_OPENAI)])
    assert [row["tool_calls"][0]["type"] for row in sorted(rows, key=lambda r: r["id"])] == ["function", "function",
                                                                                            "custom"]
    (tmp_path / "g").mkdir()
    graded = grade_cli(tmp_path / "g", tmp_path / "items.jsonl", str(tmp_path / "probe.json"), [
        {"model": "m", "epoch": 1, "item_id": it["id"], "output_text": "", "output_tools": [c]}
        for it, c in zip(lines, FLAT_CALLS_AS_OPENAI)])
    expected = [graded["m", it["id"], 1] for it in lines]
    assert expected == [1.0, 0.5, 0.0]  # a custom tool's call has no `function`: an error in grade, scored 0
    assert [{row["id"]: row["reward"] for row in rows}[it["id"]] for it in lines] == expected


def test_legacy_probe_errors_score_zero_counted(tmp_path):
    """A grader that raises: the legacy Rubric records 0.0 (OpenAI's rule, as `rfteval grade` scores it), the
    rollout has no error, and the reward counts the error."""
    grader = {"type": "python", "name": "boom", "source": (
        "def grade(sample, item):\n"
        "    if sample['output_text'] == 'boom':\n"
        "        raise ValueError('boom')\n"
        "    return float(sample['output_text'] == item['reference_answer'])\n")}
    lines, texts = probe_items(3), ["boom", "Paris", "boom"]
    rows, counts = run_legacy_probe(tmp_path, grader, lines, [(it["id"], Reply(text=t)) for it, t in zip(lines, texts)])
    (tmp_path / "g").mkdir()
    graded = grade_cli(tmp_path / "g", tmp_path / "items.jsonl", str(tmp_path / "probe.json"), [
        {"model": "m", "epoch": 1, "item_id": it["id"], "output_text": t} for it, t in zip(lines, texts)])
    expected = [graded["m", it["id"], 1] for it in lines]
    assert expected == [0.0, 1.0, 0.0]
    assert [{row["id"]: row["reward"] for row in rows}[it["id"]] for it in lines] == expected
    assert sum(counts.values()) == 2, counts


@pytest.mark.parametrize("tags", [False, True], ids=["default", "think_tags"])
def test_legacy_probe_custom_think_tags(tags, tmp_path):
    """for_verifiers(think_tags=...) under the legacy Rubric strips what `rfteval grade --think-tags` strips
    (trainer_cases.custom_tag_probes, recorded milo answers); without it, grade's scores without the flag."""
    outs, tagged, plain = custom_tag_probes(tmp_path)
    assert tagged != plain
    expected = tagged if tags else plain
    rows, _ = run_legacy_probe(tmp_path, GRADERS / "milo.json", DATASETS / "milo" / "items.jsonl",
                               [(o["item_id"], Reply(text=o["output_text"])) for o in outs],
                               {"think_tags": THINK_TAGS} if tags else None)
    want: dict[tuple[str, str], float] = {}
    for o, score in zip(outs, expected):
        assert want.setdefault((o["item_id"], o["output_text"]), score) == score
    assert len(rows) == len(outs)
    assert [row["reward"] for row in rows] == [want[row["id"], row["content"]] for row in rows]
