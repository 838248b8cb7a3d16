"""Does the grader give each item's reference answer its maximum? (`rfteval validate grader --dataset`)

How a reference becomes an output is the probes' rule (rfteval.readiness.reference_template: inferred from the
grader's templates or python source, or given as a template), so `validate grader` and `probe-grader` always agree.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from rfteval.data.dataset import Dataset
from rfteval.data.json_types import JSONValue
from rfteval.errors import InputError
from rfteval.graders.base import GradeOptions, GraderConfig

if TYPE_CHECKING:
    from collections.abc import Callable

    from rfteval.providers.judge import JudgeClient


class BelowMax(TypedDict):
    item_id: str
    score: float


class ReferenceSummary(TypedDict):
    items: int
    checked: int  # items whose reference was graded: scored (at the maximum or below it) or a grading error
    scored: int
    at_max: int
    max: float
    share_at_max: float | None  # of the scored; None when no reference was scored
    below_max: list[BelowMax]
    errors: dict[str, int]  # grading errors by type: left out of the share (an error's 0 is no grade)
    error_messages: dict[str, str]  # each error type's first message, whole (a python grader's traceback too)
    inconclusive: bool  # references were graded, and every grade was an error


class ReferenceCheck(TypedDict):
    summary: ReferenceSummary
    text: str  # what `validate grader --dataset` prints


def reference_check(dataset: Dataset, config: GraderConfig, options: GradeOptions | None = None,
                    template: JSONValue = None, judge: JudgeClient | None = None,
                    before_calls: Callable[[int], None] | None = None) -> ReferenceCheck:
    """The reference probe over every item: how many score the maximum, and which do not. With a judge,
    `before_calls` is told how many judge calls grading the references makes (judge_calls), once the references
    are rendered and before the first call; not at all when there is no reference to grade."""
    from rfteval.readiness.probes import run_probes

    def planned(samples: int) -> None:
        if before_calls is not None and judge is not None and samples:
            before_calls(judge_calls(config, samples))

    report = run_probes(config, [(it.id, it.data) for it in dataset], reference_template=template, options=options,
                        judge=judge, only=["reference"], before_grading=planned)
    probe = report.probes[0]
    top = report.score_max
    below = {i: s for i, s in probe.scores.items() if s < top - 1e-9}
    scored = len(probe.scores)  # grading errors are not scores: counted apart, never "below the maximum"
    at_max = scored - len(below)
    skipped = f"; {probe.n_skipped} skipped: {probe.skip_reason}" if probe.n_skipped else ""
    lines = [f"reference answers graded as outputs: {probe.n_graded} of {len(dataset)} items{skipped} "
             f"(how: {report.template_source})"]
    if probe.status == "inconclusive":
        lines.append(f"inconclusive: {probe.errors_text}: no reference answer was scored")
    elif scored:
        lines.append(f"at the maximum ({top:g}): {at_max}/{scored} = {at_max / scored:.1%}"
                     + (f" of the scored; {probe.errors_text} left out" if probe.n_errors else ""))
    from rfteval.data.grades import message_line

    # the message, not only its type, is what the grader is fixed from ("KeyError: 'answer_num'")
    lines += [f"  {kind}, the first: {message_line(message)}" for kind, message in probe.error_messages.items()]
    for item_id, score in list(below.items())[:10]:
        lines.append(f"  below the maximum: item {item_id}: score {score:.4f}")
    if len(below) > 10:
        lines.append(f"  ... and {len(below) - 10} more")
    from rfteval.readiness.probes import ALL_ERRORS_NOTE

    # the inconclusive line above says it: one probe ran, and it is not a probe to a user of validate grader
    lines += [f"note: {n}" for n in report.notes if not n.startswith(ALL_ERRORS_NOTE)]
    summary: ReferenceSummary = {"items": len(dataset), "checked": probe.n_graded, "scored": scored, "at_max": at_max,
                                 "max": top, "share_at_max": at_max / scored if scored else None,
                                 "below_max": [{"item_id": i, "score": s} for i, s in below.items()],
                                 "errors": dict(probe.error_types), "error_messages": dict(probe.error_messages),
                                 "inconclusive": probe.status == "inconclusive"}
    return {"summary": summary, "text": "\n".join(lines)}


def describe_grader(config: GraderConfig) -> list[str]:
    """A few lines saying what a grader is, for `validate grader`."""
    lines = [f"grader {config.name!r}: type {config.type}, valid"]
    subs = getattr(config, "graders", None)
    if isinstance(subs, dict):
        for key, sub in subs.items():
            lines.append(f"  {key}: {sub.type} {sub.name!r}")
        lines.append(f"  calculate_output: {getattr(config, 'calculate_output', '')}")
    return lines


def load_reference_template(value: str) -> JSONValue:
    """A JSON template from a file, or inline JSON, or a bare text template containing {{item.…}}."""
    from rfteval.graders.template import parse_path
    from rfteval.readiness.reference_template import template_paths

    path = Path(value)
    source: Path | None = None
    if path.is_file():
        source = path
        text = path.read_text(encoding="utf-8-sig")
    else:
        text = value
    try:
        template: JSONValue = json.loads(text)
    except json.JSONDecodeError as exc:
        if source is None and "{{" in text:
            template = text
        else:
            raise InputError(f"not a JSON template ({exc.msg})", source, exc.lineno if source else None,
                             None if source else "--reference-template") from None
    for p in template_paths(template):
        try:
            ns, _ = parse_path(p)
        except ValueError as exc:
            raise InputError(str(exc), source, field="--reference-template") from None
        if ns != "item":
            raise InputError(f"{{{{ {p} }}}}: a reference template reads item.… only", source,
                             field="--reference-template")
    return template


def judge_calls(config: GraderConfig, samples: int) -> int:
    """The judge calls grading `samples` samples of distinct items makes with no cache: one per model grader in the
    config (a multi's sub-graders included; a group judge's group is the item's one sample here)."""
    from rfteval.graders.base import walk

    return samples * sum(1 for c in walk(config) if c.calls_judge)


def judge_calls_note(calls: int, base_url: str | None, api_key_env: str, environ: dict[str, str] | None = None) -> str:
    """Where `calls` judge calls go and with which key, as is true: billing only on OpenAI's own host, and no key
    claimed when the variable is unset (a local server takes none)."""
    import os
    from urllib.parse import urlparse

    env = os.environ if environ is None else environ
    host = (urlparse(base_url).hostname or "") if base_url else "api.openai.com"
    has_key = bool(env.get(api_key_env))
    where = "OpenAI" if not base_url else base_url
    if host == "openai.com" or host.endswith(".openai.com"):
        key = f"billed to the key in ${api_key_env}" if has_key else f"but ${api_key_env} is not set: they will fail"
        return f"{calls} judge call(s) to {where}, {key}"
    key = f"with the key in ${api_key_env}" if has_key else f"no key set (${api_key_env} is empty; a local server needs none)"
    return f"{calls} judge call(s) to {where}, {key}"
