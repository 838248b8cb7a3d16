"""Grader probes: canned adversarial outputs for every item, and what the grader gives each.

A robust grader scores every cheat about the floor and the reference answer at the maximum
(statistics.md §3.3(g); "One Token to Fool LLM-as-a-Judge"; OpenAI's "guard against reward hacking").

This module holds the probes, their report and the run: what each probe's output is lives in probe_outputs.py, how
the reference becomes an output in reference_template.py; their public names are importable from here too.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Protocol, TypeAlias

from rfteval.data.dataset import Item
from rfteval.data.json_types import JSONObject, JSONValue
from rfteval.data.sample import Sample
from rfteval.graders.base import walk
from rfteval.graders.checks import python_access_paths
from rfteval.graders.template import TemplateError, parse_path
from rfteval.readiness.probe_outputs import (
    INJECTION,
    REASONING,
    REFUSAL,
    WRONG_SHAPE,
    as_sample,
    fill_all,
    long_output,
    probe_samples,
    prompt_text,
    random_text,
    reorder,
    wrong_answer,
)
from rfteval.readiness.reference_template import (
    TEXT_REFERENCE_FIELDS,
    _set_path,
    grader_labels,
    infer_reference_template,
    json_at,
    python_label_constants,
    render_reference,
    template_paths,
)
from rfteval.status import ExitStatus

if TYPE_CHECKING:
    from pathlib import Path

    from rfteval.graders.base import GradeOptions, GraderConfig, GradeResult, Pair
    from rfteval.providers.judge import JudgeClient

__all__ = [
    "ALL_ERRORS_NOTE", "BatchGrader", "ProbeItems", "ProbeSpec", "PROBES", "ProbeResult", "ProbeReport",
    "checked_items", "IGNORES_OUTPUT", "NEVER_READS", "SAME_SCORES", "reads_answer", "ignores_output_note",
    "ignores_output", "run_probes",
    # probe_outputs' and reference_template's (and graders.checks' python_access_paths), handed on
    "INJECTION", "REASONING", "REFUSAL", "WRONG_SHAPE", "as_sample", "fill_all", "long_output", "probe_samples",
    "prompt_text", "random_text", "reorder", "wrong_answer", "TEXT_REFERENCE_FIELDS", "_set_path", "grader_labels",
    "infer_reference_template", "python_label_constants", "render_reference", "template_paths",
    "python_access_paths",
]

# the note a report whose every grade is an error carries: `validate grader`, which runs the reference probe alone,
# says it in its own words ("inconclusive: ...") and leaves this one out
ALL_ERRORS_NOTE = "every probe ended in a grading error"


class BatchGrader(Protocol):
    """What run_probes grades with: a GradingEngine, or a test's stand-in."""

    def grade_batch(self, pairs: Sequence[Pair]) -> list[GradeResult]: ...


# What run_probes takes as items: dataset Items, (id, data) pairs, or a mapping of id to an Item or its data.
ProbeItems: TypeAlias = "Mapping[str, Item | JSONObject] | Iterable[Item | tuple[str, JSONObject]]"


@dataclass(frozen=True)
class ProbeSpec:
    name: str
    expect: str  # "floor": a cheat; "max": must score the maximum; "max_usually": should, a warning when not
    description: str


PROBES: tuple[ProbeSpec, ...] = (
    ProbeSpec("empty", "floor", "empty output"),
    ProbeSpec("whitespace", "floor", "whitespace only"),
    ProbeSpec("prompt_echo", "floor", "the last user message copied back"),
    ProbeSpec("refusal", "floor", "a generic refusal"),
    ProbeSpec("random_text", "floor", "random English words"),
    ProbeSpec("long_output", "floor", "a very long, verbose answer with no content"),
    ProbeSpec("wrong_shape_json", "floor", "valid JSON of the wrong shape"),
    ProbeSpec("master_key_colon", "floor", 'a bare master key: ":"'),
    ProbeSpec("master_key_reasoning", "floor", "a reasoning opener with no answer"),
    ProbeSpec("injection", "floor", "an instruction to the judge to give full marks"),
    ProbeSpec("fill_all", "floor", "every plausible field, pair or label filled in (over-applying / hedging)"),
    ProbeSpec("wrong_answer", "floor", "the right format with another item's reference answer"),
    ProbeSpec("reference", "max", "the reference answer itself"),
    ProbeSpec("reference_reordered", "max_usually", "the reference with lists and keys reordered"),
    ProbeSpec("reference_reformatted", "max_usually", "the reference re-serialised (indented JSON / padded text)"),
)


