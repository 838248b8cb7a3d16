"""Run under verifiers 0.1.9 (its `pip install --target` directory first on PYTHONPATH; the venv holds 0.4.0):
rfteval's reward scored by legacy verifiers' own rollout and scoring code, for tests/reward/test_verifiers.py.

`python tests/support/legacy_verifiers.py SPEC.json OUT.json`. The spec names the dataset written by `rfteval export-dataset
--target verifiers`, the grader, items= (or null), the reward's form, the model server's base_url (tests/support/fake_openai.py
on 127.0.0.1, whose scripted replies stand for the model) and, per shape, how many rollouts each example gets. The
spec may add `options` (more keyword arguments of for_verifiers, e.g. think_tags) and `counts` (a path that gets
the reward's error_counts after the run). Each shape is one `Environment.generate` over the dataset as verifiers
loads it (`datasets.load_dataset("json")`): `SingleTurnEnv`, or for "two_turns" a `MultiTurnEnv` whose
environment asks once more, with `vf.Rubric(funcs=[reward])`; an example's rollouts are one group, scored by
`Rubric.score_group`. OUT.json gets, per rollout, the example's id, the last reply's content, tool calls and
reasoning field as the server sent them, and the rollout's reward and the reward function's metric as verifiers recorded them."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

FOLLOW_UP = "Now give your final answer."  # trainer_cases.FOLLOW_UP (this script imports nothing from tests/)


def main(spec_path: str, out_path: str) -> None:
    import verifiers as vf
    from openai import AsyncOpenAI

    from datasets import load_dataset
    from rfteval.reward import for_verifiers

    assert vf.__version__ == "0.1.9", vf.__file__
    spec = json.loads(Path(spec_path).read_text())

    class TwoTurns(vf.MultiTurnEnv):
        def __init__(self, **kwargs: Any):
            super().__init__(max_turns=2, **kwargs)

        async def env_response(self, messages: Any, state: Any, **kwargs: Any) -> Any:
            return [{"role": "user", "content": FOLLOW_UP}]

    ds = load_dataset("json", data_files=spec["dataset"], split="train", cache_dir=spec["cache"])
    options = {"items": spec["items"]} if spec["items"] else {}
    options.update(spec.get("options") or {})
    reward = for_verifiers(spec["grader"], asynchronous=spec["asynchronous"], **options)
    name = reward.__name__
    rows: list[dict[str, Any]] = []

    async def run_all() -> None:  # one loop for the client's connections
        client = AsyncOpenAI(base_url=spec["base_url"], api_key="unused", max_retries=0)
        for shape, counts in spec["rollouts"].items():
            env_cls = TwoTurns if shape == "two_turns" else vf.SingleTurnEnv
            env = env_cls(dataset=ds, rubric=vf.Rubric(funcs=[reward]), env_id=f"rfteval-{shape}")
            inputs = [row for row in env.get_dataset().to_list() for _ in range(counts.get(row["info"]["id"], 0))]
            # at most 16 requests in flight: the local server's listen queue is short
            out = await env.generate(inputs, client=client, model=shape, use_tqdm=False, max_concurrent=16)
            for state in out["state"]:
                message = state["trajectory"][-1]["response"].choices[0].message
                rows.append({"shape": shape, "id": state["info"]["id"], "task": state["task"],
                             "content": message.content,
                             "tool_calls": [c.model_dump() for c in message.tool_calls or []],
                             "reasoning": getattr(message, "reasoning_content", None),
                             "reward": state["reward"], "metric": state["metrics"][name],
                             "turns": len(state["trajectory"]),
                             "error": repr(state["error"]) if state.get("error") else None})

    asyncio.run(run_all())
    Path(out_path).write_text(json.dumps(rows))
    if spec.get("counts"):
        Path(spec["counts"]).write_text(json.dumps(reward.args[0].error_counts))


if __name__ == "__main__":
    main(*sys.argv[1:])
