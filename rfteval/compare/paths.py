"""Two record files in, a gated comparison out: `rfteval compare` and the README's `compare_paths`.

Above both the comparison (rfteval.compare.comparison) and the gate (rfteval.compare.gate), which read each other's
types only: the comparison is built first, then the gate judges it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from rfteval.compare.comparison import CompareOptions, CompareResult, compare_sides, dataset_fields
from rfteval.compare.gate import gated
from rfteval.compare.sides import load_sides
from rfteval.errors import InputError


def compare_paths(baseline: str | Path, candidate: str | Path, labels: Sequence[str] = (),
                  options: CompareOptions | None = None, dataset: str | Path | None = None) -> CompareResult:
    """`rfteval compare`: two record files compared and gated; labels are () , (both,) or (baseline, candidate)."""
    o = options or CompareOptions()
    if len(labels) > 2:
        raise InputError("give --label once (both sides) or twice (baseline, then candidate)", field="--label")
    label_b = labels[0] if labels else None
    label_c = labels[-1] if labels else None
    if o.by and dataset is None:
        raise InputError("--by needs --dataset (the items' fields live in the dataset)", field="--by")
    fields = dataset_fields(dataset, o.by) if dataset is not None and o.by else None
    base, cand = load_sides((baseline, label_b), (candidate, label_c))
    result = gated(compare_sides(base, cand, o, fields))
    if Path(base.path).resolve() == Path(cand.path).resolve() and base.label == cand.label:
        result.notes.append("both sides are the same records: every delta is 0 by construction (give two files, "
                            "or --label twice)")
    return result
