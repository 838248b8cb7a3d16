"""`group_judge` (an rfteval extension, not an OpenAI grader type): one judge call ranks an item's N samples.

As in RULER (OpenPipe ART), relative judgments of samples of the same prompt are more consistent than absolute
ones, and GRPO only needs the ranking. The item's conversation goes once in <context>; each sample goes in its
own <sample id="..."> tag, in an order shuffled with a recorded seed (against position bias); the judge returns
{"scores": [{"id", "explanation", "score"}]}, 0..1 relative within the group. A missing, duplicate or unknown id
fails the whole group: a partial ranking cannot be trusted.

The grader groups the pairs of each batch by item, so the runner must hand it all of an item's samples at once
(`needs_groups = True`): every epoch, and with `--group-models` both models' samples.

Agent runs: a sample that carries `rollout` is shown whole, as RULER shows agents' trajectories (its messages, tool
calls and results in order, then its final answer: graders/trajectory_text.py), and a group longer than
`max_prompt_chars` is cut from each trajectory's middle, tool results first, saying so in the text and in the
grade's details (`cut`, `context_cut`). A single answer is shown as it always was, and never cut.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import random
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from pydantic import Field, field_validator

from rfteval.graders.base import (
    INVALID_VARIABLE,
    MODEL_PARSE,
    MODEL_SERVER,
    BuildContext,
    GraderConfig,
    GradeResult,
    Pair,
    register,
)
from rfteval.graders.judged import (
    SamplingParams,
    answer_details,
    effective_model,
    error_result,
    finite_number,
    judge_messages,
    judge_sampling,
    parse_json_answer,
    truncated,
)
from rfteval.graders.template import TemplateError, check_template, compile_template, to_text
from rfteval.graders.trajectory_text import fit, has_rollout, render, shares
from rfteval.providers.base import Generation, GenerationRequest, ProviderError
from rfteval.providers.judge import current_repeat

if TYPE_CHECKING:
    from rfteval.data.json_types import JSONMapping, JSONObject
    from rfteval.data.sample import Sample
    from rfteval.providers.judge import JudgeClient

DEFAULT_RUBRIC = (
    "Judge how well each sample follows the instructions in the conversation's own system and developer "
    "messages, and answers the user's request. Every instruction a sample obeys counts for it; every instruction "
    "it ignores or breaks counts against it. Where the context holds reference material, a sample that uses it "
    "correctly beats one that invents facts or contradicts it."
)

# Added to the default rubric when the group holds agents' trajectories (RULER's own default rubric says as much).
TRAJECTORY_RUBRIC = (
    " Each sample is an agent's whole trajectory: the final answer counts most, and how it got there counts too. A "
    "trajectory that gets the facts it needs from its tools and answers from what they returned beats one that "
    "guesses or cites what it never retrieved; one that reaches the goal with fewer wasted or failed calls beats one "
    "that wanders; one that stops without a final answer ranks below one that answers."
)
# About 25k tokens: a group this long fits a 32k-context judge with room for the answer. A grader can change it.
DEFAULT_MAX_PROMPT_CHARS = 100_000

SCHEMA: JSONObject = {
    "type": "object",
    "properties": {
        "scores": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "id": {"type": "string"}, "explanation": {"type": "string"}, "score": {"type": "number"},
                },
                "required": ["id", "explanation", "score"],
                "additionalProperties": False,
            },
        }
    },
    "required": ["scores"],
    "additionalProperties": False,
}
RESPONSE_FORMAT: JSONObject = {"name": "group_judge_scores", "schema": SCHEMA, "strict": True}


class GroupJudgeConfig(GraderConfig):
    type: Literal["group_judge"]
    model: str
    rubric: str | None = None
    input: str | None = None  # templated extra context ({{ item.* }} only: it is shared by the group)
    sampling_params: SamplingParams | None = None
    seed: int | None = None
    pass_threshold: float | None = None
    # the judge's user message, in characters: agents' trajectories beyond it are cut (single answers never are)
    max_prompt_chars: int = Field(default=DEFAULT_MAX_PROMPT_CHARS, ge=2000)

    calls_judge = True
    grades_groups = True

    @field_validator("input")
    @classmethod
    def _template_ok(cls, value: str | None) -> str | None:
        return None if value is None else check_template(value)


# ---- pure parts --------------------------------------------------------------------------------------------------


def group_key(item: JSONMapping) -> str:
    """Samples of the same item share a group: by its `id`, else by its content (identical prompts)."""
    if item.get("id") is not None:
        return f"id:{item['id']}"
    text = json.dumps(item, sort_keys=True, ensure_ascii=False, default=str)
    return "sha:" + hashlib.sha256(text.encode()).hexdigest()[:16]


def group_pairs(pairs: Sequence[Pair]) -> dict[str, list[int]]:
    """Indices of the pairs of each item, in first-seen order."""
    groups: dict[str, list[int]] = {}
    for i, (_, item) in enumerate(pairs):
        groups.setdefault(group_key(item), []).append(i)
    return groups


def shuffle_seed(config_seed: int | None, key: str, repeat: int = 0) -> int:
    """Per-group seed from the config seed and the item, so a re-run presents the same order (a cache hit).
    A stability repeat (k > 0) reshuffles: a judge whose ranking follows the position is not stable."""
    text = f"{config_seed or 0}:{key}" + (f":repeat{repeat}" if repeat else "")
    return int(hashlib.sha256(text.encode()).hexdigest()[:12], 16)


def _sample_text(sample: Sample) -> str:
    if has_rollout(sample):
        return render(sample)
    text = str(sample.get("output_text") or "")
    tools = sample.get("output_tools") or []
    if tools:
        text += ("\n" if text else "") + "<tool_calls>" + json.dumps(tools, ensure_ascii=False) + "</tool_calls>"
    return text


def presentation_order(samples: Sequence[Sample], seed: int) -> list[int]:
    """Original indices in the order shown to the judge: canonical (by content) first, so the incoming order does
    not matter, then shuffled by the seed."""
    digest = [hashlib.sha256(_sample_text(s).encode()).hexdigest() for s in samples]
    order = sorted(range(len(samples)), key=lambda i: (digest[i], i))
    random.Random(seed).shuffle(order)
    return order


def _escape(text: str) -> str:
    return text.replace("</sample>", "&lt;/sample&gt;").replace("</context>", "&lt;/context&gt;")


def _message_text(content: object) -> str:
    """A message's content as text: a string, text parts joined, anything else as JSON."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
    return to_text(content)


