"""The grader ready to score, which every trainer's adapter subclasses with that trainer's call: its engine (one python
pool for the process's life), its judge, the original items when given, and the error rule the trainer understands.

A team that leaves OpenAI's fine-tuning keeps its grader; training on it in TRL, verl, verifiers or OpenRLHF must not
mean re-writing it, or eval and training drift apart. Every adapter runs the grader through the same engine as
`rfteval grade` (python graders in the same sandbox), so a completion gets the same score in training as in
evaluation, as long as the grader sees the same item (items.py) and the same sample (core.py).

A grading error is never raised (one bad completion never stops a training run): it scores 0 (OpenAI's rule,
`on_error="zero"`) or None (`on_error="none"`, which TRL leaves out of the group's baseline), and is logged once per
error type on the `rfteval.reward` logger. Bad setup (an unreadable grader, a model grader with no judge endpoint,
a sandbox that cannot be built) raises at construction.
"""

from __future__ import annotations

import functools
import threading
import weakref
from collections.abc import Callable, Hashable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TypeAlias, TypedDict, TypeVar

from rfteval.data.json_types import JSONMapping, JSONObject
from rfteval.data.sample import Sample
from rfteval.errors import InputError
from rfteval.graders.base import GradeOptions, GraderConfig, GradeResult
from rfteval.graders.engine import GradingEngine
from rfteval.graders.loader import load_grader, parse_config, unwrap_grader
from rfteval.reward.items import Coercions, ItemTable, decode_exported, log, plain_data
from rfteval.reward.options import RewardOptions

if TYPE_CHECKING:
    from rfteval.providers.judge import Judge

GraderLike: TypeAlias = "str | Path | JSONMapping | GraderConfig"  # a string: JSONMapping is one at run time


_T = TypeVar("_T")


class NamedPartial(functools.partial[_T]):
    """A functools.partial that carries the `__name__` trainers log a reward under (verl, verifiers): it pickles as a
    partial does and inspect.iscoroutinefunction sees through it to the wrapped function."""

    __name__: str


def grader_config(grader: GraderLike) -> GraderConfig:
    """A grader in any form `load_grader` takes (a path, FILE.py:FUNCTION), or a dict as the file would hold it
    (bare, {"grader": ...} or a fine-tuning job), or a parsed config."""
    if isinstance(grader, GraderConfig):
        return grader
    if isinstance(grader, Mapping):
        obj, prefix = unwrap_grader(dict(grader))
        return parse_config(obj, None, prefix.rstrip("."))
    if isinstance(grader, (str, Path)):
        return load_grader(grader)
    raise TypeError(f"grader must be a path, a dict or a grader config, not {type(grader).__name__}")


# What a pickled reward holds: its class, its grader config as JSON, its options, its subclass's own arguments.
_Pickled: TypeAlias = "tuple[type[Reward], JSONObject, RewardOptions, dict[str, object]]"


class RewardDetails(TypedDict):
    """A result as a trainer logs it beside the score (verl's details=True: keys other than score are logged)."""

    score: float | None
    error: str  # the error type, "" when none
    passed: bool


def _close(engine: GradingEngine, judge: Judge | None) -> None:
    try:
        engine.close()
    finally:
        if judge is not None:
            judge.close()


def refuse_rollout_reads(config: GraderConfig, trainer: str) -> None:
    """A trainer that hands the reward text only (verl's solution_str, OpenRLHF's query) has no trajectory to build
    sample.rollout from: a grader reading it would score every completion as a grading error, so it is refused, in
    one line naming the field, before any training step."""
    from rfteval.graders.checks import reads_rollout

    if reads_rollout(config):
        raise InputError(f"grader {config.name!r} reads sample.rollout (an agent run's trajectory), but {trainer} hands "
                         "the reward text only, no messages: train it where the reward gets the messages (TRL's tool "
                         "mode, verifiers, ART, tinker-cookbook's tool_use)", field="sample.rollout")


