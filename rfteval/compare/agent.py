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
# what compare_agents adds to a comparison's per-item table (CompareResult.items), per side and as deltas
ITEM_COLUMNS = tuple(f"{role}_{key}" for role in ("baseline", "candidate")
                     for key in ("turns", "tool_calls", "tool_errors", "limited")) + ("delta_turns", "delta_tool_calls")
WORDS = {"better": "higher", "worse": "lower"}  # stats.direction's words for a quantity where more is not better
ROLES = ("baseline", "candidate")


class Options(Protocol):
    """What the statistics take from compare's options (rfteval.compare.result.CompareOptions)."""

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


def compare_agents(base: Side, cand: Side, used_b: np.ndarray, used_c: np.ndarray, items: Sequence[str] | pd.Index,
                   o: Options, per_item: dict[str, np.ndarray] | None = None,
                   bounds: tuple[float, float] | None = None) -> AgentComparison | None:
    """The agent comparison of two sides over the compared `items`, or None unless both are agent runs with
    rollouts among them. `used_b`/`used_c`: which of each side's records enter the score's means (the error
    policy's), a mask over its frame's rows: the split averages their scores.

    `per_item`, when given, receives each compared item's figures in `items`' order (ITEM_COLUMNS: per side its
    mean turns and tool calls, its tool errors and its rollouts a limit stopped; the deltas of turns and tool
    calls): compare_sides puts them in the comparison's per-item table, where a viewer sorts and filters by them.
    `bounds`: the score's range, which the score split's intervals are cut to as the score table's are."""
    import numpy as np
    import pandas as pd

    if not (base.agent and cand.agent):
        return None
    index = items if isinstance(items, pd.Index) else pd.Index(items)
    sides = [_Rollouts(side.frame, index, used) for side, used in ((base, used_b), (cand, used_c))]
    if any(not s.rows.size for s in sides):
        return None
    notes: list[str] = []
    values: dict[str, list[np.ndarray]] = {key: [] for key in ROWS}
    unpriced: list[str] = []
    for side, s in zip((base, cand), sides):
        calls = s.values("tool_calls")
        errors = np.nan_to_num(s.values("tool_errors"))  # a rollout with no tool_errors had none
        tokens_in, tokens_out = s.values("input_tokens"), s.values("output_tokens")
        cost, missing = s.costs(tokens_in, tokens_out, side.pricing)
        unpriced += missing
        for key, per_rollout in (("turns", s.values("turns")), ("tool_calls", calls),
                                 ("tokens", tokens_in + tokens_out), ("cost_usd", cost),
                                 ("latency_s", s.values("latency_s"))):
            values[key].append(s.means(per_rollout))
        values["tool_error_share"].append(s.ratio(errors, calls))
    if per_item is not None:
        per_item.update(_item_columns(sides, values))
    rows: dict[str, AgentRow] = {}
    for key in ROWS:
        b, c = values[key]
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
    stops = _stop_shares(sides, o)
    _adjust(list(stops.values()))
    split = {role: _score_split(s, o, bounds) for role, s in zip(ROLES, sides)}
    finished = stops.get(FINISHED)
    if finished is not None and finished["verdict"] in WORDS.values():
        notes.append(f"the candidate's rollouts finish on their own ({FINISHED}) in {finished['candidate']:.1%} "
                     f"against {finished['baseline']:.1%} for the baseline, a change the test shows "
                     f"({finished['verdict']}): part of a score change may come from stopping differently (see the "
                     "score by how rollouts ended)")
    return {"rollouts": {role: int(s.rows.size) for role, s in zip(ROLES, sides)}, "rows": rows,
            "stop_reasons": stops, "score_by_stop": split,
            "tool_errors": {role: s.error_types() for role, s in zip(ROLES, sides)}, "notes": notes}


def _item_columns(sides: Sequence[_Rollouts], values: Mapping[str, list[np.ndarray]]) -> dict[str, np.ndarray]:
    import numpy as np

    out = {}
    for role, s, k in zip(ROLES, sides, range(2)):
        finished = s.stop == (s.reasons.index(FINISHED) if FINISHED in s.reasons else -2)
        out[f"{role}_turns"] = values["turns"][k]
        out[f"{role}_tool_calls"] = values["tool_calls"][k]
        out[f"{role}_tool_errors"] = s.sums(np.nan_to_num(s.values("tool_errors")))
        out[f"{role}_limited"] = s.sums(((s.stop >= 0) & ~finished).astype(np.float64))
    for key in ("turns", "tool_calls"):
        out[f"delta_{key}"] = values[key][1] - values[key][0]
    return out


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


