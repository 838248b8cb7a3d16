"""RFT readiness: will reinforcement fine-tuning learn from this dataset and grader, judged from a base run's
records. `assess` computes the signals (the grader's range, per-item spread, zero-signal shares, errors) and assembles
the report from them, the label checks (rfteval.readiness.labels), the re-grades (.determinism) and the verdict
(.verdict); it reads and writes no file.

Signals follow docs/statistics.md §3 (OpenAI's RFT guide, GRPO/DAPO, Bae et al.). Everything here is a
pure function of the records except the label and determinism checks, which run the grader.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from rfteval.data.records import check_error_policy, effective_scores, error_kinds, error_type_of, frame_range
from rfteval.data.rundir import pick_label
from rfteval.errors import InputError
from rfteval.graders.base import runs_locally
from rfteval.limits import GROUP_SIZE
from rfteval.readiness.determinism import regrade
from rfteval.readiness.labels import constant_answer_score, label_skew
from rfteval.readiness.report import (
    LEVEL_DECIMALS,
    Coverage,
    ExpectedZeroSignal,
    ItemStat,
    ReadinessErrors,
    ReadinessReport,
    Thresholds,
    ZeroVariance,
)
from rfteval.readiness.verdict import decide, small_sample_note, verdict_of
from rfteval.stats import zero_signal

if TYPE_CHECKING:
    import pandas as pd

    from rfteval.data.dataset import Dataset, Item
    from rfteval.data.json_types import JSONObject
    from rfteval.data.sampling_check import NotSampling
    from rfteval.graders.base import GradeOptions, GraderConfig
    from rfteval.graders.engine import GradingEngine
    from rfteval.providers.judge import JudgeClient
    from rfteval.readiness.probes import ProbeReport


# ---------------------------------------------------------------- the grader's range

# Without a grader to ask (records assessed as they are), scores are taken to lie in [0, 1].
NO_GRADER_RANGE = (0.0, 1.0, "assumed [0, 1]: no grader given")


# ---------------------------------------------------------------- zero signal


def expected_zero_signal(counts: Sequence[int], group_size: int) -> float:
    """P(all G draws score alike) for one item on its own, from the counts of each distinct score among its K samples.

    K ≥ G: Σ_v C(n_v, G) / C(K, G), the unbiased estimator of Σ_v p_v^G (statistics.md §3.3(b); the same
    construction for any number of levels, as Chen et al.'s pass@k). K < G: the with-replacement plug-in
    Σ_v (n_v/K)^G, biased upwards. `assess` does not use the plug-in: with K < G it pools the items
    (empirical Bayes, `rfteval.stats.zero_signal.estimate`); this per-item function is kept for the library.
    """
    k = sum(counts)
    if k == 0:
        return float("nan")
    return zero_signal.unbiased(counts, group_size) if k >= group_size else zero_signal.plug_in(counts, group_size)


def _levels(scores: Sequence[float]) -> Counter[float]:
    return Counter(round(float(s), LEVEL_DECIMALS) for s in scores)


def _histogram(values: Sequence[float], low: float, high: float, bins: int) -> list[int]:
    counts = [0] * bins
    width = (high - low) or 1.0
    for v in values:
        if v is None or not math.isfinite(v):
            continue
        i = int((v - low) / width * bins)
        counts[min(max(i, 0), bins - 1)] += 1
    return counts


def classify_items(
    item_ids: Sequence[str], scores: Sequence[float], low: float, high: float, group_size: int,
    grade_errors: Sequence[bool] | None = None,
) -> list[ItemStat]:
    """Per-item mean, spread and kind of zero variance, in first-seen item order.

    `expected_zero_signal` is left None here: it pools the items (`zero_signal_summary` fills it in). An item whose
    every sample is a grading error (`grade_errors`) is of kind "errors": it scores 0 as OpenAI rewards it, but
    "all at the minimum" would be the grader's failure read as the task's.
    """
    by_item: dict[str, list[float]] = {}
    errs: Counter[str] = Counter()
    for i, (iid, s) in enumerate(zip(item_ids, scores)):
        by_item.setdefault(iid, []).append(float(s))
        if grade_errors is not None and grade_errors[i]:
            errs[iid] += 1
    out = []
    for iid, vals in by_item.items():
        k = len(vals)
        mean = sum(vals) / k
        sd = math.sqrt(sum((v - mean) ** 2 for v in vals) / (k - 1)) if k > 1 else None
        kind = None
        if k > 1 and errs[iid] == k:
            kind = "errors"
        elif k > 1:
            levels = _levels(vals)
            if len(levels) == 1:
                v = vals[0]
                kind = "floor" if abs(v - low) < 1e-9 else "ceiling" if abs(v - high) < 1e-9 else "other"
            else:
                kind = "mixed"
        out.append(ItemStat(iid, k, mean, sd, kind, None, errs[iid]))
    return out


def zero_signal_summary(items: Sequence[ItemStat], low: float, high: float, group_size: int,
                        level_counts: Mapping[str, Counter[float]]) -> tuple[ZeroVariance, ExpectedZeroSignal]:
    """Observed zero-variance shares (split floor/ceiling/other) and the expected share at group size G.

    The expected share, its floor/ceiling split and each assessed item's `expected_zero_signal` come from one
    `zero_signal.estimate` over the items with ≥ 2 samples: unbiased where K ≥ G, empirical Bayes where K < G.
    Items whose every sample is a grading error are left out of both and counted (`errors`).
    """
    assessed = [it for it in items if it.kind is not None and it.kind != "errors"]
    n = len(assessed)
    nan = float("nan")
    obs: ZeroVariance = {"n_items": n, "share": nan, "floor": nan, "ceiling": nan, "other": nan,
                         "errors": sum(it.kind == "errors" for it in items)}
    exp: ExpectedZeroSignal = {"group_size": group_size, "share": nan, "floor": nan, "ceiling": nan, "method": None,
                               "n_unbiased": 0, "n_empirical_bayes": 0, "prior": None}
    if not n:
        return obs, exp
    kinds = Counter(it.kind for it in assessed)
    obs["share"], obs["floor"] = (n - kinds["mixed"]) / n, kinds["floor"] / n
    obs["ceiling"], obs["other"] = kinds["ceiling"] / n, kinds["other"] / n
    lo_key, hi_key = round(low, LEVEL_DECIMALS), round(high, LEVEL_DECIMALS)
    est = zero_signal.estimate([level_counts[it.item_id] for it in assessed], group_size, atoms=(lo_key, hi_key))
    for it, p in zip(assessed, est.per_item):
        it.expected_zero_signal = p
    exp["share"], exp["floor"], exp["ceiling"] = est.share, est.level_share(lo_key), est.level_share(hi_key)
    exp["method"], exp["n_unbiased"], exp["n_empirical_bayes"] = est.method, est.n_unbiased, est.n_empirical_bayes
    exp["prior"] = est.prior
    if est.notes:
        exp["notes"] = est.notes
    return obs, exp


# ---------------------------------------------------------------- assess


def items_map(dataset: Dataset | str | Path | Mapping[str, Item | JSONObject] | None) -> dict[str, JSONObject] | None:
    """Item id → the item's data, from a dataset, its file, or a map of ids to items or to their data."""
    from rfteval.data.dataset import Item, load_dataset

    if dataset is None:
        return None
    if isinstance(dataset, (str, Path)):
        dataset = load_dataset(dataset)
    if isinstance(dataset, Mapping):
        return {str(k): v.data if isinstance(v, Item) else v for k, v in dataset.items()}
    return {it.id: it.data for it in dataset}


def error_counts(df: pd.DataFrame, kinds: pd.Series, used: pd.Series, policy: str) -> ReadinessErrors:
    """Errors of the assessed records, by kind, and what the policy did with them.

    `generate` counts every generation-stage error (model refusals included, as before); `refusal` the model
    refusals among them (scored 0); `excluded` the records left out of the signals; the shares are of all records
    (`generate_share`) and of the records used (`grade_share`).
    """
    n_records = len(df)
    n_used = int(used.sum())
    gen = kinds.isin(["generate", "refusal"])
    values = df["error"] if "error" in df else [None] * n_records

    def types(flags: pd.Series) -> dict[str, int]:
        return dict(Counter(t for e, f in zip(values, flags) if f and isinstance(t := error_type_of(e), str)))

    n_gen, n_grade = int(gen.sum()), int((kinds[used] == "grade").sum())
    return {"generate": n_gen, "grade": n_grade, "generate_share": n_gen / n_records if n_records else 0.0,
            "grade_share": n_grade / n_used if n_used else 0.0, "grade_types": types(kinds == "grade"),
            "refusal": int((kinds == "refusal").sum()), "generate_types": types(gen), "policy": policy,
            "excluded": n_records - n_used}


def coverage(records_df: pd.DataFrame, label: str | None, items: Sequence[str] | int | None,
             epochs: int | None) -> Coverage:
    """The label's cells against items × epochs: the items (their ids, or only how many) and the epochs its run
    was asked for, else as many as the records hold. A cell is answered when its record is not a generation
    failure (a model refusal is an answer); one with no record is missing."""
    df = records_df
    if label is not None and "model_label" in df:
        df = df[df["model_label"].astype(str) == label]
    ids = df["item_id"].astype(str)
    if isinstance(items, Sequence):
        df, ids = df[ids.isin(set(items))], ids[ids.isin(set(items))]
    cells = df.assign(item_id=ids).drop_duplicates(["item_id", "epoch"], keep="last")
    n_items = len(items) if isinstance(items, Sequence) else items if items is not None else int(ids.nunique())
    n_epochs = epochs if epochs is not None else int(df["epoch"].nunique())
    expected = n_items * n_epochs
    present = min(len(cells), expected)
    failed = min(int((error_kinds(cells) == "generate").sum()), present)
    return {"items": n_items, "epochs": n_epochs, "expected": expected, "answered": present - failed,
            "missing": expected - present, "generation_errors": failed}


def assess(
    records_df: pd.DataFrame, grader_config: GraderConfig | None = None,
    dataset: Dataset | str | Path | Mapping[str, Item | JSONObject] | None = None,
    thresholds: Thresholds = Thresholds(), *, group_size: int = GROUP_SIZE, label: str | None = None, regrade_n: int = 0,
    seed: int = 0, options: GradeOptions | None = None, judge: JudgeClient | None = None,
    engine: GradingEngine | None = None, probes: ProbeReport | None = None, bins: int = 10, errors: str = "exclude",
    not_sampling: NotSampling | None = None,
) -> ReadinessReport:
    """Readiness of one model's N-epoch records (the base model's, before training).

    `engine` (anything with grade_batch) overrides building one from `grader_config`; the grader runs only for the
    constant-answer score of label-like data and for `regrade_n` > 0, and only when it needs no judge or has one.
    `errors` is the policy for generation errors: "exclude" (left out of every signal, counted) or "zero" (reward
    0); grading errors and model refusals score 0 under both (`effective_scores`). `not_sampling` is the label's
    epochs found identical although sampling was asked for (rfteval.data.sampling_check, which reads the
    temperature from the run's spec): the checks that read the spread of epochs are then inconclusive.
    """
    if group_size < 2:
        raise InputError("must be at least 2", field="--group-size")
    check_error_policy(errors)
    chosen = pick_label(records_df, label)
    df = records_df
    if chosen is not None and "model_label" in df:
        df = df[df["model_label"].astype(str) == chosen]
    n_records = len(df)
    kinds = error_kinds(df)
    rewards = effective_scores(df, errors)
    mask = rewards.notna()
    scored = df[mask].assign(score=rewards[mask])
    if scored.empty:
        raise InputError("no graded records to assess")
    ids = scored["item_id"].astype(str).tolist()
    scores = scored["score"].astype(float).tolist()
    grade_err = (kinds[mask] == "grade").tolist()

    low, high, source = grader_config.score_range() if grader_config is not None else NO_GRADER_RANGE
    if grader_config is None and (recorded := frame_range(df)) is not None:  # records copied out of their run
        low, high, source = *recorded, "the range the grader wrote on the records"
    if min(scores) < low or max(scores) > high:
        low, high = min(low, min(scores)), max(high, max(scores))
        source += "; widened to the observed scores"
    span = (high - low) or 1.0

    stats = classify_items(ids, scores, low, high, group_size, grade_err)
    levels_by_item: dict[str, Counter[float]] = {}
    for iid, s in zip(ids, scores):
        levels_by_item.setdefault(iid, Counter())[round(s, LEVEL_DECIMALS)] += 1
    obs, exp = zero_signal_summary(stats, low, high, group_size, levels_by_item)

    means = [it.mean for it in stats]
    n = len(means)
    mean = sum(means) / n
    se = math.sqrt(sum((m - mean) ** 2 for m in means) / (n - 1) / n) if n > 1 else None
    sds = [it.sd for it in stats if it.sd is not None]
    multi = [[(s - low) / span for s in vals] for vals in _group(ids, scores).values() if len(vals) > 1]
    # sample variance (ddof=1), as every other spread here: for binary scores the unbiased estimate of p(1−p)
    variances = [sum((v - sum(x) / len(x)) ** 2 for v in x) / (len(x) - 1) for x in multi]
    levels = _levels(scores)
    lo_key, hi_key = round(low, LEVEL_DECIMALS), round(high, LEVEL_DECIMALS)
    sd_max = span / math.sqrt(2)
    errors_out = error_counts(df, kinds, mask, errors)

    report = ReadinessReport(
        label=chosen, n_items=n, n_records=n_records, samples_min=min(it.k for it in stats),
        samples_max=max(it.k for it in stats), group_size=group_size, score_min=low, score_max=high,
        range_source=source, mean=mean, se=se, position=(mean - low) / span, zero_variance=obs,
        expected_zero_signal=exp, distinct_levels=len(levels), binary=set(levels) <= {lo_key, hi_key},
        share_at_min=levels.get(lo_key, 0) / len(scores), share_at_max=levels.get(hi_key, 0) / len(scores),
        mean_within_sd=sum(sds) / len(sds) if sds else None,
        mean_item_variance=sum(variances) / len(variances) if variances else None,
        mean_histogram=_histogram(means, low, high, bins), sd_histogram=_histogram(sds, 0.0, sd_max, bins),
        sd_histogram_max=sd_max, errors=errors_out, items=stats, labels=None, determinism=None, checks=[],
        verdict="ready", thresholds=thresholds,
    )
    if report.binary:
        report.notes.append("binary (pass/fail) scores: OpenAI's RFT guide recommends a smooth score with partial "
                            "credit")
    if exp.get("n_empirical_bayes"):
        report.notes.append(f"fewer samples per item than G={group_size} on {exp['n_empirical_bayes']} items: their "
                            f"expected zero-signal share is an {(exp['method'] or '').split(' + ')[-1]} estimate, pooling "
                            "the items (docs/readiness.md)")
    report.notes.extend(exp.get("notes", []))
    if obs["errors"]:
        report.notes.append(f"{obs['errors']} item(s) left out of the zero-signal and all-min/all-max shares: every "
                            "sample a grading error (they score 0, the grader's failure, not the task's)")
    if "truncated_in_reasoning" in df:  # samples cut off while thinking score as empty answers: not the task
        from rfteval.data.reasoning import truncation_line

        cut = int(df["truncated_in_reasoning"].eq(True).sum())  # null in records written before the field
        if (line := truncation_line(chosen or "this model", cut, cut / n_records if n_records else 0.0)):
            report.notes.append(line)

    items = items_map(dataset)
    answered = scored[~kinds[mask].isin(["generate", "refusal"])]  # rows with an output to read or grade again
    outputs = [c for c in ("output_text", "output_json", "output_tools") if c in answered]
    # records read without their outputs (the viewer's columns): no answers to look at, not answers all empty
    records = answered[[c for c in ("item_id", "epoch", "score", "error", *outputs) if c in answered]
                       ].to_dict("records") if outputs else []
    item_means = {it.item_id: it.mean for it in stats}
    report.labels = label_skew(records, items, grader_config, item_means)

    can_grade = engine is not None or (grader_config is not None and (runs_locally(grader_config) or judge))
    own_engine = None
    try:
        if items and can_grade:
            lab = report.labels
            need = (lab is not None and lab.majority_label is not None) or regrade_n > 0
            if need and engine is None and grader_config is not None:
                from rfteval.graders.base import GradeOptions
                from rfteval.graders.engine import GradingEngine

                engine = own_engine = GradingEngine(grader_config, options or GradeOptions(), judge=judge)
            if engine is not None and lab is not None and lab.majority_label is not None:
                lab.constant_answer_score, lab.constant_answer_errors = constant_answer_score(
                    engine, items, lab.answer_path, lab.majority_label)
                lab.constant_answer_method = "graded"
            if engine is not None and regrade_n > 0:
                report.determinism = regrade(records, items, engine, regrade_n, seed)
            from rfteval.providers.judge import raise_if_stopped

            raise_if_stopped(judge, "readiness was not assessed (its re-grades would read as flips)")
        elif regrade_n > 0:
            report.notes.append("determinism not checked: it needs the grader, the dataset, and a judge endpoint "
                                "for model graders")
    finally:
        if own_engine is not None:
            own_engine.close()

    if not_sampling is not None:
        report.not_sampling = not_sampling.to_json()
    report.checks = decide(report, probes)
    report.verdict = verdict_of(report.checks)
    if (note := small_sample_note(n)) is not None:
        report.provisional = True
        report.notes.insert(0, note)
    return report


def _group(ids: Sequence[str], scores: Sequence[float]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for iid, s in zip(ids, scores):
        out.setdefault(iid, []).append(s)
    return out
