"""A checkpoint series: one baseline against every other model of a run directory, paired by item.

`rfteval compare RUNDIR` with no labels. Each candidate is one two-side comparison (rfteval.compare.comparison.compare_sides,
unchanged: the same metric, error policy, slices and gate checks); what the series adds is the family: Holm's
adjustment across the candidates, the best candidate named with its winner's curse stated, and, with enough items,
that best candidate's delta re-estimated on items that played no part in picking it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, NotRequired, TypedDict

from rfteval.compare.comparison import compare_sides
from rfteval.compare.gate import Gate, GateVerdict, evaluate_gate
from rfteval.compare.result import CompareOptions, CompareResult, PairRow, PassKCheck, SideBrief, SideCounts
from rfteval.compare.sides import Side, load_sides
from rfteval.data import rundir
from rfteval.data.json_types import JSONObject
from rfteval.data.records import json_safe
from rfteval.data.sampling_check import check_path
from rfteval.errors import InputError
from rfteval.stats import paired as stats
from rfteval.stats.paired import PairedDelta
from rfteval.stats.permutation import sign_flip_p_value

if TYPE_CHECKING:
    import numpy as np

    from rfteval.data.sampling_check import NotSampling

# The public names (what `from ... import *` and the alias package in rfteval/ hand on)
__all__ = [
    "HELD_OUT_MIN_ITEMS", "HeldOutDelta", "HeldOutBest", "BestCandidate", "SeriesGate", "CandidateRow",
    "Candidate", "SeriesResult", "verdict", "candidate_json", "held_out_best", "best_candidate",
    "compare_series", "series_from_sides",
]

HELD_OUT_MIN_ITEMS = 20  # below this a half holds under 10 items: its interval would say little


# ---------------------------------------------------------------------------------------------- result


class HeldOutDelta(TypedDict):
    mean: float
    se: float
    ci95: list[float]
    p_value: float
    p_method: str
    n: int


class HeldOutBest(TypedDict):
    """The best candidate chosen on half the items, its delta measured on the other half (held_out_best)."""

    label: str
    choose_items: int
    measure_items: int
    delta: HeldOutDelta


class BestCandidate(TypedDict):
    label: str
    delta: float
    ci95: list[float]
    p_adjusted: float
    note: NotRequired[str]  # with 2+ candidates: picking the best overstates it
    shared_items: NotRequired[int]
    held_out: NotRequired[HeldOutBest]  # from HELD_OUT_MIN_ITEMS shared items on


class SeriesGate(TypedDict):
    """The series' gate: each gated candidate's GateVerdict, and the failures and warnings of all, labelled."""

    passed: bool
    failures: list[str]
    warnings: list[str]
    mode: str
    candidates: dict[str, GateVerdict]


class CandidateRow(SideCounts):
    """A candidate as `--format json` lists it (made JSON-safe by SeriesResult.to_json)."""

    baseline_mean: float
    delta: PairedDelta
    p_adjusted: float
    verdict: str
    gated: bool
    gate: GateVerdict
    slices: dict[str, PairRow]
    notes: list[str]
    pass_k: NotRequired[PassKCheck]


@dataclass
class Candidate:
    label: str
    result: CompareResult  # the two-side comparison baseline → this label
    p_adjusted: float  # Holm across every candidate of the series
    gated: bool


@dataclass
class SeriesResult:
    run_dir: str
    baseline: SideBrief
    candidates: list[Candidate]
    best: BestCandidate | None
    gate: SeriesGate
    options: CompareOptions
    notes: list[str] = field(default_factory=list)
    # per label: its every item's epochs identical although sampling was asked for (rfteval.data.sampling_check;
    # compare_series reads it from the run's record files)
    not_sampling: dict[str, NotSampling] = field(default_factory=dict)

    @property
    def metric(self) -> str:
        return self.candidates[0].result.metric if self.candidates else self.options.metric

    def to_json(self) -> JSONObject:
        """`{"baseline": {...}, "candidates": [{"label", "mean", "ci95", "delta": {...}, "p_adjusted"}, ...]}`,
        plus the best candidate, the gate, the options and the notes."""
        o = self.options
        return json_safe({
            "run_dir": self.run_dir,
            "baseline": self.baseline,
            "candidates": [candidate_json(c, o.level) for c in self.candidates],
            "best": self.best,
            "gate": self.gate,
            "options": {"tie": o.tie, "level": o.level, "ci_method": o.ci_method, "seed": o.seed,
                        "exclude_errors": o.exclude_errors, "strict": o.strict, "by": list(o.by),
                        "errors": o.errors, "gate": o.gate.mode, "max_error_rate": o.gate.max_error_rate,
                        "metric": self.metric, "pass_threshold": o.pass_threshold,
                        "baseline": self.baseline["label"],
                        "gated": [c.label for c in self.candidates if c.gated]},
            "notes": self.notes,
            "not_sampling": {label: c.to_json() for label, c in self.not_sampling.items()},
        })


def verdict(c: Candidate, level: float) -> str:
    """The candidate's word from stats.direction on its Holm-adjusted p (adjusted across the series)."""
    return stats.direction(c.result.delta, level)