TRAJECTORY_NOTE = (
    "Each sample is an agent's trajectory in <trajectory>: its assistant messages, each <tool_call> (the tool's name "
    "and arguments) and each <tool_result> (what the tool returned; error=\"...\" when it failed), in order, then "
    "its <final_answer> (or <no_final_answer stop=\"...\"/> when a limit ended it first). A notice in [… …] marks "
    "a part cut to fit your context: do not count a cut against the sample.\n\n"
)


def judge_prompt(rubric: str, n: int, trajectories: bool = False) -> str:
    return (
        f"You are a judge comparing {n} candidate responses (samples) to the same conversation, shown in <context>. "
        "Score every sample from 0 to 1 relative to the others in this group: the best sample gets the highest "
        "score and the worst the lowest; equally good samples get equal scores. Use the spread of the range when "
        "the samples differ in quality. Ignore the order in which the samples appear.\n\n"
        + (TRAJECTORY_NOTE if trajectories else "")
        + f"Rubric:\n{rubric}\n\n"
        'Answer with JSON {"scores": [{"id": "<sample id>", "explanation": "<why, in one or two sentences>", '
        '"score": <number from 0 to 1>}]}: exactly one entry per sample id, and no other ids.'
    )


def group_user_message(item: JSONMapping, shown: Sequence[tuple[str, Sample]], extra: str | None,
                       texts: Sequence[str] | None = None) -> str:
    """The <context> once, any <extra>, then each <sample>: its text as `texts` gives it (a trajectory fitted to
    the budget), else as _sample_text renders it."""
    lines = ["<context>"]
    messages = item.get("messages")
    for m in messages if isinstance(messages, list) else []:  # a dataset line's messages: a list (data/dataset.py)
        if isinstance(m, dict):
            text = _escape(_message_text(m.get("content")))
            lines.append(f'<message role="{m.get("role", "")}">\n{text}\n</message>')
    if item.get("tools"):
        lines.append("<tools>" + json.dumps(item["tools"], ensure_ascii=False) + "</tools>")
    lines.append("</context>")
    if extra:
        lines.append(f"<extra>\n{_escape(extra)}\n</extra>")
    for n, (sid, sample) in enumerate(shown):
        text = texts[n] if texts is not None else _sample_text(sample)
        lines.append(f'<sample id="{sid}">\n{_escape(text)}\n</sample>')
    return "\n".join(lines)