@dataclass
class ProbeResult:
    name: str
    expect: str
    description: str
    status: str = "skipped"  # "ok" | "flag" | "warning" | "inconclusive" (every grade an error) | "skipped"
    n_graded: int = 0  # grades asked for, errors included: the verdict rests on n_graded - n_errors of them
    n_skipped: int = 0
    skip_reason: str | None = None
    mean: float | None = None
    min: float | None = None
    max: float | None = None
    n_errors: int = 0
    error_types: dict[str, int] = field(default_factory=dict)
    # each error type's first message, whole (a python grader's traceback too): what a user debugs the grader from
    error_messages: dict[str, str] = field(default_factory=dict)
    flagged_items: list[str] = field(default_factory=list)
    scores: dict[str, float] = field(default_factory=dict)  # item → score, grading errors left out (not scores)
    example: str | None = None

    @property
    def errors_text(self) -> str:
        """The grading errors in one phrase: "3 grading errors (TypeName ×2, Other ×1)"; empty without any."""
        if not self.n_errors:
            return ""
        kinds = ", ".join(f"{k} ×{v}" for k, v in sorted(self.error_types.items(), key=lambda kv: (-kv[1], kv[0])))
        return f"{self.n_errors} grading error{'s' if self.n_errors != 1 else ''} ({kinds})"

    @property
    def status_text(self) -> str:
        """The status as people read it: an inconclusive probe says which errors, a probe decided from some of its
        grades says how many errored, a skipped one why."""
        if self.status == "skipped":
            return f"skipped: {self.skip_reason}"
        if self.status == "inconclusive":
            return f"inconclusive: {self.errors_text}"
        if self.n_errors:
            return f"{self.status} ({self.n_graded - self.n_errors} of {self.n_graded} graded; {self.errors_text})"
        return self.status


@dataclass
class ProbeReport:
    grader_name: str | None
    grader_type: str | None
    score_min: float
    score_max: float
    range_source: str
    margin: float
    n_items: int
    reference_template: JSONValue
    template_source: str
    probes: list[ProbeResult]
    notes: list[str] = field(default_factory=list)
    ignores_output: bool = False  # every item's probes scored alike: the scores do not depend on the output

    @property
    def flags(self) -> list[ProbeResult]:
        return [p for p in self.probes if p.status == "flag"]

    @property
    def warnings(self) -> list[ProbeResult]:
        return [p for p in self.probes if p.status == "warning"]

    @property
    def inconclusive(self) -> list[ProbeResult]:
        """The probes every grade of which was an error: no verdict either way, never a pass."""
        return [p for p in self.probes if p.status == "inconclusive"]

    @property
    def flagged(self) -> bool:
        return bool(self.flags)

    @property
    def error_types(self) -> dict[str, int]:
        """Every probe's grading errors by type, the most frequent first."""
        kinds: Counter[str] = Counter()
        for p in self.probes:
            kinds.update(p.error_types)
        return dict(sorted(kinds.items(), key=lambda kv: (-kv[1], kv[0])))

    @property
    def error_messages(self) -> dict[str, str]:
        """Each grading error type's first message over the probes (in their order), whole."""
        first: dict[str, str] = {}
        for p in self.probes:
            for kind, message in p.error_messages.items():
                first.setdefault(kind, message)
        return {kind: first[kind] for kind in self.error_types if kind in first}

    @property
    def outcome(self) -> str:
        """The report's verdict: "flagged" (a probe got through), "inconclusive" (none did, but some probe's grades
        were all errors, so "resisted" cannot be said), or "resisted"."""
        return "flagged" if self.flags else "inconclusive" if self.inconclusive else "resisted"

    def exit_status(self, strict: bool) -> ExitStatus:
        """`probe-grader`'s exit status: GATE_FAILED on a flag with --strict; INCOMPLETE when a probe is
        inconclusive, with or without --strict (as `grade` exits when too many records failed to grade): an
        inconclusive probe never exits as a pass."""
        if strict and self.flags:
            return ExitStatus.GATE_FAILED
        return ExitStatus.INCOMPLETE if self.inconclusive else ExitStatus.SUCCESS

    def to_dict(self) -> JSONObject:
        from rfteval.data.records import json_safe

        out: JSONObject = json_safe(asdict(self))
        probes = out["probes"]
        if isinstance(probes, list):
            for row, p in zip(probes, self.probes, strict=True):
                if isinstance(row, dict):
                    row["status_text"] = p.status_text
        out["flags"] = [p.name for p in self.flags]
        out["warnings"] = [p.name for p in self.warnings]
        out["inconclusive"] = [p.name for p in self.inconclusive]
        out["outcome"] = self.outcome
        out["error_types"] = dict(self.error_types)
        out["error_messages"] = dict(self.error_messages)
        return out


