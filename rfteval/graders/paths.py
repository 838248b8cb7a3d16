"""`rfteval grade` as one library call: files in, checked before any grading, graded records written whole."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from rfteval.errors import InputError
from rfteval.limits import MAX_ERROR_RATE, PYTHON_MEMORY_MB, PYTHON_TIMEOUT_S

if TYPE_CHECKING:
    from rfteval.data.dataset import Item
    from rfteval.data.records import Record
    from rfteval.graders.base import GradeOptions, GraderConfig
    from rfteval.providers.judge import Judge
    from rfteval.sandbox.policy import SandboxPolicy


def require_sandbox(config: GraderConfig, policy: SandboxPolicy) -> None:
    """What grading needs here, checked before anything is graded: when the grader has python code and the sandbox
    cannot be built here, stop with one line (exit 2) unless `policy` is unsafe (--unsafe-python-graders); when it
    reads an environment variable that is not set (an endpoint grader's `${VAR}` header), one line naming it."""
    import os

    from rfteval.graders.base import uses_python, walk
    from rfteval.sandbox.host_probe import sandbox_problem

    if uses_python(config):
        problem = sandbox_problem(policy)
        if problem is not None:
            raise InputError(problem, field="--unsafe-python-graders")
    for grader in walk(config):
        for where, var in grader.needs_env():
            if not os.environ.get(var):
                raise InputError(f"grader {grader.name!r} reads ${{{var}}}, which is not set in the environment: "
                                 f"export {var} first (its value is sent, and written nowhere)", field=where)


def dataset_format(config: GraderConfig, items: Iterable[Item], dataset: str | Path, allow_trailing_assistant: bool,
                   warn: Callable[[str], None], template_problems: Sequence[InputError] = ()) -> list[InputError]:
    """The RFT format's rules over the dataset a grader grades (data.dataset.FormatCheck, with the fields this
    grader reads as its reference, but those `template_problems` already say no item has): the errors returned, the
    warnings passed to `warn`."""
    from rfteval.data.dataset import check_format
    from rfteval.graders.checks import reference_fields

    check = check_format(items, dataset, allow_trailing_assistant, reference_fields(config, template_problems))
    for line in check.warnings():
        warn(f"warning: {line}")
    return check.problems()


@dataclass(frozen=True)
class GradeRequest:
    """What `rfteval grade` was asked for; the flags that can be wrong on their own are checked on building it."""

    dataset: Path
    grader: Path
    outputs: Path
    out: Path | None = None
    skip_invalid: bool = False
    python_timeout_s: float = PYTHON_TIMEOUT_S
    python_memory_mb: int = PYTHON_MEMORY_MB
    reasoning: str = "strip"
    think_tags: list[str] | None = None
    unsafe_python_graders: bool = False
    never_pass: tuple[str | None, ...] = ()  # env vars a python grader must never see (the judge's key)
    judge_cache: Path | None = None  # --judge-cache; None: judge_cache_path's default
    allow_grader_without_sample: bool = False  # the lint's way out (graders/lint.py)
    allow_trailing_assistant: bool = False  # the RFT format check's (data/dataset.py FormatCheck)
    judge_model: str | None = None  # --judge-model: every judge's model replaced (a retired one is never asked)
    max_error_rate: float = MAX_ERROR_RATE  # exit 3 above this share of records that failed to grade
    top: int = 50  # rows of the per-item table
    tags: tuple[tuple[str, str], ...] = field(init=False)
    options: GradeOptions = field(init=False)

    def __post_init__(self) -> None:
        """Every flag that can be wrong on its own, checked here, so before any sample is graded or judge call paid
        for: a --max-error-rate of -1 used to exit 3 after grading everything."""
        from rfteval.data.reasoning import REASONING_MODES, parse_tags
        from rfteval.data.transcripts import TRACES_FILE
        from rfteval.graders.base import GradeOptions

        if self.reasoning not in REASONING_MODES:
            raise InputError(f"expected strip or keep, got {self.reasoning!r}", field="--reasoning")
        try:
            tags = parse_tags(self.think_tags)
        except ValueError as exc:
            raise InputError(str(exc), field="--think-tags") from None
        if not 0 <= self.max_error_rate <= 1:
            raise InputError(f"must be a share between 0 and 1, got {self.max_error_rate:g}", field="--max-error-rate")
        if self.top < 0:
            raise InputError(f"must be >= 0, got {self.top}", field="--top")
        object.__setattr__(self, "tags", tuple(tags))
        object.__setattr__(self, "options", GradeOptions(sandbox=self.sandbox_policy()))
        if self.outputs.is_dir() and (self.outputs / TRACES_FILE).is_file():  # vf-eval's run directory
            object.__setattr__(self, "outputs", self.outputs / TRACES_FILE)

    @property
    def inputs(self) -> list[Path]:
        return [self.dataset, self.grader, self.outputs]

    def sandbox_policy(self) -> SandboxPolicy:
        """The python grader sandbox's policy from the flags: unsafe mode, the key variables, the limits."""
        from rfteval.sandbox.policy import SandboxPolicy

        return SandboxPolicy.from_flags(self.unsafe_python_graders, self.never_pass, self.python_timeout_s,
                                        self.python_memory_mb)

    @property
    def records_path(self) -> Path:
        from rfteval.graders.grading import default_records_path

        return self.out or default_records_path(self.outputs)

    @property
    def judge_cache_path(self) -> Path:
        """Where judge answers are cached: --judge-cache, else judge_cache.jsonl beside the records written, the
        name `rfteval run` gives its run directory's cache and `agree --regrade` reads beside A. A re-run of the
        same grade sends no judge call again, and an `agree --regrade` of these records shares the answers."""
        from rfteval.data.rundir import JUDGE_CACHE

        return self.judge_cache or self.records_path.parent / JUDGE_CACHE


@dataclass(frozen=True)
class GradedFile:
    """The records file written, the grader that graded it, and its records."""

    path: Path
    config: GraderConfig
    records: list[Record]


def grade_paths(request: GradeRequest, warn: Callable[[str], None],
                open_judge: Callable[[GraderConfig], Judge | None]) -> GradedFile:
    """Check everything (output path, dataset, grader, templates, sandbox, every outputs line) before grading, so
    bad input never leaves a half-written result; then grade and write the records. `warn` gets the lines a user
    should see and the run goes on; `open_judge` connects the judge (and checks it) once the inputs are known
    good (it caches answers in `request.judge_cache_path`), and the judge is closed here."""
    from rfteval.data.dataset import load_dataset
    from rfteval.data.outfile import check_output, write_output
    from rfteval.data.outputs import Output, iter_outputs, prompt_index
    from rfteval.data.records import write_jsonl
    from rfteval.errors import InputErrors
    from rfteval.graders.base import judge_types, load_notes
    from rfteval.graders.checks import output_json_warning, preflight
    from rfteval.graders.grading import grade_outputs
    from rfteval.graders.lint import load_checked_grader
    from rfteval.graders.loader import GraderFile

    r = request
    path = check_output(r.records_path, inputs=r.inputs, flag="--out")
    data = load_dataset(r.dataset, skip_invalid=r.skip_invalid)
    if data.skipped:
        warn(f"warning: skipped {len(data.skipped)} invalid dataset lines (first: {data.skipped[0]})")
    source = GraderFile(r.grader)  # read once: the config, and whether samples get an output_json
    config = load_checked_grader(source, warn, allow_without_sample=r.allow_grader_without_sample,
                                 judge_model=r.judge_model)
    if judge_types(config):  # the cache is appended to: never an input, never the records file
        check_output(r.judge_cache_path, inputs=[*r.inputs, path], flag="--judge-cache")
    for note in load_notes(config):
        warn(f"note: {note}")
    set_aside: list[Output] = []
    outs = list(iter_outputs(r.outputs, known_items={it.id for it in data},
                             unknown=set_aside if r.skip_invalid else None,
                             prompts=prompt_index((it.id, it.messages) for it in data)))
    # transcripts graded as rollouts: their samples hold sample.rollout, which a grader may then read
    rollouts = bool(outs) and all(o.transcript is not None for o in outs)
    problems = preflight(config, data, r.grader, rollout=rollouts)
    problems += dataset_format(config, data, r.dataset, r.allow_trailing_assistant, warn, problems)
    if problems:
        raise InputErrors(problems)
    parse_json = source.has_response_format
    if (warning := output_json_warning(config, parse_json)) is not None:
        warn(f"warning: {warning}")
    policy = r.sandbox_policy()
    require_sandbox(config, policy)
    if set_aside:
        warn(f"warning: skipped {len(set_aside)} output(s) of items not in the dataset (skipped lines; first: "
             f"{r.outputs}:{set_aside[0].line}, item {set_aside[0].item_id!r})")
    judge = open_judge(config)
    try:
        records = grade_outputs(data, config, outs, r.options, judge=judge, parse_json=parse_json,
                                reasoning=r.reasoning, tags=r.tags)
    finally:
        if judge is not None:
            judge.close()
    from rfteval.providers.judge import raise_if_stopped

    raise_if_stopped(judge, "no records were written (a re-run after fixing it re-sends only what failed)")
    write_output(path, lambda tmp: write_jsonl(records, tmp), inputs=r.inputs, flag="--out")
    return GradedFile(path, config, records)
