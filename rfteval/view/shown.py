"""Each figure of the viewer's pages as the terminal prints it (rfteval.report's formats, compare's and agree's own
rows and lines), beside its number: a Compare row, an agent pair's part of it, a summary row, a model's row of the
Runs page, the Agree page's tables. The page shows these strings and computes no format of its own."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from rfteval.data.records import json_safe

if TYPE_CHECKING:
    from rfteval.compare.agree import AgreeResult
    from rfteval.compare.result import PairRow, SideReport
    from rfteval.data.json_types import JSONObject
    from rfteval.stats.paired import PairedDelta


def item_row(r: dict[str, object], by: dict[str, dict[str, str]], tie: float) -> JSONObject:
    """One row of the Compare page: compare's `items_json` fields, plus what the filters read, and the row as
    compare's per-item table prints it (coloured as it colours an item: a change beyond --tie, no test)."""
    from rfteval.report.format import fmt, fmt_ci, fmt_p

    item_id = str(r["item_id"])
    delta = as_float(r["delta"])
    shown: JSONObject = {
        "baseline": fmt(as_float(r["baseline"])), "candidate": fmt(as_float(r["candidate"])), "delta": fmt(delta, sign=True),
        "delta_ci95": fmt_ci([as_float(r["delta_lo"]), as_float(r["delta_hi"])]), "drop_p": fmt_p(as_float(r["drop_p_adjusted"])),
        "tone": "" if delta is None or abs(delta) <= tie else ("up" if delta > 0 else "down")}
    return {"shown": shown, **json_safe({
        "item_id": item_id, "baseline": r["baseline"], "candidate": r["candidate"], "delta": r["delta"],
        "delta_ci95": [r["delta_lo"], r["delta_hi"]], "baseline_epochs": r["baseline_n"],
        "candidate_epochs": r["candidate_n"], "baseline_errors": r["baseline_errors"],
        "candidate_errors": r["candidate_errors"], "baseline_error": r.get("baseline_error"),
        "candidate_error": r.get("candidate_error"),
        "wtl": [r["epoch_wins"], r["epoch_ties"], r["epoch_losses"]], "drop_p_adjusted": r["drop_p_adjusted"],
        "significant": bool(r["significant"]), "hardest": bool(r["hardest"]),
        "slices": {name: values.get(item_id, "(not in dataset)") for name, values in by.items()},
    }), **({"rollout": rollout_row(r)} if "d_turns" in r else {})}


def rollout_row(r: Mapping[str, object]) -> JSONObject:
    """An agent pair's part of a Compare row: each side's per-item figures, the differences, and the text of each
    (as a turn count reads: two places)."""
    from rfteval.report.format import fmt

    def side(name: str) -> JSONObject:
        return json_safe({"turns": r[f"{name}_turns"], "tool_calls": r[f"{name}_tool_calls"],
                          "tool_errors": r[f"{name}_tool_errors"], "tool_error_types": r[f"{name}_tool_error_types"],
                          "stop_reasons": r[f"{name}_stop_reasons"]})

    def reasons(counts: object) -> str:
        return ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) if isinstance(counts, dict) and counts \
            else "—"

    def errors(name: str) -> str:
        total, kinds = as_float(r[f"{name}_tool_errors"]), r[f"{name}_tool_error_types"]
        if total is None:
            return "—"
        listed = ", ".join(f"{k} {v}" for k, v in sorted(kinds.items())) if isinstance(kinds, dict) else ""
        return f"{total:.0f}" + (f" ({listed})" if total and listed else "")

    return {"baseline": side("baseline"), "candidate": side("candidate"), **json_safe(
        {"d_turns": r["d_turns"], "d_tool_calls": r["d_tool_calls"]}),
        "shown": {"turns": f"{fmt(as_float(r['baseline_turns']), 2)} → {fmt(as_float(r['candidate_turns']), 2)}",
                  "d_turns": fmt(as_float(r["d_turns"]), 2, sign=True),
                  "tool_calls": f"{fmt(as_float(r['baseline_tool_calls']), 2)} → "
                                f"{fmt(as_float(r['candidate_tool_calls']), 2)}",
                  "d_tool_calls": fmt(as_float(r["d_tool_calls"]), 2, sign=True),
                  "stop_reasons": [reasons(r["baseline_stop_reasons"]), reasons(r["candidate_stop_reasons"])],
                  "tool_errors": [errors("baseline"), errors("candidate")]}}


