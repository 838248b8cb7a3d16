"""`python`: the team's own `grade(sample, item) -> float`, run unchanged in the sandboxed worker pool.

The config is checked here without running anything (size, syntax, a top-level `grade` callable with two
positional arguments); the source itself only ever runs in a worker process (see sandbox.py).
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Hashable, Sequence
from typing import TYPE_CHECKING, Literal

from pydantic import field_validator
from pydantic_core import PydanticCustomError

from rfteval.graders.base import BuildContext, GraderConfig, GradeResult, Pair, register
from rfteval.typos import CURLY_QUOTES, curly_quotes

if TYPE_CHECKING:
    from rfteval.data.json_types import JSONObject
    from rfteval.data.sample import Sample

MAX_SOURCE_BYTES = 256 * 1024  # OpenAI's limit: "source < 256 kB"


def _error(message: str) -> PydanticCustomError:
    return PydanticCustomError("python_source", message)


def top_level_bindings(body: list[ast.stmt], name: str) -> list[ast.stmt]:
    """Top-level statements that bind `name`, looking into if/try/with blocks but not into defs or classes: the
    python grader's `grade` and a reward file's function (graders/reward_function.py) are found alike."""
    found: list[ast.stmt] = []
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if node.name == name:
                found.append(node)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(n, ast.Name) and n.id == name for t in targets for n in ast.walk(t)):
                found.append(node)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            if any((alias.asname or alias.name.split(".")[0]) == name for alias in node.names):
                found.append(node)
        elif isinstance(node, (ast.If, ast.For, ast.While)):
            found += top_level_bindings(node.body, name) + top_level_bindings(node.orelse, name)
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            found += top_level_bindings(node.body, name)
        elif isinstance(node, ast.Try):
            found += top_level_bindings(node.body, name)
            for handler in node.handlers:
                found += top_level_bindings(handler.body, name)
            found += top_level_bindings(node.orelse, name) + top_level_bindings(node.finalbody, name)
    return found


def signature_problem(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> str | None:
    """Why grade(sample, item) could not be called with two positional arguments, or None."""
    if isinstance(fn, ast.AsyncFunctionDef):
        return "grade must be a plain function, not async"
    args = fn.args
    positional = args.posonlyargs + args.args
    optional = len(args.defaults)
    required = len(positional) - optional
    if required > 2:
        return f"grade takes {required} required arguments; it must take exactly two: grade(sample, item)"
    if len(positional) < 2 and args.vararg is None:
        return f"grade takes {len(positional)} positional argument(s); it must take two: grade(sample, item)"
    missing_kw = [a.arg for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d is None]
    if missing_kw:
        return f"grade has required keyword-only argument(s) {', '.join(missing_kw)}; it must take (sample, item)"
    return None


def parse_source(source: str, error: Callable[[str], Exception]) -> ast.Module:
    """The source's syntax tree, or `error(reason)` raised: too large for OpenAI, or not Python."""
    size = len(source.encode("utf-8", "surrogatepass"))
    if size >= MAX_SOURCE_BYTES:  # OpenAI: "less than 256kB", so exactly 256 KiB is already too large
        raise error(f"source is {size / 1024:.0f} kB; OpenAI's limit is under 256 kB")
    try:
        return ast.parse(source, "<source>")
    except SyntaxError as exc:
        line = (exc.text or "").strip()
        shown = f": {line[:120]!r}" if line else ""
        # Python names the character ("invalid character '“' (U+201C)"); the fix is said as a JSON or TOML file's
        # error says it, and only when a curly quote is what failed (one inside a string literal is valid)
        curly = curly_quotes((exc.text or "").rstrip("\n")) if any(q in exc.msg for q in CURLY_QUOTES) else None
        raise error(f"SyntaxError at source line {exc.lineno}: {exc.msg}{shown}"
                    + (f"; {curly}" if curly else "")) from None
    except ValueError as exc:  # e.g. a NUL byte
        raise error(f"source is not valid Python: {exc}") from None


def check_source(source: str) -> str:
    """The source unchanged, or a validation error: too large, not Python, or no usable grade()."""
    tree = parse_source(source, _error)
    defs = top_level_bindings(tree.body, "grade")
    if not defs:
        raise _error("source must define a top-level function grade(sample, item)")
    last = defs[-1]
    if isinstance(last, (ast.FunctionDef, ast.AsyncFunctionDef)):
        problem = signature_problem(last)
        if problem:
            raise _error(f"source line {last.lineno}: {problem}")
    elif isinstance(last, ast.ClassDef):
        raise _error(f"source line {last.lineno}: grade is a class; it must be a function grade(sample, item)")
    return source  # bound by assignment or import: callable-ness is checked when it runs


class PythonConfig(GraderConfig):
    type: Literal["python"]
    source: str
    image_tag: str | None = None  # OpenAI's sandbox image; here the packages come from `rfteval[graders]`
    pass_threshold: float | None = None  # Evals shape: passed = score >= pass_threshold

    @field_validator("source")
    @classmethod
    def _source(cls, value: str) -> str:
        return check_source(value)

    runs_python = True

    def score_range(self) -> tuple[float, float, str]:
        return 0.0, 1.0, "assumed [0, 1]: OpenAI does not document a python grader's range"

    def python_source(self) -> str:
        return self.source


class PythonGrader:
    """Sends whole batches to the context's worker pool; the pool starts on the first batch, not at build."""

    def __init__(self, config: PythonConfig, ctx: BuildContext):
        self.config = config
        self._ctx = ctx

    def grade_batch(self, pairs: Sequence[Pair], units: Sequence[Hashable] | None = None) -> list[GradeResult]:
        if not pairs:
            return []
        results = self._ctx.python_pool().grade(self.config.source, pairs, units)
        threshold = self.config.pass_threshold
        if threshold is not None:
            for result in results:
                result.passed = result.error is None and result.score >= threshold
        return results

    def grade(self, sample: Sample, item: JSONObject) -> GradeResult:
        return self.grade_batch([(sample, item)])[0]


@register("python", PythonConfig, "your own grade(sample, item) -> float, run in sandboxed worker processes")
def build(config: PythonConfig, ctx: BuildContext) -> PythonGrader:
    return PythonGrader(config, ctx)