def candidate_json(c: Candidate, level: float) -> CandidateRow:
    r = c.result
    row: CandidateRow = {"label": c.label, "mean": r.candidate["mean"], "ci95": r.candidate["ci95"],
            "items": r.candidate["items"], "records": r.candidate["records"], "errors": r.candidate["errors"],
            "baseline_mean": r.baseline["mean"], "delta": r.delta, "p_adjusted": c.p_adjusted,
            "verdict": verdict(c, level), "gated": c.gated, "gate": r.gate, "slices": r.slices,
            "notes": r.notes}
    if r.pass_k is not None:
        row["pass_k"] = r.pass_k
    return row


# ---------------------------------------------------------------------------------------------- best candidate


def held_out_best(labels: Sequence[str], deltas: np.ndarray, level: float = 0.95, seed: int = 0) -> HeldOutBest:
    """The best candidate chosen on a random half of the items, its delta measured on the other half.

    `deltas` is (candidates, items): each candidate's per-item delta on the items every candidate shares. The
    best of several candidates on all items is the maximum of noisy estimates, biased upwards (the winner's
    curse) even when every candidate equals the baseline. Choosing on half A and measuring on the disjoint half
    B gives an estimate whose error is independent of the choice: unbiased for the chosen candidate's true
    delta, with an ordinary paired t interval over B's items. The price is half the items for each step, so
    it is offered only from HELD_OUT_MIN_ITEMS items on. One split, seeded: averaging several splits would
    lower the variance but tie the halves together, leaving no simple interval.
    """
    import numpy as np

    n = deltas.shape[1]
    rng = np.random.default_rng(np.random.SeedSequence(seed).spawn(2)[1])
    order = rng.permutation(n)
    half_a, half_b = np.sort(order[: n // 2]), np.sort(order[n // 2:])
    pick = int(np.argmax(deltas[:, half_a].mean(axis=1)))
    d = deltas[pick, half_b]
    mean, se, lo, hi = stats.t_interval(d, level)
    p, p_method = sign_flip_p_value(d, seed=seed)
    return {"label": labels[pick], "choose_items": int(half_a.size), "measure_items": int(half_b.size),
            "delta": {"mean": float(mean), "se": float(se), "ci95": [float(lo), float(hi)], "p_value": p,
                      "p_method": p_method, "n": int(d.size)}}


def best_candidate(candidates: Sequence[Candidate], o: CompareOptions) -> BestCandidate | None:
    """The candidate with the largest paired delta, the note that this overstates it, and with ≥ 20 shared
    items its delta re-estimated on held-out items (held_out_best)."""
    import numpy as np

    if not candidates:
        return None
    # the largest delta; on a tie the earlier checkpoint (NaN, from no paired item, never wins)
    order = [(d if d == d else -math.inf, -i) for i, d in enumerate(c.result.delta["mean"] for c in candidates)]
    best = candidates[max(range(len(candidates)), key=order.__getitem__)]
    d = best.result.delta
    out: BestCandidate = {"label": best.label, "delta": d["mean"], "ci95": d["ci95"], "p_adjusted": best.p_adjusted}
    if len(candidates) < 2:
        return out
    out["note"] = (f"{best.label} has the largest delta of {len(candidates)} candidates: picking the best of many "
                   "overstates it (the largest of several noisy estimates is biased upwards), and its interval "
                   "does not account for the choice")
    frames = [c.result.items.set_index("item_id")["delta"] for c in candidates]
    shared = frames[0].index
    for f in frames[1:]:
        shared = shared.intersection(f.index)
    shared = shared.sort_values()
    out["shared_items"] = int(len(shared))
    if len(shared) >= HELD_OUT_MIN_ITEMS:
        matrix = np.vstack([f.reindex(shared).to_numpy(dtype=np.float64) for f in frames])
        out["held_out"] = held_out_best([c.label for c in candidates], matrix, o.level, o.seed)
    return out


# ---------------------------------------------------------------------------------------------- the series


def compare_series(run_dir: str | Path, options: CompareOptions | None = None, baseline: str | None = None,
                   gated: Sequence[str] = (), fields: dict[str, dict[str, str]] | None = None) -> SeriesResult:
    """Baseline against every other label of a run directory, in the spec's order.

    Holm across the candidates: with K checkpoints, K unadjusted tests would call at least one "better" by
    chance far more often than α. The table's p adj. is Holm across all candidates. The gate runs on
    `gated` (default: every candidate) with Holm across the gated candidates only: when one candidate is named
    up front, the others' tests decide nothing and need not cost it power. Exit status: the gate fails when any
    gated candidate's gate fails.
    """
    o = options or CompareOptions()
    path = Path(run_dir)
    if not path.is_dir():
        raise InputError("a checkpoint series needs a run directory (one record file per model)", path)
    labels = rundir.run_labels(path)
    if len(labels) < 2:
        raise InputError(f"a series needs 2 or more models, found {len(labels)} ({', '.join(labels) or 'none'})",
                         path)
    base_label = rundir.choose_label(list(labels), baseline, "--baseline")
    others = [label for label in labels if label != base_label]
    for label in gated:
        if label not in others:
            raise InputError(f"no candidate {label!r} in this run (candidates: {', '.join(others)})",
                             field="--candidate")  # before reading any records
    sides = load_sides(*[(path, label) for label in [base_label, *others]])
    series = series_from_sides(sides[0], sides[1:], o, gated, fields, str(path))
    series.not_sampling = {side.label: found for side in sides
                           if (found := check_path(side.path, side.label)) is not None}
    return series


def series_from_sides(base: Side, cands: Sequence[Side], options: CompareOptions | None = None,
                      gated: Sequence[str] = (), fields: dict[str, dict[str, str]] | None = None,
                      run_dir: str = "") -> SeriesResult:
    """The series of sides already loaded (compare_series reads them from a run directory; simulations build
    them in memory). Candidates are labelled by Side.label, in the order given."""
    o = options or CompareOptions()
    others = [c.label for c in cands]
    if not others:
        raise InputError("a series needs at least one candidate", run_dir or None)
    for label in gated:
        if label not in others:
            raise InputError(f"no candidate {label!r} in this run (candidates: {', '.join(others)})",
                             field="--candidate")
    gate_on = set(gated) if gated else set(others)
    plain = replace(o, gate=Gate(mode=o.gate.mode, max_error_rate=o.gate.max_error_rate))
    results = [compare_sides(base, cand, plain, fields) for cand in cands]
    adjusted = stats.holm([r.delta["p_value"] for r in results]).tolist()
    for r, p in zip(results, adjusted):
        r.delta["p_adjusted"] = p
    candidates = [Candidate(label, r, p, label in gate_on) for label, r, p in zip(others, results, adjusted)]
    gate = _series_gate(candidates, o.gate)
    notes: list[str] = []
    if len({r.delta["n"] for r in results}) > 1:
        notes.append("candidates pair with different numbers of baseline items: each row's baseline mean is over "
                     "its own paired items")
    best = best_candidate(candidates, o)
    if best and best.get("note"):
        notes.append(best["note"])
    first = results[0]
    b = first.baseline
    baseline_json: SideBrief = {"label": b["label"], "mean": b["mean"], "ci95": b["ci95"], "items": b["items"],
                                     "records": b["records"], "errors": b["errors"], "path": b["path"]}
    return SeriesResult(run_dir, baseline_json, candidates, best, gate, o, notes)


def _series_gate(candidates: Sequence[Candidate], gate: Gate) -> SeriesGate:
    """Each gated candidate's gate (rfteval.compare.gate.evaluate_gate) on its p-value Holm-adjusted across the gated
    candidates; failures are prefixed with the candidate's label."""
    gated = [c for c in candidates if c.gated]
    if not gate.active:
        return {"passed": True, "failures": [], "warnings": [], "mode": gate.mode, "candidates": {}}
    adjusted = stats.holm([c.result.delta["p_value"] for c in gated]).tolist()
    failures: list[str] = []
    warnings: list[str] = []
    per: dict[str, GateVerdict] = {}
    for c, p in zip(gated, adjusted):
        # the gate's family is the gated candidates; the table's (c.result.delta) stays every candidate
        c.result.gate = evaluate_gate(c.result, gate, p_adjusted=p)
        per[c.label] = c.result.gate
        failures += [f"{c.label}: {line}" for line in c.result.gate["failures"]]
        warnings += [f"{c.label}: {line}" for line in c.result.gate["warnings"]]
    return {"passed": not failures, "failures": failures, "warnings": warnings, "mode": gate.mode,
            "candidates": per}

