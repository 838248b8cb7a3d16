"""Importing this module registers every grader type (one module per type)."""

from rfteval.graders import (  # noqa: F401
    group_judge,
    label_model,
    multi,
    python,
    reward_function,
    score_model,
    string_check,
    text_similarity,
)
from rfteval.graders.base import REGISTRY

__all__ = ["REGISTRY"]
