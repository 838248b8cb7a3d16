"""Grader engine: OpenAI grader configs run locally.

Importing the package registers every built-in grader type: a new type is one module plus one line below.
"""

from rfteval.graders import (  # noqa: F401  (each module registers its type)
    endpoint,
    group_judge,
    label_model,
    multi,
    python,
    reward_function,
    score_model,
    string_check,
    text_similarity,
)
from rfteval.graders.base import REGISTRY, GradeError, GradeOptions, GradeResult
from rfteval.graders.engine import GradingEngine, build_grader
from rfteval.graders.loader import load_grader, parse_config

__all__ = ["REGISTRY", "GradeError", "GradeOptions", "GradeResult", "GradingEngine", "build_grader", "load_grader",
           "parse_config"]