class _Rollouts:
    """A side's rollouts of the compared items: its records with a rollout (turns or a stop reason), less generation
    failures (the endpoint never answered: no rollout to measure, as no answer to score). Held as row numbers of the
    side's frame (no copy of it) and each one's position among the compared items, found once; every per-item
    figure is then a weighted count."""

    def __init__(self, frame: pd.DataFrame, index: pd.Index, used: np.ndarray):
        import numpy as np
        import pandas as pd

        codes, uniques = pd.factorize(frame["item_id"])
        where = np.asarray(index.get_indexer(uniques))
        pos = np.where(codes >= 0, where[codes], -1)
        stop_codes, reasons = pd.factorize(frame["stop_reason"])
        has = (frame["turns"].notna().to_numpy() | (stop_codes >= 0)) & ~frame["is_generation_failure"].to_numpy()
        self.frame = frame
        self.rows = np.flatnonzero(has & (pos >= 0))
        self.pos = pos[self.rows]
        self.stop = stop_codes[self.rows]  # -1: no stop reason
        self.reasons = [str(r) for r in reasons]
        self.used = np.asarray(used, dtype=bool)[self.rows]
        self.n = len(index)

    def values(self, name: str) -> np.ndarray:
        import numpy as np

        return self.frame[name].to_numpy(dtype=np.float64)[self.rows]

    def means(self, values: np.ndarray, where: np.ndarray | None = None) -> np.ndarray:
        """Per compared item, the mean over its rollouts that have the value (and `where`); NaN for an item with
        none (as stats.item_stats computes a mean)."""
        import numpy as np

        ok = np.isfinite(values) if where is None else np.isfinite(values) & where
        counts = np.bincount(self.pos[ok], minlength=self.n)
        sums = np.bincount(self.pos[ok], weights=values[ok], minlength=self.n)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(counts > 0, sums / counts, np.nan)

    def sums(self, values: np.ndarray) -> np.ndarray:
        """Per compared item, the sum over its rollouts (0 for an item with none)."""
        import numpy as np

        return np.bincount(self.pos, weights=values, minlength=self.n)

    def ratio(self, num: np.ndarray, den: np.ndarray) -> np.ndarray:
        """Per compared item, Σ num / Σ den over its rollouts that have both; NaN where Σ den is 0."""
        import numpy as np

        ok = np.isfinite(num) & np.isfinite(den)
        top = np.bincount(self.pos[ok], weights=num[ok], minlength=self.n)
        bottom = np.bincount(self.pos[ok], weights=den[ok], minlength=self.n)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(bottom > 0, top / bottom, np.nan)

    def costs(self, tokens_in: np.ndarray, tokens_out: np.ndarray,
              pricing: Mapping[str, Mapping[str, float]] | None) -> tuple[np.ndarray, list[str]]:
        """Each rollout's cost in USD at its model's price (the run's [pricing], else the defaults), NaN without
        one; and the models with no price."""
        import numpy as np
        import pandas as pd

        from rfteval.providers.pricing import find_price, price_table

        table = price_table(pricing)
        codes, models = pd.factorize(self.frame["model"].iloc[self.rows])
        p_in, p_out, missing = np.full(len(models) + 1, np.nan), np.full(len(models) + 1, np.nan), []
        for k, model in enumerate(str(m) for m in models):
            price = find_price(model, table)
            if price is None:
                missing.append(model)
            else:
                p_in[k], p_out[k] = price[0], price[1]
        return (tokens_in * p_in[codes] + tokens_out * p_out[codes]) / 1_000_000, missing  # code -1: the NaN

    def error_types(self) -> dict[str, int]:
        """The tool errors of these rollouts by type."""
        import numpy as np

        out = {}
        for name in sorted(c for c in self.frame.columns if c.startswith(TOOL_ERROR)):
            total = int(np.nansum(self.frame[name].to_numpy(dtype=np.float64)[self.rows]))
            if total:
                out[name[len(TOOL_ERROR):]] = total
        return out


