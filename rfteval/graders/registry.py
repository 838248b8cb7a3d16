"""The grader types: every built-in type registers itself when rfteval.graders is imported (its __init__)."""

import rfteval.graders  # noqa: F401
from rfteval.graders.base import REGISTRY

__all__ = ["REGISTRY"]