def as_float(value: object) -> float | None:
    """A number of a frame's row as a float (None for a missing one), for the formats."""
    import math

    try:
        x = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def pair_shown(row: PairRow) -> JSONObject:
    """A summary row (overall, a slice, a sub-score) as compare's summary table prints it."""
    from rfteval.report.format import fmt, fmt_ci, fmt_p
    from rfteval.report.terminal import shown_p, wtl

    d = row["delta"]
    return {"items": str(row["items"]), "baseline": fmt(row["baseline"]["mean"]),
            "baseline_ci95": fmt_ci(row["baseline"]["ci95"], sign=False), "candidate": fmt(row["candidate"]["mean"]),
            "candidate_ci95": fmt_ci(row["candidate"]["ci95"], sign=False), "delta": fmt(d["mean"], sign=True),
            "delta_ci95": fmt_ci(d["ci95"]), "p": fmt_p(shown_p(d)), "wtl": wtl(d)}


def side_shown(side: SideReport, pass_k: object, delta: PairedDelta | None) -> JSONObject:
    """A model's row of the Runs page, each figure as compare prints it; the delta's verdict word (stats.direction)
    is what colours it."""
    from rfteval.report.format import fmt, fmt_ci, fmt_p, fmt_share
    from rfteval.report.terminal import shown_p, verdict

    k = pass_k if isinstance(pass_k, dict) else {}
    n = k.get("n")
    out: JSONObject = {
        "mean": fmt(side["mean"]), "ci95": fmt_ci(side["ci95"], sign=False), "items": str(side["items"]),
        "records": str(side["records"]), "pass_at_1": fmt(k["pass_at_1"]) if k else "n/a",
        "pass_at_n": f"{fmt(k['pass_at_n'])} (N={n})" if k else "n/a",
        "generation_errors": f"{side['generation_errors']} ({fmt_share(side['generation_error_share'])})",
        "scored_zero": str(side["scored_zero_errors"]),
        "truncated": f"{side['truncated_in_reasoning']} ({fmt_share(side['truncated_in_reasoning_share'])})",
        "delta": "baseline", "delta_ci95": "", "p": "", "verdict": "baseline"}
    if delta is not None:
        out.update(delta=fmt(delta["mean"], sign=True), delta_ci95=fmt_ci(delta["ci95"]), p=fmt_p(shown_p(delta)),
                   verdict=verdict(delta))
    return out


def agree_shown(result: AgreeResult) -> JSONObject:
    """What `rfteval agree` prints, line for line and cell for cell (report/agree_render.py's rows and lines): the
    headline table (kappa with its interval, the bias with its interval, the error records), the error counts by
    type, the notes, the verdict, the items where the graders disagree most."""
    from rfteval.report import agree_render

    gate = result.gate
    gated = bool(gate["checks"])
    # the terminal's order: the verdict per candidate, then each gate check (a gate once hid the verdict)
    lines = agree_render.verdict_lines(result) + agree_render.gate_lines(result)
    if not lines:
        labels = sorted({str(x) for x in result.paired["model_label"]}) if "model_label" in result.paired else []
        lines = [f"no verdict to compare: the records hold one model ({', '.join(labels) or 'none'}); a verdict "
                 "is a candidate against its baseline, under each grader"]
    labels_table = None
    if result.labels is not None:
        names = result.labels["labels"]
        labels_table = {"columns": ["A \\ B", *names],
                        "rows": [[name, *(str(v) for v in row)] for name, row in zip(names, result.labels["confusion"])]}
    return json_safe({
        "graders": [f"{name}: {side.path}" + (f"  ({side.grader})" if side.grader else "")
                    for name, side in (("A", result.a), ("B", result.b))],
        "summary": [list(row) for row in agree_render.summary_rows(result)],
        "errors": agree_render.error_lines(result),
        "notes": agree_render.note_lines(result),
        "labels": labels_table,
        "verdict": {"gated": gated, "passed": gate["passed"], "lines": lines,
                    "failures": [f"gate failed: {line}" for line in gate["failures"]],
                    "warnings": [f"gate warning: {line}" for line in gate["warnings"]]},
        "verdict_rows": [list(row) for row in agree_render.verdict_rows(result)],
        "items": [list(agree_render.item_cells(r)) for r in result.items],
    })