def item_means(ids: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Each item's mean over its records that have the value, the items in order of first appearance (two sides
    listing the same items in the same order are then aligned for effort_row)."""
    import numpy as np
    import pandas as pd

    index = pd.Index(pd.unique(ids))
    frame = pd.DataFrame({"item_id": ids, "turns": values, "stop_reason": None, "is_generation_failure": False})
    return _Rollouts(frame, index, np.ones(len(ids), dtype=bool)).means(values)


def effort_row(b: np.ndarray, c: np.ndarray, o: Options, bounds: tuple[float, float]) -> AgentRow | None:
    """Both sides' per-item values (aligned by item, NaN where a side has none) paired over the items both have:
    the score's statistics (stats.paired), intervals cut to what the quantity can take (a count, a cost: >= 0; a
    share: [0, 1])."""
    import numpy as np

    both = np.isfinite(b) & np.isfinite(c)
    if not both.any():
        return None
    bv, cv = b[both], c[both]
    span = bounds[1] - bounds[0]
    delta = stats.paired_delta(bv, cv, o.tie, o.level, o.seed, o.ci_method)
    delta["ci95"] = list(stats.clip_interval(delta["ci95"][0], delta["ci95"][1], (-span, span)))
    delta["p_adjusted"] = delta["p_value"]
    means: list[AgentMean] = []
    for values in (bv, cv):
        s = stats.side_summary(values, o.level, o.ci_method, o.seed)
        means.append({"mean": s["mean"], "ci95": list(stats.clip_interval(s["ci95"][0], s["ci95"][1], bounds)),
                      "se": s["se"]})
    return {"items": int(both.sum()), "baseline": means[0], "candidate": means[1], "delta": delta, "verdict": ""}


def _adjust(rows: Sequence[AgentRow] | Sequence[StopShare]) -> None:
    """Holm across the rows of one table (they answer one question together), then each row's word."""
    adjusted: list[float] = stats.holm([r["delta"]["p_value"] for r in rows]).tolist() if rows else []
    for row, p in zip(rows, adjusted):
        row["delta"]["p_adjusted"] = float(p)
        word = stats.direction(row["delta"], float(row["delta"]["level"]))
        row["verdict"] = WORDS.get(word, word)


def _stop_shares(sides: Sequence[_Rollouts], o: Options) -> dict[str, StopShare]:
    import numpy as np

    seen = {s.reasons[k] for s in sides for k in np.unique(s.stop[s.stop >= 0]).tolist()}
    names = [r for r in STOP_REASONS if r in seen] + sorted(seen - set(STOP_REASONS))
    ended = [s.stop >= 0 for s in sides]
    out: dict[str, StopShare] = {}
    for reason in names:
        hits = [s.stop == (s.reasons.index(reason) if reason in s.reasons else -2) for s in sides]
        shares = [s.means(h.astype(np.float64), e) for s, h, e in zip(sides, hits, ended)]
        row = effort_row(shares[0], shares[1], o, (0.0, 1.0))
        if row is None:
            continue
        counts = [int(h.sum()) for h in hits]
        out[reason] = {"baseline": counts[0] / max(int(ended[0].sum()), 1),
                       "candidate": counts[1] / max(int(ended[1].sum()), 1),
                       "baseline_rollouts": counts[0], "candidate_rollouts": counts[1],
                       "items": row["items"], "delta": row["delta"], "verdict": ""}
    return out


def _score_split(side: _Rollouts, o: Options, bounds: tuple[float, float] | None = None) -> ScoreSplit:
    """The mean score of a side's rollouts that finished on their own and of those a limit stopped, each over its
    items' means (the error policy's records: a generation failure is not among them, a grading error scores 0)."""
    import numpy as np

    scores = side.values("score")
    scored = side.used & (side.stop >= 0) & np.isfinite(scores)
    finished = side.stop == (side.reasons.index(FINISHED) if FINISHED in side.reasons else -2)
    out = {}
    for name, sel in (("finished", scored & finished), ("limited", scored & ~finished)):
        means = side.means(scores, sel)
        means = means[np.isfinite(means)]
        if means.size:
            s = stats.side_summary(means, o.level, o.ci_method, o.seed)
            mean, ci = s["mean"], s["ci95"]
            if bounds is not None:
                ci = list(stats.clip_interval(ci[0], ci[1], bounds))
        else:
            mean, ci = float("nan"), [float("nan"), float("nan")]
        out[name] = ScoreGroup(mean=mean, ci95=ci, items=int(means.size), rollouts=int(sel.sum()))
    return ScoreSplit(finished=out["finished"], limited=out["limited"])
