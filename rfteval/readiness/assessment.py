"""RFT readiness: will reinforcement fine-tuning learn from this dataset and grader, judged from a base run.

Signals follow docs/statistics.md §3 (OpenAI's RFT guide, GRPO/DAPO, Bae et al.). Everything here is a
pure function of the records except `regrade` and `constant_answer_score`, which run the grader.
"""

from __future__ import annotations

import json
import math
import random
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, NotRequired, SupportsFloat, TypedDict

from rfteval.data.outfile import replace_atomically
from rfteval.data.records import check_error_policy, effective_scores, error_kinds, error_type_of, frame_range, json_safe
from rfteval.data.rundir import pick_label
from rfteval.errors import InputError
from rfteval.graders.base import runs_locally, walk
from rfteval.stats import zero_signal

if TYPE_CHECKING:
    import pandas as pd

    from rfteval.data.dataset import Dataset, Item
    from rfteval.data.json_types import JSONInput, JSONObject, JSONValue
    from rfteval.data.sample import Sample
    from rfteval.graders.base import GradeOptions, GraderConfig
    from rfteval.graders.engine import GradingEngine
    from rfteval.providers.judge import JudgeClient
    from rfteval.readiness.probes import ProbeReport


_DECIMALS = 9  # scores equal to 9 decimals are one score level


@dataclass(frozen=True)
class Thresholds:
    """Where the verdict turns. Heuristics (statistics.md §3.4), not sourced numbers: tune them per team."""

    zero_signal_not_ready: float = 0.6  # expected zero-signal share at G above this: not ready
    zero_signal_risky: float = 0.4
    min_position: float = 0.05  # base mean below 5% of the grader's range: risky (little success to learn from)
    max_position: float = 0.95
    max_floor_share: float = 0.5  # items whose every sample scored the minimum
    max_ceiling_share: float = 0.5
    label_skew_risky: float = 0.7  # majority reference label share
    prediction_skew_risky: float = 0.8  # majority share of the model's answers
    max_flip_rate: float = 0.05  # re-graded outputs whose score changed: above this, not ready; any, risky
    max_grade_error_share: float = 0.2
    max_generate_error_share: float = 0.2


@dataclass
class ItemStat:
    item_id: str
    k: int
    mean: float
    sd: float | None  # ddof=1; None with one sample
    kind: str | None  # "floor" | "ceiling" | "other" when all samples are equal, "mixed" when not, None when k < 2
    expected_zero_signal: float | None
    n_grade_errors: int = 0


@dataclass
class LabelSkew:
    """Label-like references and answers (statistics.md §3.3(e))."""

    reference_path: str
    answer_path: str
    reference_counts: dict[str, int] | None = None
    majority_label: str | None = None
    majority_share: float | None = None
    chance: float | None = None
    constant_answer_score: float | None = None
    constant_answer_method: str | None = None  # "graded" (the grader scored it) or "estimated (exact match)"
    per_label_mean: dict[str, float] | None = None
    answer_counts: dict[str, int] | None = None
    answer_majority_label: str | None = None
    answer_majority_share: float | None = None


class ChangedGrade(TypedDict):
    """One re-graded output whose grade moved (Determinism.changed)."""

    item_id: str
    epoch: object  # the record's, as it stored it
    stored: float
    regraded: float
    stored_error: str | None
    regraded_error: str | None


@dataclass
class Determinism:
    n_regraded: int
    n_changed: int
    flip_rate: float
    max_abs_diff: float
    changed: list[ChangedGrade] = field(default_factory=list)


@dataclass
class Check:
    name: str
    status: str  # "ok" | "risky" | "not_ready" | "skipped"
    value: float | None
    threshold: str
    message: str


class ZeroVariance(TypedDict):
    """Observed shares of the assessed items (≥ 2 samples) whose samples all scored alike, by where."""

    n_items: int
    share: float
    floor: float
    ceiling: float
    other: float


class ExpectedZeroSignal(TypedDict):
    """The expected share of zero-advantage groups at group size G, and how it was estimated."""

    group_size: int
    share: float
    floor: float
    ceiling: float
    method: str | None
    n_unbiased: int
    n_empirical_bayes: int
    prior: zero_signal.FittedPrior | None
    notes: NotRequired[list[str]]


