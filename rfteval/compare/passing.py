"""When a sample passes, and pass@k: the pass threshold of each side (and why that value), its checks and notes, pass@1
against pass@N (the sharpening flag), and a run's pass curves for summary.json."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from rfteval.compare.measure import paired_row, side_stats
from rfteval.compare.ranges import side_range
from rfteval.compare.result import CompareOptions, PairRow, PassCurves, PassKCheck, PassThreshold
from rfteval.compare.sides import Side
from rfteval.errors import InputError
from rfteval.stats import paired as stats
from rfteval.stats import passk

if TYPE_CHECKING:
    from rfteval.graders.base import GraderConfig


def grader_maximum(side: Side) -> tuple[float, str] | None:
    """The top of the side's grader range and where that comes from; None when unknown."""
    found = side_range(side)
    return None if found is None else (found[1], f"the grader's maximum ({found[2]})")


def max_threshold_notes(sides: Sequence[Side], o: CompareOptions) -> list[str]:
    """max_threshold_note for each side, one line for the sides it says the same of."""
    by_text: dict[str, list[str]] = {}
    for side in sides:
        line = max_threshold_note(side, resolve_threshold(side, o))
        if line:
            by_text.setdefault(line.split(": ", 1)[1], []).append(side.label)
    return [f"{', '.join(labels)}: {text}" for text, labels in by_text.items()]


def max_threshold_note(side: Side, threshold: tuple[float, str] | None) -> str | None:
    """One line when a sample of a grader whose range is not [0, 1] passes only at its maximum: the grader has no
    pass_threshold (its records carry no `passed`), so 9 on a 0..10 judge fails."""
    import numpy as np

    found = side_range(side)
    if threshold is None or found is None or (found[0], found[1]) == (0.0, 1.0):
        return None
    if not threshold[1].startswith("the grader's maximum"):
        return None
    if "passed" in side.frame and np.isfinite(side.frame["passed"].to_numpy(dtype=np.float64)).all():
        return None
    return (f"{side.label}: the grader's range is [{found[0]:g}, {found[1]:g}] and it has no pass_threshold, so a "
            f"sample passes only at {found[1]:g} (a {found[1] - (found[1] - found[0]) / 10:g} fails): give "
            "--pass-threshold X (or the grader a pass_threshold)")


def resolve_threshold(side: Side, o: CompareOptions) -> tuple[float, str] | None:
    """The score a sample must reach to pass when its record has no `passed` verdict, and why that value.

    --pass-threshold, else --score-range's top, else the maximum of the grader that wrote the records, else 1.0
    for scores in [0, 1]. None when none of these applies (scores above 1 and nothing known about the grader):
    "reaches 1.0" would then be an arbitrary rule.
    """
    import numpy as np

    if o.pass_threshold is not None:
        return float(o.pass_threshold), "--pass-threshold"
    if o.score_range is not None:
        return float(o.score_range[1]), "the top of --score-range"
    found = grader_maximum(side)
    scores = side.frame["score"].to_numpy(dtype=np.float64)
    top = float(np.nanmax(scores)) if scores.size and np.isfinite(scores).any() else None
    if found is not None:
        # a python grader's range is assumed [0, 1]: one that scores 6 and 10 has no known maximum, and "reaches
        # 1" would pass its 6
        return None if top is not None and top > found[0] + 1e-9 else found
    if top is not None and top > 1.0:
        return None
    return 1.0, "1.0 (no grader information with the records)"


def check_threshold_in_range(sides: Sequence[Side], o: CompareOptions) -> None:
    """--pass-threshold outside the scores' known range makes every pass@k and pass rate 0 (above the top) or 1
    (below the bottom) whatever the models did: a verdict no one should read, so bad input."""
    if o.pass_threshold is None:
        return
    for side in sides:
        found = (o.score_range[0], o.score_range[1], "--score-range") if o.score_range else side_range(side)
        if found is not None and found[2].startswith("assumed"):
            continue  # a python grader's [0, 1] is a guess, and a threshold is how a user corrects it
        if found is not None and not found[0] <= o.pass_threshold <= found[1]:
            what = "no sample can pass" if o.pass_threshold > found[1] else "every sample passes"
            raise InputError(f"{o.pass_threshold:g} is outside the scores' range [{found[0]:g}, {found[1]:g}] "
                             f"({found[2]}): {what}", field="--pass-threshold")


def side_thresholds(base: Side, cand: Side, o: CompareOptions, required: bool) -> tuple[float, float] | None:
    """Both sides' pass thresholds; None (or, when `required`, bad input) when either cannot be set."""
    tb, tc = resolve_threshold(base, o), resolve_threshold(cand, o)
    if tb is None or tc is None:
        if required:
            side = base if tb is None else cand
            raise InputError("scores above 1 (or above the grader's assumed maximum) and no grader maximum "
                             "known: give --pass-threshold X (or --score-range LO,HI)", side.path or side.label,
                             field="--metric")
        return None
    return tb[0], tc[0]


def _threshold_info(base: Side, cand: Side, o: CompareOptions) -> dict[str, PassThreshold | None]:
    out: dict[str, PassThreshold | None] = {}
    for role, side in (("baseline", base), ("candidate", cand)):
        found = resolve_threshold(side, o)
        out[role] = {"threshold": found[0], "source": found[1]} if found else None
    return out


def _num3(x: float | None, sign: str = "") -> str:
    return "n/a" if x is None or not math.isfinite(x) else f"{x:{sign}.3f}"


