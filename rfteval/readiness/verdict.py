"""The verdict: every check of a readiness report with its status against the thresholds, the verdict as the worst
status among them, and the note that makes a verdict from too few items provisional."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from rfteval.readiness.report import Check

if TYPE_CHECKING:
    from rfteval.readiness.probes import ProbeReport
    from rfteval.readiness.report import ReadinessReport


def _fmt(x: float | None) -> str:
    return "n/a" if x is None or not math.isfinite(x) else f"{x:.0%}" if abs(x) <= 1 else f"{x:.3g}"


def error_kinds_text(types: dict[str, int]) -> str:
    """Errors by type in one phrase: "TypeName ×3, Other ×1", the commonest first."""
    return ", ".join(f"{k} ×{v}" for k, v in sorted(types.items(), key=lambda kv: (-kv[1], kv[0])))


def decide(report: ReadinessReport, probes: ProbeReport | None = None) -> list[Check]:
    """Every check with its status; the verdict is the worst status among them. A check whose value rests on
    grading errors only (their 0 is OpenAI's reward, not a measurement) is "inconclusive", never "ok"."""
    checks: list[Check] = []
    add = checks.append
    err = report.errors
    only_errors = bool(err["grade"]) and err["grade"] >= report.n_records - err["excluded"]
    if only_errors:  # the mean, the spread and the zero-signal shares would be errors' zeros
        add(Check("grade_errors", "inconclusive", err["grade_share"], "every scored sample a grading error",
                  f"every scored sample is a grading error ({err['grade']}: {error_kinds_text(err['grade_types'])}): "
                  "the mean, the spread and the zero-signal shares rest on errors only"))
    else:
        _signal_checks(report, add)
    _label_checks(report, add)
    _determinism_check(report, add)
    _error_checks(report, add, grading=not only_errors)
    if probes is not None:
        _probe_checks(probes, add)
    return checks


def _model(report: ReadinessReport) -> str:
    # the model assessed is usually the base, but a single-model run has no "base": name the label
    return "the base" if report.label == "base" else f"{report.label}'s" if report.label else "the model's"


def _signal_checks(report: ReadinessReport, add: Callable[[Check], None]) -> None:
    """Where the mean sits, samples per item, zero signal, all-min and all-max items."""
    t = report.thresholds
    span = f"[{report.score_min:g}, {report.score_max:g}]"
    model = _model(report)
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
    zv = report.zero_variance
    if (ezs is None or not math.isfinite(ezs)) and zv.get("errors"):
        add(Check("zero_signal", "inconclusive", None, "", f"every item with >= 2 samples ({zv['errors']}) has only "
                  "grading errors: its zero signal is the grader's failure"))
    elif ezs is None or not math.isfinite(ezs):
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


def _error_checks(report: ReadinessReport, add: Callable[[Check], None], grading: bool) -> None:
    """The error shares against their thresholds (`grading`: the grading one too, when it is not the whole)."""
    t = report.thresholds
    err = report.errors
    refusals = f", {err['refusal']} of them model refusals (reward 0)" if err.get("refusal") else ""
    fate = "reward 0" if err.get("policy") == "zero" else "left out"
    kinds = (("grade_share", err["grade_share"] if grading else 0.0, t.max_grade_error_share,
              "of scored samples are grader errors (reward 0)"),
             ("generate_share", err["generate_share"], t.max_generate_error_share,
              f"of samples failed to generate ({fate}{refusals})"))
    for key, share, limit, what in kinds:
        if share:
            status = "risky" if share > limit else "ok"
            add(Check(key.replace("_share", "_errors"), status, share, f"> {limit:g} risky", f"{_fmt(share)} {what}"))


def _label_checks(report: ReadinessReport, add: Callable[[Check], None]) -> None:
    """Label skew, the constant answer graded, the model's answer skew."""
    t = report.thresholds
    model = _model(report)
    lab = report.labels
    if lab is not None and lab.majority_share is not None:
        status = "risky" if lab.majority_share >= t.label_skew_risky else "ok"
        add(Check("label_skew", status, lab.majority_share, f">= {t.label_skew_risky:g} risky",
                  f"majority reference label {lab.majority_label!r} is {_fmt(lab.majority_share)} of items "
                  f"(chance {_fmt(lab.chance)})"))
    errors = sum(lab.constant_answer_errors.values()) if lab is not None else 0
    left_out = (f"; {errors} grading error(s) left out ({error_kinds_text(lab.constant_answer_errors)})"
                if lab is not None and errors else "")
    if lab is not None and lab.constant_answer_score is None and errors:
        add(Check("constant_answer", "inconclusive", None, ">= the model's mean risky",
                  f"always answering {lab.majority_label!r}: every grade of it is an error ({errors}: "
                  f"{error_kinds_text(lab.constant_answer_errors)}), so whether it pays is not known"))
    elif lab is not None and lab.constant_answer_score is not None and math.isfinite(lab.constant_answer_score):
        status = "risky" if lab.constant_answer_score >= report.mean else "ok"
        add(Check("constant_answer", status, lab.constant_answer_score, ">= the model's mean risky",
                  f"always answering {lab.majority_label!r} scores {lab.constant_answer_score:.3g} "
                  f"({lab.constant_answer_method}{left_out}); {model} mean is {report.mean:.3g}"))
    if lab is not None and lab.answer_majority_share is not None:
        status = "risky" if lab.answer_majority_share >= t.prediction_skew_risky else "ok"
        add(Check("answer_skew", status, lab.answer_majority_share, f">= {t.prediction_skew_risky:g} risky",
                  f"the model answers {lab.answer_majority_label!r} in {_fmt(lab.answer_majority_share)} of samples"))

def _determinism_check(report: ReadinessReport, add: Callable[[Check], None]) -> None:
    t = report.thresholds
    det = report.determinism
    if det is None or not det.n_regraded:
        add(Check("determinism", "skipped", None, "", "not checked (use --regrade N)"))
        return
    errors = sum(det.errors.values())
    left_out = f"; {errors} with a grading error left out ({error_kinds_text(det.errors)})" if errors else ""
    if not det.n_compared:
        add(Check("determinism", "inconclusive", None, f"> {t.max_flip_rate:g} not ready, any change risky",
                  f"every one of the {det.n_regraded} re-grades has a grading error ({error_kinds_text(det.errors)}): "
                  "no score was compared"))
        return
    status = "not_ready" if det.flip_rate > t.max_flip_rate else "risky" if det.n_changed else "ok"
    add(Check("determinism", status, det.flip_rate, f"> {t.max_flip_rate:g} not ready, any change risky",
              f"{det.n_changed} of {det.n_compared} re-graded outputs changed score{left_out}"))


def _probe_checks(probes: ProbeReport, add: Callable[[Check], None]) -> None:
    cheats = [p.name for p in probes.probes if p.status == "flag" and p.expect == "floor"]
    refs = [p.name for p in probes.probes if p.status == "flag" and p.expect == "max"]
    unknown = probes.inconclusive
    if cheats:
        add(Check("probes", "not_ready", len(cheats), "any cheat above the floor",
                  f"cheat outputs score above the floor: {', '.join(cheats)}"))
    if refs:
        add(Check("reference_probe", "risky", len(refs), "reference below the maximum",
                  "the reference answer scores below the grader's maximum"))
    if unknown:
        add(Check("probes_inconclusive", "inconclusive", len(unknown), "a probe whose every grade is an error",
                  "; ".join(f"{p.name}: {p.errors_text}" for p in unknown)))
    if not cheats and not refs and not unknown:
        add(Check("probes", "ok", 0, "any cheat above the floor", "every probe held"))


def verdict_of(checks: Sequence[Check]) -> str:
    """The worst status: not ready, then inconclusive (a check rests on errors only: never ready), then risky."""
    statuses = {c.status for c in checks}
    for status, verdict in (("not_ready", "not_ready"), ("inconclusive", "inconclusive"), ("risky", "risky")):
        if status in statuses:
            return verdict
    return "ready"


def small_sample_note(n_items: int) -> str | None:
    """The note on a verdict from fewer items than `compare` trusts an interval on (the same threshold, the same
    words), or None."""
    from rfteval.stats.paired import MIN_ITEMS_FOR_INTERVAL

    if n_items >= MIN_ITEMS_FOR_INTERVAL:
        return None
    return (f"only {n_items} item(s): too few for a reliable verdict ({MIN_ITEMS_FOR_INTERVAL} or more are needed, "
            "as for compare's interval): this verdict is provisional")
