"""PrimeIntellect verifiers: a reward function asks for its arguments by name.

Two contracts, one function. verifiers 0.1.x–0.3.x (the legacy `vf.Rubric(funcs=[...], weights=[...])`, which
environments written for them and tinker-cookbook's verifiers recipe use) passes `completion` (a string or the
messages the model generated), `prompt`, `answer`, `info`, `state` and `task`, the environment's id as a string
(`"default"` when it has none). verifiers 0.4's tasks (`verifiers.v1`: prime-rl, `vf-eval`, `vf-replay`) pass
`task`, the task's data (a pydantic TaskData), and `trace`, the rollout. `task` is told apart by its type: a string
is the legacy environment's name, anything else 0.4's data. So the same reward serves prime-rl, tinker-cookbook's
verifiers_rl, torchtitan and Miles, which run verifiers environments.

Both record `float(reward)`: a reward is always a number (on_error "zero"; "none" is refused, as neither can store
one), and the synchronous form returns a float that can also be awaited, since 0.4's Task.score gathers what
every reward returns."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Generator, Mapping
from typing import Literal, Unpack, overload

from rfteval.data.json_types import JSONObject, JSONValue
from rfteval.data.reasoning import message_reasoning
from rfteval.reward.base import GraderLike, NamedPartial, Reward
from rfteval.reward.core import Conversation, sample_from_completion
from rfteval.reward.items import META, plain_data
from rfteval.reward.options import RewardOptions, RewardOptionsArgs
from rfteval.reward.targets import DatasetShape, RowParts, Trainer, register
from rfteval.reward.taskset import trace_generated


def _fields(value: object) -> dict[str, object]:
    """A pydantic model (verifiers.v1's TaskData, its messages) or a mapping as a dict."""
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dict(dump())
    return dict(value) if isinstance(value, Mapping) else {}


class Score(float):
    """A reward: a float that can also be awaited. verifiers 0.4's Task.score gathers whatever each reward returns
    (asyncio.gather, which takes awaitables only), the legacy Rubric awaits what is awaitable and calls float() on
    the rest, and a direct call reads a float; so the synchronous form works in each."""

    def __await__(self) -> Generator[object, None, Score]:
        async def value() -> Score:
            return self

        return value().__await__()


def _sampled(trace: object) -> list[object]:
    """What the model and its tools generated in a verifiers.v1 trace (taskset.trace_generated: its sampled replies,
    tool results and environment turns, never a prompt's few-shot assistant turn); none when the rollout stopped
    before the model's first reply. An object without nodes (not a verifiers Trace) gives its `assistant_messages`,
    else its `.messages`."""
    if getattr(trace, "nodes", None) is not None:
        return [_fields(m) for m in trace_generated(trace)]
    sampled = getattr(trace, "assistant_messages", None)
    messages = sampled if sampled is not None else getattr(trace, "messages", [])
    return [_fields(m) for m in messages]


def _last_response(state: object) -> dict[str, object] | None:
    """The message of a legacy rollout's last model response (an openai ChatCompletion in state["trajectory"])."""
    trajectory = state.get("trajectory") if isinstance(state, Mapping) else None
    if not isinstance(trajectory, list) or not trajectory or not isinstance(trajectory[-1], Mapping):
        return None
    choices = getattr(trajectory[-1].get("response"), "choices", None)
    return _fields(getattr(choices[0], "message", None)) if choices else None


def _with_reasoning(completion: JSONValue, state: object) -> JSONValue:
    """The completion with its last reply's reasoning field restored from the rollout's state: legacy verifiers
    keeps only a reply's content and tool calls in the completion's messages, while the server's
    `reasoning_content` / `reasoning` stays on the response. The reply is the last assistant message when its
    content is the last response's (an environment's final message may follow it)."""
    if not isinstance(completion, list):
        return completion
    replies = [(i, m) for i, m in enumerate(completion) if isinstance(m, dict) and m.get("role") == "assistant"]
    if not replies:
        return completion
    at, last = replies[-1]
    if message_reasoning(last) is not None:
        return completion
    response = _last_response(state)
    if response is None or (response.get("content") or "") != (last.get("content") or ""):
        return completion
    reasoning = message_reasoning(response)
    if reasoning is None:
        return completion
    return [*completion[:at], {**last, "reasoning_content": reasoning}, *completion[at + 1:]]


class VerifiersReward(Reward):
    """The item: the line an exported dataset's `info` carries; or, with items=, the line named by its id (the
    exported line's, else info's); else `info` with `answer` at `reference_field` and the prompt as `messages`."""

    none_refused = (
        "cannot be a verifiers reward: verifiers records float(reward) (0.4's Task.score fails the trace on "
        'None; the legacy Rubric logs it and scores 0); a verifiers 0.4 trace also counts the error in its '
        'metric <name>_error')

    def __init__(self, grader: GraderLike, options: RewardOptions, reference_field: str | None = "reference_answer"):
        super().__init__(grader, options)
        self.reference_field = reference_field

    def _extra(self) -> dict[str, object]:
        return {"reference_field": self.reference_field}

    def item(self, prompt: object, answer: object, info: object) -> JSONObject:
        fields = _fields(info)
        if self.table is not None or "rfteval" in fields:
            return self.find_item(fields)
        item = self.find_item(fields, prompt)
        if self.reference_field and answer not in (None, "") and self.reference_field not in item:
            item[self.reference_field] = plain_data(answer)
        return item

    def __call__(self, completion: Conversation | None = None, answer: str | None = None,
                 info: Mapping[str, object] | None = None, prompt: Conversation | None = None, state: object = None,
                 task: object = None, trace: object = None, **kwargs: object) -> Score:
        """The legacy Rubric's arguments (task, a string, names the environment and is not read; state gives the
        last reply's reasoning field), or verifiers.v1's task (its TaskData model, or a mapping) and trace (its
        sampled assistant messages, models or mappings); other keywords are not read."""
        given: object = completion
        fields: object = info
        asked: object = prompt
        reference: object = answer
        if trace is not None or (task is not None and not isinstance(task, str)):  # verifiers.v1
            data = _fields(task)
            fields = data.get("info", data) if isinstance(data.get("info"), Mapping) else data
            asked = data.get("prompt") if prompt is None else prompt
            reference = data.get("answer") if answer is None else answer
            if completion is None and trace is not None:
                given = _sampled(trace)
        if given is None:
            raise TypeError(f"{self.__name__}() needs completion= (verifiers' Rubric) or trace= (verifiers.v1)")
        sample = sample_from_completion(_with_reasoning(plain_data(given), state), self.options)
        result = self.grade_one(sample, self.item(asked, reference, fields))
        record_metric = getattr(trace, "record_metric", None)
        if callable(record_metric):  # the trace's own count of grading errors, which vf-eval and prime-rl report
            record_metric(f"{self.__name__}_error", float(result.error is not None))
        score = self.value(result)
        assert score is not None  # on_error is "zero" here (__init__ refuses "none")
        return Score(score)


async def _verifiers_reward(reward: VerifiersReward, completion: Conversation | None = None,
                            answer: str | None = None, info: Mapping[str, object] | None = None,
                            prompt: Conversation | None = None, state: object = None, task: object = None,
                            trace: object = None) -> float:
    """verifiers passes only the parameters a reward names (inspect.signature), awaits it when it is a coroutine
    function, and runs many at once: grade in a thread."""
    return float(await asyncio.to_thread(reward, completion, answer, info, prompt, state, task, trace))


VerifiersAsync = NamedPartial[Coroutine[object, object, float]]  # for_verifiers' default form


# One type per form (asynchronous= as a literal), so typed code gets the form it asked for, not a union.
@overload
def for_verifiers(grader: GraderLike, reference_field: str | None = ..., asynchronous: Literal[True] = ...,
                  **options: Unpack[RewardOptionsArgs]) -> VerifiersAsync: ...
@overload
def for_verifiers(grader: GraderLike, reference_field: str | None = ..., *, asynchronous: Literal[False],
                  **options: Unpack[RewardOptionsArgs]) -> VerifiersReward: ...
@overload
def for_verifiers(grader: GraderLike, reference_field: str | None = ..., asynchronous: bool = ...,
                  **options: Unpack[RewardOptionsArgs]) -> VerifiersReward | VerifiersAsync: ...


def for_verifiers(grader: GraderLike, reference_field: str | None = "reference_answer", asynchronous: bool = True,
                  **options: Unpack[RewardOptionsArgs]) -> VerifiersReward | VerifiersAsync:
    """A verifiers reward function scoring with `grader`: `vf.Rubric(funcs=[for_verifiers(grader)])` (verifiers
    0.1–0.3), or a verifiers.v1 task's reward (0.4). Async by default (a functools.partial of an `async def`, which
    pickles, grading in a thread); asynchronous=False gives the synchronous callable, whose float result can also
    be awaited. Options as for_trl, except on_error: "zero" only (see VerifiersReward)."""
    reward = VerifiersReward(grader, RewardOptions(**options), reference_field)
    if not asynchronous:
        return reward
    fn = NamedPartial(_verifiers_reward, reward)
    fn.__name__ = reward.__name__  # verifiers names the reward in its metrics
    return fn


def _row(parts: RowParts) -> JSONObject:
    """verifiers' dataset row: prompt, answer (the reference as text) and info (the line's fields); its messages know
    system, user, assistant and tool."""
    return {"prompt": parts.prompt, "answer": parts.reference, "info": {**parts.fields, META: parts.meta}}


register(Trainer("verifiers", dataset=DatasetShape("verifiers", row=_row)))