def fitted_texts(item: JSONMapping, shown: Sequence[tuple[str, Sample]], extra: str | None,
                 budget: int) -> tuple[list[str], list[JSONObject | None], JSONObject | None]:
    """Each shown sample's text with the group's user message held to about `budget` characters: (texts, each
    sample's `cut` details or None, the group's `context_cut` details or None). Only trajectories are cut; the
    context, any extra and single answers are what they are."""
    texts = [_sample_text(s) for _, s in shown]
    full = len(group_user_message(item, shown, extra, texts))
    cuttable = [n for n, (_, s) in enumerate(shown) if has_rollout(s)]
    cuts: list[JSONObject | None] = [None] * len(shown)
    if full <= budget or not cuttable:
        return texts, cuts, None
    room = budget - (full - sum(len(texts[n]) for n in cuttable))
    for n, cap in zip(cuttable, shares([len(texts[n]) for n in cuttable], room), strict=True):
        sample = shown[n][1]
        texts[n], cut = fit(sample, cap)
        if cut is not None:
            cuts[n] = dict(cut.as_details())
    shown_chars = len(group_user_message(item, shown, extra, texts))
    summary: JSONObject = {"max_prompt_chars": budget, "full_chars": full, "shown_chars": shown_chars,
                           "samples_cut": sum(c is not None for c in cuts)}
    return texts, cuts, summary


@dataclass
class GroupPlan:
    indices: list[int]  # pair indices (into the batch) of this group, in original order
    order: list[int]  # positions into `indices`, in the order shown
    ids: list[str]  # the id shown for each entry of `order`
    seed: int
    request: GenerationRequest | None
    failure: GradeResult | None = None
    cuts: list[JSONObject | None] = dataclasses.field(default_factory=list)  # per position shown
    context_cut: JSONObject | None = None


def plan_group(config: GroupJudgeConfig, key: str, indices: list[int], pairs: Sequence[Pair], repeat: int) -> GroupPlan:
    samples = [pairs[i][0] for i in indices]
    item = pairs[indices[0]][1]
    seed = shuffle_seed(config.seed, key, repeat)
    order = presentation_order(samples, seed)
    ids = [f"s{p + 1}" for p in range(len(order))]
    extra = None
    if config.input:
        try:
            extra = compile_template(config.input).render(item, {})
        except TemplateError as exc:
            return GroupPlan(indices, order, ids, seed, None, GradeResult.failed(INVALID_VARIABLE, f"input: {exc}"))
    shown = [(ids[p], samples[j]) for p, j in enumerate(order)]
    trajectories = any(has_rollout(s) for s in samples)
    texts, cuts, context_cut = fitted_texts(item, shown, extra, config.max_prompt_chars)
    rubric = config.rubric or (DEFAULT_RUBRIC + TRAJECTORY_RUBRIC if trajectories else DEFAULT_RUBRIC)
    messages: list[JSONObject] = [
        {"role": "system", "content": judge_prompt(rubric, len(samples), trajectories)},
        {"role": "user", "content": group_user_message(item, shown, extra, texts)},
    ]
    request = GenerationRequest(
        model=config.model, messages=judge_messages(messages),
        sampling=judge_sampling(config.sampling_params, RESPONSE_FORMAT), item_id=str(item.get("id", "")),
    )
    return GroupPlan(indices, order, ids, seed, request, cuts=cuts, context_cut=context_cut)


