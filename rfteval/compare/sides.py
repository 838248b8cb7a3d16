"""One side of a comparison: one model's records as the normalised frame rfteval.data.frame reads, and several
sides read at once.

A side is a `RecordFrame`: compare, a series, a run's summary and its pass curves hold the same frame, read once.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from rfteval.data.frame import SUB, RecordFrame, frame_from_records, load_frame

__all__ = ["SUB", "Side", "load_side", "side_from_records", "load_sides"]

Side = RecordFrame  # one model's records, normalised (item_id, epoch, score, the error flags, sub:<key>)
load_side = load_frame  # a side from a record file or a run directory, filtered to a label when given
side_from_records = frame_from_records  # a side from records in memory


def load_sides(*sides: tuple[str | Path, str | None], keep_rows: Sequence[bool] = ()) -> list[Side]:
    """Several sides read on threads: one side's single-threaded steps (regex, pandas) overlap the other's
    multi-threaded JSON parse. The first side's error wins, as if they were read in order. `keep_rows`, per side:
    keep its records as read (load_frame's keep_rows)."""
    from concurrent.futures import ThreadPoolExecutor

    keep = [*keep_rows, *[False] * (len(sides) - len(keep_rows))]
    with ThreadPoolExecutor(max_workers=len(sides)) as pool:
        futures = [pool.submit(load_side, path, label, held) for (path, label), held in zip(sides, keep)]
        return [f.result() for f in futures]
