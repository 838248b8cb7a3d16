"""`multi`: several sub-graders keyed by variable name, combined by the `calculate_output` formula.

Each sub-grader grades the whole batch (python sub-graders go to the worker pool in one message), then the formula
runs per pair over {key: score}. An error in any sub-grader makes the multi result an error: a formula over a
score that is really a failure would hide it.
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import SerializeAsAny, ValidationInfo, field_validator, model_validator

from rfteval.errors import InputError
from rfteval.graders.base import (
    FORMULA_EVAL,
    OTHER,
    BuildContext,
    GradeError,
    Grader,
    GraderConfig,
    GradeResult,
    Pair,
    register,
)
from rfteval.graders.formula import Formula, FormulaError, FormulaEvalError, compile_formula
from rfteval.graders.loader import line_of

if TYPE_CHECKING:
    from rfteval.data.json_types import JSONObject

_CORNER_KEYS = 10  # 2**10 formula evaluations at most when reading a multi's range
_VARIABLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")  # what the formula parser takes as a name (ASCII only)


def _context(info: ValidationInfo) -> tuple[str | Path | None, str, str | None]:
    """(source file, field prefix, file text): what loader.parse_config put in the validation context."""
    ctx = info.context or {}
    return ctx.get("source"), ctx.get("prefix") or "", ctx.get("text")


def _sub_prefix(prefix: str, key: str) -> str:
    return f"{prefix}.graders.{key}" if prefix else f"graders.{key}"


class MultiConfig(GraderConfig):
    type: Literal["multi"]
    graders: dict[str, SerializeAsAny[GraderConfig]]
    calculate_output: str

    def sub_graders(self) -> list[GraderConfig]:
        return list(self.graders.values())

    def score_range(self) -> tuple[float, float, str]:
        """calculate_output declares no range, so it is read from the sub-graders' ranges: a formula that is one
        key has that grader's range (a multi around a 0..10 judge scores 0..10, and "passes only at the maximum"
        must mean 10, not 1); a formula over graders whose ranges are not all [0, 1] is evaluated at the corners of
        their ranges (exact for the weighted sums, min and max that calculate_output holds in practice)."""
        import itertools

        formula = self.calculate_output.strip()
        if formula in self.graders:
            low, high, source = self.graders[formula].score_range()
            return low, high, f"graders.{formula}'s: {source}"
        try:
            compiled = compile_formula(formula, self.graders.keys())
        except FormulaError:
            compiled = None
        keys = sorted(compiled.names) if compiled is not None else []
        ranges = {key: self.graders[key].score_range()[:2] for key in keys}
        if compiled is None or all(r == (0.0, 1.0) for r in ranges.values()) or len(keys) > _CORNER_KEYS:
            return 0.0, 1.0, "assumed [0, 1]: calculate_output declares no range"
        try:
            values = [compiled(dict(zip(keys, corner))) for corner in itertools.product(*ranges.values())]
        except (FormulaEvalError, ArithmeticError, ValueError):
            return 0.0, 1.0, "assumed [0, 1]: calculate_output declares no range"
        return min(values), max(values), "calculate_output at the corners of its graders' ranges"

    @model_validator(mode="before")
    @classmethod
    def _sdk_nulls(cls, data: object) -> object:
        """The null single-grader keys the `openai` SDK's `model_dump()` writes for a multi (its `graders` is typed
        as one grader, so a dict of named graders comes out with that grader's fields as null beside them)."""
        if not isinstance(data, dict):
            return data
        data = _drop_sdk_nulls(data, keep=set(MultiConfig.model_fields))
        graders = data.get("graders")
        return {**data, "graders": _drop_sdk_nulls(graders, keep=set())} if isinstance(graders, dict) else data

    @field_validator("graders", mode="before")
    @classmethod
    def _parse_graders(cls, value: object, info: ValidationInfo) -> dict[str, GraderConfig]:
        """Validate each sub-grader as its own type, so errors name e.g. `graders.email.operation`."""
        from rfteval.graders.loader import parse_config

        source, prefix, text = _context(info)
        if isinstance(value, dict) and isinstance(value.get("type"), str):
            # the API reference's shape: one grader object, which the formula names by its `name`
            value = {str(value.get("name") or value["type"]): value}
        if not isinstance(value, dict):
            raise ValueError("graders must be an object mapping a variable name to a grader")
        if not value:
            raise ValueError("graders must hold at least one grader")
        out: dict[str, GraderConfig] = {}
        for key, sub in value.items():
            where = _sub_prefix(prefix, str(key))
            if not isinstance(key, str) or not _VARIABLE.fullmatch(key):
                raise InputError(f"grader key {key!r} must be an identifier (letters, digits, _), as the formula "
                                 "uses it as a variable", source, line_of(text, where), where)
            if isinstance(sub, GraderConfig):  # built in code, already validated
                parsed = sub
            else:
                if isinstance(sub, dict) and sub.get("type") == "multi":
                    field = f"{where}.type"
                    raise InputError("a multi grader cannot contain another multi grader", source,
                                     line_of(text, field), field)
                parsed = parse_config(sub, source, where, text)
            if parsed.type == "multi":
                raise InputError("a multi grader cannot contain another multi grader", source, None, f"{where}.type")
            out[key] = parsed
        return out

    @field_validator("calculate_output")
    @classmethod
    def _check_formula(cls, value: str, info: ValidationInfo) -> str:
        graders = info.data.get("graders")
        if graders is None:  # graders failed validation; that error is the one to report
            return value
        try:
            compile_formula(value, graders.keys())
        except FormulaError as exc:
            raise ValueError(str(exc)) from None
        return value


