"""The options every trainer's reward takes: the flags `rfteval grade` takes (--judge-*, --grader-timeout,
--grader-memory, --unsafe-python-graders, --reasoning, --think-tags), how the adapter finds the item and how it scores
a grading error; as a frozen value (RewardOptions, pickled with the reward into a trainer's workers) and as the
keywords every `for_*` factory takes (RewardOptionsArgs).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

from rfteval.data.json_types import JSONObject
from rfteval.data.reasoning import parse_tags
from rfteval.limits import PYTHON_MEMORY_MB, PYTHON_TIMEOUT_S
from rfteval.providers.endpoint import DEFAULT_API, DEFAULT_KEY_ENV, JUDGE_CONCURRENCY, JUDGE_KEYWORDS, JudgeEndpoint
from rfteval.sandbox.policy import SandboxPolicy, unsafe_from_env

ON_ERROR = ("zero", "none")
REASONING = ("strip", "keep")


@dataclass(frozen=True)
class RewardOptions:
    """The settings `rfteval grade` takes as flags (--judge-*, --grader-timeout, --grader-memory,
    --unsafe-python-graders), plus how the adapter finds the item and scores an error."""

    judge_base_url: str | None = None
    judge_api_key_env: str = DEFAULT_KEY_ENV
    judge_api: str = DEFAULT_API
    judge_model: str | None = None
    judge_concurrency: int = JUDGE_CONCURRENCY
    grader_timeout: float = PYTHON_TIMEOUT_S
    grader_memory: int = PYTHON_MEMORY_MB
    python_workers: int | None = None
    unsafe_python_graders: bool = False
    name: str | None = None  # the reward's __name__ (TRL logs rewards under it); default rfteval_<grader name>
    # "zero": an erroring completion scores 0 (OpenAI's rule); "none": None, which TRL leaves out of the group's
    # baseline. None here means the adapter's default (TRL: "none", the others: "zero").
    on_error: str | None = None
    # "strip": the grader sees the final answer, without a leading think block (what OpenAI's output_text is);
    # "keep": the completion as generated.
    reasoning: str = "strip"
    # The think-block tags, as `rfteval grade --think-tags` takes them: "OPEN,CLOSE" per pair (one string, or a list);
    # None: grade's default, <think>,</think>. Eval and training must strip the same blocks, or a custom-tag model
    # is graded on its answer in one and on its thinking in the other.
    think_tags: str | Sequence[str] | None = None
    # The original RFT lines (a JSONL path, or the rows): each completion's item is the line whose id is in the
    # trainer's id column, exactly as `rfteval grade` reads it, whatever the trainer's loader did to the columns.
    items: str | Sequence[JSONObject] | None = None
    id_field: str = "id"

    def __post_init__(self) -> None:
        if self.on_error is not None and self.on_error not in ON_ERROR:
            raise ValueError(f"on_error must be 'zero' or 'none', not {self.on_error!r}")
        if self.reasoning not in REASONING:
            raise ValueError(f"reasoning must be 'strip' or 'keep', not {self.reasoning!r}")
        if isinstance(self.items, Path):
            object.__setattr__(self, "items", str(self.items))
        if self.think_tags is not None:  # a tuple of strings: hashable, and the same after a JSON round trip
            tags = (self.think_tags,) if isinstance(self.think_tags, str) else tuple(self.think_tags)
            try:
                parse_tags(tags)
            except (ValueError, AttributeError, TypeError) as exc:
                raise ValueError(f"think_tags: {exc} (as `rfteval grade --think-tags`), not "
                                 f"{self.think_tags!r}") from None
            object.__setattr__(self, "think_tags", tags)

    def judge_endpoint(self) -> JudgeEndpoint:
        """The judge_* options as the endpoint a model grader's judge is opened on."""
        return JudgeEndpoint(**{field: getattr(self, key) for key, field in JUDGE_KEYWORDS.items()})

    def sandbox_policy(self) -> SandboxPolicy:
        """The python grader sandbox's, for this reward's pool alone: unsafe with unsafe_python_graders=True (else
        as RFTEVAL_UNSAFE_PYTHON_GRADERS=1 says), the judge's key variable kept from grader code, the limits."""
        return SandboxPolicy.from_flags(self.unsafe_python_graders or unsafe_from_env(), (self.judge_api_key_env,),
                                        self.grader_timeout, self.grader_memory)

    @functools.cached_property
    def tags(self) -> tuple[tuple[str, str], ...]:
        """think_tags as (open, close) pairs: `rfteval grade`'s parse of the same values."""
        return parse_tags(self.think_tags if not isinstance(self.think_tags, str) else (self.think_tags,))


class RewardOptionsArgs(TypedDict, total=False):
    """RewardOptions as the keyword options every `for_*` factory takes (`**options`), so a call is checked field by
    field (tests/reward/test_core.py holds it to RewardOptions' fields)."""

    judge_base_url: str | None
    judge_api_key_env: str
    judge_api: str
    judge_model: str | None
    judge_concurrency: int
    grader_timeout: float
    grader_memory: int
    python_workers: int | None
    unsafe_python_graders: bool
    name: str | None
    on_error: str | None
    reasoning: str
    think_tags: str | Sequence[str] | None
    items: str | Sequence[JSONObject] | None
    id_field: str


def judge_keywords(endpoint: JudgeEndpoint) -> dict[str, str | int | None]:
    """An endpoint as RewardOptions' judge_* keywords (what an exported module stores)."""
    return {key: getattr(endpoint, field) for key, field in JUDGE_KEYWORDS.items()}