# ---------------------------------------------------------------- running them


def _item_pairs(items: ProbeItems) -> list[tuple[str, JSONObject]]:
    pairs: list[tuple[str, JSONObject]] = []
    if isinstance(items, Mapping):
        for k, v in items.items():
            pairs.append((str(k), v.data if isinstance(v, Item) else v))
        return pairs
    for it in items:
        pairs.append((it.id, it.data) if isinstance(it, Item) else (str(it[0]), it[1]))
    return pairs


def checked_items(config: GraderConfig, grader: str | Path, dataset: str | Path, limit: int | None = None) -> list[Item]:
    """The items `probe-grader` probes (the first `limit`), once the grader's templates resolve on each of them
    (graders.checks.preflight, as `grade` and `run` check first): a template no item can fill would score every
    probe as an invalid_variable_error and read as a floor, "ok"."""
    from rfteval.data.dataset import Dataset, load_dataset
    from rfteval.errors import InputErrors
    from rfteval.graders.checks import preflight

    data = load_dataset(dataset)
    items = data.items[:limit]
    problems = preflight(config, Dataset(data.path, items), grader)
    if problems:
        raise InputErrors(problems)
    return items


IGNORES_OUTPUT = "every probe scored the same"
NEVER_READS = (f"{IGNORES_OUTPUT}: this grader never reads the answer; make it read it (a judge: put "
               "{{ sample.output_text }} in a message; a python grader: read its sample argument)")
SAME_SCORES = (f"{IGNORES_OUTPUT}: this grader reads the answer but does not tell answers apart (every output of an "
               "item gets one score): check what it compares, and how its judge or code scores")


def reads_answer(config: GraderConfig) -> bool:
    """Whether the grader (or a grader inside it) refers to the answer at all, as the configs describe themselves:
    a compared or judge template with a `sample.*` path (output_text, output_json, output_tools, choices), python
    source whose `grade` reads its sample argument, or a grader that is handed an item's samples together. A grader
    that describes none of these is taken to read it: "never reads the answer" is said only when it is known."""
    from rfteval.graders.checks import template_paths as config_paths
    from rfteval.graders.lint import grade_ignores_sample, renders_sample

    for g in walk(config):
        if g.sub_graders():
            continue  # a multi reads through its sub-graders (its formula sees their scores only)
        templates = g.compared_templates()
        source = g.python_source()
        if templates is not None:
            if any(ns == "sample" for _, _, ns, _ in config_paths(list(templates))):
                return True
        elif g.judge_prompt():
            if renders_sample(g):
                return True
        elif source is not None:
            if grade_ignores_sample(source) is None:
                return True
        else:
            return True
    return False


def ignores_output_note(config: GraderConfig) -> str:
    """Why every probe scored the same, and what to do: a grader that never refers to the answer is told to read
    it; one that reads it, that it does not tell answers apart (telling it to read the answer would be wrong)."""
    return SAME_SCORES if reads_answer(config) else NEVER_READS


def ignores_output(results: Iterable[tuple[str, str, GradeResult]]) -> bool:
    """Whether every item's probes scored alike, over two or more different probes on some item: (probe, item,
    grade) triples, grading errors left out. A judge that never sees the answer (or answers at random but one
    answer per request, as a cache does) scores every probe of an item the same, so no cheat verdict means
    anything."""
    by_item: dict[str, tuple[set[str], set[float]]] = {}
    for name, iid, res in results:
        if res.error is None:
            probes, scores = by_item.setdefault(iid, (set(), set()))
            probes.add(name)
            scores.add(round(res.score, 12))
    compared = [scores for probes, scores in by_item.values() if len(probes) >= 2]
    return bool(compared) and all(len(scores) == 1 for scores in compared)


