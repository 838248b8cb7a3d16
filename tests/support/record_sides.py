"""Records for the comparison tests: one record per (item, epoch) with the given scores, and a base/tuned pair."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from rfteval.data.records import Record, make_record, write_jsonl


def rec(label: str, item: str, epoch: int, score: float | None, *, error: dict[str, str] | None = None,
        sub: dict[str, float] | None = None, **extra: Any) -> Record:
    r = make_record(run_id="t", model_label=label, model=f"m-{label}", item_id=item, epoch=epoch, output_text="out",
                    error=error)
    r.score = score
    r.sub_scores = sub
    for name, value in extra.items():
        setattr(r, name, value)
    return r


def side_records(label: str, scores: dict[str, list[float]], **kw: Any) -> list[Record]:
    return [rec(label, item, e, s, **kw) for item, ss in scores.items() for e, s in enumerate(ss)]


BASE = {"a": [0, 0, 1], "b": [1, 1, 1], "c": [0, 0, 0], "d": [1, 0, 1]}
TUNED = {"a": [1, 1, 1], "b": [1, 1, 0], "c": [0, 1, 0], "d": [1, 1, 1]}


def write_side(path: Path, label: str, scores: dict[str, list[float | None]], *, model: str = "m",
               errors: frozenset[tuple[str, int]] | set[tuple[str, int]] = frozenset(),
               error: dict[str, str] | None = None,
               sub: Callable[[float | None], dict[str, float]] | None = None) -> Path:
    """One side's records as a JSONL file: a record per (item, epoch) with its score; `error` on the (item, epoch)
    pairs in `errors`; sub-scores made from each score by `sub`."""
    recs = []
    for item, ss in scores.items():
        for e, s in enumerate(ss):
            r = make_record(run_id="t", model_label=label, model=model, item_id=item, epoch=e, output_text="o",
                            error=error if (item, e) in errors else None)
            r.score = s
            if sub is not None:
                r.sub_scores = sub(s)
            recs.append(r)
    write_jsonl(recs, path)
    return path


def item_means(scores: dict[str, list[float]]) -> dict[str, float]:
    return {k: sum(v) / len(v) for k, v in scores.items()}


def write_pair(directory: Path) -> tuple[Path, Path]:
    """base.jsonl and tuned.jsonl holding BASE and TUNED."""
    b, t = directory / "base.jsonl", directory / "tuned.jsonl"
    write_jsonl(side_records("base", BASE), b)
    write_jsonl(side_records("tuned", TUNED), t)
    return b, t