class ReadinessErrors(TypedDict):
    """Errors of the assessed records by kind, and what the policy did with them (`error_counts`)."""

    generate: int
    grade: int
    generate_share: float
    grade_share: float
    grade_types: dict[str, int]
    refusal: int
    generate_types: dict[str, int]
    policy: str
    excluded: int


@dataclass
class ReadinessReport:
    label: str | None
    n_items: int
    n_records: int
    samples_min: int
    samples_max: int
    group_size: int
    score_min: float
    score_max: float
    range_source: str
    mean: float
    se: float | None
    position: float
    zero_variance: ZeroVariance
    expected_zero_signal: ExpectedZeroSignal
    distinct_levels: int
    binary: bool
    share_at_min: float
    share_at_max: float
    mean_within_sd: float | None
    mean_item_variance: float | None
    mean_histogram: list[int]
    sd_histogram: list[int]
    sd_histogram_max: float
    errors: ReadinessErrors
    items: list[ItemStat]
    labels: LabelSkew | None
    determinism: Determinism | None
    checks: list[Check]
    verdict: str
    thresholds: Thresholds
    notes: list[str] = field(default_factory=list)
    provisional: bool = False  # fewer items than compare trusts an interval on: the verdict is said to be provisional

    @property
    def reasons(self) -> list[Check]:
        """The checks that decided the verdict (for `ready`: the checks that passed)."""
        want = "ok" if self.verdict == "ready" else self.verdict
        return [c for c in self.checks if c.status == want]

    def to_dict(self) -> JSONObject:
        out = json_safe(asdict(self))
        out["reasons"] = [c.name for c in self.reasons]
        return out


# ---------------------------------------------------------------- records


def scored_mask(df: pd.DataFrame, errors: str = "exclude") -> pd.Series:
    """Rows that are a reward training would see (see `effective_scores`): graded, or scored 0 by the policy."""
    return effective_scores(df, errors).notna()


