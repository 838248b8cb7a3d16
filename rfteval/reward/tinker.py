"""tinker-cookbook (Thinking Machines' Tinker): an RFT dataset and its grader as tinker-cookbook's RL dataset, whose
environments score with the grader.

tinker-cookbook's single-turn environment is `ProblemEnv` (tinker_cookbook/rl/problem_env.py): its `step` parses the
sampled tokens with the renderer, and its reward is `format_coef * (format - 1) + float(check_answer(text))`, summed
by `TrajectoryGroup.get_total_rewards` with the group rewards of `EnvGroupBuilder.compute_group_rewards`. `RFTEnv`
is a ProblemEnv whose `check_answer` is the grader's score and whose format term is 0 unless `format_coef` is set,
so the reward tinker-cookbook trains on is `rfteval grade`'s score. The grade is computed from the parsed message
itself (its thinking parts are not the answer, as a reasoning field is not in `rfteval grade`), in a thread, so the
rollout loop keeps running; `check_answer` hands that score to ProblemEnv's own reward code. A grader that ranks an
item's samples together (group_judge) grades the group's replies at once instead, as the group rewards of
`RFTGroupBuilder.compute_group_rewards` (the step rewards then hold only the format term).

For tinker-cookbook's tool-use agents (tool_use/: `build_agent_tool_env`), `for_tinker_agent(grader).reward_fn(item)`
is the episode's `reward_fn(history)`: the messages the episode generated are graded as `rfteval run --tools` grades
a rollout (the final answer, its tool calls, the trajectory in sample["rollout"]), so the agent is trained on the
score the eval gives it.

    dataset = for_tinker("graders/math.json", renderer, items="datasets/math/items.jsonl", group_size=8)
    # or, in a recipe's config: dataset_builder=RFTDatasetBuilder(grader=..., items=..., batch_size=...,
    #     group_size=..., model_name_for_tokenizer=..., renderer_name=...)
"""

from __future__ import annotations

import asyncio
import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Unpack

import chz
from tinker_cookbook import renderers
from tinker_cookbook.completers import StopCondition
from tinker_cookbook.rl.problem_env import ProblemEnv, ProblemGroupBuilder
from tinker_cookbook.rl.types import (
    Action,
    ActionExtra,
    Env,
    EnvGroupBuilder,
    Metrics,
    Observation,
    RLDataset,
    RLDatasetBuilder,
    StepResult,
    Trajectory,
)

from rfteval.data.json_types import JSONObject, JSONValue
from rfteval.errors import InputError
from rfteval.graders.base import GradeResult, needs_groups
from rfteval.reward.base import GraderLike, Reward
from rfteval.reward.core import sample_from_message, sample_from_messages
from rfteval.reward.episode import result_metrics
from rfteval.reward.export_dataset import DEVELOPER_ROLES
from rfteval.reward.options import RewardOptions, RewardOptionsArgs


