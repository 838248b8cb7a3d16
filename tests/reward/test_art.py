"""OpenPipe ART scores with rfteval's grader through its own code: `art.gather_trajectory_groups` gathers
`art.TrajectoryGroup`s of rollouts and calls `for_art(...)` as its `after_each`; every bundled milo, chipstack and math
completion, as the sampled `Choice` of an `art.Trajectory` in each shape (tests/support/trainer_shapes.py: the thinking in
the content or in the message's reasoning_content) and as the second of two turns, gets `rfteval grade`'s score as
`trajectory.reward`. A group judge (rfteval's group_judge) ranks a whole group as RULER does, against
tests/support/fake_openai.py."""

from __future__ import annotations

import asyncio
import json
import os
from collections import defaultdict
from typing import Any

import pytest

from tests.support.optional import require
from tests.support.trainer_cases import DATASETS, GRADERS, grade_cli
from tests.support.trainer_shapes import CASES, FIRST_TURN, FOLLOW_UP, Completion, completions, items

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # ART imports litellm, which fetches prices otherwise
art = require("art", "trainers")

from openai.types.chat.chat_completion import Choice  # noqa: E402

from rfteval.reward.art import for_art  # noqa: E402


def choice(content: str, reasoning: str | None = None) -> Choice:
    """A sampled turn as ART keeps it: openai's Choice (a reasoning parser's field rides as an extra)."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if reasoning is not None:
        message["reasoning_content"] = reasoning
    return Choice.model_validate({"index": 0, "finish_reason": "stop", "message": message})


def trajectory(line: dict[str, Any], c: Completion, key: int, two_turns: bool = False) -> Any:
    """The completion's trajectory; `key` in its metadata finds it again (ART keeps a group's trajectories in the
    order they finish)."""
    turns: list[Any] = [*line["messages"]]
    if two_turns:
        turns += [choice(FIRST_TURN), {"role": "user", "content": FOLLOW_UP}]
    turns.append(choice(c.content, c.reasoning))
    return art.Trajectory(messages_and_choices=turns, metadata={"id": line["id"], "key": key})


async def rollout(t: Any) -> Any:
    await asyncio.sleep(0)
    return t


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES)
def test_gather_trajectory_groups_after_each_equals_rfteval_grade(case, tmp_path):
    cases = completions(tmp_path, case)
    lines = items(case)
    reward = for_art(GRADERS / f"{case}.json", items=str(DATASETS / case / "items.jsonl"))
    by_item: dict[str, list[Any]] = defaultdict(list)
    want: list[tuple[float, str]] = []
    for c in cases:
        by_item[c.item_id].append(trajectory(lines[c.item_id], c, len(want)))
        want.append((c.expected, f"{c.model}/{c.epoch}/{c.shape}"))
        if c.shape == "plain":  # the answer as the second of two turns scores as the answer alone
            by_item[c.item_id].append(trajectory(lines[c.item_id], c, len(want), two_turns=True))
            want.append((c.expected, f"{c.model}/{c.epoch}/two turns"))

    async def gather() -> list[Any]:
        return await art.gather_trajectory_groups(
            (art.TrajectoryGroup(rollout(t) for t in group) for group in by_item.values()),
            after_each=reward, pbar_desc=None)

    groups = asyncio.run(gather())
    got = {t.metadata["key"]: t.reward for g in groups for t in g.trajectories}
    assert len(got) == len(want) == len(cases) + len(cases) // 5
    wrong = [(what, got[k], e) for k, (e, what) in enumerate(want) if got[k] != e]
    assert not wrong, f"{len(wrong)} of {len(got)} differ, e.g. {wrong[:3]}"
    assert all(t.metrics["rfteval/grading_error"] == 0.0 for g in groups for t in g.trajectories)


@pytest.mark.slow
def test_one_trajectory_sub_scores_errors_and_no_reply(tmp_path):
    """Milo (a multi grader) on one trajectory in its rollout: the reward, sub-scores in the metrics; a trajectory
    whose prompt ends in a few-shot assistant turn and has no sampled reply scores the empty answer, not the
    few-shot; a grader that raises scores 0, flagged and counted."""
    line = next(iter(items("milo").values()))
    answer = json.dumps({"events": line["reference_answer"]}) if not isinstance(line["reference_answer"], dict) \
        else json.dumps(line["reference_answer"])
    graded = grade_cli(tmp_path, DATASETS / "milo" / "items.jsonl", str(GRADERS / "milo.json"),
                       [{"item_id": line["id"], "epoch": 1, "output_text": answer, "model": "m"},
                        {"item_id": line["id"], "epoch": 2, "output_text": "", "model": "m"}])
    reward = for_art(GRADERS / "milo.json", items=[line])
    t = art.Trajectory(messages_and_choices=[*line["messages"], choice(answer)], metadata={"id": line["id"]})
    assert asyncio.run(reward.trajectory(t)) == t.reward == graded["m", line["id"], 1]
    assert t.metrics["rfteval/grading_error"] == 0.0 and len(t.metrics) > 1  # the sub-scores
    few_shot = [*line["messages"][:-1], {"role": "assistant", "content": answer}, line["messages"][-1]]
    silent = art.Trajectory(messages_and_choices=few_shot, metadata={"id": line["id"]})
    assert asyncio.run(reward.trajectory(silent)) == graded["m", line["id"], 2] != graded["m", line["id"], 1]

    broken = {"type": "python", "name": "broken", "source": "def grade(sample, item):\n    raise ValueError('no')\n"}
    failing = for_art(broken, items=[line])
    t = art.Trajectory(messages_and_choices=[*line["messages"], choice(answer)], metadata={"id": line["id"]},
                       reward=0.7)
    assert asyncio.run(failing.trajectory(t)) == 0.0 and t.metrics["rfteval/grading_error"] == 1.0
    assert sum(failing.error_counts.values()) == 1
    with pytest.raises(ValueError, match="no meaning in ART"):
        for_art(broken, on_error="none")


def test_without_items_the_item_is_the_prompt_and_the_metadata():
    """A grader reading the trajectory's metadata (scalars, as ART's metadata holds) and its prompt messages."""
    grader = {"type": "string_check", "name": "exact", "operation": "eq", "input": "{{ sample.output_text }}",
              "reference": "{{ item.expected }}"}
    reward = for_art(grader)
    prompt = [{"role": "user", "content": "Say hi."}]
    ts = [art.Trajectory(messages_and_choices=[*prompt, choice(text)], metadata={"expected": "hi"})
          for text in ("hi", "<think>\nhm\n</think>\n\nhi", "hello")]
    # a reasoning parser's field, the answer after it with its newlines: exact match as in `rfteval grade`
    ts.append(art.Trajectory(messages_and_choices=[*prompt, choice("\n\nhi", reasoning="hm")],
                             metadata={"expected": "hi"}))
    assert [asyncio.run(reward.trajectory(t)) for t in ts] == [1.0, 1.0, 0.0, 1.0]
    assert reward.item_of(ts[0]) == {"messages": prompt, "expected": "hi"}


def value_judge(request: Any) -> Any:
    """Scores each sample by the number after 'v=' in its text (as tests/graders/test_group_judge.py does); an ART
    trajectory is shown whole (RULER over trajectories), its final answer inside it."""
    import re

    shown = re.findall(r'<sample id="([^"]+)">\n(.*?)\n</sample>', request.body["messages"][1]["content"], re.S)
    return json.dumps({"scores": [{"id": sid, "explanation": "v", "score": float(re.findall(r"v=([0-9.]+)", text)[-1])}
                                  for sid, text in shown]})


@pytest.mark.slow
def test_a_group_judge_ranks_the_whole_group_like_ruler(fake_openai, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    fake_openai.responder = value_judge
    grader = {"type": "group_judge", "name": "rank", "model": "judge-m", "seed": 7}
    reward = for_art(grader, judge_base_url=fake_openai.base_url)
    prompt = [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "Question?"}]
    values = [0.25, 0.75, 0.5]

    async def gather() -> list[Any]:
        group = art.TrajectoryGroup(rollout(art.Trajectory(messages_and_choices=[*prompt, choice(f"answer v={v}")],
                                                           reward=0.1)) for v in values)
        return await art.gather_trajectory_groups([group], after_each=reward, pbar_desc=None)

    (group,) = asyncio.run(gather())
    assert sorted(t.reward for t in group.trajectories) == sorted(values)
    assert all(t.reward == float(t.messages()[-1]["content"].split("v=")[1]) for t in group.trajectories)
    assert all(t.metrics["independent_reward"] == 0.1 for t in group.trajectories)  # RULER keeps it too
    assert len(fake_openai.requests) == 1  # one judge call for the group
    shown = fake_openai.requests[0].body["messages"][1]["content"]
    assert shown.count("<trajectory") == 3 and "<final_answer>" in shown  # each ranked as a whole trajectory
    with pytest.raises(ValueError, match="after_each"):  # one trajectory alone has no rank
        asyncio.run(reward.trajectory(group.trajectories[0]))


@pytest.mark.slow
def test_the_readmes_call_scores_groups(monkeypatch):
    import ast

    from tests.support.trainer_shapes import readme_block

    monkeypatch.chdir(DATASETS.parent)
    line = next(iter(items("milo").values()))
    trajectories = [art.Trajectory(messages_and_choices=[*line["messages"], choice("{}")], metadata={"id": line["id"]},
                                   reward=0.5)]
    groups = [art.TrajectoryGroup(rollout(t) for t in trajectories)]  # what a training loop hands over
    code = compile(readme_block("**OpenPipe ART**", "python"), "<README>", "exec",
                   flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    scope: dict[str, Any] = {"art": art, "for_art": for_art, "groups": groups}
    asyncio.run(eval(code, scope))
    (group,) = scope["groups"]  # the README rebinds groups to what gather returns
    assert group.trajectories[0].metrics["rfteval/grading_error"] == 0.0 and group.trajectories[0].reward != 0.5


def test_a_sampled_tool_call_scores_as_grade(tmp_path):
    """A Choice whose message calls a tool (openai's ChatCompletionMessageToolCall): output_tools in OpenAI's shape."""
    from tests.support.trainer_shapes import TOOL_GRADER, TOOL_ITEM, TOOL_TEXT, tool_call_expected

    call = {"id": "call_1", "type": "function",
            "function": {"name": TOOL_ITEM["tool"], "arguments": json.dumps(TOOL_ITEM["args"])}}
    sampled = Choice.model_validate({"index": 0, "finish_reason": "tool_calls", "message": {
        "role": "assistant", "content": TOOL_TEXT, "tool_calls": [call]}})
    t = art.Trajectory(messages_and_choices=[*TOOL_ITEM["messages"], sampled], metadata={"id": TOOL_ITEM["id"]})
    reward = for_art(TOOL_GRADER, items=[TOOL_ITEM])
    assert asyncio.run(reward.trajectory(t)) == tool_call_expected(tmp_path) == 1.0


@pytest.mark.slow
def test_custom_think_tags_score_as_rfteval_grade_does(tmp_path):
    """for_art(think_tags=...) strips what `rfteval grade --think-tags` strips, through gather_trajectory_groups'
    after_each; without it, the rewards are grade's without the flag."""
    from tests.support.trainer_cases import THINK_TAGS, custom_tag_probes

    outs, tagged, plain = custom_tag_probes(tmp_path)
    lines = items("milo")
    for options, expected in (({}, plain), ({"think_tags": [THINK_TAGS]}, tagged)):
        reward = for_art(GRADERS / "milo.json", items=str(DATASETS / "milo" / "items.jsonl"), **options)
        ts = [art.Trajectory(messages_and_choices=[*lines[o["item_id"]]["messages"], choice(o["output_text"])],
                             metadata={"id": o["item_id"], "key": k}) for k, o in enumerate(outs)]

        async def gather(ts: list[Any] = ts, reward: Any = reward) -> list[Any]:
            return await art.gather_trajectory_groups([art.TrajectoryGroup(rollout(t) for t in ts)],
                                                      after_each=reward, pbar_desc=None)

        (group,) = asyncio.run(gather())
        got = {t.metadata["key"]: t.reward for t in group.trajectories}
        assert [got[k] for k in range(len(outs))] == expected, options
    assert tagged != plain
