"""An OpenAI grader as an open trainer's reward: TRL's reward-function contract and verl's `compute_score`.

A team that leaves OpenAI's fine-tuning keeps its grader; training on it in TRL or verl must not mean re-writing it,
or eval and training drift apart. These adapters run the grader through the same engine as `rfteval grade` (python
graders in the same sandbox), so a completion gets the same score in training as in evaluation.

    from rfteval.reward import for_trl, for_verl
    reward = for_trl("graders/chipstack.json")          # GRPOTrainer(reward_funcs=[reward], ...)
    compute_score = for_verl("graders/chipstack.json")  # verl: custom_reward_function.path / .name

A grading error scores 0 (OpenAI's rule for RFT) and is logged once per error type on the `rfteval.reward` logger;
it is never raised, so one bad completion never stops a training run. Bad setup (an unreadable grader, a model
grader with no judge endpoint, a sandbox that cannot be built) raises at construction.
"""

from __future__ import annotations

import json
import logging
import threading
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rfteval.errors import InputError
from rfteval.graders.base import GradeOptions, GraderConfig, GradeResult
from rfteval.graders.engine import GradingEngine
from rfteval.graders.loader import load_grader, parse_config, unwrap_grader
from rfteval.graders.sandbox import configure, grading_units
from rfteval.sample import make_sample

log = logging.getLogger("rfteval.reward")

# Keywords TRL's GRPOTrainer._calculate_rewards adds besides the dataset columns (trl/trainer/grpo_trainer.py).
TRL_EXTRAS = frozenset({"trainer_state", "log_extra", "log_metric", "environments"})
# Keys verl's NaiveRewardManager writes into extra_info before calling compute_score (not the dataset's).
VERL_ADDED = ("num_turns", "rollout_reward_scores")


@dataclass(frozen=True)
class RewardOptions:
    """The settings `rfteval grade` takes as flags (--judge-*, --grader-timeout, --grader-memory,
    --unsafe-python-graders), as keyword options of for_trl / for_verl."""

    judge_base_url: str | None = None
    judge_api_key_env: str = "OPENAI_API_KEY"
    judge_api: str = "chat"
    judge_model: str | None = None
    judge_concurrency: int = 16
    grader_timeout: float = 120.0
    grader_memory: int = 2048
    python_workers: int | None = None
    unsafe_python_graders: bool = False
    name: str | None = None  # the reward's __name__ (TRL logs rewards under it); default rfteval_<grader name>


def grader_config(grader: str | Path | Mapping[str, Any] | GraderConfig) -> GraderConfig:
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