def _text(content: JSONValue) -> str:
    """An RFT message's content as the text a tinker Message carries (OpenAI's text parts joined)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text") for p in content if isinstance(p, dict)]
        return "".join(t for t in parts if isinstance(t, str))
    return "" if content is None else str(content)


def tinker_messages(item: JSONObject, developer_role: str = "system") -> list[renderers.Message]:
    """The item's conversation as tinker Messages. OpenAI's `developer` role is `system` by default (as
    `export-dataset` writes it): qwen3's renderer writes any role as it is (`<|im_start|>developer`, a turn Qwen was
    never trained on) and role_colon as `Developer:`; gpt_oss's renderer knows `developer` (harmony's own role) and
    writes `system` as a developer message under "# Instructions", so developer_role="keep" gives it as written."""
    if developer_role not in DEVELOPER_ROLES:
        raise ValueError(f"developer_role must be 'system' or 'keep', not {developer_role!r}")
    messages = item.get("messages")
    if not isinstance(messages, list) or not messages:
        raise InputError("has no messages: tinker-cookbook renders the item's conversation as the prompt",
                         field="messages")
    out: list[renderers.Message] = []
    for m in messages:
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise InputError("every message needs a role", field="messages")
        role = "system" if m["role"] == "developer" and developer_role == "system" else str(m["role"])
        out.append(renderers.Message(role=role, content=_text(m.get("content"))))
    return out


class TinkerReward(Reward):
    """The grader for tinker-cookbook: one parsed assistant message and its item, scored as `rfteval grade` does. A
    reward there is a float that is summed, so a grading error scores 0 (on_error="zero"; "none" is refused)."""

    none_refused = (
        "has no meaning in tinker-cookbook: a step's reward is a float that is summed into the trajectory's "
        "(the step's metrics count the error: rfteval/grading_error)")

    def score_message(self, message: object, item: JSONObject) -> tuple[float, GradeResult]:
        result = self.grade_one(sample_from_message(message, self.options), item)
        value = self.value(result)
        assert value is not None  # on_error is "zero"
        return value, result


    def reward_fn(self, item: JSONObject, initial_messages: Sequence[object] | None = None) -> AgentRewardFn:
        """tinker-cookbook's `reward_fn(history)` for `build_agent_tool_env` (tool_use/agent_tool_message_env.py), for
        one item: the episode's messages graded as `rfteval run --tools` grades a rollout (see AgentRewardFn).
        `initial_messages`: what the env was built with, when not the item's own messages."""
        if needs_groups(self.config):
            raise ValueError(f"{self.__name__} ranks a whole group (group_judge): a tool-use episode's reward_fn "
                             "grades one episode alone")
        prompt = list(initial_messages) if initial_messages is not None else item.get("messages")
        return AgentRewardFn(self, item, len(prompt) if isinstance(prompt, list) else 0,
                             [_role(m) for m in prompt] if isinstance(prompt, list) else [])


def _role(message: object) -> object:
    return message.get("role") if isinstance(message, Mapping) else getattr(message, "role", None)


class AgentRewardFn:
    """An episode's reward for tinker-cookbook's tool-use env: `await reward_fn(history)` gives (score, metrics), the
    metrics `rfteval/grading_error` and sub-scores.

    AgentToolMessageEnv hands over its whole history by default (the initial messages first), or only the messages
    generated during the rollout when a rollout_config's termination policy says so: the prompt is left out when the
    history starts with it (its roles, in order), so the sample is the generated messages either way, built by
    rollout_sample as the run builds a rollout's (core.sample_from_messages): the final turn's answer, its tool
    calls in OpenAI's shape, the trajectory in sample["rollout"]. A grading error scores 0 (counted)."""

    def __init__(self, reward: TinkerReward, item: JSONObject, prompt_len: int, prompt_roles: list[object]):
        self.reward = reward
        self.item = item
        self.prompt_len = prompt_len
        self.prompt_roles = prompt_roles

    def generated(self, history: Sequence[object]) -> list[object]:
        n = self.prompt_len
        if n and len(history) >= n and [_role(m) for m in history[:n]] == self.prompt_roles:
            return list(history[n:])
        return list(history)

    def score(self, history: Sequence[object]) -> tuple[float, GradeResult]:
        sample = sample_from_messages(self.generated(history), self.reward.options)
        result = self.reward.grade_one(sample, self.item)
        value = self.reward.value(result)
        assert value is not None  # on_error is "zero"
        return value, result

    async def __call__(self, history: list[renderers.Message]) -> tuple[float, dict[str, float]]:
        value, result = await asyncio.to_thread(self.score, history)
        return value, result_metrics(result)


def for_tinker_agent(grader: GraderLike, **options: Unpack[RewardOptionsArgs]) -> TinkerReward:
    """The grader for tinker-cookbook's tool-use environments: `build_agent_tool_env(renderer, tools,
    initial_messages, reward.reward_fn(item))`, one reward (one python pool, one judge) for every item's env.
    Options as for_trl, except on_error (always "zero")."""
    return TinkerReward(grader, RewardOptions(**options))


