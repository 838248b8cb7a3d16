"""Two agent runs compared beyond their scores: what each rollout cost, and how it ended.

When both sides are an agent run's records (rfteval.data.frame reads their `turns`, `stop_reason`, `tool_calls`,
`tool_errors`, tokens, latency and model), a comparison adds three things, all over the items the score compares:

- **Effort** (`rows`): per item, the mean over its rollouts of turns, tool calls, tokens (input + output), cost and
  latency, and its tool-error share (tool errors / tool calls over its rollouts); then paired by item exactly as
  the score is (stats.paired: side means and intervals over per-item means, the paired delta, its interval and
  sign-flip p, Holm-adjusted across the rows). "Fewer tool calls at the same accuracy" is the tool calls row
  beside the score's. More is not better here, so a row's word is "higher" or "lower" (stats.direction's rule:
  p adjusted below α and the interval on that side of 0), never "better".
- **How rollouts ended** (`stop_reasons`): each side's share of its rollouts ending with each stop reason, and
  the paired delta of each item's share (Holm across the reasons). The gate's `--max-stop-share` reads the
  candidate's share here.
- **The score by how it ended** (`score_by_stop`): each side's mean score (per-item means first) of rollouts that
  finished on their own (`no_tool_calls`) and of those a limit stopped. A tuned agent that "wins" by stopping
  differently (more rollouts cut at the turn limit, graded on what they had) shows up here and in the shares.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Protocol, TypedDict

from rfteval.compare.sides import Side
from rfteval.data.frame import TOOL_ERROR
from rfteval.stats import paired as stats
from rfteval.stats.paired import PairedDelta

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

# The stop reasons of a rollout (issue 37; the runner's rfteval.data.rollout names the same): the model answered,
# or a limit stopped it. Held here for compare's checks of --max-stop-share until the runner's list lands.
STOP_REASONS = ("no_tool_calls", "max_turns", "max_tool_calls", "length", "rollout_timeout", "context")
FINISHED = "no_tool_calls"  # finished on its own: the model answered with no tool call
# The effort rows, in the order shown: key -> the words a report shows
ROWS: dict[str, str] = {"turns": "turns", "tool_calls": "tool calls", "tool_error_share": "tool-error share",
                        "tokens": "tokens", "cost_usd": "cost (USD)", "latency_s": "latency (s)"}
WORDS = {"better": "higher", "worse": "lower"}  # stats.direction's words for a quantity where more is not better
ROLES = ("baseline", "candidate")


class Options(Protocol):
    """What the statistics take from compare's options (rfteval.compare.comparison.CompareOptions)."""

    @property
    def tie(self) -> float: ...

    @property
    def level(self) -> float: ...

    @property
    def ci_method(self) -> str: ...

    @property
    def seed(self) -> int: ...


class AgentMean(TypedDict):
    mean: float
    ci95: list[float]
    se: float


class AgentRow(TypedDict):
    """One effort row: both sides' mean of per-item means with intervals, the paired delta and its word."""

    items: int
    baseline: AgentMean
    candidate: AgentMean
    delta: PairedDelta  # p_adjusted: Holm across the rows
    verdict: str  # "higher", "lower", "no clear difference" or "too few items to tell"


class StopShare(TypedDict):
    """One stop reason: each side's share of its rollouts that ended so, and the paired delta of per-item shares."""

    baseline: float
    candidate: float
    baseline_rollouts: int  # rollouts that ended so
    candidate_rollouts: int
    items: int
    delta: PairedDelta  # p_adjusted: Holm across the reasons
    verdict: str


class ScoreGroup(TypedDict):
    """The mean score (per-item means first) of one side's rollouts that ended one way, with its interval."""

    mean: float
    ci95: list[float]
    items: int
    rollouts: int


class ScoreSplit(TypedDict):
    finished: ScoreGroup  # ended with no_tool_calls: the model answered
    limited: ScoreGroup  # a limit stopped it (every other stop reason)


class AgentComparison(TypedDict):
    """`--format json`'s "agent": what compare adds when both sides are agent runs."""

    rollouts: dict[str, int]  # per role: the rollouts of the compared items (generation failures left out)
    rows: dict[str, AgentRow]  # ROWS' keys; cost_usd only when both sides' models have a price
    stop_reasons: dict[str, StopShare]  # every reason either side ended with, STOP_REASONS' order first
    score_by_stop: dict[str, ScoreSplit]  # per role
    tool_errors: dict[str, dict[str, int]]  # per role: the tool errors by type
    notes: list[str]


