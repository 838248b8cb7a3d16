"""PrimeIntellect verifiers 0.4 scores with rfteval's reward through its own code: a `verifiers.v1` Task with the
reward plugged by file path (`TaskConfig.rewards`, verifiers' loader), scored by `Task.score` on a real Trace, for
every local dataset exported with `rfteval export-dataset --target verifiers` and read back with
`load_dataset("json")`. verifiers 0.4 has no legacy `Rubric`; its keyword injection (`invoke`, which passes a
function the arguments it names) is run with the Rubric's names (completion, prompt, answer, info, state)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from trainer_cases import GRADERS, LOCAL_CASES, THINK_TAGS, custom_tag_probes, expected_scores, export, hf_json

from rfteval.reward import for_verifiers

vf = pytest.importorskip("verifiers.v1", reason="verifiers is not installed: `make trainers` installs it")
pytestmark = pytest.mark.slow


def plug(tmp_path: Path, case: str) -> str:
    """A module holding the reward, plugged as verifiers plugs rewards: `path/to/file.py:function`."""
    module = tmp_path / f"vf_{case}_reward.py"
    module.write_text(f"from rfteval.reward import for_verifiers\n\nreward = for_verifiers({str(GRADERS / f'{case}.json')!r})\n")
    return f"{module}:reward"


@pytest.mark.parametrize("case", LOCAL_CASES)
def test_task_score_equals_rfteval_grade(case, tmp_path):
    from verifiers.v1.configs.task import RewardFunctionConfig, TaskConfig
    from verifiers.v1.graph import MessageNode
    from verifiers.v1.task import Task, TaskData
    from verifiers.v1.trace import AgentInfo, Trace, TraceTask

    class RFTTask(TaskData):
        answer: str = ""
        info: dict[str, Any] = {}

    class RFT(Task[RFTTask]):
        pass

    outs, expected = expected_scores(tmp_path, case)
    ds = hf_json(export(case, "verifiers", tmp_path / "vf"), tmp_path)
    by_id = {row["info"]["id"]: row for row in ds}
    config = TaskConfig(rewards={"rfteval": RewardFunctionConfig(fn=plug(tmp_path, case))})

    async def score_all() -> list[float]:
        scores = []
        for o in outs:
            row = by_id[o["item_id"]]
            data = RFTTask(prompt=[{"role": m["role"], "content": m["content"]} for m in row["prompt"]],
                           answer=row["answer"], info=row["info"])
            nodes = [MessageNode(message=m, parent=i - 1 if i else None) for i, m in enumerate(data.prompt)]
            nodes.append(MessageNode(message=vf.AssistantMessage(content=o["output_text"]), parent=len(nodes) - 1))
            trace = Trace(task=TraceTask(type="RFT", data=data), agent=AgentInfo(config=vf.AgentConfig()), nodes=nodes)
            await RFT(data, config).score(trace)
            scores.append(trace.rewards["rfteval"].score)
        return scores

    assert asyncio.run(score_all()) == expected


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

    async def sync_fn(**kw: Any) -> Any:  # invoke_all gathers awaitables: the sync form is awaited through this
        return sync(**kw)

    sync_fn.__signature__ = __import__("inspect").signature(sync)  # type: ignore[attr-defined]
    try:
        assert [asyncio.run(run(reward, o)) for o in outs] == expected
        assert [asyncio.run(run(sync_fn, o)) for o in outs[:6]] == expected[:6]
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
                nodes.append(MessageNode(message=vf.AssistantMessage(content=o["output_text"]),
                                         parent=len(nodes) - 1))
                trace = Trace(task=TraceTask(type="RFT", data=data), agent=AgentInfo(config=vf.AgentConfig()),
                              nodes=nodes)
                await RFT(data, config).score(trace)
                scores.append(trace.rewards["rfteval"].score)
            return scores

        assert asyncio.run(score_all(config)) == expected, options
