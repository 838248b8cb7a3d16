"""Does grader B grade like grader A? Pair two sides' grades of the same samples (rfteval.compare.graded reads them,
rfteval.compare.regrade makes B by grading A's outputs again) and measure how well they agree.

Library first: `agree_paths` is what `rfteval agree` calls; `agree_frames` takes graded sides already read.
The statistics are rfteval.stats.agreement's (per sample, at the pass threshold) and stats.paired_delta's (the verdict
under each grader); the gate uses compare's gate types and the evidence semantics of rfteval.compare.gate: a check
fails only when the data show the threshold is crossed, never because the interval is too wide to prove it is not.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from rfteval.compare.gate_types import GATE_EPS, AgreeGate, GateCheck, GateVerdict
from rfteval.compare.graded import KEY, GradedSide, SideErrors, load_graded
from rfteval.compare.regrade import JudgeOpener, JudgeUsage, Regrade, load_regrade_grader, regrade_side
from rfteval.data import rundir
from rfteval.data.json_types import JSONObject
from rfteval.data.records import json_safe
from rfteval.errors import InputError
from rfteval.stats import agreement
from rfteval.stats import paired as stats
from rfteval.stats.agreement import LabelAgreement, PassAgreement, ScoreAgreement
from rfteval.stats.paired import PairedDelta

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    import pandas as pd

    from rfteval.graders.base import GraderConfig

TEXT_WIDTH = 160  # an output's text in the per-item table: enough to see why, short enough to scan


class ErrorReport(TypedDict):
    """The error policy agree applied (compare's --errors) and what it did to the pairs."""

    policy: str  # "exclude": every pair with an error on either side is left out; "zero": errors score 0
    pairs_left_out: int  # paired samples left out of every statistic (an error on A, on B, or both)
    a: SideErrors
    b: SideErrors


# ---------------------------------------------------------------------------------------------- results


class Unmatched(TypedDict):
    """Samples graded on one side only: how many, and the first few as label/item#epoch."""

    a_only: int
    b_only: int
    a_only_first: list[str]
    b_only_first: list[str]


class ItemRow(TypedDict):
    item_id: str
    n: int
    a_mean: float
    b_mean: float
    diff: float  # B − A, the item's mean over its paired samples
    model_label: str  # of the sample the two disagree on most
    epoch: int
    a_score: float
    b_score: float
    output: str  # that sample's output, shortened


class VerdictRow(TypedDict):
    baseline: str
    candidate: str
    under_a: PairedDelta
    under_b: PairedDelta
    difference: PairedDelta  # of the two deltas: (B's delta − A's delta) per item
    word_a: str
    word_b: str
    same: bool
    answer: str


@dataclass(frozen=True)
class AgreeOptions:
    pass_threshold: float | None = None
    level: float = 0.95
    seed: int = 0
    top: int = 10
    gate: AgreeGate = field(default_factory=AgreeGate)
    # compare's --errors (rfteval.data.records.effective_scores): "exclude" leaves every pair with an error record
    # on either side out of the statistics, as compare's --exclude-errors does (a failed grade is no grade, and two
    # graders' agreement is about grades); "zero" scores every error record 0, OpenAI's reward rule
    errors: str = "exclude"

    def __post_init__(self) -> None:
        """The options that are wrong on their own: one line (exit 2) naming the flag, before any judge is paid for
        (--regrade)."""
        from rfteval.data.records import check_error_policy

        check_error_policy(self.errors)
        if self.pass_threshold is not None and not math.isfinite(self.pass_threshold):
            raise InputError(f"must be a finite number, got {self.pass_threshold}", field="--pass-threshold")
        if self.top < 0:
            raise InputError(f"must be >= 0, got {self.top}", field="--top")


@dataclass
class AgreeResult:
    a: GradedSide
    b: GradedSide
    scores: ScoreAgreement
    unmatched: Unmatched
    pass_: PassAgreement | None
    thresholds: dict[str, float | None]
    pass_note: str | None
    labels: LabelAgreement | None
    items: list[ItemRow]
    item_diffs: list[tuple[str, float]]  # every item: (id, B − A), for the plots
    verdict: list[VerdictRow] | None
    gate: GateVerdict
    paired: pd.DataFrame  # the matched samples: key, score_a, score_b
    errors: ErrorReport
    usage: dict[str, JudgeUsage] = field(default_factory=dict)
    scale_note: str | None = None  # B's grades mapped onto A's range (the two graders' ranges differ)

    def to_json(self) -> JSONObject:
        p = self.pass_
        th = self.thresholds
        common = th["a"] if th["a"] == th["b"] else None
        pass_json = None if p is None else {
            "threshold": common, "thresholds": th, "table": p["table"], "kappa": p["kappa"],
            "agreement": p["agreement"], "precision": p["precision"]["value"], "recall": p["recall"]["value"],
            "precision_ci95": p["precision"]["ci95"], "recall_ci95": p["recall"]["ci95"]}
        s = self.scores
        return json_safe({
            "a": {"path": self.a.path, "grader": self.a.grader, "generation_failures": self.a.generation_failures,
                  "score_range": list(self.a.score_range) if self.a.score_range else None},
            "b": {"path": self.b.path, "grader": self.b.grader, "generation_failures": self.b.generation_failures,
                  "score_range": list(self.b.score_range) if self.b.score_range else None},
            "n_samples": s["n_samples"], "n_items": s["n_items"], "unmatched": self.unmatched,
            "pearson": s["pearson"], "spearman": s["spearman"], "bias": s["bias"], "mae": s["mae"], "loa": s["loa"],
            "pass": pass_json, "pass_note": self.pass_note, "scale_note": self.scale_note, "labels": self.labels,
            "items": self.items,
            "errors": self.errors, "verdict": self.verdict, "gate": self.gate, "judge": self.usage or None,
        })


# ---------------------------------------------------------------------------------------------- pairing


def _unmatched(a: pd.DataFrame, b: pd.DataFrame, merged: pd.DataFrame, limit: int = 10) -> Unmatched:
    def keys(df: pd.DataFrame) -> set[tuple[str, str, int]]:
        return set(zip(df["model_label"], df["item_id"], df["epoch"].astype(int)))

    both = keys(merged)
    only_a, only_b = sorted(keys(a) - both), sorted(keys(b) - both)

    def name(k: tuple[str, str, int]) -> str:
        return f"{k[0]}/{k[1]}#{k[2]}"

    return {"a_only": len(only_a), "b_only": len(only_b), "a_only_first": [name(k) for k in only_a[:limit]],
            "b_only_first": [name(k) for k in only_b[:limit]]}


def _pass_column(side: GradedSide, threshold: float | None) -> npt.NDArray[np.bool_] | None:
    """Per sample: the grader's own `passed` verdict, else score ≥ --pass-threshold (rfteval.stats.passk.passes, the
    one pass rule); a grading error fails (it scores 0, OpenAI's rule). None when neither verdict nor threshold."""
    import numpy as np

    from rfteval.stats.passk import passes

    return passes(side.frame["score"].to_numpy(dtype=np.float64), side.frame["passed"].to_numpy(dtype=np.float64),
                  threshold, error=side.frame["is_error"].to_numpy(dtype=bool))


def grader_threshold(grader: str | None, config: GraderConfig | None = None) -> float | None:
    """A grader file's `pass_threshold`, when it loads and has one (`config`: the file's grader, already read)."""
    if grader is None:
        return None
    try:
        from rfteval.graders import load_grader

        value = getattr(config if config is not None else load_grader(grader), "pass_threshold", None)
    except Exception:  # noqa: BLE001 - best effort: a grader that moved only loses the reported value
        return None
    return float(value) if isinstance(value, (int, float)) else None


def agree_frames(a: GradedSide, b: GradedSide, options: AgreeOptions | None = None) -> AgreeResult:
    """Pair A's and B's grades on (model label, item id, epoch) and measure how well they agree."""
    import numpy as np

    from rfteval.data.records import effective_scores

    o = options or AgreeOptions()
    # a range the side's scores pass is not its grader's (a python grader's [0, 1] is assumed): neither mapped
    # onto nor cut to
    range_a, range_b = _held_range(a), _held_range(b)
    scale_note, b_threshold = None, o.pass_threshold
    rescale = range_a is not None and range_b is not None and tuple(range_a) != tuple(range_b)
    if rescale and range_a is not None and range_b is not None:
        # a 0..10 judge against a 0..1 one: B − A on the raw scores is the scales' gap, not a disagreement, so B's
        # grades are mapped linearly onto A's range (Pearson, Spearman and kappa do not change), and a
        # --pass-threshold is read in A's units on both sides
        (alo, ahi), (blo, bhi) = range_a, range_b
        if o.pass_threshold is not None:
            b_threshold = blo + (o.pass_threshold - alo) * ((bhi - blo) / (ahi - alo))
        scale_note = (f"B's range [{_num(blo)}, {_num(bhi)}] differs from A's [{_num(alo)}, {_num(ahi)}]: B's grades "
                      "are mapped linearly onto A's range, so bias, |B − A|, the deltas and --pass-threshold are in "
                      "A's units")
    a_pass_all, b_pass_all = _pass_column(a, o.pass_threshold), _pass_column(b, b_threshold)
    fa, fb = a.frame.copy(), b.frame.copy()
    for side, frame, col in ((a, fa, a_pass_all), (b, fb, b_pass_all)):
        # the one error policy: NaN for a record left out, 0 for an error scored 0, else the grade
        frame["score"] = effective_scores(side.frame, o.errors, exclude_errors=o.errors == "exclude").to_numpy()
        if col is not None:
            frame["pass"] = col
    if rescale and range_a is not None and range_b is not None:
        (alo, ahi), (blo, bhi) = range_a, range_b
        fb["score"] = alo + (fb["score"] - blo) * ((ahi - alo) / (bhi - blo))
        range_b = range_a
    merged = fa.merge(fb, on=KEY, suffixes=("_a", "_b"), how="inner", sort=False)
    unmatched = _unmatched(fa, fb, merged)
    if merged.empty:
        example_a = next(iter(fa[KEY].itertuples(index=False)), None)
        example_b = next(iter(fb[KEY].itertuples(index=False)), None)
        raise InputError(f"no sample is graded on both sides (pairs match on model label, item id and epoch; "
                         f"A has e.g. {tuple(example_a) if example_a else None}, "
                         f"B {tuple(example_b) if example_b else None})", b.path, field="item_id")
    kept = np.isfinite(merged["score_a"].to_numpy(np.float64)) & np.isfinite(merged["score_b"].to_numpy(np.float64))
    errors: ErrorReport = {"policy": o.errors, "pairs_left_out": int((~kept).sum()), "a": a.errors(),
                           "b": b.errors()}
    if not kept.any():
        raise InputError(f"every paired sample has an error record on A or B ({_error_text(errors)}): no grade is "
                         "left to measure agreement on (--errors zero scores them 0)", b.path, field="--errors")
    merged = merged[kept].sort_values(KEY, kind="stable").reset_index(drop=True)
    sa, sb = merged["score_a"].to_numpy(np.float64), merged["score_b"].to_numpy(np.float64)
    items = merged["item_id"].to_numpy()
    scores = agreement.score_agreement(sa, sb, items, o.level, o.seed)
    if range_a is not None and range_b is not None:  # B − A can lie only within these
        lo, hi = scores["bias"]["ci95"]
        bounds = (range_b[0] - range_a[1], range_b[1] - range_a[0])
        scores["bias"]["ci95"] = list(stats.clip_interval(lo, hi, bounds))
    thresholds = {"a": o.pass_threshold if o.pass_threshold is not None else grader_threshold(a.grader),
                  "b": b_threshold if b_threshold is not None else grader_threshold(b.grader, b.config)}
    pass_: PassAgreement | None = None
    note = None
    if "pass_a" in merged and "pass_b" in merged:
        pass_ = agreement.pass_agreement(merged["pass_a"].to_numpy(bool), merged["pass_b"].to_numpy(bool), items,
                                         o.level, o.seed)
    else:
        note = _no_verdict_note([s.name for s, col in ((a, a_pass_all), (b, b_pass_all)) if col is None])
    labels = None
    la, lb = merged["label_a"], merged["label_b"]
    if la.notna().all() and lb.notna().all():
        labels = agreement.label_agreement(la.tolist(), lb.tolist(), items, level=o.level, seed=o.seed)
    item_rows, diffs = _items(merged, o.top)
    verdict = _verdict(merged, o, range_a, range_b)
    result = AgreeResult(a, b, scores, unmatched, pass_, thresholds, note, labels, item_rows, diffs, verdict,
                         {"passed": True, "failures": [], "warnings": [], "checks": []},
                         merged[[*KEY, "score_a", "score_b"]], errors, scale_note=scale_note)
    result.gate = evaluate_agree_gate(result, o.gate, o.level)
    return result


def _no_verdict_note(sides: list[str]) -> str:
    return (f"{' and '.join(sides)}'s records carry no pass verdict (the grader has no pass_threshold): give "
            "--pass-threshold X for the pass/fail table")


def _held_range(side: GradedSide) -> tuple[float, float] | None:
    """The side's grader range when every score of the side lies in it, else None."""
    import numpy as np

    if side.score_range is None:
        return None
    low, high = side.score_range
    scores = side.frame["score"].to_numpy(dtype=np.float64)
    scores = scores[np.isfinite(scores)]
    if scores.size and (scores.min() < low - 1e-9 or scores.max() > high + 1e-9):
        return None
    return low, high


def _num(x: float) -> str:
    return f"{x:g}"


def _error_text(errors: ErrorReport) -> str:
    """'A: none; B: model_grader_parse_error 22': each side's error records by type."""
    return "; ".join(f"{name}: " + (", ".join(f"{k} {n}" for k, n in side["by_kind"].items()) or "none")
                     for name, side in (("A", errors["a"]), ("B", errors["b"])))


def _items(merged: pd.DataFrame, top: int) -> tuple[list[ItemRow], list[tuple[str, float]]]:
    """Each item's mean B − A; the `top` items where the two disagree most, each with the sample that shows it."""
    import numpy as np

    m = merged.assign(d=merged["score_b"] - merged["score_a"], ad=(merged["score_b"] - merged["score_a"]).abs())
    g = m.groupby("item_id", sort=False)
    per = g.agg(n=("d", "size"), a_mean=("score_a", "mean"), b_mean=("score_b", "mean"), diff=("d", "mean"))
    per = per.assign(absdiff=per["diff"].abs(), spread=g["ad"].max()).sort_values(
        ["absdiff", "spread"], ascending=False, kind="stable")
    worst = m.loc[g["ad"].idxmax()].set_index("item_id")
    rows: list[ItemRow] = []
    for item_id, r in per[per["spread"] > 1e-12].head(max(top, 0)).iterrows():  # items they agree on are not listed
        w = worst.loc[item_id]
        rows.append({"item_id": str(item_id), "n": int(r["n"]), "a_mean": float(r["a_mean"]),
                     "b_mean": float(r["b_mean"]), "diff": float(r["diff"]), "model_label": str(w["model_label"]),
                     "epoch": int(w["epoch"]), "a_score": float(w["score_a"]), "b_score": float(w["score_b"]),
                     "output": agreement.shorten(w["output_text_a"] if isinstance(w["output_text_a"], str)
                                                 else w.get("output_text_b"), TEXT_WIDTH)})
    diffs = [(str(i), float(v)) for i, v in zip(per.index, per["diff"].to_numpy(np.float64))]
    return rows, diffs


def _verdict(merged: pd.DataFrame, o: AgreeOptions, range_a: tuple[float, float] | None = None,
             range_b: tuple[float, float] | None = None) -> list[VerdictRow] | None:
    """Per candidate label: the paired delta against the baseline under A, under B, and the two deltas' difference.
    A delta's interval is cut to ±(its grader's span), as compare cuts it."""
    import numpy as np

    labels = list(dict.fromkeys(merged["model_label"].tolist()))
    if len(labels) < 2:
        return None
    base = rundir.baseline_label(labels)
    means = merged.groupby(["model_label", "item_id"], sort=False)[["score_a", "score_b"]].mean()
    rows: list[VerdictRow] = []
    for cand in (label for label in labels if label != base):
        b_ = means.loc[base]
        c_ = means.loc[cand]
        common = b_.index.intersection(c_.index)
        bm, cm = b_.loc[common], c_.loc[common]
        da_b, dc_b = bm["score_a"].to_numpy(np.float64), cm["score_a"].to_numpy(np.float64)
        db_b, dd_b = bm["score_b"].to_numpy(np.float64), cm["score_b"].to_numpy(np.float64)
        under_a = stats.paired_delta(da_b, dc_b, level=o.level, seed=o.seed)
        under_b = stats.paired_delta(db_b, dd_b, level=o.level, seed=o.seed)
        for delta, grader_range_ in ((under_a, range_a), (under_b, range_b)):
            if grader_range_ is not None:
                span = grader_range_[1] - grader_range_[0]
                delta["ci95"] = list(stats.clip_interval(delta["ci95"][0], delta["ci95"][1], (-span, span)))
        diff = stats.paired_delta(dc_b - da_b, dd_b - db_b, level=o.level, seed=o.seed)
        wa, wb = stats.direction(under_a, o.level), stats.direction(under_b, o.level)
        rows.append({"baseline": base, "candidate": cand, "under_a": under_a, "under_b": under_b,
                     "difference": diff, "word_a": wa, "word_b": wb, "same": wa == wb,
                     "answer": verdict_answer(cand, wa, wb)})
    return rows


def verdict_answer(candidate: str, word_a: str, word_b: str) -> str:
    """The one-line answer to "does the verdict survive the change of grader?"."""
    if word_a == word_b == "better":
        return f"the {candidate} model's gain holds under both graders"
    if word_a == word_b == "worse":
        return f"the {candidate} model's loss holds under both graders"
    if word_a == "better":
        return f"the gain under A is not seen under B ({word_b})"
    if word_a == "worse":
        return f"the loss under A is not seen under B ({word_b})"
    if word_b in ("better", "worse"):
        return f"B sees the {candidate} model {word_b}; A did not ({word_a})"
    return f"neither grader shows a difference for {candidate} ({word_a})"


# ---------------------------------------------------------------------------------------------- the gate


def evaluate_agree_gate(result: AgreeResult, gate: AgreeGate, level: float = 0.95) -> GateVerdict:
    """Evidence mode, as compare's gate: a check fails only when the interval lies wholly past its threshold."""
    checks: list[GateCheck] = []
    if gate.min_kappa is not None:
        checks.append(_kappa_check(result, gate.min_kappa))
    if gate.max_bias is not None:
        checks.append(_bias_check(result, gate.max_bias))
    if gate.require_same_verdict:
        checks.append(_verdict_check(result, level))
    rate = _error_rate_check(result, gate.max_error_rate)
    if checks:  # as compare's gate: every gate fails on a side whose records are errors past --max-error-rate
        checks.append(rate)
    warnings = [f"{c['name']}: {c['warning']}" for c in checks if c["warning"]]
    if not checks and not rate["passed"]:  # no gate asked for: said, not failed
        warnings.append(f"{rate['name']}: {rate['detail']}")
    return {"passed": all(c["passed"] for c in checks), "checks": checks,
            "failures": [f"{c['name']}: {c['detail']}" for c in checks if not c["passed"]], "warnings": warnings}


def _error_rate_check(result: AgreeResult, x: float) -> GateCheck:
    """Either side's share of error records (grading errors, refusals, generation failures) above X: the grades
    that are left say little about a grader that failed that often, whatever the policy did with the failures."""
    over = []
    for name, side in (("A", result.errors["a"]), ("B", result.errors["b"])):
        if side["share"] > x + GATE_EPS:
            kinds = ", ".join(f"{k} {n}" for k, n in side["by_kind"].items())
            over.append(f"{name}: {side['errors']} of {side['records']} records are errors ({side['share']:.1%} > "
                        f"{x:g}; {kinds})")
    detail = (f"errors within {x:g} on both sides" if not over else
              "; ".join(over) + ": a grader that fails this often is not measured by the grades it gave")
    return {"name": "error-rate", "passed": not over, "detail": detail, "warning": None}


def _kappa_check(result: AgreeResult, x: float) -> GateCheck:
    if result.pass_ is None:
        raise InputError(result.pass_note or "no pass verdicts to compute kappa from", field="--min-kappa")
    k = result.pass_["kappa"]
    value, (lo, hi) = k["value"], k["ci95"]
    if not math.isfinite(hi):
        return {"name": "min-kappa", "passed": True, "detail": f"kappa {value:.3f}: interval undefined (fewer "
                "than 2 items), nothing shown", "warning": "too few items for an interval: the check cannot fail"}
    ok = hi >= x - GATE_EPS
    detail = (f"kappa {value:.3f} [{lo:.3f}, {hi:.3f}]: " +
              (f"not shown below {x:g}" if ok else f"the whole interval lies below {x:g}"))
    warning = (f"kappa's interval reaches down to {lo:.3f}, below {x:g}: the data do not show agreement "
               "that good either; add items" if ok and lo < x - GATE_EPS else None)
    return {"name": "min-kappa", "passed": ok, "detail": detail, "warning": warning}


def _bias_check(result: AgreeResult, x: float) -> GateCheck:
    b = result.scores["bias"]
    mean, (lo, hi) = b["mean"], b["ci95"]
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return {"name": "max-bias", "passed": True, "detail": f"bias {mean:+.4f}: interval undefined (fewer than "
                "2 items), nothing shown", "warning": "too few items for an interval: the check cannot fail"}
    ok = not (lo > x + GATE_EPS or hi < -x - GATE_EPS)
    detail = (f"bias B − A {mean:+.4f} [{lo:+.4f}, {hi:+.4f}]: " +
              (f"no bias beyond ±{x:g} shown" if ok else f"the whole interval lies beyond ±{x:g}"))
    warning = (f"the interval reaches past ±{x:g}: a bias that large is not ruled out; add items"
               if ok and (hi > x + GATE_EPS or lo < -x - GATE_EPS) else None)
    return {"name": "max-bias", "passed": ok, "detail": detail, "warning": warning}


ONE_LABEL = "needs two or more model labels in the records (base and tuned) to compare verdicts"


def _verdict_check(result: AgreeResult, level: float) -> GateCheck:
    """Fails when the verdicts differ and the data show it: opposite directions, or one grader sees a change the
    other does not *and* the two deltas are shown to differ. The same verdict passes, even when the size of the
    change differs (that is a warning); a differing verdict the data cannot tell from noise passes with a warning.
    """
    if not result.verdict:
        raise InputError(ONE_LABEL, result.a.path, field="--require-same-verdict")
    bad, notes = [], []
    for v in result.verdict:
        shown = stats.direction(v["difference"], level) in ("better", "worse")
        opposite = {v["word_a"], v["word_b"]} == {"better", "worse"}
        lo, hi = v["difference"]["ci95"]
        gap = f"B's delta − A's {v['difference']['mean']:+.4f} [{lo:+.4f}, {hi:+.4f}]"
        if opposite or (not v["same"] and shown):
            bad.append(f"{v['candidate']}: {v['answer']}; {gap}")
        elif not v["same"]:
            notes.append(f"{v['candidate']}: {v['answer']}, but the two deltas are not shown to differ ({gap}): "
                         "add items")
        elif shown:
            notes.append(f"{v['candidate']}: same verdict, but the size differs: {gap}")
    detail = "; ".join(bad) if bad else "; ".join(f"{v['candidate']}: {v['answer']}" for v in result.verdict)
    return {"name": "require-same-verdict", "passed": not bad, "detail": detail,
            "warning": "; ".join(notes) if notes else None}


# ---------------------------------------------------------------------------------------------- entry point


def agree_paths(a: str | Path, b: str | Path | None, options: AgreeOptions | None = None,
                regrade: Regrade | None = None, open_judge: JudgeOpener | None = None) -> AgreeResult:
    """`rfteval agree A B` (B a records file or run directory), or `rfteval agree A --regrade GRADER`, whose judge
    `open_judge` opens (regrade.regrade_side) once every input is checked."""
    if (b is None) == (regrade is None):
        raise InputError("give B (records or a run directory) or --regrade GRADER, not both and not neither",
                         field="B")
    o = options or AgreeOptions()
    side_a = load_graded(a, "A")
    usage: dict[str, JudgeUsage] = {}
    if regrade is not None:
        config = regrade.config or load_regrade_grader(
            regrade.grader, allow_without_sample=regrade.allow_grader_without_sample, judge_model=regrade.judge.model)
        refuse_before_regrade(side_a, config, o)
        side_b, usage = regrade_side(side_a, regrade, config=config, open_judge=open_judge)
    else:
        assert b is not None
        side_b = load_graded(b, "B")
    result = agree_frames(side_a, side_b, o)
    result.usage = usage
    return result


def refuse_before_regrade(a: GradedSide, b_grader: GraderConfig, o: AgreeOptions) -> None:
    """What agree_frames and the gate would refuse once B is graded, when A and B's grader already tell: one line
    (exit 2) before any judge call is paid for. `--min-kappa` without `--pass-threshold` once re-graded every
    sample (69 judge calls), wrote --out, and only then asked for the threshold."""
    if o.gate.min_kappa is not None and o.pass_threshold is None:
        missing = [name for name, has in (("A", _pass_column(a, None) is not None),
                                           ("B", b_grader.gives_pass_verdict())) if not has]
        if missing:
            raise InputError(_no_verdict_note(missing), field="--min-kappa")
    if o.gate.require_same_verdict and a.frame["model_label"].nunique() < 2:
        raise InputError(ONE_LABEL, a.path, field="--require-same-verdict")
    if o.errors == "exclude" and len(a.frame) and a.frame["is_error"].all():
        raise InputError(f"every sample of A has an error record ({_error_text_side(a)}): no pair would be left "
                         "to measure agreement on (--errors zero scores them 0)", a.path, field="--errors")


def _error_text_side(side: GradedSide) -> str:
    return ", ".join(f"{k} {n}" for k, n in side.errors()["by_kind"].items())
