"""What the verifiers 0.4 taskset package `rfteval export-environment --target prime-rl` writes calls: its tasks from
the RFT lines, and its reward from a trace.

prime-rl loads a taskset by id from an installed package (`vf.load_taskset(config.env.taskset)` in its orchestrator,
`vf.load_environment(config)` in its env server), ships each task's data to the env server as a dict, which
validates it into the taskset's TaskData, and scores a finished trace with `Task.score`, which calls the task's
`@vf.reward` methods with `trace`. The package holds only the classes verifiers asks for; the work is here, so it
scores as `rfteval grade` does, and as this module does in the installed rfteval.

The RFT line rides in the task data as JSON text (`item`), exact through any wire. The sample is the trace's
generated messages (trace_generated: the sampled turns, tool results and environment turns, never the task's prompt)
built as `rfteval run --tools` builds a rollout's (core.sample_from_messages): the last sampled assistant turn is the
answer, the trajectory sample["rollout"]; a trace with none is the empty answer (never a few-shot assistant turn of
the prompt). A grading error scores 0 (a reward in
`Task.score` is a float) and is logged once per type."""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import Mapping
from pathlib import Path

from rfteval.data.json_types import JSONObject, JSONValue
from rfteval.graders.base import GradeResult
from rfteval.reward.base import Reward
from rfteval.reward.core import plain_message, sample_from_messages
from rfteval.reward.options import RewardOptions

# The keys of the task data the package's TaskData declares (besides verifiers' own `id` and `prompt`).
ANSWER = "answer"
ITEM = "item"


def _reference_text(value: JSONValue) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def task_rows(dataset: str | Path, reference_field: str = "reference_answer") -> list[JSONObject]:
    """One task's data per RFT line, as `rfteval grade` reads the file: its id (the line's, else rfteval's content
    hash), its messages as the prompt (OpenAI's `developer` role as `system`, the roles verifiers knows), the
    reference as text (`answer`, for logs) and the line itself as JSON text (`item`)."""
    from rfteval.data.dataset import iter_items

    rows: list[JSONObject] = []
    for it in iter_items(Path(dataset)):
        messages = it.data.get("messages")
        prompt: list[JSONValue] = [{**m, "role": "system"} if isinstance(m, dict) and m.get("role") == "developer"
                                   else m for m in (messages if isinstance(messages, list) else [])]
        rows.append({"id": it.id, "prompt": prompt, ANSWER: _reference_text(it.data.get(reference_field)),
                     ITEM: json.dumps(it.data, ensure_ascii=False)})
    return rows


def trace_generated(trace: object, prompt_len: int | None = None) -> list[object]:
    """What the model and its tools generated in a verifiers 0.4 trace, in order (replies, tool results, an
    environment's user turns), never the prompt's: the nodes from the first one its model calls committed (what a real
    rollout records), else from the first node marked `sampled` (verifiers' provenance flag), else those after the
    prompt (`prompt_len`); none when the model never replied."""
    nodes = list(getattr(trace, "nodes", None) or [])
    called = sorted({c.node for c in getattr(trace, "calls", None) or [] if getattr(c, "node", None) is not None})
    called = [i for i in called if 0 <= i < len(nodes)]
    sampled = [i for i, n in enumerate(nodes) if getattr(n, "sampled", False)]
    start = called[0] if called else sampled[0] if sampled else prompt_len if prompt_len is not None else len(nodes)
    return [plain_message(getattr(n, "message", None)) for n in nodes[start:]]


class TasksetReward(Reward):
    """The grader of an exported taskset, one per (grader, options) in a process."""

    def score_trace(self, item_json: str, prompt_len: int, trace: object) -> tuple[float, GradeResult]:
        sample = sample_from_messages(trace_generated(trace, prompt_len), self.options)
        result = self.grade_one(sample, json.loads(item_json))
        value = self.value(result)
        return (0.0 if value is None else value), result


@functools.cache
def _reward(grader: str, options_json: str) -> TasksetReward:
    options = json.loads(options_json)
    options["on_error"] = "zero"
    return TasksetReward(grader, RewardOptions(**options))


def taskset_reward(grader: str | Path, options: Mapping[str, object] | None = None) -> TasksetReward:
    """The process's reward for a grader file and the exported options (built once: one python pool, one judge)."""
    return _reward(str(grader), json.dumps(dict(options or {}), sort_keys=True))


async def score_trace(grader: str | Path, options: Mapping[str, object] | None, item_json: str, prompt_len: int,
                      trace: object) -> float:
    """The reward of one trace, for the package's `@vf.reward`: graded in a thread (Task.score gathers rewards). A
    grading error scores 0 and is counted in the trace's `rfteval_error` metric (as for_verifiers counts it), which
    prime-rl and vf-eval report: without it an error is a silent 0 among real ones."""
    reward = taskset_reward(grader, options)
    value, result = await asyncio.to_thread(reward.score_trace, item_json, prompt_len, trace)
    record_metric = getattr(trace, "record_metric", None)
    if callable(record_metric):
        record_metric("rfteval_error", float(result.error is not None))
    return value
