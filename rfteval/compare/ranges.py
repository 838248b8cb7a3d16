"""The score range of the grader behind a side's records: its grader file's (a run directory's spec names it), else
the range the grader wrote on the records; a multi grader's sub-graders' ranges too."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from rfteval.compare.sides import Side

if TYPE_CHECKING:
    from rfteval.graders.base import GraderConfig


@lru_cache(maxsize=32)
def _grader_file(grader: str) -> GraderConfig | None:
    """A grader file loaded once for both look-ups below; None when it no longer loads."""
    from rfteval.graders.loader import load_grader
    try:
        return load_grader(grader)
    except Exception:  # noqa: BLE001 - a best-effort look-up: any grader that no longer loads means "unknown"
        return None


def grader_range(grader: str) -> tuple[float, float, str] | None:
    """A grader file's range as readiness reads it (its config's score_range: declared, by definition or
    assumed) and where that comes from; None when the file no longer loads (moved, edited into something
    invalid): the caller then falls back."""
    config = _grader_file(grader)
    return config_range(config, grader) if config is not None else None


def config_range(config: GraderConfig, grader: str) -> tuple[float, float, str]:
    """grader_range of a grader already loaded from the file `grader`."""
    low, high, source = config.score_range()
    return float(low), float(high), f"{source}; {Path(grader).name}"


def side_range(side: Side) -> tuple[float, float, str] | None:
    """The range of the grader that wrote a side's records: its grader file (the run directory's spec), else the
    range the grader wrote on the records (grade_details.score_range); None when neither is known."""
    if side.grader is not None:
        found = side.declared_range if side.declared_range is not None else grader_range(side.grader)
        if found is not None:
            return found
    if side.recorded_range is not None:
        low, high = side.recorded_range
        return low, high, "the range written on the records"
    return None


def sub_grader_ranges(grader: str) -> dict[str, tuple[float, float, str]]:
    """A multi grader file's sub-graders' ranges by key (a 0..10 score_model inside a multi scoring 0..1)."""
    config = _grader_file(grader)  # best effort, as grader_range
    return config_sub_ranges(config) if config is not None else {}


def config_sub_ranges(config: GraderConfig) -> dict[str, tuple[float, float, str]]:
    """sub_grader_ranges of a grader already loaded."""
    graders = getattr(config, "graders", None)
    if not isinstance(graders, dict):
        return {}
    return {str(key): (*sub.score_range()[:2], f"{key}: {sub.score_range()[2]}") for key, sub in graders.items()}
