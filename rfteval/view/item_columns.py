"""What the Compare page's filters and orders read beside the comparison's items: W/T/L over epoch pairs, the gate's
per-item drop test, the lowest quarter, and an agent pair's stop reasons and tool error types per item."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

    from rfteval.compare.gate_types import GateCheck
    from rfteval.compare.result import CompareResult


def rollout_tallies(frame: pd.DataFrame) -> pd.DataFrame:
    """Per item of one model's record frame (indexed by item_id): `stop_reasons`, how many of its rollouts stopped
    for each reason, and `tool_error_types`, its tool errors by type. A rollout is a record with turns or a stop
    reason that is no generation failure, as compare's agent figures count them (rfteval.compare.agent)."""
    import numpy as np
    import pandas as pd

    from rfteval.data.frame import TOOL_ERROR

    stops: dict[str, dict[str, int]] = {}
    types: dict[str, dict[str, int]] = {}
    ids: list[str] = []
    if "turns" in frame and "stop_reason" in frame:
        has = (frame["turns"].notna() | frame["stop_reason"].notna()) & ~frame["is_generation_failure"]
        rows = frame.loc[has.to_numpy()]
        ids = [str(i) for i in pd.unique(rows["item_id"])]
        for (item, reason), n in rows.groupby(["item_id", "stop_reason"], observed=True, sort=False).size().items():
            stops.setdefault(str(item), {})[str(reason)] = int(n)
        columns = sorted(str(c) for c in frame.columns if str(c).startswith(TOOL_ERROR))
        if columns:
            sums = rows.groupby("item_id", sort=False)[columns].sum()
            for item, counts in zip(sums.index, sums.to_numpy(np.float64)):
                types[str(item)] = {name[len(TOOL_ERROR):]: int(n) for name, n in zip(columns, counts) if n}
    return pd.DataFrame({"stop_reasons": [stops.get(i, {}) for i in ids],
                         "tool_error_types": [types.get(i, {}) for i in ids]}, index=pd.Index(ids, name="item_id"))


def add_rollout_columns(items: pd.DataFrame, base: pd.DataFrame | None, cand: pd.DataFrame | None) -> None:
    """The comparison's items, which hold compare's per-item agent figures (rfteval.compare.agent.ITEM_COLUMNS:
    each side's mean turns and tool calls, its tool errors, the candidate's minus the baseline's), with what the
    pages read beside them: each side's stop reasons and tool error types (rollouts), the deltas under the names
    the page's orders use (d_turns, d_tool_calls) and the tool errors of both sides together (a sort by errors)."""
    ids = items["item_id"]
    for side, found in (("baseline", base), ("candidate", cand)):
        for name in ("stop_reasons", "tool_error_types"):
            column = found[name].to_dict() if found is not None else {}
            items[f"{side}_{name}"] = [column.get(i, {}) for i in ids]
    items["d_turns"], items["d_tool_calls"] = items["delta_turns"], items["delta_tool_calls"]
    items["tool_errors"] = items["baseline_tool_errors"].fillna(0) + items["candidate_tool_errors"].fillna(0)


def epoch_wtl(result: CompareResult, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per item, over every (baseline epoch, candidate epoch) pair of its used records: candidate higher, equal,
    lower (ties within compare's --tie)."""
    import numpy as np

    n = len(ids)
    wins, ties, losses = np.zeros(n, np.int64), np.zeros(n, np.int64), np.zeros(n, np.int64)
    if result.baseline_records is None or result.candidate_records is None:
        return wins, ties, losses
    import pandas as pd

    tie = result.options.tie
    index = pd.Index(ids)
    groups = []
    for frame in (result.baseline_records, result.candidate_records):
        code = index.get_indexer(frame["item_id"])  # -1: an unpaired item
        ok = code >= 0
        code, score = code[ok].astype(np.int64), frame["score"].to_numpy(np.float64)[ok]
        order = np.argsort(code, kind="stable")
        groups.append((code[order], score[order]))
    (cb, sb), (cc, sc) = groups
    kb, kc = np.bincount(cb, minlength=n), np.bincount(cc, minlength=n)
    if len(kb) and (kb == kb[0]).all() and (kc == kc[0]).all() and kb[0] and kc[0]:  # one matrix for all
        mb, mc = sb.reshape(n, kb[0]), sc.reshape(n, kc[0])
        d = mc[:, None, :] - mb[:, :, None]
        wins, ties = (d > tie).sum(axis=(1, 2)), (np.abs(d) <= tie).sum(axis=(1, 2))
        losses = (d < -tie).sum(axis=(1, 2))
        return wins, ties, losses
    sb_start, sc_start = np.concatenate(([0], np.cumsum(kb))), np.concatenate(([0], np.cumsum(kc)))
    for k in range(n):
        d = sc[sc_start[k]:sc_start[k + 1]][None, :] - sb[sb_start[k]:sb_start[k + 1]][:, None]
        wins[k], ties[k], losses[k] = (d > tie).sum(), (np.abs(d) <= tie).sum(), (d < -tie).sum()
    return wins, ties, losses


def drop_check(result: CompareResult) -> GateCheck:
    """The gate's per-item drop test (--max-item-drop 0): each item that dropped, Holm across every item."""
    from dataclasses import replace

    from rfteval.compare.gate import item_drop_check

    gate = replace(result.options.gate, max_item_drop=0.0)
    return item_drop_check(result, gate)


def lowest_quarter(result: CompareResult) -> np.ndarray:
    """The items of the hardest slice's descriptive choice: the lowest quarter by baseline mean
    (stats.select_lowest, compare's rule when the slice cannot be cross-fitted)."""
    from rfteval.compare.hardest import HARDEST_FRACTION
    from rfteval.stats.paired import select_lowest

    return select_lowest(result.items["baseline"].to_numpy(), HARDEST_FRACTION, result.options.seed)
