"""The CI gate over a comparison: each check with its power, in evidence mode (fail on shown harm) or strict mode.

A check is a pure function of a CompareResult and the Gate; evaluate_gate runs the active ones and gathers one line
per failure and per warning. tests/compare/test_simulation.py holds the rates at which noise alone fails them.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import TYPE_CHECKING

from rfteval.compare.gate_types import GATE_EPS, GATE_MODES, Gate, GateCheck, GateVerdict
from rfteval.errors import InputError
from rfteval.stats import paired as stats
from rfteval.stats import permutation
from rfteval.stats.tdist import t_ppf

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

    from rfteval.compare.result import CompareResult
    from rfteval.stats.paired import PairedDelta

NAN = float("nan")


def _power_t(level: float, n: int) -> tuple[float, float]:
    """(t_{1−α/2}, t_{power}) on n − 1 degrees of freedom: the two quantiles an MDE is made of."""
    if n < 2:
        return NAN, NAN
    return t_ppf(0.5 + level / 2, float(n - 1)), t_ppf(stats.POWER, float(n - 1))


def _num(x: float | None) -> float:
    return NAN if x is None else float(x)


def _drop_check(result: CompareResult, gate: Gate, d: PairedDelta) -> GateCheck:
    """--max-drop: evidence mode fails on a drop the test sees (verdict "worse") that is larger than X."""
    x, level = float(gate.max_drop or 0.0), result.options.level
    mean, (lo, hi) = _num(d["mean"]), (_num(v) for v in d["ci95"])
    t_hi, t_pow = _power_t(level, d["n"])
    se = _num(d["se"])
    word = stats.direction(d, level)
    if gate.mode == "strict":
        ok = math.isfinite(lo) and lo >= -x - GATE_EPS
        detail = (f"delta interval lower bound {lo:+.4f} {'>=' if ok else '<'} -{x:g} (non-inferiority)"
                  if math.isfinite(lo) else "delta interval undefined (fewer than 2 paired items): cannot show "
                  "non-inferiority")
        sees = t_hi * se
        warning = (f"the interval's half-width {sees:.3f} exceeds the margin {x:g}: even an unchanged model fails "
                   "this strict gate about half the time; add items or epochs" if math.isfinite(sees) and sees > x
                   else None)
        return {"name": "max-drop", "passed": ok, "detail": detail, "mde": _num(d["mde"]), "warning": warning}
    ok = not (word == "worse" and mean < -x - GATE_EPS)
    if ok:
        detail = (f"delta {mean:+.4f} [{lo:+.4f}, {hi:+.4f}]: no drop larger than {x:g} shown"
                  if math.isfinite(lo) else f"delta {mean:+.4f}: no drop shown ({word})")
    else:
        detail = f"delta {mean:+.4f} [{lo:+.4f}, {hi:+.4f}] lies below 0 and below -{x:g}"
    detectable = max(_num(d["mde"]), x + t_pow * se) if math.isfinite(se) else NAN
    warning = None
    if math.isfinite(detectable) and x < _num(d["mde"]):
        warning = (f"this eval cannot reliably see a drop of {x:g}; it sees drops >= {detectable:.2f} "
                   "(80% power): add items or epochs")
    return {"name": "max-drop", "passed": ok, "detail": detail, "mde": detectable, "warning": warning}


def _fail_under_check(result: CompareResult, gate: Gate) -> GateCheck:
    c, x, level = result.candidate, float(gate.fail_under or 0.0), result.options.level
    mean, (lo, hi) = _num(c["mean"]), (_num(v) for v in c["ci95"])
    t_hi, t_pow = _power_t(level, c["items"])
    resolution = (t_hi + t_pow) * _num(c["se"])
    if gate.mode == "strict":
        bound, word = lo, "lower"
        ok = math.isfinite(lo) and lo >= x - GATE_EPS
    else:
        bound, word = (hi if math.isfinite(hi) else mean), "upper"
        ok = bound >= x - GATE_EPS
    detail = (f"candidate mean {mean:.4f}, interval {word} bound {bound:.4f} {'>=' if ok else '<'} {x:g}"
              if math.isfinite(bound) else f"candidate interval undefined (fewer than 2 items): cannot show >= {x:g}")
    return {"name": "fail-under", "passed": ok, "detail": detail, "mde": resolution, "warning": None}


def _improvement_check(result: CompareResult, d: PairedDelta) -> GateCheck:
    level = result.options.level
    lo, hi = (_num(v) for v in d["ci95"])
    word = stats.direction(d, level)
    ok = word == "better"
    if word == "too few items to tell":
        detail = (f"too few items to tell: with {d['n']} paired items the permutation test cannot reach "
                  f"p < {1 - level:.2g}")
    elif math.isfinite(lo):
        detail = (f"delta interval [{lo:+.4f}, {hi:+.4f}], p {d['p_value']:.3g}: "
                  + ("an improvement" if ok else "no improvement shown"))
    else:
        detail = "delta interval undefined (fewer than 2 paired items)"
    return {"name": "require-improvement", "passed": ok, "detail": detail, "mde": _num(d["mde"]), "warning": None}


def item_drop_check(result: CompareResult, gate: Gate) -> GateCheck:
    """--max-item-drop: an item fails when it dropped by more than X *and* its drop is significant after Holm.

    Each item is tested on its own epochs (permutation.epoch_drop_p_values); the family is every paired item, so
    that picking the items to test on their observed drop cannot inflate the error rate. Items not past X are
    given p = 1 rather than tested, which can only make Holm stricter for the others.
    """
    import numpy as np

    x, alpha = float(gate.max_item_drop or 0.0), 1.0 - result.options.level
    items = result.items
    m = len(items)
    floors = np.array([permutation.epoch_split_floor(int(b), int(c))
                       for b, c in zip(items["baseline_n"], items["candidate_n"])]) if m else np.zeros(0)
    big = (items["delta"] < -x - GATE_EPS).to_numpy()
    flagged: list[str] = []
    p = np.ones(m)
    reachable = bool(m) and floors.min() <= alpha / m  # Holm's first step asks p ≤ α/m of the smallest p
    if reachable and big.any() and result.baseline_records is not None and result.candidate_records is not None:
        ids = items["item_id"].to_numpy()[big]
        eb = _epochs_by_item(result.baseline_records, ids)
        ec = _epochs_by_item(result.candidate_records, ids)
        p[big] = permutation.epoch_drop_p_values(eb, ec, result.options.seed)
    adjusted = np.minimum(1.0, stats.holm(p) if m else p)
    hit = big & (adjusted < alpha)
    flagged = items["item_id"][hit].tolist()
    warning = None
    if m and not reachable:
        kb, kc = int(items["baseline_n"].max()), int(items["candidate_n"].max())
        warning = (f"{kb}+{kc} epochs per item cannot show any single item's drop among {m} items (smallest "
                   f"possible p {floors.min():.3g} > {alpha:g}/{m}): --max-item-drop cannot fail; "
                   "add epochs to use it")
    ok = not flagged
    if ok:
        past = int(big.sum())
        detail = (f"no item dropped by more than {x:g} with significance (Holm across {m} items)" if not past else
                  f"{past} item(s) dropped by more than {x:g}, none significant after Holm across {m} items")
    else:
        shown = ", ".join(f"{i} ({dd:+.3f}, p_adj {pa:.3g})" for i, dd, pa in
                          zip(flagged[:5], items["delta"][hit].tolist()[:5], adjusted[hit].tolist()[:5]))
        more = f" and {len(flagged) - 5} more" if len(flagged) > 5 else ""
        detail = f"{len(flagged)} item(s) dropped by more than {x:g}, significant after Holm: {shown}{more}"
    return {"name": "max-item-drop", "passed": ok, "detail": detail, "mde": NAN, "warning": warning,
            "flagged": flagged, "p_adjusted": {i: pa for i, pa in zip(items["item_id"][big].tolist(),
                                                                      adjusted[big].tolist())}}


def _epochs_by_item(records: pd.DataFrame, ids: np.ndarray) -> list[np.ndarray]:
    import numpy as np

    sub = records[records["item_id"].isin(set(ids.tolist()))]
    groups = {k: v.to_numpy(dtype=np.float64) for k, v in sub.groupby("item_id", sort=False)["score"]}
    return [groups.get(i, np.zeros(0)) for i in ids]


def _error_rate_check(result: CompareResult, gate: Gate) -> GateCheck:
    shares = [(side["label"], side.get("generation_error_share", 0.0)) for side in (result.baseline, result.candidate)]
    over = [(label, share) for label, share in shares if share > gate.max_error_rate + GATE_EPS]
    ok = not over
    detail = ("generation errors within " + f"{gate.max_error_rate:g} on both sides" if ok else
              "; ".join(f"{label}: {share:.1%} of records failed to generate (> {gate.max_error_rate:g})"
                        for label, share in over) + ": a broken run is not a verdict")
    return {"name": "error-rate", "passed": ok, "detail": detail, "mde": NAN, "warning": None}


def stop_share_check(result: CompareResult, reason: str, limit: float) -> GateCheck:
    """--max-stop-share REASON=SHARE: fails when more than SHARE of the candidate's rollouts (of the compared items)
    ended with REASON. An observed share, as --max-error-rate's: a tuned agent cut at its turn limit too often
    has not won, whatever its score."""
    from rfteval.compare.agent import stop_share

    name = f"max-stop-share {reason}"
    found = stop_share(result.agent, reason)
    if found is None:
        return {"name": name, "passed": False, "mde": NAN, "warning": None,
                "detail": "no stop reasons to check: the two sides are not both agent runs' records (turns, "
                          "stop_reason)"}
    share, rollouts = found
    ok = share <= limit + GATE_EPS
    detail = (f"{result.candidate['label']}: {share:.1%} of {rollouts} rollouts ended with {reason} "
              f"({'<=' if ok else '>'} {limit:g})")
    return {"name": name, "passed": ok, "detail": detail, "mde": NAN, "warning": None}


def evaluate_gate(result: CompareResult, gate: Gate, p_adjusted: float | None = None) -> GateVerdict:
    """Each active check with its power, one line per failure, one per warning. Equal to a threshold passes.

    `p_adjusted`: the delta's p-value adjusted within the family the caller gates (a series: Holm across the gated
    candidates), used by the delta's checks in place of the result's own; the result is not changed.
    """
    if gate.mode not in GATE_MODES:
        raise InputError(f"must be one of {', '.join(GATE_MODES)}, got {gate.mode!r}", field="--gate")
    delta: PairedDelta = result.delta if p_adjusted is None else {**result.delta, "p_adjusted": p_adjusted}
    checks: list[GateCheck] = []
    if gate.fail_under is not None:
        checks.append(_fail_under_check(result, gate))
    if gate.max_drop is not None:
        checks.append(_drop_check(result, gate, delta))
    if gate.require_improvement:
        checks.append(_improvement_check(result, delta))
    flagged: list[str] = []
    if gate.max_item_drop is not None:
        item = item_drop_check(result, gate)
        flagged = item["flagged"]
        checks.append(item)
    checks += [stop_share_check(result, reason, limit) for reason, limit in gate.max_stop_share]
    if checks:
        checks.append(_error_rate_check(result, gate))
    failures = [f"{c['name']}: {c['detail']}" for c in checks if not c["passed"]]
    warnings = [f"{c['name']}: {c['warning']}" for c in checks if c.get("warning")]
    verdict: GateVerdict = {"passed": not failures, "failures": failures, "checks": checks, "warnings": warnings,
                            "mode": gate.mode, "flagged_items": flagged}
    if p_adjusted is not None:
        verdict["p_adjusted"] = p_adjusted
    return verdict


def gated(result: CompareResult) -> CompareResult:
    """The comparison with the verdict of the gate its options ask for (compare_sides leaves the verdict empty)."""
    return replace(result, gate=evaluate_gate(result, result.options.gate))
