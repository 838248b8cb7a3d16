"""What every grader type shares: its result, its error, its protocol and the type registry."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict, PrivateAttr, ValidationInfo, model_validator

# A grade's result, error types and the pair graded live in data/ (the sandbox returns them, and it sits below the
# graders); every grader module imports them from here, as before.
from rfteval.data.grades import (  # noqa: F401  (re-exported: the graders import them from here)
    FORMULA_EVAL,
    FORMULA_PARSE,
    INVALID_VARIABLE,
    MODEL_PARSE,
    MODEL_REFUSAL,
    MODEL_SERVER,
    MODEL_TRUNCATED,
    OTHER,
    PYTHON_MEMORY,
    PYTHON_RUNTIME,
    PYTHON_SERVER,
    PYTHON_TIMEOUT,
    GradeError,
    GradeResult,
    Pair,
    checked_score,
)
from rfteval.limits import PYTHON_BATCH_SIZE
from rfteval.sandbox.policy import SandboxPolicy

if TYPE_CHECKING:
    from rfteval.data.json_types import JSONObject
    from rfteval.data.sample import Sample
    from rfteval.providers.judge import JudgeClient


class GraderConfig(BaseModel):
    """Base of every grader config: OpenAI's fields, with unknown keys refused so typos surface.

    `name` is required by OpenAI's schema, yet OpenAI's own examples (the graders guide's python and combined
    examples, the RFT guide's job request, the RFT cookbook's multi grader) omit it. Those load here: the name
    defaults to the multi key for a sub-grader, else to the type, and `load_notes` says so in one line.
    """

    # strict: "0" is not a number and true is not 1 (OpenAI refuses both); JSON numbers still fill float fields
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
    type: str
    name: str
    _notes: list[str] = PrivateAttr(default_factory=list)

    # What the type is, for the modules that must know it (readiness, probes, the judge, the sandbox, the
    # runner): each type says so here instead of every caller testing `type ==`.
    calls_judge: ClassVar[bool] = False  # a model grader: needs a judge endpoint, costs money to run again
    runs_python: ClassVar[bool] = False  # runs code in the python sandbox
    grades_groups: ClassVar[bool] = False  # must be handed all of an item's samples at once
    always_gives_verdict: ClassVar[bool] = False  # every grade says whether it passed (string_check, label_model)

    def sub_graders(self) -> list[GraderConfig]:
        """The graders inside this one (a multi's), in order."""
        return []

    @property
    def needs_judge(self) -> bool:
        """Whether this grader or one inside it calls a judge: a judge client is opened only then
        (providers.judge.open_judge)."""
        return bool(judge_types(self))

    def score_range(self) -> tuple[float, float, str]:
        """The lowest and highest score, and where that comes from (declared, by definition, or assumed)."""
        return 0.0, 1.0, f"assumed [0, 1] for a {self.type} grader"

    def gives_pass_verdict(self) -> bool:
        """Whether each of its grades carries its own pass verdict (GradeResult.passed, the record's `passed`): by
        definition, or from its pass_threshold. `agree --regrade` asks before any judge call is paid for."""
        return self.always_gives_verdict or getattr(self, "pass_threshold", None) is not None

    def compared_templates(self) -> tuple[str, str] | None:
        """(answer template, reference template) when this grader itself compares an answer with a reference:
        where readiness reads labels and probes find the reference. None for the others."""
        return None

    def python_source(self) -> str | None:
        """The code, when this grader's score comes from python source: probes read the reference from it."""
        return None

    def judge_prompt(self) -> list[JSONObject]:
        """The messages a judge model is given (score_model, label_model), as JSON: probes read from them which
        fields of the sample the judge sees. Empty for graders without such a prompt."""
        return []

    def needs_env(self) -> list[tuple[str, str]]:
        """(field, VAR) for each environment variable grading with this grader reads (an endpoint grader's `${VAR}`
        in a header): checked before anything is graded (graders.paths.require_sandbox). Empty for the others."""
        return []

    @model_validator(mode="before")
    @classmethod
    def _default_name(cls, data: object, info: ValidationInfo) -> object:
        data = drop_unset(cls, data)
        if isinstance(data, dict) and "name" not in data and isinstance(data.get("type"), str):
            prefix = str((info.context or {}).get("prefix") or "")
            head, sep, key = prefix.rpartition("graders.")
            name = key if sep and key and "." not in key else data["type"]
            data = {**data, "name": name}
            notes = (info.context or {}).get("notes")
            if isinstance(notes, list):
                where = f"{prefix}: " if prefix else ""
                notes.append(f"{where}no name given (OpenAI's examples omit it, its API schema asks for one); "
                             f"using {name!r}")
        return data


def drop_unset(model: type[BaseModel], data: object) -> object:
    """`null` read as "unset" for every field that has a default (and `name`, which gets one): the `openai` SDK
    types its optional fields `Optional[...] = None` and its `model_dump()` writes them as null (a score_model's
    `"range": null` is OpenAI's default [0, 1]). A required field's null is left for validation to refuse."""
    if not isinstance(data, dict):
        return data
    fields = model.model_fields
    unset = [k for k, v in data.items() if v is None and k in fields and (k == "name" or not fields[k].is_required())]
    return {k: v for k, v in data.items() if k not in unset} if unset else data


def pass_rule_note(config: GraderConfig) -> str | None:
    """One line when a grader whose range is not [0, 1] has no pass_threshold: a sample then passes only at the
    top of the range (the pass rule of pass@k and agree's pass table), so 9 of 10 fails."""
    low, high, _ = config.score_range()
    if (low, high) == (0.0, 1.0) or getattr(config, "pass_threshold", None) is not None:
        return None
    return (f"range [{low:g}, {high:g}] and no pass_threshold: a sample passes (pass@k, --metric pass@K) only at "
            f"{high:g}, so {high - (high - low) / 10:g} fails; give --pass-threshold X (or the grader a pass_threshold, "
            "which OpenAI's Evals take)")


def walk(config: GraderConfig) -> Iterator[GraderConfig]:
    """The config and every grader inside it, depth first."""
    yield config
    for sub in config.sub_graders():
        yield from walk(sub)


def judge_types(config: GraderConfig) -> set[str]:
    """The model-grader types in a config (a multi's sub-graders included): what needs a judge."""
    return {c.type for c in walk(config) if c.calls_judge}


def runs_locally(config: GraderConfig) -> bool:
    """Grades without a judge model (cheap to run again)."""
    return not judge_types(config)


def uses_python(config: GraderConfig) -> bool:
    """Runs python code anywhere (itself, or a sub-grader): needs the sandbox."""
    return any(c.runs_python for c in walk(config))


def needs_groups(config: GraderConfig) -> bool:
    """Must be handed whole item groups: it is, or contains, a grader that ranks an item's samples together."""
    return any(c.grades_groups for c in walk(config))


def load_notes(config: GraderConfig) -> list[str]:
    """The one-line notes loading made about a config (defaults it filled in), sub-graders included."""
    notes = list(config._notes)
    for sub in config.sub_graders():
        notes += [n for n in load_notes(sub) if n not in notes]
    return notes


class Grader(Protocol):
    """A built grader. Batch-first: python graders send a batch to the worker pool in one message.

    `units`, one key per pair, are the python sandbox's grading units: pairs of equal keys (one model, one item:
    (model label, item id)) may share a process; None, every pair a process of its own. Graders that run no python
    take them and pass them on (a multi to its sub-graders) or leave them.
    """

    @property
    def config(self) -> GraderConfig: ...  # read-only here, so each grader may hold its own config class

    def grade_batch(self, pairs: Sequence[Pair], units: Sequence[Hashable] | None = None) -> list[GradeResult]: ...


class SampleGrader:
    """Base for graders that score one pair at a time in the rfteval process (pure, cheap)."""

    config: GraderConfig

    def grade_one(self, sample: Sample, item: JSONObject) -> GradeResult:
        raise NotImplementedError

    def grade_batch(self, pairs: Sequence[Pair], units: Sequence[Hashable] | None = None) -> list[GradeResult]:
        return [self.grade_one(s, i) for s, i in pairs]


@dataclass
class GradeOptions:
    """Run-time settings of graders that are not part of OpenAI's config."""

    # what python graders' sandbox may do (unsafe mode, the variables kept from it, the limits): built where the
    # flags are read, and given to the pool these options open, that pool alone
    sandbox: SandboxPolicy = field(default_factory=SandboxPolicy)
    python_workers: int | None = None  # None: every core
    python_batch_size: int = PYTHON_BATCH_SIZE

    def __post_init__(self) -> None:
        """Checked when the options are built, before any sample is graded or judge call paid for (the sandbox's
        limits are checked where its policy is built from the flags: SandboxPolicy.from_flags)."""
        from rfteval.errors import InputError

        if self.python_workers is not None and self.python_workers < 1:
            raise InputError(f"must be at least 1, got {self.python_workers}", field="--python-workers")


class PythonPool(Protocol):
    """The python sandbox's worker pool (rfteval.sandbox.WorkerPool) as the graders use it."""

    def grade(self, source: str, pairs: Sequence[Pair], units: Sequence[Hashable] | None = None) -> list[GradeResult]:
        ...

    def close(self) -> None: ...


@dataclass
class BuildContext:
    """Shared resources for building graders: one python worker pool, one judge client."""

    options: GradeOptions = field(default_factory=GradeOptions)
    judge: JudgeClient | None = None  # set by the runner for model graders (score_model, label_model, group_judge)
    # Makes the python sandbox pool on first use (rfteval.graders.engine passes one), so that building graders
    # that run no python never imports the pool.
    pool_factory: Callable[[GradeOptions], PythonPool] | None = None
    _pool: PythonPool | None = None

    def python_pool(self) -> PythonPool:
        if self._pool is None:
            if self.pool_factory is None:
                raise RuntimeError("this BuildContext has no python pool factory (use rfteval.graders.GradingEngine)")
            self._pool = self.pool_factory(self.options)
        return self._pool

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None


@dataclass(frozen=True)
class GraderType:
    """One registry entry: a grader type's config model and how to build it."""

    name: str
    config: type[GraderConfig]
    # each type's build takes its own config class; the registry's takes any config and checks it is that class
    build: Callable[[GraderConfig, BuildContext], Grader]
    summary: str
    extension: bool = False  # an rfteval addition, not an OpenAI grader type


REGISTRY: dict[str, GraderType] = {}


C = TypeVar("C", bound=GraderConfig)
G = TypeVar("G", bound=Grader)


def register(name: str, config: type[C], summary: str,
             extension: bool = False) -> Callable[[Callable[[C, BuildContext], G]], Callable[[C, BuildContext], G]]:
    """Decorator for a grader type's build function: one module, one registry entry."""

    def deco(build: Callable[[C, BuildContext], G]) -> Callable[[C, BuildContext], G]:
        def checked(cfg: GraderConfig, ctx: BuildContext) -> Grader:
            if not isinstance(cfg, config):  # REGISTRY[cfg.type] is looked up by the config's own type
                raise TypeError(f"grader type {name!r} builds from a {config.__name__}, not a {type(cfg).__name__}")
            return build(cfg, ctx)

        REGISTRY[name] = GraderType(name, config, checked, summary, extension)
        return build

    return deco