def compare_agents(base: Side, cand: Side, used_b: pd.DataFrame, used_c: pd.DataFrame, items: Sequence[str],
                   o: Options) -> AgentComparison | None:
    """The agent comparison of two sides over the compared `items`, or None unless both are agent runs with
    rollouts among them. `used_b`/`used_c`: the records that enter the score's means (the error policy's), whose
    scores the split averages."""
    import numpy as np
    import pandas as pd

    if not (base.agent and cand.agent):
        return None
    wanted = pd.Index(items)
    roll = [_rollouts(side.frame, wanted) for side in (base, cand)]
    if any(r.empty for r in roll):
        return None
    notes: list[str] = []
    per_item: dict[str, list[pd.Series]] = {key: [] for key in ROWS}
    unpriced: list[str] = []
    for side, r in zip((base, cand), roll):
        ids = r["item_id"].to_numpy()
        per_item["turns"].append(item_means(ids, r["turns"].to_numpy(dtype=np.float64)))
        per_item["tool_calls"].append(item_means(ids, r["tool_calls"].to_numpy(dtype=np.float64)))
        per_item["tool_error_share"].append(_error_shares(r))
        tokens = r["input_tokens"].to_numpy(dtype=np.float64) + r["output_tokens"].to_numpy(dtype=np.float64)
        per_item["tokens"].append(item_means(ids, tokens))
        cost, missing = _costs(r, side.pricing)
        unpriced += missing
        per_item["cost_usd"].append(item_means(ids, cost))
        per_item["latency_s"].append(item_means(ids, r["latency_s"].to_numpy(dtype=np.float64)))
    rows: dict[str, AgentRow] = {}
    for key in ROWS:
        b, c = per_item[key]
        found = effort_row(b, c, o, (0.0, 1.0) if key == "tool_error_share" else (0.0, np.inf))
        if found is not None:
            rows[key] = found
    if unpriced:
        notes.append(f"cost: no price for {', '.join(sorted(set(unpriced)))} (the run directory's [pricing] table, "
                     "else rfteval's defaults): " + ("no cost row" if "cost_usd" not in rows else
                                                    "its rollouts are left out of the cost row"))
    elif "cost_usd" in rows:
        notes.append("cost: input and output tokens at the run directory's [pricing] prices, else rfteval's "
                     "defaults (standard tier: a Batch API discount is not applied)")
    _adjust(list(rows.values()))
    stops = _stop_shares(roll, o)
    _adjust(list(stops.values()))
    split = {role: _score_split(used, r, o) for role, used, r in zip(ROLES, (used_b, used_c), roll)}
    finished = stops.get(FINISHED)
    if finished is not None and finished["verdict"] in WORDS.values():
        notes.append(f"the candidate's rollouts finish on their own ({FINISHED}) in {finished['candidate']:.1%} "
                     f"against {finished['baseline']:.1%} for the baseline, a change the test shows "
                     f"({finished['verdict']}): part of a score change may come from stopping differently (see the "
                     "score by how rollouts ended)")
    return {"rollouts": {role: int(len(r)) for role, r in zip(ROLES, roll)}, "rows": rows, "stop_reasons": stops,
            "score_by_stop": split, "tool_errors": {role: _error_types(r) for role, r in zip(ROLES, roll)},
            "notes": notes}


def stop_share(agent: AgentComparison | None, reason: str, role: str = "candidate") -> tuple[float, int] | None:
    """(share, rollouts) of one side's rollouts that ended with `reason`: 0 for a reason none ended with; None
    without an agent comparison."""
    if agent is None:
        return None
    total = agent["rollouts"][role]
    found = agent["stop_reasons"].get(reason)
    if found is None:
        return 0.0, total
    return float(found["candidate"] if role == "candidate" else found["baseline"]), total


def _rollouts(frame: pd.DataFrame, items: pd.Index) -> pd.DataFrame:
    """A side's rollouts of the compared items: its records with a rollout (turns or a stop reason), less generation
    failures (the endpoint never answered: no rollout to measure, as no answer to score)."""
    has = frame["turns"].notna() | frame["stop_reason"].notna()
    return frame[has & ~frame["is_generation_failure"] & frame["item_id"].isin(items)]


def item_means(ids: np.ndarray, values: np.ndarray) -> pd.Series:
    """Each item's mean over its rollouts that have the value (NaN: unknown, left out), by item_id."""
    import numpy as np
    import pandas as pd

    ok = np.isfinite(values)
    if not ok.any():
        return pd.Series([], dtype=np.float64)
    st = stats.item_stats(pd.DataFrame({"item_id": ids[ok], "score": values[ok]}))
    return pd.Series(st["mean"].to_numpy(), index=st["item_id"].to_numpy())


def _error_shares(r: pd.DataFrame) -> pd.Series:
    """Per item: its rollouts' tool errors over their tool calls; items without a call have no share."""
    import numpy as np

    calls = r["tool_calls"].to_numpy(dtype=np.float64)
    errors = np.nan_to_num(r["tool_errors"].to_numpy(dtype=np.float64))  # a rollout with no tool_errors had none
    ok = np.isfinite(calls)
    sums = r[ok].assign(c=calls[ok], e=errors[ok]).groupby("item_id", sort=False)[["c", "e"]].sum()
    sums = sums[sums["c"] > 0]
    return (sums["e"] / sums["c"]).astype(np.float64)