class RFTEnv(ProblemEnv):
    """A ProblemEnv for one RFT item: the item's messages as the prompt, the grader's score as check_answer. With
    format_coef=0 (the default) the step's reward is the score exactly; tinker-cookbook's stop-sequence format term
    applies when format_coef is set."""

    def __init__(self, reward: TinkerReward, item: JSONObject, renderer: renderers.Renderer,
                 format_coef: float = 0.0, group: bool = False, developer_role: str = "system"):
        messages = tinker_messages(item, developer_role)
        super().__init__(renderer, convo_prefix=messages[:-1], format_coef=format_coef)
        self.reward = reward
        self.item = item
        self.messages = messages
        # group: the grader ranks the group's replies together (group_judge), so step only keeps its reply and
        # RFTGroupBuilder.compute_group_rewards grades the group
        self.group = group
        self.reply: renderers.Message | None = None
        self.score: float | None = None  # set by step before ProblemEnv's reward code asks check_answer
        self.result: GradeResult | None = None

    def get_question(self) -> str:
        last = self.messages[-1]
        content = last["content"]
        return content if isinstance(content, str) else renderers.get_text_content(last)

    async def initial_observation(self) -> tuple[Observation, StopCondition]:
        """The whole conversation of the item (system and earlier turns included), as `rfteval run` sends it."""
        return self.renderer.build_generation_prompt(self.messages), self.stop_condition

    def check_answer(self, sample_str: str) -> bool:
        """The grader's score (0..1 or the grader's range; ProblemEnv takes float() of it, as its docstring says
        "a reward (0.0 to 1.0)"): computed by step from the parsed message, not from the flattened text."""
        if self.score is None:
            raise RuntimeError("RFTEnv.check_answer is called by its step, after grading")
        return self.score  # type: ignore[return-value]  # ProblemEnv.step takes float(check_answer(...))

    def check_format(self, sample_str: str) -> bool:
        return True  # the grader judges the answer; tinker-cookbook's format term is its stop sequence only

    def get_reference_answer(self) -> str:
        ref = self.item.get("reference_answer", "")
        return ref if isinstance(ref, str) else str(ref)

    async def step(self, action: Action, *, extra: ActionExtra | None = None) -> StepResult:
        message, _ = self.renderer.parse_response(action)
        self.reply = message
        if self.group:
            self.score = 0.0  # the answer's reward comes as the group reward
            result = await super().step(action, extra=extra)
            del result.metrics["correct"]  # not known here: the group's metrics carry rfteval/score
            return result
        self.score, graded = await asyncio.to_thread(self.reward.score_message, message, self.item)
        self.result = graded
        result = await super().step(action, extra=extra)
        result.metrics.update(result_metrics(graded))
        return result


@dataclass(frozen=True)
class RFTGroupBuilder(ProblemGroupBuilder):
    """tinker-cookbook's ProblemGroupBuilder whose group rewards are the grader's scores of the group's replies,
    graded together in one batch: how a grader that ranks an item's samples (group_judge, RULER-style) sees them
    all at once. Its envs are RFTEnvs in group mode (their step rewards hold only the format term)."""

    async def compute_group_rewards(self, trajectory_group: list[Trajectory], env_group: Sequence[Env]
                                    ) -> list[tuple[float, Metrics]]:
        envs = [e for e in env_group if isinstance(e, RFTEnv)]
        if len(envs) != len(env_group) or not envs:
            raise TypeError("RFTGroupBuilder's envs must be RFTEnvs")
        reward = envs[0].reward
        pairs = [(sample_from_message(e.reply, reward.options), e.item) for e in envs]
        results = await asyncio.to_thread(reward.grade, pairs, [0] * len(pairs))
        out: list[tuple[float, Metrics]] = []
        for result in results:
            value = reward.value(result)
            assert value is not None  # on_error is "zero"
            metrics: Metrics = {"rfteval/score": value, **result_metrics(result)}
            out.append((value, metrics))
        return out