class Reward:
    """A grader ready to score completions: its engine (one python pool for the process's life), its judge, the
    original items when given, and the error rule. Each trainer's adapter is a subclass with that trainer's call."""

    default_on_error = "zero"
    # The trainer's name when it hands text only (no messages): a grader reading sample.rollout is refused
    text_only: str | None = None
    # Why on_error="none" is refused, for a trainer that records every reward as a float (None would fail its step
    # or its tensor); None: the trainer can leave a reward out (TRL), or maps it itself (OpenRLHF: 0.0, said once).
    none_refused: str | None = None

    def __init__(self, grader: GraderLike, options: RewardOptions):
        if options.on_error == "none" and self.none_refused is not None:
            raise ValueError(f"on_error='none' {self.none_refused}; a grading error scores 0 (on_error='zero', the "
                             "default) and is counted (error_counts)")
        self.config = grader_config(grader)
        if self.text_only is not None:
            refuse_rollout_reads(self.config, self.text_only)
        self.options = options
        self.on_error = options.on_error or self.default_on_error
        self.table = ItemTable(options.items, options.id_field) if options.items is not None else None
        judge = self._judge()
        grade_options = GradeOptions(sandbox=options.sandbox_policy(), python_workers=options.python_workers)
        try:
            self.engine = GradingEngine(self.config, grade_options, judge=judge)
        except BaseException:
            if judge is not None:
                judge.close()
            raise
        self._finalizer = weakref.finalize(self, _close, self.engine, judge)  # also runs at interpreter exit
        self._lock = threading.Lock()
        self._logged: set[Hashable] = set()
        self.__name__ = options.name or f"rfteval_{self.config.name}"
        self.coercions = Coercions(self.__name__)
        self.error_counts: dict[str, int] = {}  # grading errors by type, over the reward's life

    def _judge(self) -> Judge | None:
        """The judge the grader calls (None without a model grader); a setting it cannot be opened with says which
        options to pass."""
        from rfteval.graders.base import judge_types
        from rfteval.providers.judge import open_judge

        try:
            return open_judge(self.options.judge_endpoint(), self.config)
        except InputError as exc:
            types = "/".join(sorted(judge_types(self.config)))
            raise InputError(
                f"grader {self.config.name!r} has a {types} grader, which needs a judge "
                f"endpoint: pass judge_base_url= (an OpenAI-compatible server, e.g. vLLM), judge_api_key_env= (the "
                f"environment variable holding its key) and, to replace the grader's model, judge_model= "
                f"({exc.message})") from None

    # -- the item

    def find_item(self, fields: Mapping[str, object], prompt: object = None) -> JSONObject:
        """The item for one completion from what the trainer handed over: the items= line by id; else the line an
        exported dataset carries exactly; else the fields as they came (values a loader invented turned back where
        exact, warned about once per column where not), with a conversation prompt as `messages`."""
        if self.table is not None:
            rid = self._exported_id(fields)
            if rid is None:
                raise InputError(f"items= is given but the trainer passed no {self.options.id_field!r} column: keep "
                                 "the id column in the dataset (rfteval export-dataset writes it)",
                                 field=self.options.id_field)
            return self.table.get(rid)
        exported = decode_exported(fields, prompt)
        if exported is not None:
            return exported
        item: JSONObject = {}
        plain_prompt = plain_data(prompt)
        if "messages" not in fields and isinstance(plain_prompt, list) and plain_prompt and all(
                isinstance(m, Mapping) and "role" in m for m in plain_prompt):
            item["messages"] = plain_prompt
        item.update((key, plain_data(value, key, self.coercions)) for key, value in fields.items())
        return item

    def _exported_id(self, fields: Mapping[str, object]) -> object:
        """The id items= is looked up by: an exported row's own line's id first (export-dataset stores a date-like
        id as JSON text, which Arrow would have made a timestamp: the column holds '"2025-03-14"'), else the id
        column as it came (a line that had none has the id export-dataset added, in the column only)."""
        key = self.options.id_field
        try:
            exported = decode_exported(fields)
        except (TypeError, ValueError, KeyError):
            exported = None  # not export-dataset's row after all: the column as it came
        if exported is not None and exported.get(key) is not None:
            return exported[key]
        return fields.get(key)

    # -- grading and the error rule

    def grade(self, pairs: Sequence[tuple[Sample, JSONObject]], units: Sequence[Hashable]) -> list[GradeResult]:
        return self.engine.grade_batch(list(pairs), list(units))

    def grade_one(self, sample: Sample, item: JSONObject) -> GradeResult:
        return self.grade([(sample, item)], [0])[0]

    def value(self, result: GradeResult) -> float | None:
        """The reward for one result: its score, or on a grading error 0 ("zero") or None ("none"), the error
        counted and its type logged the first time it shows."""
        if result.error is None:
            return float(result.score)
        self._log_error(result)
        return 0.0 if self.on_error == "zero" else None

    def score(self, results: Sequence[GradeResult]) -> list[float | None]:
        return [self.value(r) for r in results]

    def details(self, result: GradeResult) -> RewardDetails:
        """A result as a dict a trainer logs beside the score: error type ("" when none) and passed."""
        return {"score": self.value(result), "error": result.error.type if result.error else "",
                "passed": bool(result.passed) if result.passed is not None else result.error is None and
                result.score >= 1.0}

    def _log_error(self, result: GradeResult) -> None:
        assert result.error is not None
        with self._lock:
            self.error_counts[result.error.type] = self.error_counts.get(result.error.type, 0) + 1
            if result.error.type in self._logged:
                return
            self._logged.add(result.error.type)
        rule = "scored 0" if self.on_error == "zero" else "scored None"
        log.warning("%s: %s, %s (logged once per error type): %s", self.__name__, result.error.type, rule,
                    result.error.message[:2000])

    def note_once(self, key: Hashable, message: str, *args: object) -> None:
        with self._lock:
            if key in self._logged:
                return
            self._logged.add(key)
        log.warning(message, *args)

    # -- life and pickling

    def close(self) -> None:
        """Stop the python workers and the judge (also done at exit)."""
        self._finalizer()

    def __enter__(self) -> Reward:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __reduce__(self) -> tuple[Callable[[type[Reward], JSONObject, RewardOptions, dict[str, object]], Reward],
                                  _Pickled]:
        """Pickled as its class, config and options (trainers ship reward functions to worker processes, TRL's
        AsyncGRPOTrainer among them); the copy starts its own engine."""
        return _rebuild, (type(self), self.config.model_dump(mode="json"), self.options, self._extra())

    def _extra(self) -> dict[str, object]:
        """The subclass's own constructor arguments, by keyword, for the copy a pickle rebuilds."""
        return {}

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.__name__} ({self.config.type})>"


def _rebuild(cls: type[Reward], config: JSONObject, options: RewardOptions, extra: dict[str, object]) -> Reward:
    return cls(config, options, **extra)