def _costs(r: pd.DataFrame, pricing: Mapping[str, Mapping[str, float]] | None) -> tuple[np.ndarray, list[str]]:
    """Each rollout's cost in USD at its model's price (the run's [pricing], else the defaults), NaN without one;
    and the models with no price."""
    import numpy as np

    from rfteval.providers.pricing import find_price, price_table

    table = price_table(pricing)
    out = np.full(len(r), np.nan)
    models = r["model"].to_numpy(dtype=object)
    tokens_in = r["input_tokens"].to_numpy(dtype=np.float64)
    tokens_out = r["output_tokens"].to_numpy(dtype=np.float64)
    missing = []
    for model in dict.fromkeys(m for m in models.tolist() if isinstance(m, str)):
        price = find_price(model, table)
        if price is None:
            missing.append(model)
            continue
        sel = models == model
        out[sel] = (tokens_in[sel] * price[0] + tokens_out[sel] * price[1]) / 1_000_000
    return out, missing


def effort_row(b: pd.Series, c: pd.Series, o: Options, bounds: tuple[float, float]) -> AgentRow | None:
    """Both sides' per-item means paired by item: the score's statistics (stats.paired), intervals cut to what the
    quantity can take (a count, a cost: >= 0; a share: [0, 1])."""
    import numpy as np

    j = b.rename("b").to_frame().join(c.rename("c"), how="inner")
    if j.empty:
        return None
    bv, cv = j["b"].to_numpy(dtype=np.float64), j["c"].to_numpy(dtype=np.float64)
    span = bounds[1] - bounds[0]
    delta = stats.paired_delta(bv, cv, o.tie, o.level, o.seed, o.ci_method)
    delta["ci95"] = list(stats.clip_interval(delta["ci95"][0], delta["ci95"][1], (-span, span)))
    delta["p_adjusted"] = delta["p_value"]
    means: list[AgentMean] = []
    for values in (bv, cv):
        s = stats.side_summary(values, o.level, o.ci_method, o.seed)
        means.append({"mean": s["mean"], "ci95": list(stats.clip_interval(s["ci95"][0], s["ci95"][1], bounds)),
                      "se": s["se"]})
    return {"items": int(len(j)), "baseline": means[0], "candidate": means[1], "delta": delta, "verdict": ""}


def _adjust(rows: Sequence[AgentRow] | Sequence[StopShare]) -> None:
    """Holm across the rows of one table (they answer one question together), then each row's word."""
    adjusted: list[float] = stats.holm([r["delta"]["p_value"] for r in rows]).tolist() if rows else []
    for row, p in zip(rows, adjusted):
        row["delta"]["p_adjusted"] = float(p)
        word = stats.direction(row["delta"], float(row["delta"]["level"]))
        row["verdict"] = WORDS.get(word, word)


def _stop_shares(roll: Sequence[pd.DataFrame], o: Options) -> dict[str, StopShare]:
    import numpy as np

    ended = [r[r["stop_reason"].notna()] for r in roll]
    seen = set().union(*(set(e["stop_reason"].astype(str)) for e in ended))
    reasons = [s for s in STOP_REASONS if s in seen] + sorted(seen - set(STOP_REASONS))
    out: dict[str, StopShare] = {}
    for reason in reasons:
        hits = [(e["stop_reason"] == reason).to_numpy() for e in ended]
        shares = [item_means(e["item_id"].to_numpy(), h.astype(np.float64)) for e, h in zip(ended, hits)]
        row = effort_row(shares[0], shares[1], o, (0.0, 1.0))
        if row is None:
            continue
        out[reason] = {"baseline": float(hits[0].mean()) if len(hits[0]) else 0.0,
                       "candidate": float(hits[1].mean()) if len(hits[1]) else 0.0,
                       "baseline_rollouts": int(hits[0].sum()), "candidate_rollouts": int(hits[1].sum()),
                       "items": row["items"], "delta": row["delta"], "verdict": ""}
    return out


def _score_split(used: pd.DataFrame, roll: pd.DataFrame, o: Options) -> ScoreSplit:
    """The mean score of a side's rollouts that finished on their own and of those a limit stopped, each over its
    items' means (the error policy's records: a generation failure is not among them, a grading error scores 0)."""
    import numpy as np

    scored = used.loc[used.index.intersection(roll.index)]
    scored = scored[scored["stop_reason"].notna() & np.isfinite(scored["score"].to_numpy(dtype=np.float64))]
    finished = (scored["stop_reason"] == FINISHED).to_numpy()
    out = {}
    for name, sel in (("finished", finished), ("limited", ~finished)):
        group = scored[sel]
        means = item_means(group["item_id"].to_numpy(), group["score"].to_numpy(dtype=np.float64))
        if len(means):
            s = stats.side_summary(means.to_numpy(), o.level, o.ci_method, o.seed)
            mean, ci = s["mean"], s["ci95"]
        else:
            mean, ci = float("nan"), [float("nan"), float("nan")]
        out[name] = ScoreGroup(mean=mean, ci95=ci, items=int(len(means)), rollouts=int(sel.sum()))
    return ScoreSplit(finished=out["finished"], limited=out["limited"])


def _error_types(r: pd.DataFrame) -> dict[str, int]:
    return {c[len(TOOL_ERROR):]: int(r[c].fillna(0).sum()) for c in sorted(r.columns) if c.startswith(TOOL_ERROR)
            and r[c].fillna(0).sum() > 0}