def parse_scores(text: str, ids: Sequence[str]) -> tuple[dict[str, tuple[float, str]], str | None]:
    """{id: (score, explanation)} from the judge's answer, or the reason the whole group fails."""
    obj = parse_json_answer(text)
    entries = obj.get("scores") if isinstance(obj, dict) else None
    if not isinstance(entries, list):
        return {}, f'judge answer is not {{"scores": [...]}}: {text[:200]!r}'
    expected = set(ids)
    out: dict[str, tuple[float, str]] = {}
    duplicate: list[str] = []
    unknown: list[str] = []
    for n, entry in enumerate(entries):
        sid = entry.get("id") if isinstance(entry, dict) else None
        if not isinstance(entry, dict) or not isinstance(sid, str):
            return {}, f"scores[{n}] has no string id"
        score = finite_number(entry.get("score"))
        if score is None:
            return {}, f"scores[{n}] (id {sid!r}): score {entry.get('score')!r:.50} is not a finite number"
        if sid not in expected:
            unknown.append(sid)
        elif sid in out:
            duplicate.append(sid)
        else:
            out[sid] = (score, str(entry.get("explanation", "")))
    missing = [i for i in ids if i not in out]
    problems = []
    if missing:
        problems.append(f"missing ids {missing}")
    if duplicate:
        problems.append(f"duplicate ids {sorted(set(duplicate))}")
    if unknown:
        problems.append(f"unknown ids {unknown[:10]}")
    if problems:
        return {}, f"judge scored {len(entries)} entries for {len(ids)} samples: " + "; ".join(problems)
    return out, None


def group_results(config: GroupJudgeConfig, plan: GroupPlan, answer: Generation) -> list[GradeResult]:
    """One result per pair of the group, un-shuffled back to the original order."""
    assert plan.request is not None
    base = answer_details(plan.request, answer)
    base.update(group_size=len(plan.indices), shuffle_seed=plan.seed)
    if plan.context_cut is not None:
        base["context_cut"] = plan.context_cut
    scores, problem = parse_scores(answer.output_text, plan.ids)
    if problem is not None and answer.finish_reason == "length":  # cut off: a limit to raise, not a bad judge
        return [truncated(plan.request, answer, dict(base)) for _ in plan.indices]
    if problem is not None:
        base["raw_answer"] = answer.output_text[:4000]
        return [GradeResult.failed(MODEL_PARSE, problem, details=dict(base)) for _ in plan.indices]
    results: list[GradeResult | None] = [None] * len(plan.indices)
    for position, j in enumerate(plan.order):
        sid = plan.ids[position]
        raw, explanation = scores[sid]
        score = min(max(raw, 0.0), 1.0)
        details = {**base, "sample_id": sid, "position": position, "explanation": explanation}
        if plan.cuts and plan.cuts[position] is not None:
            details["cut"] = plan.cuts[position]
        if score != raw:
            details.update(clipped=True, raw_score=raw)
        passed = None if config.pass_threshold is None else score >= config.pass_threshold
        results[j] = GradeResult(score, passed=passed, details=details)
    return [r for r in results if r is not None]


def grade_pairs(config: GroupJudgeConfig, pairs: Sequence[Pair], judge: JudgeClient) -> list[GradeResult]:
    repeat = current_repeat()
    plans = [plan_group(config, key, idx, pairs, repeat) for key, idx in group_pairs(pairs).items()]
    todo = [p for p in plans if p.request is not None]
    answers = iter(judge.complete([p.request for p in todo if p.request is not None]) if todo else [])
    model = effective_model(judge, config.model)
    out: list[GradeResult | None] = [None] * len(pairs)
    for plan in plans:
        if plan.request is None:
            group = [plan.failure or GradeResult.failed(INVALID_VARIABLE, "no request")] * len(plan.indices)
        else:
            answer = next(answers)
            plan.request = dataclasses.replace(plan.request, model=model)
            if isinstance(answer, ProviderError):
                group = [error_result(answer, model)] * len(plan.indices)
            else:
                group = group_results(config, plan, answer)
        for i, result in zip(plan.indices, group, strict=True):
            out[i] = result
    return [r for r in out if r is not None]


class GroupJudgeGrader:
    """Grades whole groups: the runner must pass every sample of an item in one batch."""

    needs_groups = True

    def __init__(self, config: GroupJudgeConfig, ctx: BuildContext):
        self.config = config
        self.ctx = ctx

    def grade_batch(self, pairs: Sequence[Pair], units: Sequence[Hashable] | None = None) -> list[GradeResult]:
        if self.ctx.judge is None:
            msg = "group_judge needs a judge endpoint; none is configured for this command"
            return [GradeResult.failed(MODEL_SERVER, msg) for _ in pairs]
        return grade_pairs(self.config, pairs, self.ctx.judge)


@register(
    "group_judge", GroupJudgeConfig,
    "rfteval extension: a judge ranks an item's samples against each other (RULER-style), 0..1", extension=True,
)
def build(config: GroupJudgeConfig, ctx: BuildContext) -> GroupJudgeGrader:
    return GroupJudgeGrader(config, ctx)
