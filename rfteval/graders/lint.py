"""The grader lint: what a grader's config alone shows to be wrong, checked wherever a grader is loaded to grade
(`validate grader`, `run`, `grade`, `probe-grader`, `agree --regrade`, `export-reward`: all through
`load_checked_grader`), before anything is sent.

- A model grader (score_model, label_model, one inside a multi) whose messages render no `sample.*` path never
  shows the judge the answer: every output of an item gets the same score, and a cached judge answers every cell
  from one call. Azure's RFT sample (azure-sdk-for-net, Sample18_FineTuning_Reinforcement.md) ships such a
  grader. An error (exit 2), unless `--allow-grader-without-sample` says the judge truly needs none.
- A python grader whose `grade` never reads its first parameter scores every output of an item alike: a warning.
- A grader naming a model OpenAI retired cannot run there as written: a warning naming `--judge-model`.
- A grader reading `sample.rollout` (an agent run's trajectory, rfteval's extension of the sample) is not uploadable
  to OpenAI, whose samples have no such field: a warning, as the group judge is an rfteval extension.

The group judge is exempt from the first check: it always puts the samples in its own prompt.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rfteval.errors import InputError
from rfteval.graders.checks import reads_rollout

if TYPE_CHECKING:
    from rfteval.graders.base import GraderConfig
    from rfteval.graders.loader import GraderFile

ALLOW_FLAG = "--allow-grader-without-sample"

# OpenAI's deprecations page (reference-2026-12.md): o3-mini and o4-mini were shut down on 23 October 2026.
# A dated snapshot (o4-mini-2025-04-16) is the same model.
RETIRED_MODELS = {"o3-mini": "23 October 2026", "o4-mini": "23 October 2026"}
_SNAPSHOT = re.compile(r"-\d{4}-\d{2}-\d{2}$")


@dataclass(frozen=True)
class Finding:
    """One thing the lint found: an error stops the command (exit 2), a warning is printed and the command goes on."""

    error: bool
    message: str
    field: str | None = None


def keyed_graders(config: GraderConfig, where: str = "") -> Iterator[tuple[str, GraderConfig]]:
    """(field prefix, grader) for the config and every grader inside it: `graders.KEY` names a multi's sub-grader
    as its formula does."""
    yield where, config
    for key, sub in (getattr(config, "graders", None) or {}).items():
        yield from keyed_graders(sub, f"{where}.graders.{key}" if where else f"graders.{key}")


def grader_label(config: GraderConfig, where: str, top: GraderConfig) -> str:
    """How a finding names the grader: its name and type, and in a multi the sub-grader's key too."""
    if not where:
        return f"{config.type} grader {config.name!r}"
    key = where.rsplit(".", 1)[-1]
    return f"{config.type} grader {config.name!r} (key {key!r} of {top.type} {top.name!r})"


def renders_sample(config: GraderConfig) -> bool:
    """Whether any message of a model grader's prompt renders a `sample.*` path (text, content parts, image URLs).

    Read from the messages as the judge is sent them (judged.judge_messages), not from the config: a content part
    may hold keys that are never sent (`{"type": "input_text", "text": "Rate it", "note": "{{ sample.output_text
    }}"}` loads, but only its `text` reaches the judge)."""
    from rfteval.graders.checks import template_paths
    from rfteval.graders.judged import judge_messages

    sent = judge_messages(config.judge_prompt())
    return any(namespace == "sample" for _, _, namespace, _ in template_paths(sent))


def grade_ignores_sample(source: str) -> str | None:
    """The name of `grade`'s first parameter when the function body never reads it, else None (also when the
    source has no plain `def grade` with a named first parameter: then nothing is known)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    defs = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "grade"]
    if not defs:
        return None
    fn = defs[-1]
    positional = fn.args.posonlyargs + fn.args.args
    if not positional:
        return None
    name = positional[0].arg
    for node in fn.body:
        for sub in ast.walk(node):
            if isinstance(sub, ast.Name) and sub.id == name:
                return None
            if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Name) and sub.func.id in ("locals", "vars"):
                return None  # reads its arguments by other means
    return name


def retired_model(model: str) -> str | None:
    """The date OpenAI retired `model` on, or None."""
    base = _SNAPSHOT.sub("", model.strip().lower()).removeprefix("openai/")
    return RETIRED_MODELS.get(base)


def lint_grader(config: GraderConfig, judge_model: str | None = None) -> list[Finding]:
    """Every finding of the lint, in the config's order. `judge_model` (--judge-model) replaces every judge's model,
    so a retired model named in the file is then never asked."""
    findings: list[Finding] = []
    for where, grader in keyed_graders(config):
        label = grader_label(grader, where, config)
        field = f"{where}.input" if where else "input"
        if grader.judge_prompt() and not renders_sample(grader):
            findings.append(Finding(True, (
                f"{label}: no message renders the answer (no {{{{ sample.output_text }}}} or other sample.* path), "
                "so the judge scores every output alike; add {{ sample.output_text }} to a message, or pass "
                f"{ALLOW_FLAG} if this judge truly needs no answer"), field))
        source = grader.python_source() if grader.type == "python" else None
        if source is not None and (param := grade_ignores_sample(source)) is not None:
            findings.append(Finding(False, (
                f"{label}: grade() never reads its first parameter {param!r} (the sample): every output of an item "
                "scores the same"), f"{where}.source" if where else "source"))
        if not where and reads_rollout(config):  # once for the whole config, its sub-graders' reads included
            findings.append(Finding(False, (
                f"{label}: reads sample.rollout, an agent run's trajectory (rfteval's extension of the sample): "
                "OpenAI's graders have no such field, so this grader is not uploadable to OpenAI as it is")))
        model = getattr(grader, "model", None)
        if judge_model is None and isinstance(model, str) and (date := retired_model(model)) is not None:
            findings.append(Finding(False, (
                f"{label}: model {model!r} was retired by OpenAI on {date} and will not run on OpenAI; point the "
                "judge at another model with --judge-model (and --judge-base-url for another server)"),
                f"{where}.model" if where else "model"))
    return findings


def check_grader(config: GraderConfig, source: str | Path | None, warn: Callable[[str], None], *,
                 allow_without_sample: bool = False, judge_model: str | None = None) -> None:
    """Print the lint's warnings through `warn` (as `warning: ...` lines) and raise the first error as one line
    naming the grader file; `allow_without_sample` lets a grader whose judge sees no answer through."""
    errors: list[InputError] = []
    for finding in lint_grader(config, judge_model):
        if finding.error:
            if not allow_without_sample:
                errors.append(InputError(finding.message, source))
        else:
            warn(f"warning: {finding.message}")
    if errors:
        from rfteval.errors import InputErrors

        raise InputErrors(errors)


def load_checked_grader(path: str | Path | GraderFile, warn: Callable[[str], None], *,
                        allow_without_sample: bool = False, judge_model: str | None = None) -> GraderConfig:
    """A grader loaded to grade with (loader.load_grader) and the lint applied: the one way every command that
    grades gets its grader (a grader read only for its metadata, such as its range, is loaded plainly). `path` may
    be the GraderFile the command already read."""
    from rfteval.graders.loader import GraderFile

    source = GraderFile.of(path)
    config = source.config
    check_grader(config, source.path, warn, allow_without_sample=allow_without_sample, judge_model=judge_model)
    return config
