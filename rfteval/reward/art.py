"""OpenPipe ART: a grader as the reward of ART's trajectories.

ART trains on `art.Trajectory` objects: `messages_and_choices` holds the prompt messages (dicts) and the sampled
turns (OpenAI `Choice` objects, the only trainable ones), and `trajectory.reward` is what it trains on. Rewards are
set per trajectory in the rollout, or for a whole `art.TrajectoryGroup` by the `after_each` callback of
`art.gather_trajectory_groups` (the slot RULER's `ruler_score_group` fills). `for_art(grader)` serves both:

    reward = for_art("graders/milo.json", items="datasets/milo/items.jsonl")
    groups = await art.gather_trajectory_groups(..., after_each=reward)   # every trajectory of each group
    await reward.trajectory(t)                                            # or one, inside the rollout

The sample is built from what was generated after the prompt (each sampled `Choice`'s message, the tool and user
messages between them) by rollout_sample, as `rfteval run --tools` builds a rollout's: the final turn gives
output_text and output_tools (a trajectory without a Choice has no reply, the empty answer, never a few-shot
assistant turn of the prompt; its reasoning field or think block is not the answer, as in `rfteval grade`), the
whole trajectory `sample["rollout"]`, so a grader that counts tool calls scores training as it scores the eval.
The item is the items= line named by the trajectory's (else the group's) metadata id, else the prompt
messages with the metadata. A group judge (rfteval's `group_judge` grader) ranks a whole group in one judge call,
as RULER does, and keeps the reward it replaces in `metrics["independent_reward"]` as RULER does.
Each trajectory's metrics get `rfteval/grading_error` (1 when grading failed, its reward then 0) and sub-scores."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Unpack

from rfteval.data.json_types import JSONObject, JSONValue
from rfteval.data.sample import Sample
from rfteval.errors import InputError
from rfteval.graders.base import needs_groups
from rfteval.reward.base import GraderLike, Reward
from rfteval.reward.core import sample_from_messages
from rfteval.reward.episode import plain_metadata, result_metrics
from rfteval.reward.items import plain_data
from rfteval.reward.options import RewardOptions, RewardOptionsArgs

if TYPE_CHECKING:
    import art


def _is_choice(entry: object) -> bool:
    """A sampled turn: ART keeps them as openai's Choice (anything with a .message that is not a mapping)."""
    return not isinstance(entry, Mapping) and hasattr(entry, "message")


