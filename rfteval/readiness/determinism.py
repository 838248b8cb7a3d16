"""Is the grader deterministic: stored outputs graded again and compared with their stored scores (statistics.md
§3.3(f))."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, SupportsFloat

from rfteval.data.records import error_type_of
from rfteval.readiness.labels import sample_from_record
from rfteval.readiness.report import ChangedGrade, Determinism

if TYPE_CHECKING:
    from rfteval.data.json_types import JSONObject
    from rfteval.graders.engine import GradingEngine


def regrade(
    records: Sequence[Mapping[str, object]], items: Mapping[str, JSONObject], engine: GradingEngine, n: int,
    seed: int = 0,
    tol: float = 1e-9,
) -> Determinism:
    """Grade n stored outputs again and compare with the stored scores (statistics.md §3.3(f)).

    A re-grade with a grading error on either side compares no score: its 0 against a stored 0 would read as "the
    same grade" (a grader that now raises on every output, deterministic), against a stored score as a flip. Such
    re-grades are left out of the changes and the flip rate and counted by type in `errors`."""
    pool = [r for r in records if r.get("item_id") is not None and str(r["item_id"]) in items]
    picked = sorted(random.Random(seed).sample(range(len(pool)), min(n, len(pool))))
    chosen = [pool[i] for i in picked]
    results = engine.grade_batch([(sample_from_record(r), items[str(r["item_id"])]) for r in chosen])
    changed: list[ChangedGrade] = []
    errors: Counter[str] = Counter()
    max_diff = 0.0
    for rec, res in zip(chosen, results):
        was_error = error_type_of(rec.get("error"))
        now_error = res.error.type if res.error else None
        if was_error or now_error:
            errors[now_error or str(was_error)] += 1
            continue
        score = rec["score"]  # a scored record: effective_scores gave it a float
        stored = float(score) if isinstance(score, SupportsFloat) else float("nan")
        diff = abs(res.score - stored)
        max_diff = max(max_diff, diff)
        if diff > tol:
            changed.append({"item_id": str(rec["item_id"]), "epoch": rec.get("epoch"), "stored": stored,
                            "regraded": res.score, "stored_error": None, "regraded_error": None})
    compared = len(chosen) - sum(errors.values())
    return Determinism(len(chosen), len(changed), len(changed) / compared if compared else float("nan"), max_diff,
                       changed, dict(errors))
