"""Grader engine: OpenAI grader configs run locally. Heavy modules load on first use."""

from rfteval.graders.base import GradeError, GradeOptions, GradeResult
from rfteval.graders.engine import GradingEngine, build_grader
from rfteval.graders.loader import load_grader, parse_config

__all__ = ["GradeError", "GradeOptions", "GradeResult", "GradingEngine", "build_grader", "load_grader", "parse_config"]
