"""The score range of the grader behind a side's records: its grader file's (a run directory's spec names it), else
the range the grader wrote on the records; a multi grader's sub-graders' ranges too."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from rfteval.compare.sides import Side


@lru_cache(maxsize=32)
def grader_range(grader: str) -> tuple[float, float, str] | None:
    """A grader file's range as readiness reads it (its config's score_range: declared, by definition or
    assumed) and where that comes from; None when the file no longer loads (moved, edited into something
    invalid): the caller then falls back."""
    from rfteval.graders.loader import load_grader
    try:
        config = load_grader(grader)
    except Exception:  # noqa: BLE001 - a best-effort look-up: any grader that no longer loads means "unknown"
        return None
    low, high, source = config.score_range()
    return float(low), float(high), f"{source}; {Path(grader).name}"


def side_range(side: Side) -> tuple[float, float, str] | None:
    """The range of the grader that wrote a side's records: its grader file (the run directory's spec), else the
    range the grader wrote on the records (grade_details.score_range); None when neither is known."""
    if side.grader is not None:
        found = grader_range(side.grader)
        if found is not None:
            return found
    if side.recorded_range is not None:
        low, high = side.recorded_range
        return low, high, "the range written on the records"
    return None



@lru_cache(maxsize=32)
def sub_grader_ranges(grader: str) -> dict[str, tuple[float, float, str]]:
    """A multi grader file's sub-graders' ranges by key (a 0..10 score_model inside a multi scoring 0..1)."""
    from rfteval.graders.loader import load_grader
    try:
        config = load_grader(grader)
    except Exception:  # noqa: BLE001 - best effort, as grader_range
        return {}
    graders = getattr(config, "graders", None)
    if not isinstance(graders, dict):
        return {}
    return {str(key): (*sub.score_range()[:2], f"{key}: {sub.score_range()[2]}") for key, sub in graders.items()}