def grpo_advantages(records_df: pd.DataFrame, errors: str = "exclude") -> pd.Series:
    """(r − group mean) / group std per (model_label, item_id), aligned to the rows; 0 for a zero-signal group.

    The std is the sample std (ddof=1): what TRL's GRPOTrainer and verl compute (torch's `std()` is Bessel-corrected
    by default), so the signs and sizes match what a GRPO trainer would see. Rewards are the score levels the
    zero-signal share counts (rounded to `_DECIMALS` decimals), so a group is zero-signal exactly when its
    advantages are 0, and a group of one sample gets 0. Rows left out by the error policy (`effective_scores`)
    get NaN.
    """
    import pandas as pd

    out = pd.Series(float("nan"), index=records_df.index, dtype="float64", name="advantage")
    rewards = effective_scores(records_df, errors)
    mask = rewards.notna()
    if not mask.any():
        return out
    scores = rewards[mask].round(_DECIMALS)
    keys = [records_df.loc[mask, "item_id"].astype(str)]
    if "model_label" in records_df:
        keys.insert(0, records_df.loc[mask, "model_label"].astype(str))
    grouped = scores.groupby(keys, sort=False)
    mean = grouped.transform("mean")
    std = grouped.transform(lambda s: s.std(ddof=1) if len(s) > 1 else 0.0).fillna(0.0)
    one_level = grouped.transform("nunique") == 1
    adv = (scores - mean) / std.mask(one_level | (std == 0))
    out.loc[mask] = adv.fillna(0.0)
    return out


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
    return Counter(round(float(s), _DECIMALS) for s in scores)


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

    `expected_zero_signal` is left None here: it pools the items (`zero_signal_summary` fills it in).
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
        if k > 1:
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
    """
    assessed = [it for it in items if it.kind is not None]
    n = len(assessed)
    nan = float("nan")
    obs: ZeroVariance = {"n_items": n, "share": nan, "floor": nan, "ceiling": nan, "other": nan}
    exp: ExpectedZeroSignal = {"group_size": group_size, "share": nan, "floor": nan, "ceiling": nan, "method": None,
                               "n_unbiased": 0, "n_empirical_bayes": 0, "prior": None}
    if not n:
        return obs, exp
    kinds = Counter(it.kind for it in assessed)
    obs["share"], obs["floor"] = (n - kinds["mixed"]) / n, kinds["floor"] / n
    obs["ceiling"], obs["other"] = kinds["ceiling"] / n, kinds["other"] / n
    lo_key, hi_key = round(low, _DECIMALS), round(high, _DECIMALS)
    est = zero_signal.estimate([level_counts[it.item_id] for it in assessed], group_size, atoms=(lo_key, hi_key))
    for it, p in zip(assessed, est.per_item):
        it.expected_zero_signal = p
    exp["share"], exp["floor"], exp["ceiling"] = est.share, est.level_share(lo_key), est.level_share(hi_key)
    exp["method"], exp["n_unbiased"], exp["n_empirical_bayes"] = est.method, est.n_unbiased, est.n_empirical_bayes
    exp["prior"] = est.prior
    if est.notes:
        exp["notes"] = est.notes
    return obs, exp


# ---------------------------------------------------------------- label skew


def _single_path(template: str, namespace: str) -> str | None:
    """The path of a template that is exactly one `{{ namespace.… }}` placeholder."""
    import re

    m = re.fullmatch(r"\s*\{\{\s*(" + namespace + r"\.[^}]*?)\s*\}\}\s*", template or "")
    return m.group(1) if m else None


def label_paths(config: GraderConfig | None) -> tuple[str, str]:
    """Where answers and references are read: the first string_check/text_similarity pair, else the defaults."""
    for g in walk(config) if config is not None else ():
        templates = g.compared_templates()
        if templates is not None:
            answer, ref = _single_path(templates[0], "sample"), _single_path(templates[1], "item")
            if answer and ref:
                return answer, ref
    return "sample.output_text", "item.reference_answer"


def _read_path(root: JSONInput, path: str) -> object:
    """The value at a template path (`item.reference_answer`, `sample.output_json.label`), None when absent."""
    from rfteval.graders.template import TemplateError, lookup, parse_path

    _, keys = parse_path(path)
    try:
        return lookup(root, path, keys)
    except TemplateError:
        return None


def _as_label(value: object) -> str | None:
    if isinstance(value, bool) or value is None:
        return None if value is None else str(value).lower()
    if isinstance(value, (str, int, float)):
        text = str(value).strip()
        return text or None
    return None


def is_label_like(values: Sequence[str | None]) -> bool:
    """Short scalar values with few distinct ones: a classification answer rather than free text."""
    if len(values) < 2 or any(v is None or len(v) > 64 for v in values):
        return False
    distinct = len(set(values))
    return distinct <= min(20, max(2, len(values) // 2))


def sample_from_record(record: Mapping[str, object]) -> Sample:
    """The grader-facing sample of a stored record (Parquet keeps output_json and output_tools as JSON text)."""
    from rfteval.data.sample import make_sample

    def decoded(v: object) -> JSONValue:
        if isinstance(v, str):
            try:
                return json.loads(v)
            except ValueError:
                return None
        if isinstance(v, float) and math.isnan(v):
            return None
        if v is None or isinstance(v, (bool, int, float, list, dict)):
            return v
        item = getattr(v, "item", None)  # a numpy scalar (a frame's column of numbers): its Python value
        return decoded(item()) if callable(item) else None

    tools = decoded(record.get("output_tools"))
    text = record.get("output_text")
    text = text if isinstance(text, str) else ""
    out_json = decoded(record.get("output_json")) if "output_json" in record else ...
    if out_json is None:
        out_json = ...  # let make_sample parse the text, as the runner did
    return make_sample(text, tools if isinstance(tools, list) else None, output_json=out_json)


def label_skew(
    records: Sequence[Mapping[str, object]], items: Mapping[str, JSONObject] | None, config: GraderConfig | None,
    item_means: Mapping[str, float],
) -> LabelSkew | None:
    """Majority-label share, chance, per-label mean score, and how often the model gives one answer."""
    answer_path, ref_path = label_paths(config)
    skew = LabelSkew(reference_path=ref_path, answer_path=answer_path)
    found = False
    if items:
        refs = {iid: _as_label(_read_path(data, ref_path)) for iid, data in items.items()}
        values = [refs[i] for i in item_means if i in refs]
        if is_label_like(values):
            found = True
            counts = Counter(values)
            label, top = counts.most_common(1)[0]
            by_label: dict[str, list[float]] = {}
            for iid, mean in item_means.items():
                ref = refs.get(iid)
                if ref is not None:
                    by_label.setdefault(ref, []).append(mean)
            skew.reference_counts = {str(k): n for k, n in counts.most_common()}
            skew.majority_label, skew.majority_share = label, top / len(values)
            skew.chance = 1 / len(counts)
            skew.per_label_mean = {k: sum(v) / len(v) for k, v in sorted(by_label.items())}
            skew.constant_answer_score = skew.majority_share
            skew.constant_answer_method = "estimated (exact match)"
    answers = []
    for rec in records:
        sample = sample_from_record(rec)
        answers.append(_as_label(_read_path(sample, answer_path)))
    if is_label_like(answers):
        found = True
        counts = Counter(answers)
        label, top = counts.most_common(1)[0]
        skew.answer_counts = {str(k): n for k, n in counts.most_common(20)}
        skew.answer_majority_label, skew.answer_majority_share = label, top / len(answers)
    return skew if found else None


def constant_answer_sample(answer_path: str, label: str) -> Sample:
    """A sample that gives `label` where the grader reads the answer."""
    from rfteval.data.sample import make_sample

    keys = answer_path.split(".")[1:]
    if keys and keys[0] == "output_json" and len(keys) > 1:
        obj: JSONValue = label
        for key in reversed(keys[1:]):
            obj = {key: obj}
        return make_sample(json.dumps(obj, ensure_ascii=False), output_json=obj)
    return make_sample(label)


def constant_answer_score(engine: GradingEngine, items: Mapping[str, JSONObject], answer_path: str,
                          label: str) -> float:
    """The mean score the grader gives the same answer on every item (each item once)."""
    pairs = [(constant_answer_sample(answer_path, label), data) for data in items.values()]
    results = engine.grade_batch(pairs)
    return sum(r.score for r in results) / len(results) if results else float("nan")


# ---------------------------------------------------------------- determinism


def regrade(
    records: Sequence[Mapping[str, object]], items: Mapping[str, JSONObject], engine: GradingEngine, n: int,
    seed: int = 0,
    tol: float = 1e-9,
) -> Determinism:
    """Grade n stored outputs again and compare with the stored scores (statistics.md §3.3(f))."""
    pool = [r for r in records if r.get("item_id") is not None and str(r["item_id"]) in items]
    picked = sorted(random.Random(seed).sample(range(len(pool)), min(n, len(pool))))
    chosen = [pool[i] for i in picked]
    results = engine.grade_batch([(sample_from_record(r), items[str(r["item_id"])]) for r in chosen])
    changed: list[ChangedGrade] = []
    max_diff = 0.0
    for rec, res in zip(chosen, results):
        score = rec["score"]  # a scored record: effective_scores gave it a float
        stored = float(score) if isinstance(score, SupportsFloat) else float("nan")
        diff = abs(res.score - stored)
        max_diff = max(max_diff, diff)
        was_error = error_type_of(rec.get("error"))
        now_error = res.error.type if res.error else None
        if diff > tol or (was_error or None) != now_error:
            changed.append({"item_id": str(rec["item_id"]), "epoch": rec.get("epoch"), "stored": stored,
                            "regraded": res.score, "stored_error": was_error, "regraded_error": now_error})
    m = len(chosen)
    return Determinism(m, len(changed), len(changed) / m if m else float("nan"), max_diff, changed)


# ---------------------------------------------------------------- the verdict


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

    pos = report.position
    at_edge = abs(report.mean - report.score_min) < 1e-9 or abs(report.mean - report.score_max) < 1e-9
    where = "minimum" if pos < 0.5 else "maximum"
    if at_edge:
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
        add(Check("zero_signal", status, ezs, limits,
                  f"expected share of zero-advantage groups at G={g}: {_fmt(ezs)} "
                  f"({report.expected_zero_signal.get('method')})"))

    zv = report.zero_variance
    edges = (("floor", zv["floor"], t.max_floor_share, "scored the minimum on every sample (no success to learn from)"),
             ("ceiling", zv["ceiling"], t.max_ceiling_share, "scored the maximum on every sample (nothing left to learn)"))
    for key, share, limit, what in edges:
        if math.isfinite(share):
            status = "risky" if share > limit else "ok"
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
    statuses = {c.status for c in checks}
    return "not_ready" if "not_ready" in statuses else "risky" if "risky" in statuses else "ready"


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


def assess(
    records_df: pd.DataFrame, grader_config: GraderConfig | None = None,
    dataset: Dataset | str | Path | Mapping[str, Item | JSONObject] | None = None,
    thresholds: Thresholds = Thresholds(), *, group_size: int = 8, label: str | None = None, regrade_n: int = 0,
    seed: int = 0, options: GradeOptions | None = None, judge: JudgeClient | None = None,
    engine: GradingEngine | None = None, probes: ProbeReport | None = None, bins: int = 10, errors: str = "exclude",
) -> ReadinessReport:
    """Readiness of one model's N-epoch records (the base model's, before training).

    `engine` (anything with grade_batch) overrides building one from `grader_config`; the grader runs only for the
    constant-answer score of label-like data and for `regrade_n` > 0, and only when it needs no judge or has one.
    `errors` is the policy for generation errors: "exclude" (left out of every signal, counted) or "zero" (reward
    0); grading errors and model refusals score 0 under both (`effective_scores`).
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
        levels_by_item.setdefault(iid, Counter())[round(s, _DECIMALS)] += 1
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
    lo_key, hi_key = round(low, _DECIMALS), round(high, _DECIMALS)
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
                lab.constant_answer_score = constant_answer_score(engine, items, lab.answer_path, lab.majority_label)
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

    report.checks = decide(report, probes)
    report.verdict = verdict_of(report.checks)
    if (note := small_sample_note(n)) is not None:
        report.provisional = True
        report.notes.insert(0, note)
    return report