class RFTDataset(RLDataset):
    """The RFT lines as tinker-cookbook batches: each batch holds `batch_size` items, each item a group of
    `group_size` RFTEnvs (ProblemGroupBuilder, tinker-cookbook's own), in file order."""

    def __init__(self, reward: TinkerReward, items: Sequence[JSONObject], renderer: renderers.Renderer, *,
                 batch_size: int, group_size: int, format_coef: float = 0.0, name: str = "rfteval",
                 developer_role: str = "system"):
        if batch_size < 1 or group_size < 1:
            raise ValueError("batch_size and group_size must be at least 1")
        self.reward = reward
        self.items = list(items)
        self.renderer = renderer
        self.batch_size = batch_size
        self.group_size = group_size
        self.format_coef = format_coef
        self.name = name
        self.developer_role = developer_role
        if developer_role not in DEVELOPER_ROLES:  # refused now, not in the middle of a rollout
            raise ValueError(f"developer_role must be 'system' or 'keep', not {developer_role!r}")

    def builder(self, item: JSONObject) -> ProblemGroupBuilder:
        """One item's group: per-step rewards (ProblemGroupBuilder), or group rewards (RFTGroupBuilder) for a
        grader that ranks an item's samples together."""
        group = needs_groups(self.reward.config)
        thunk = functools.partial(RFTEnv, self.reward, item, self.renderer, self.format_coef, group,
                                  self.developer_role)
        cls = RFTGroupBuilder if group else ProblemGroupBuilder
        return cls(env_thunk=thunk, num_envs=self.group_size, dataset_name=self.name)

    def get_batch(self, index: int) -> Sequence[EnvGroupBuilder]:
        start = index * self.batch_size
        if not 0 <= start < len(self.items):
            raise IndexError(f"batch {index} of {len(self)}")
        return [self.builder(it) for it in self.items[start:start + self.batch_size]]

    def __len__(self) -> int:
        return math.ceil(len(self.items) / self.batch_size)


def _read_items(items: str | Path | Sequence[Mapping[str, JSONValue]] | None) -> list[JSONObject]:
    """The lines as `rfteval grade` reads them (its checks, its errors naming file and line)."""
    from rfteval.data.dataset import iter_items

    if items is None:
        raise TypeError("for_tinker needs items= (the RFT dataset: a JSONL path, or its rows)")
    if isinstance(items, (str, Path)):
        return [it.data for it in iter_items(Path(items))]
    return [dict(it) for it in items]


def for_tinker(grader: GraderLike, renderer: renderers.Renderer, *, batch_size: int = 8, group_size: int = 4,
               format_coef: float = 0.0, developer_role: str = "system",
               **options: Unpack[RewardOptionsArgs]) -> RFTDataset:
    """tinker-cookbook's RL dataset for the RFT dataset `items=` (a JSONL path, or its rows) scored by `grader`:
    batches of ProblemGroupBuilders over RFTEnvs. `renderer` is tinker-cookbook's (renderers.get_renderer(name,
    tokenizer)). developer_role="keep" renders OpenAI's `developer` turns as they are (for gpt_oss's renderer, which
    knows the role), else as `system` (tinker_messages). Options as for_trl, except on_error (always "zero":
    tinker-cookbook sums float rewards)."""
    items = options.get("items")
    rows = _read_items(items)
    reward = TinkerReward(grader, RewardOptions(**options))
    source = Path(items).stem if isinstance(items, str) else "rfteval"
    return RFTDataset(reward, rows, renderer, batch_size=batch_size, group_size=group_size, format_coef=format_coef,
                      name=source, developer_role=developer_role)


@chz.chz
class RFTDatasetBuilder(RLDatasetBuilder):
    """The dataset builder a tinker-cookbook recipe names in its config: an RFT dataset and a grader file, the
    tokenizer's model and the renderer; `test_items` gives the test set."""

    grader: str
    items: str
    batch_size: int
    group_size: int
    model_name_for_tokenizer: str
    renderer_name: str
    test_items: str | None = None
    format_coef: float = 0.0
    judge_base_url: str | None = None
    judge_model: str | None = None
    developer_role: str = "system"

    async def __call__(self) -> tuple[RFTDataset, RFTDataset | None]:
        from tinker_cookbook.tokenizer_utils import get_tokenizer

        renderer = renderers.get_renderer(self.renderer_name, tokenizer=get_tokenizer(self.model_name_for_tokenizer))
        train = for_tinker(self.grader, renderer, batch_size=self.batch_size, group_size=self.group_size,
                           format_coef=self.format_coef, developer_role=self.developer_role, items=self.items,
                           judge_base_url=self.judge_base_url, judge_model=self.judge_model)
        test = None
        if self.test_items is not None:
            test = RFTDataset(train.reward, _read_items(self.test_items), renderer, batch_size=self.batch_size,
                              group_size=1, format_coef=self.format_coef, name=Path(self.test_items).stem,
                              developer_role=self.developer_role)
        return train, test