def pass_k_check(base: Side, cand: Side, o: CompareOptions, thresholds: tuple[float, float],
                 metric: passk.Metric) -> tuple[PassKCheck | None, str | None]:
    """pass@1 and pass@N of the paired items compared (N: the epochs both sides have), and the sharpening flag.

    RL fine-tuning often concentrates probability on answers the base model could already sample: pass@1 rises
    while pass@N, which credits an item when any of N samples passes, does not (Yue et al. 2025, "Does
    Reinforcement Learning Really Incentivize Reasoning Capacity in LLMs Beyond the Base Model?"). The note is
    raised only when both comparisons say so through stats.direction: pass@1 shown better (p < α and the
    interval above 0), pass@N not shown better. "Not shown better" is an absence of evidence, and the note says
    exactly that. No Holm across the two: the note makes no claim that either test alone would not.
    Returns (None, None) below 2 epochs a side.
    """
    import numpy as np

    _, st_b = side_stats(base, o, thresholds[0])
    _, st_c = side_stats(cand, o, thresholds[1])
    j = st_b[["mean", "n"]].join(st_c[["mean", "n"]], how="inner", lsuffix="_b", rsuffix="_c")
    if j.empty:
        return None, None
    n_b, n_c = j["n_b"].to_numpy(), j["n_c"].to_numpy()
    top = int(min(n_b.max(), n_c.max()))
    if top < 2:
        return None, None
    c_b = np.rint(j["mean_b"].to_numpy() * n_b).astype(np.int64)
    c_c = np.rint(j["mean_c"].to_numpy() * n_c).astype(np.int64)
    rows: dict[str, PairRow] = {}
    for name, k in (("pass_at_1", 1), ("pass_at_n", top)):
        vb, vc = passk.per_item(n_b, c_b, k), passk.per_item(n_c, c_c, k)
        ok = np.isfinite(vb) & np.isfinite(vc)
        row: PairRow = {"k": k, **paired_row(vb[ok], vc[ok], o, (0.0, 1.0))}
        row["verdict"] = stats.direction(row["delta"], o.level)
        rows[name] = row
    one, top_row = rows["pass_at_1"], rows["pass_at_n"]
    sharpening = one["verdict"] == "better" and top_row["verdict"] != "better"
    out: PassKCheck = {"n": top, "pass_at_1": one, "pass_at_n": top_row, "sharpening": sharpening,
                       "thresholds": _threshold_info(base, cand, o), "metric": metric.name}
    note = None
    if sharpening:
        def span(row: PairRow) -> str:
            d = row["delta"]
            return (f"{_num3(row['baseline']['mean'])} -> {_num3(row['candidate']['mean'])}, delta "
                    f"{_num3(d['mean'], '+')} [{_num3(d['ci95'][0], '+')}, {_num3(d['ci95'][1], '+')}]")

        # the words are stats.direction's, never a comparison of the point estimates: pass@N "not shown better" on
        # 11 items is no evidence that it did not rise (it may have, by more than pass@1 did)
        word = top_row["verdict"]
        if word == "worse":
            lead = f"pass@1 shown better, pass@{top} shown worse (sharpening, not new capability)"
        else:
            lead = (f"pass@1 shown better, pass@{top} not shown better ({word}): sharpening (not new capability) "
                    f"looks like this, and so does a pass@{top} gain that {top_row['delta']['n']} items cannot show")
        note = (f"{lead}; pass@1 {span(one)}; pass@{top} {span(top_row)}"
                + ("" if word == "worse" else f" (near the ceiling pass@{top} may also have no room to rise)"))
    return out, note


def run_pass_curves(sides: Mapping[str, Side], grader: GraderConfig) -> tuple[dict[str, PassCurves], PassThreshold]:
    """Per label of a run, {"pass_at_k": {"1": …, "N": …}, "pass_all_k": {…}}, and the pass rule.

    For summary.json: from the sides the run already read for its comparison (rfteval.data.frame.load_run_frames),
    under compare's default error policy (a generation error is left out, a grading error or refusal fails), so
    `compare --metric pass@K` reproduces these numbers. A sample passes by its record's `passed`, else when it
    reaches the grader's maximum. A label with no side (no records yet), or whose scores pass that maximum (then it
    is not the grader's), is left out.
    """
    import numpy as np

    _, high, source = grader.score_range()
    o = CompareOptions()
    out: dict[str, PassCurves] = {}
    above: list[str] = []
    for label, side in sides.items():
        scores = side.frame["score"].to_numpy(dtype=np.float64)
        if np.isfinite(scores).any() and float(np.nanmax(scores)) > float(high) + 1e-9:
            above.append(label)  # scores above the grader's (assumed) maximum: no pass rule is known, no pass@k
            continue
        _, st = side_stats(side, o, float(high))
        n = st["n"].to_numpy()
        c = (st["mean"].to_numpy() * n).round().astype("int64")
        out[label] = {"pass_at_k": {str(k): v for k, v in passk.curve(n, c, "pass@").items()},
                      "pass_all_k": {str(k): v for k, v in passk.curve(n, c, "pass^").items()}}
    unknown = (f"; not applied to {', '.join(above)}, whose scores pass it: give --pass-threshold X to compare "
               "--metric pass@K") if above else ""
    return out, {"threshold": float(high), "source": f"the record's passed, else score >= the grader's maximum "
                                                     f"({source}){unknown}"}