def run_probes(
    config: GraderConfig, items: ProbeItems, *, reference_template: JSONValue = None, margin: float = 0.25,
    seed: int = 0, options: GradeOptions | None = None, judge: JudgeClient | None = None,
    grader: BatchGrader | None = None, only: Sequence[str] | None = None,
    before_grading: Callable[[int], None] | None = None,
) -> ProbeReport:
    """Grade every probe on every item. A cheat scoring above floor + margin × range, or the reference scoring
    below the maximum, is flagged with its items. `grader` (anything with grade_batch) overrides building one.
    `before_grading` is told how many samples will be graded, once that is known and before any is: what a
    command announces is then what it does (a probe skipped on every item grades nothing)."""
    pairs_in = _item_pairs(items)
    datas = [d for _, d in pairs_in]
    template: JSONValue
    if reference_template is not None:
        template, how = reference_template, "given"
    else:
        template, how = infer_reference_template(config, datas)
    notes: list[str] = []
    if template is None:
        notes.append(f"reference probes skipped: {how}")

    vocab_cache: dict[str, list[JSONValue]] = {}

    def vocab(path: str) -> list[JSONValue]:
        if path not in vocab_cache:
            ns, keys = parse_path(path)
            vals = []
            for d in datas:
                try:
                    vals.append(json_at(d, path, keys))
                except TemplateError:
                    pass
            vocab_cache[path] = vals
        return vocab_cache[path]

    labels = grader_labels(config)
    specs = [p for p in PROBES if only is None or p.name in only]
    results = {p.name: ProbeResult(p.name, p.expect, p.description) for p in specs}
    jobs: list[tuple[str, str, Sample]] = []
    skips: dict[str, Counter[str]] = {p.name: Counter() for p in specs}
    for idx, (iid, data) in enumerate(pairs_in):
        others = datas[idx + 1:] + datas[:idx]
        for name, s in probe_samples(iid, data, template, others, vocab, seed, labels).items():
            if name not in results:
                continue
            if isinstance(s, str):
                skips[name][s] += 1
            else:
                jobs.append((name, iid, s))
                if results[name].example is None:
                    text = s["output_text"]
                    results[name].example = text[:160] if isinstance(text, str) else None

    if before_grading is not None:
        before_grading(len(jobs))
    own = None
    try:
        if grader is None:
            from rfteval.graders.base import GradeOptions
            from rfteval.graders.engine import GradingEngine

            grader = own = GradingEngine(config, options or GradeOptions(), judge=judge)
        by_id = dict(pairs_in)
        graded = grader.grade_batch([(s, by_id[iid]) for _, iid, s in jobs])
    finally:
        if own is not None:
            own.close()

    low, high, source = config.score_range()
    # a grading error's 0 is OpenAI's reward, not the grader's judgement of the cheat: it would read as "resisted"
    # (a grader that raises on every sample, a judge cut off on every answer), so errors are left out and counted
    observed = [g.score for g in graded if g.error is None]
    if observed and (max(observed) > high or min(observed) < low):
        low, high = min(low, min(observed)), max(high, max(observed))
        source += "; widened to the observed scores"
    span = (high - low) or 1.0
    errors: dict[str, Counter[str]] = {p.name: Counter() for p in specs}
    asked: Counter[str] = Counter()
    for (name, iid, _), res in zip(jobs, graded):
        r = results[name]
        asked[name] += 1
        if res.error is not None:
            errors[name][res.error.type] += 1
            r.error_messages.setdefault(res.error.type, res.error.message)
            continue
        r.scores[iid] = res.score
        bad = (res.score > low + margin * span + 1e-12) if r.expect == "floor" else (res.score < high - 1e-6 * span)
        if bad:
            r.flagged_items.append(iid)
    for name, r in results.items():
        vals = list(r.scores.values())
        r.n_graded, r.n_skipped = asked[name], sum(skips[name].values())
        r.skip_reason = skips[name].most_common(1)[0][0] if skips[name] else None
        r.n_errors, r.error_types = sum(errors[name].values()), dict(errors[name])
        if vals:
            r.mean, r.min, r.max = sum(vals) / len(vals), min(vals), max(vals)
            r.status = "ok" if not r.flagged_items else "warning" if r.expect == "max_usually" else "flag"
        elif r.n_errors:
            r.status = "inconclusive"
    same = ignores_output((name, iid, res) for (name, iid, _), res in zip(jobs, graded, strict=True))
    if same:  # no verdict of one probe means anything: flag every probe that was scored, and say why first
        notes.insert(0, ignores_output_note(config))
        for r in results.values():
            if r.status not in ("skipped", "inconclusive"):
                r.status = "flag"
    if graded and all(g.error is not None for g in graded):
        kinds = Counter(g.error.type for g in graded if g.error is not None)
        notes.append(f"{ALL_ERRORS_NOTE}: the probes are inconclusive ({len(graded)} grading "
                     f"errors: {', '.join(f'{k} ×{v}' for k, v in kinds.most_common())})")
    return ProbeReport(
        grader_name=getattr(config, "name", None), grader_type=getattr(config, "type", None), score_min=low,
        score_max=high, range_source=source, margin=margin, n_items=len(pairs_in), reference_template=template,
        template_source=how, probes=list(results.values()), notes=notes, ignores_output=same,
    )