def _single_grader_fields() -> set[str]:
    """Every field name of a grader type that is not a multi (the keys the SDK may dump as null)."""
    from rfteval.graders.base import REGISTRY

    return {name for t in REGISTRY.values() if t.config is not MultiConfig for name in t.config.model_fields}


def _drop_sdk_nulls(data: dict[str, object], keep: set[str]) -> dict[str, object]:
    """`data` without the null values of keys that are single-grader fields (those in `keep` excepted); any other
    null stays, so a sub-grader written as null is still refused."""
    drop = {k for k, v in data.items() if v is None and k not in keep} & _single_grader_fields()
    return {k: v for k, v in data.items() if k not in drop} if drop else data


def combine(formula: Formula, results: dict[str, GradeResult]) -> GradeResult:
    """One pair's multi result from its sub-results (keys in config order)."""
    scores = {key: float(r.score) for key, r in results.items()}
    graders: JSONObject = {key: _sub_details(r) for key, r in results.items()}
    details: JSONObject = {"graders": graders}
    stdout = "".join(f"[{key}]\n{r.stdout}" for key, r in results.items() if r.stdout) or None
    for key, r in results.items():
        if r.error is not None:
            error = GradeError(r.error.type, f"graders.{key}: {r.error.message}")
            return GradeResult(0.0, sub_scores=scores, error=error, stdout=stdout, details=details)
    try:
        value = formula(scores)
    except FormulaEvalError as exc:
        error = GradeError(FORMULA_EVAL, f"calculate_output {formula.text!r}: {exc}")
        return GradeResult(0.0, sub_scores=scores, error=error, stdout=stdout, details=details)
    return GradeResult(value, sub_scores=scores, stdout=stdout, details=details)


def _sub_details(r: GradeResult) -> JSONObject:
    """One sub-grader's grade inside a multi's details["graders"] (the keys a record's grade_details shows):
    score and passed; error {type, message}, sub_scores and details when it has them. JSON, as the record holds it."""
    d: JSONObject = {"score": r.score, "passed": r.passed}
    if r.error is not None:
        d["error"] = {"type": r.error.type, "message": r.error.message}
    if r.sub_scores:
        scores: JSONObject = dict(r.sub_scores)
        d["sub_scores"] = scores
    if r.details:
        d["details"] = r.details
    return d


class MultiGrader:
    def __init__(self, config: MultiConfig, ctx: BuildContext):
        from rfteval.graders.engine import build_grader

        self.config = config
        self.formula = compile_formula(config.calculate_output, config.graders.keys())
        self.graders: dict[str, Grader] = {key: build_grader(sub, ctx) for key, sub in config.graders.items()}

    def grade_batch(self, pairs: Sequence[Pair], units: Sequence[Hashable] | None = None) -> list[GradeResult]:
        per_key = {key: _grade_all(grader, pairs, units) for key, grader in self.graders.items()}
        return [combine(self.formula, {key: rs[i] for key, rs in per_key.items()}) for i in range(len(pairs))]


def _grade_all(grader: Grader, pairs: Sequence[Pair], units: Sequence[Hashable] | None) -> list[GradeResult]:
    """A sub-grader's results for the batch (its python in the batch's grading units); a crash becomes one error
    per pair, so the run goes on."""
    try:
        results = list(grader.grade_batch(pairs, units))
    except Exception as exc:
        return [GradeResult.failed(OTHER, f"{type(exc).__name__}: {exc}") for _ in pairs]
    if len(results) != len(pairs):
        msg = f"returned {len(results)} results for {len(pairs)} samples"
        return [GradeResult.failed(OTHER, msg) for _ in pairs]
    return results


@register("multi", MultiConfig, "sub-graders combined by a formula (calculate_output)")
def build(config: MultiConfig, ctx: BuildContext) -> MultiGrader:
    return MultiGrader(config, ctx)