def small_sample_note(n_items: int) -> str | None:
    """The note on a verdict from fewer items than `compare` trusts an interval on (the same threshold, the same
    words), or None."""
    from rfteval.stats.paired import MIN_ITEMS_FOR_INTERVAL

    if n_items >= MIN_ITEMS_FOR_INTERVAL:
        return None
    return (f"only {n_items} item(s): too few for a reliable verdict ({MIN_ITEMS_FOR_INTERVAL} or more are needed, "
            "as for compare's interval): this verdict is provisional")


def _group(ids: Sequence[str], scores: Sequence[float]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for iid, s in zip(ids, scores):
        out.setdefault(iid, []).append(s)
    return out


# ---------------------------------------------------------------- advantages into record files


def write_advantages(files: list[Path], label: str | None, errors: str = "exclude") -> list[Path]:
    """Write GRPO advantages of one label into its record files, each replaced atomically (`errors`: the policy for
    generation errors, as in `readiness.effective_scores`)."""
    written = []
    for path in files:
        if path.suffix == ".parquet":
            _write_parquet_advantages(path, label, errors)
        else:
            _write_jsonl_advantages(path, label, errors)
        written.append(path)
    return written


def _label_rows(df: pd.DataFrame, label: str | None) -> pd.Series:
    import pandas as pd

    if label is None or "model_label" not in df:
        return pd.Series(True, index=df.index)
    return df["model_label"].astype(str) == label


def _write_jsonl_advantages(path: Path, label: str | None, errors: str) -> None:
    from rfteval.data.records import decode_records, records_frame, write_jsonl

    records = list(decode_records(path))
    df = records_frame(records)
    mine = _label_rows(df, label)
    adv = grpo_advantages(df[mine], errors)
    for pos, (idx, is_mine) in enumerate(mine.items()):
        if is_mine:
            value = float(adv.loc[idx])
            records[pos].advantage = value if math.isfinite(value) else None
    write_jsonl(records, path)


def _write_parquet_advantages(path: Path, label: str | None, errors: str) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from rfteval.data.records import read_parquet_records

    table = read_parquet_records(path)
    df = table.to_pandas()
    mine = _label_rows(df, label)
    adv = grpo_advantages(df[mine], errors)
    old = df["advantage"].tolist() if "advantage" in df else [None] * len(df)
    values = []
    for (idx, is_mine), before in zip(mine.items(), old):
        v = float(adv.loc[idx]) if is_mine else before
        values.append(v if v is not None and math.isfinite(v) else None)
    column = pa.array(values, pa.float64())
    i = table.schema.get_field_index("advantage")
    table = table.set_column(i, "advantage", column) if i >= 0 else table.append_column("advantage", column)
    replace_atomically(path, lambda tmp: pq.write_table(table, tmp))
