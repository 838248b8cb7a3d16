"""The verdict: every check of a readiness report with its status against the thresholds, the verdict as the worst
status among them, and the note that makes a verdict from too few items provisional."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from rfteval.readiness.report import Check

if TYPE_CHECKING:
    from rfteval.readiness.probes import ProbeReport
    from rfteval.readiness.report import ReadinessReport


def _fmt(x: float | None) -> str:
    return "n/a" if x is None or not math.isfinite(x) else f"{x:.0%}" if abs(x) <= 1 else f"{x:.3g}"


def decide(report: ReadinessReport, probes: ProbeReport | None = None) -> list[Check]:
    """Every check with its status; the verdict is the worst status among them."""
    t = report.thresholds
    checks: list[Check] = []
    add = checks.append
    span = f"[{report.score_min:g}, {report.score_max:g}]"
    # the model assessed is usually the base, but a single-model run has no "base": name the label
    model = "the base" if report.label == "base" else f"{report.label}'s" if report.label else "the model's"

    # every item's epochs are one answer repeated (the server did not sample): what the spread of epochs shows is
    # the server's, not the task's, so the checks that read it say so instead of a verdict
    flat = report.not_sampling is not None
    pos = report.position
    at_edge = abs(report.mean - report.score_min) < 1e-9 or abs(report.mean - report.score_max) < 1e-9
    where = "minimum" if pos < 0.5 else "maximum"
    if at_edge and flat:
        add(Check("base_mean", "inconclusive", pos, "at the minimum or maximum",
                  f"{model} mean {report.mean:.3g} is the grader's {where} on epochs that are one answer repeated "
                  "(the server is not sampling): sampled answers may not all score alike"))
    elif at_edge:
        add(Check("base_mean", "not_ready", pos, "at the minimum or maximum",
                  f"{model} mean {report.mean:.3g} is the grader's {where}: no variance for RFT to learn from"))
    elif pos < t.min_position or pos > t.max_position:
        add(Check("base_mean", "risky", pos, f"< {t.min_position:g} or > {t.max_position:g} of {span}",
                  f"{model} mean sits at {_fmt(pos)} of the grader's range, near its {where}"))
    else:
        add(Check("base_mean", "ok", pos, f"within {t.min_position:g}..{t.max_position:g} of {span}",
                  f"{model} mean sits at {_fmt(pos)} of the grader's range"))

    if report.samples_min < 2:
        add(Check("samples_per_item", "risky", report.samples_min, ">= 2",
                  "some items have one sample: within-item variance is unknown there; run >= 2 epochs"))

    ezs = report.expected_zero_signal.get("share")
    g = report.group_size
    if ezs is None or not math.isfinite(ezs):
        add(Check("zero_signal", "skipped", None, "", "needs >= 2 samples per item"))
    else:
        status = "not_ready" if ezs > t.zero_signal_not_ready else "risky" if ezs > t.zero_signal_risky else "ok"
        limits = f"> {t.zero_signal_not_ready:g} not ready, > {t.zero_signal_risky:g} risky"
        if flat:
            add(Check("zero_signal", "inconclusive", ezs, limits,
                      f"not assessed: every item's epochs are identical (the server is not sampling), so the expected "
                      f"share of zero-advantage groups at G={g} ({_fmt(ezs)}) measures the server, not the task"))
        else:
            add(Check("zero_signal", status, ezs, limits,
                      f"expected share of zero-advantage groups at G={g}: {_fmt(ezs)} "
                      f"({report.expected_zero_signal.get('method')})"))

    zv = report.zero_variance
    edges = (("floor", zv["floor"], t.max_floor_share, "scored the minimum on every sample (no success to learn from)"),
             ("ceiling", zv["ceiling"], t.max_ceiling_share, "scored the maximum on every sample (nothing left to learn)"))
    for key, share, limit, what in edges:
        if math.isfinite(share):
            status = "risky" if share > limit else "ok"
            if status == "risky" and flat:  # every sample of an item is one answer: of course they score alike
                add(Check(f"{key}_items", "inconclusive", share, f"> {limit:g} risky",
                          f"{_fmt(share)} of items {what}, on epochs that are one answer repeated (the server is not "
                          "sampling)"))
            else:
                add(Check(f"{key}_items", status, share, f"> {limit:g} risky", f"{_fmt(share)} of items {what}"))

    lab = report.labels
    if lab is not None and lab.majority_share is not None:
        status = "risky" if lab.majority_share >= t.label_skew_risky else "ok"
        add(Check("label_skew", status, lab.majority_share, f">= {t.label_skew_risky:g} risky",
                  f"majority reference label {lab.majority_label!r} is {_fmt(lab.majority_share)} of items "
                  f"(chance {_fmt(lab.chance)})"))
    if lab is not None and lab.constant_answer_score is not None and math.isfinite(lab.constant_answer_score):
        status = "risky" if lab.constant_answer_score >= report.mean else "ok"
        add(Check("constant_answer", status, lab.constant_answer_score, ">= the model's mean risky",
                  f"always answering {lab.majority_label!r} scores {lab.constant_answer_score:.3g} "
                  f"({lab.constant_answer_method}); {model} mean is {report.mean:.3g}"))
    if lab is not None and lab.answer_majority_share is not None:
        status = "risky" if lab.answer_majority_share >= t.prediction_skew_risky else "ok"
        add(Check("answer_skew", status, lab.answer_majority_share, f">= {t.prediction_skew_risky:g} risky",
                  f"the model answers {lab.answer_majority_label!r} in {_fmt(lab.answer_majority_share)} of samples"))

    det = report.determinism
    if det is None or not det.n_regraded:
        add(Check("determinism", "skipped", None, "", "not checked (use --regrade N)"))
    else:
        status = "not_ready" if det.flip_rate > t.max_flip_rate else "risky" if det.n_changed else "ok"
        add(Check("determinism", status, det.flip_rate, f"> {t.max_flip_rate:g} not ready, any change risky",
                  f"{det.n_changed} of {det.n_regraded} re-graded outputs changed score"))

    err = report.errors
    refusals = f", {err['refusal']} of them model refusals (reward 0)" if err.get("refusal") else ""
    fate = "reward 0" if err.get("policy") == "zero" else "left out"
    kinds = (("grade_share", err["grade_share"], t.max_grade_error_share,
              "of scored samples are grader errors (reward 0)"),
             ("generate_share", err["generate_share"], t.max_generate_error_share,
              f"of samples failed to generate ({fate}{refusals})"))
    for key, share, limit, what in kinds:
        if share:
            status = "risky" if share > limit else "ok"
            add(Check(key.replace("_share", "_errors"), status, share, f"> {limit:g} risky", f"{_fmt(share)} {what}"))

    if probes is not None:
        cheats = [p.name for p in probes.probes if p.status == "flag" and p.expect == "floor"]
        refs = [p.name for p in probes.probes if p.status == "flag" and p.expect == "max"]
        if cheats:
            add(Check("probes", "not_ready", len(cheats), "any cheat above the floor",
                      f"cheat outputs score above the floor: {', '.join(cheats)}"))
        if refs:
            add(Check("reference_probe", "risky", len(refs), "reference below the maximum",
                      "the reference answer scores below the grader's maximum"))
        if not cheats and not refs:
            add(Check("probes", "ok", 0, "any cheat above the floor", "every probe held"))
    return checks


def verdict_of(checks: Sequence[Check]) -> str:
    """The worst status; a check that could not be assessed on these epochs (inconclusive) leaves it risky at best:
    readiness was not shown."""
    statuses = {c.status for c in checks}
    return ("not_ready" if "not_ready" in statuses else "risky" if statuses & {"risky", "inconclusive"}
            else "ready")


def small_sample_note(n_items: int) -> str | None:
    """The note on a verdict from fewer items than `compare` trusts an interval on (the same threshold, the same
    words), or None."""
    from rfteval.stats.paired import MIN_ITEMS_FOR_INTERVAL

    if n_items >= MIN_ITEMS_FOR_INTERVAL:
        return None
    return (f"only {n_items} item(s): too few for a reliable verdict ({MIN_ITEMS_FOR_INTERVAL} or more are needed, "
            "as for compare's interval): this verdict is provisional")