def plain_data(value: Any) -> Any:
    """Column values as JSON-like data: numpy arrays and scalars (what parquet-backed datasets hand over, verl's
    among them) become lists and numbers, so graders see what the JSONL item held."""
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if isinstance(value, Mapping):
        return {k: plain_data(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain_data(v) for v in value]
    tolist = getattr(value, "tolist", None)  # numpy arrays and scalars, torch tensors
    if callable(tolist):
        return plain_data(tolist())
    return value


def _content_text(content: Any) -> str:
    """A message's content as text: a string, or the text parts of a content list."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        parts = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, Mapping) and isinstance(part.get("text"), str):
                parts.append(part["text"])
        return "".join(parts)
    return str(content)


def openai_tool_calls(calls: Any) -> list[dict[str, Any]]:
    """Tool calls in the shape OpenAI graders read (`sample.output_tools`): TRL's parse_response gives arguments
    as a dict; OpenAI's are a JSON string, written here as vLLM's tool parsers write them (json.dumps,
    ensure_ascii=False)."""
    out: list[dict[str, Any]] = []
    for call in calls or []:
        if not isinstance(call, Mapping):
            continue
        call = dict(plain_data(call))
        function = call.get("function")
        if isinstance(function, Mapping):
            function = dict(function)
            if not isinstance(function.get("arguments"), str) and function.get("arguments") is not None:
                function["arguments"] = json.dumps(function["arguments"], ensure_ascii=False)
            call["function"] = function
        call.setdefault("type", "function")
        out.append(call)
    return out


def sample_from_completion(completion: Any) -> dict[str, Any]:
    """The grader's sample for one TRL completion: a string (standard format), or a list of messages
    (conversational format) whose last assistant message gives output_text and output_tools."""
    if isinstance(completion, str):
        return make_sample(completion)
    if isinstance(completion, Mapping):
        completion = [completion]
    if isinstance(completion, Sequence):
        assistant = [m for m in completion if isinstance(m, Mapping) and m.get("role") == "assistant"]
        if not assistant:
            return make_sample("")
        last = assistant[-1]
        return make_sample(_content_text(last.get("content")), openai_tool_calls(last.get("tool_calls")))
    raise TypeError(f"a completion must be a string or a list of messages, not {type(completion).__name__}")


def _close(engine: GradingEngine, judge: Any) -> None:
    try:
        engine.close()
    finally:
        if judge is not None:
            judge.close()


class _Reward:
    """A grader ready to score completions: its engine (one python pool for the process's life) and judge."""

    kind = ""

    def __init__(self, grader: str | Path | Mapping[str, Any] | GraderConfig, options: RewardOptions):
        from rfteval.judge_stability import model_grader_types

        self.config = grader_config(grader)
        self.options = options
        if options.unsafe_python_graders:
            configure(unsafe=True)  # process-wide, as the CLI flag
        configure(never_pass=[options.judge_api_key_env])
        judge = None
        types = model_grader_types(self.config)
        if types:
            judge = self._judge(types)
        grade_options = GradeOptions(python_timeout_s=options.grader_timeout, python_memory_mb=options.grader_memory,
                                     python_workers=options.python_workers)
        try:
            self.engine = GradingEngine(self.config, grade_options, judge=judge)
        except BaseException:
            if judge is not None:
                judge.close()
            raise
        self._finalizer = weakref.finalize(self, _close, self.engine, judge)  # also runs at interpreter exit
        self._lock = threading.Lock()
        self._logged: set[Any] = set()
        self.__name__ = options.name or f"rfteval_{self.config.name}"

    def _judge(self, types: set[str]) -> Any:
        from rfteval.judge import Judge

        o = self.options
        try:
            return Judge.from_settings(o.judge_base_url, o.judge_api_key_env, o.judge_api,
                                       concurrency=o.judge_concurrency, model_override=o.judge_model)
        except InputError as exc:
            raise InputError(
                f"grader {self.config.name!r} has a {'/'.join(sorted(types))} grader, which needs a judge "
                f"endpoint: pass judge_base_url= (an OpenAI-compatible server, e.g. vLLM), judge_api_key_env= (the "
                f"environment variable holding its key) and, to replace the grader's model, judge_model= "
                f"({exc.message})") from None

    def score(self, results: Sequence[GradeResult]) -> list[float]:
        """Scores, 0 for a grading error (OpenAI's rule), each error type logged the first time it shows."""
        out: list[float] = []
        for result in results:
            if result.error is not None:
                self._log_error(result)
                out.append(0.0)
            else:
                out.append(float(result.score))
        return out

    def _log_error(self, result: GradeResult) -> None:
        assert result.error is not None
        with self._lock:
            if result.error.type in self._logged:
                return
            self._logged.add(result.error.type)
        log.warning("%s: %s, scored 0 (logged once per error type): %s", self.__name__, result.error.type,
                    result.error.message[:2000])

    def close(self) -> None:
        """Stop the python workers and the judge (also done at exit)."""
        self._finalizer()

    def __enter__(self) -> _Reward:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled as its config and options (trainers ship reward functions to worker processes); the copy
        starts its own engine."""
        return _rebuild, (self.kind, self.config.model_dump(mode="json"), asdict(self.options), self._extra())

    def _extra(self) -> dict[str, Any]:
        return {}

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.__name__} ({self.config.type})>"


class TRLReward(_Reward):
    """TRL's reward-function contract: `f(prompts=..., completions=..., completion_ids=..., **columns)` returns one
    float per completion. Every dataset column but the prompt arrives as a keyword holding one value per
    completion (TRL's GRPOTrainer._calculate_rewards); a completion's item is built from those values, with the
    prompt as `messages` when it is a conversation (an RFT line's shape)."""

    kind = "trl"

    def __call__(self, prompts: Sequence[Any] | None = None, completions: Sequence[Any] | None = None,
                 completion_ids: Any = None, **kwargs: Any) -> list[float]:
        if completions is None:
            raise TypeError(f"{self.__name__}() needs completions= (TRL passes prompts=, completions=, "
                            "completion_ids= and the dataset columns)")
        n = len(completions)
        if prompts is not None and len(prompts) != n:
            raise ValueError(f"{self.__name__}(): {len(prompts)} prompts for {n} completions")
        columns: dict[str, Sequence[Any]] = {}
        for key, values in kwargs.items():
            if key in TRL_EXTRAS:
                continue
            if isinstance(values, (str, bytes, Mapping)) or not hasattr(values, "__len__") or len(values) != n:
                self._note_ignored(key)
                continue
            columns[key] = values
        items: list[dict[str, Any]] = []
        units: list[int] = []
        seen: dict[str, int] = {}
        for i in range(n):
            item: dict[str, Any] = {}
            prompt = plain_data(prompts[i]) if prompts is not None else None
            if "messages" not in columns and isinstance(prompt, list) and prompt and all(
                    isinstance(m, Mapping) and "role" in m for m in prompt):
                item["messages"] = prompt
            item.update((key, plain_data(values[i])) for key, values in columns.items())
            key = json.dumps(item, sort_keys=True, default=str)  # a prompt's completions share one item, one unit
            if key not in seen:
                seen[key] = len(items)
                items.append(item)
            units.append(seen[key])
        pairs = [(sample_from_completion(c), items[u]) for c, u in zip(completions, units)]
        with grading_units(units):
            results = self.engine.grade_batch(pairs)
        return self.score(results)

    def _note_ignored(self, key: str) -> None:
        with self._lock:
            if ("ignored", key) in self._logged:
                return
            self._logged.add(("ignored", key))
        log.warning("%s: keyword %r is not a column (one value per completion); not part of the item", self.__name__,
                    key)


class VerlReward(_Reward):
    """verl's custom reward function: `compute_score(data_source, solution_str, ground_truth, extra_info=None)`.
    The item is `extra_info` with `ground_truth` at `reference_field` (the dataset's reward_model.ground_truth)."""

    kind = "verl"

    def __init__(self, grader: Any, options: RewardOptions, reference_field: str | None = "reference_answer",
                 ground_truth_json: bool = False):
        super().__init__(grader, options)
        self.reference_field = reference_field
        self.ground_truth_json = ground_truth_json

    def _extra(self) -> dict[str, Any]:
        return {"reference_field": self.reference_field, "ground_truth_json": self.ground_truth_json}

    def item(self, ground_truth: Any, extra_info: Mapping[str, Any] | None) -> dict[str, Any]:
        item = plain_data(dict(extra_info)) if extra_info else {}
        for key in VERL_ADDED:
            item.pop(key, None)
        if self.reference_field:
            truth = plain_data(ground_truth)
            if self.ground_truth_json and isinstance(truth, str):
                try:
                    truth = json.loads(truth)
                except ValueError:
                    pass  # not JSON: the grader gets the string (and may well score it 0)
            item[self.reference_field] = truth
        return item

    def __call__(self, data_source: Any = None, solution_str: str | None = None, ground_truth: Any = None,
                 extra_info: Mapping[str, Any] | None = None, **kwargs: Any) -> float:
        """verl may call this from several threads at once (its reward loop's executor): the engine is
        thread-safe. Keywords verl adds (reward_router_address, reward_kwargs) are ignored."""
        sample = make_sample(solution_str or "")
        with grading_units([0]):
            (result,) = self.engine.grade_batch([(sample, self.item(ground_truth, extra_info))])
        return self.score([result])[0]


def _rebuild(kind: str, config: dict[str, Any], options: dict[str, Any], extra: dict[str, Any]) -> _Reward:
    opts = RewardOptions(**options)
    if kind == "verl":
        return VerlReward(config, opts, **extra)
    return TRLReward(config, opts)


def for_trl(grader: str | Path | Mapping[str, Any] | GraderConfig, **options: Any) -> TRLReward:
    """A TRL reward function (GRPOTrainer, RLOOTrainer: `reward_funcs=[...]`) that scores with `grader`.

    Options: judge_base_url, judge_api_key_env, judge_api, judge_model, judge_concurrency (model graders only),
    grader_timeout, grader_memory, python_workers, unsafe_python_graders, name. Close it (or use `with`) to
    stop its python workers early; otherwise they stop at exit."""
    return TRLReward(grader, RewardOptions(**options))


def for_verl(grader: str | Path | Mapping[str, Any] | GraderConfig, reference_field: str | None = "reference_answer",
             ground_truth_json: bool = False, **options: Any) -> VerlReward:
    """verl's `compute_score(data_source, solution_str, ground_truth, extra_info=None) -> float` scoring with
    `grader`. The item is `extra_info` with `ground_truth` set at `reference_field` (None: extra_info alone, for
    datasets that keep the whole item there); `ground_truth_json` parses a JSON-string ground truth first (parquet
    files often hold structured references as JSON text). Options as for_trl."""
    return VerlReward(grader, RewardOptions(**options), reference_field, ground_truth_json)


# ------------------------------------------------------------------ export-reward: a module for the trainer's side

_EXPORT_HEAD = '''\
"""{doc}"""

from __future__ import annotations

import json
from typing import Any

GRADER = json.loads(r"""
{config}
""")
OPTIONS: dict[str, Any] = json.loads(r"""{options}""")
_reward: Any = None


def _get() -> Any:
    """The reward, built at the first call in each process (so the module pickles and imports cheaply)."""
    global _reward
    if _reward is None:
        from rfteval.reward import {factory}

        _reward = {factory}(GRADER, **OPTIONS)
    return _reward


def close() -> None:
    """Stop rfteval's python workers now rather than at exit."""
    if _reward is not None:
        _reward.close()
'''

_EXPORT_TRL = '''

def reward(prompts: Any = None, completions: Any = None, completion_ids: Any = None, **kwargs: Any) -> list[float]:
    """TRL's reward-function contract: one float per completion; a grading error scores 0 (logged once)."""
    return _get()(prompts=prompts, completions=completions, completion_ids=completion_ids, **kwargs)


reward.__name__ = {reward_name!r}  # the name TRL logs this reward under
'''

_EXPORT_VERL = '''

def compute_score(data_source: Any, solution_str: str, ground_truth: Any, extra_info: Any = None,
                  **kwargs: Any) -> float:
    """verl's custom reward contract; the item is extra_info with ground_truth at {field}."""
    return _get()(data_source, solution_str, ground_truth, extra_info, **kwargs)
'''


def _doc(text: str) -> str:
    """Text safe inside a triple-quoted docstring (names and paths are the user's)."""
    return text.replace("\\", "\\\\").replace('"""', '\\"\\"\\"')


def export_module(config: GraderConfig, target: str, source: str, out: str | Path,
                  options: Mapping[str, Any] | None = None) -> str:
    """The text of a Python module holding `config` inline (a JSON literal) and exposing it as TRL's `reward`
    or verl's `compute_score`. `options` are for_trl / for_verl keyword options, stored beside the config."""
    options = dict(options or {})
    if target == "trl":
        RewardOptions(**options)  # unknown options fail here, not in the trainer
        name = options.get("name") or f"rfteval_{config.name}"
        title = f"TRL reward function for grader {config.name!r} (rfteval)."
        usage = f"    from {Path(out).stem} import reward\n    trainer = GRPOTrainer(..., reward_funcs=[reward])"
        tail = _EXPORT_TRL.format(reward_name=name)
        factory = "for_trl"
    elif target == "verl":
        field = options.get("reference_field", "reference_answer")
        RewardOptions(**{k: v for k, v in options.items() if k not in ("reference_field", "ground_truth_json")})
        title = f"verl custom reward function for grader {config.name!r} (rfteval)."
        usage = (f"    custom_reward_function.path={out} custom_reward_function.name=compute_score\n\n"
                 f"The item is the row's extra_info with reward_model.ground_truth at {field!r}.")
        tail = _EXPORT_VERL.format(field=_doc(repr(field)))
        factory = "for_verl"
    else:
        raise ValueError(f"unknown target {target!r}; expected trl or verl")
    doc = (f"{title}\n\nWritten by `rfteval export-reward` from {source}\n(grader {config.name!r}, type "
           f"{config.type}).\n\nThe grader config is held below; rfteval, imported at the first call, scores with "
           "it exactly as\n`rfteval grade` does (python graders in its sandbox). Needs rfteval installed where the "
           f"trainer runs.\n\n{usage}\n")
    text = _EXPORT_HEAD.format(
        doc=_doc(doc), factory=factory,
        config=json.dumps(config.model_dump(mode="json", exclude_unset=True), indent=2),  # as written; ASCII only
        options=json.dumps(options),
    ) + tail
    compile(text, "<export>", "exec")  # a JSON text never holds three quotes in a row nor ends in a backslash
    return text