def _compact(value: object) -> object:
    """A Choice as a server sent it: the null fields openai's model fills in left out (as the run keeps choices and
    `grade --outputs` reads an ART trajectory's)."""
    if isinstance(value, dict):
        return {k: _compact(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_compact(v) for v in value]
    return value


def _prompt_and_generated(entries: Sequence[object], prompt_len: int | None
                          ) -> tuple[list[JSONObject], list[object], list[JSONValue] | None]:
    """The prompt messages (before the first sampled turn), what was generated after it (each Choice's message, the
    tool and user messages between them), and the final turn's Choice as ART kept it (None without one). With no
    Choice, the generated part starts after the prompt: the item's messages when known, else the last user turn."""
    choices = [i for i, e in enumerate(entries) if _is_choice(e)]
    if choices:
        first = choices[0]
        prompt = [m for m in (plain_data(e) for e in entries[:first]) if isinstance(m, dict)]
        generated = [e.message if _is_choice(e) else e for e in entries[first:]]  # type: ignore[attr-defined]
        last = plain_data(entries[choices[-1]].model_dump(mode="json"))  # type: ignore[attr-defined]  # a Choice
        return prompt, generated, [_compact(last)]  # type: ignore[list-item]  # _compact keeps JSON data JSON
    messages = [m for m in (plain_data(e) for e in entries) if isinstance(m, dict)]
    if prompt_len is None:
        users = [i for i, m in enumerate(messages) if m.get("role") == "user"]
        prompt_len = users[-1] + 1 if users else len(messages)
    return messages[:prompt_len], list(messages[prompt_len:]), None


class ARTReward(Reward):
    """The grader for ART. A grading error scores 0 (a Trajectory's reward is a float; on_error="none" is refused)
    and is counted in `error_counts` and in the trajectory's metrics."""

    none_refused = (
        "has no meaning in ART: Trajectory.reward is a float (the trajectory's metrics count the error: "
        'rfteval/grading_error)')

    def item_of(self, trajectory: art.Trajectory, group_metadata: Mapping[str, object] | None = None) -> JSONObject:
        """The trajectory's item: the items= line named by its metadata id (or the group's); else its prompt
        messages as `messages`, with its metadata."""
        metadata = {**plain_metadata(group_metadata or {}), **plain_metadata(trajectory.metadata)}
        if self.table is not None:
            rid = metadata.get(self.options.id_field)
            if rid is None:
                raise InputError(f"items= is given but the trajectory's metadata has no {self.options.id_field!r}: "
                                 f"set Trajectory(metadata={{{self.options.id_field!r}: ITEM_ID}}) (or the group's)",
                                 field=self.options.id_field)
            return self.table.get(rid)
        prompt, _, _ = _prompt_and_generated(trajectory.messages_and_choices, None)
        return self.find_item(metadata, prompt)

    def _pairs(self, trajectories: Sequence[art.Trajectory], group_metadata: Mapping[str, object] | None
               ) -> tuple[list[tuple[Sample, JSONObject]], list[int]]:
        """(sample, item) per trajectory, and its unit: trajectories of one item share one python process, as an
        item's samples do in `rfteval grade`."""
        pairs: list[tuple[Sample, JSONObject]] = []
        units: list[int] = []
        seen: dict[str, int] = {}
        for t in trajectories:
            item = self.item_of(t, group_metadata)
            messages = item.get("messages")
            prompt_len = len(messages) if self.table is not None and isinstance(messages, list) else None
            _, generated, choice = _prompt_and_generated(t.messages_and_choices, prompt_len)
            pairs.append((sample_from_messages(generated, self.options, choices=choice), item))
            units.append(seen.setdefault(json.dumps(item, sort_keys=True, default=str), len(seen)))
        return pairs, units

    def grade_trajectories(self, trajectories: Sequence[art.Trajectory],
                           group_metadata: Mapping[str, object] | None = None) -> list[float]:
        """Grade the trajectories in one batch (a group judge sees them together), set each one's reward and
        metrics, and return the rewards."""
        pairs, units = self._pairs(trajectories, group_metadata)
        results = self.grade(pairs, units)
        rewards = []
        ranks = needs_groups(self.config)
        for t, result in zip(trajectories, results):
            value = self.value(result)
            assert value is not None  # on_error is "zero"
            if ranks:
                t.metrics["independent_reward"] = t.reward  # what RULER keeps of the reward it replaces
            t.metrics.update(result_metrics(result))
            t.reward = value
            rewards.append(value)
        return rewards

    async def trajectory(self, trajectory: art.Trajectory) -> float:
        """Grade one trajectory (inside a rollout): sets and returns its reward; grading runs in a thread. A grader
        that ranks a group (group_judge) has no score for one trajectory alone: it is refused here."""
        if needs_groups(self.config):
            raise ValueError(f"{self.__name__} ranks a whole group (group_judge): pass it as after_each= of "
                             "art.gather_trajectory_groups, not per trajectory")
        return (await asyncio.to_thread(self.grade_trajectories, [trajectory]))[0]

    async def __call__(self, group: art.TrajectoryGroup) -> art.TrajectoryGroup:
        """`after_each` of art.gather_trajectory_groups: every trajectory of the group graded, in place."""
        await asyncio.to_thread(self.grade_trajectories, group.trajectories, group.metadata)
        return group


def for_art(grader: GraderLike, **options: Unpack[RewardOptionsArgs]) -> ARTReward:
    """An ART reward scoring with `grader`: `after_each=` of art.gather_trajectory_groups (the whole group,
    in place), or `await reward.trajectory(t)` for one. Options as for_trl, except on_error (always "zero")."""
    return ARTReward(grader, RewardOptions(**options))
