"""Terminal tables for graded records: per model overall, and per item (ChipStack's 'per sample')."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console

from rfteval.report.format import table as house_table

if TYPE_CHECKING:
    from rfteval.run.summary import GradeSummary


def _fmt(x: float) -> str:
    return f"{x:.4f}"


def render_models(console: Console, summaries: list[GradeSummary], title: str = "Scores") -> None:
    """The models table; a "cut off thinking" column and the run's hint line only when an output was cut off
    while reasoning (the run table's rule, rfteval.report.run_table)."""
    from rfteval.data.reasoning import truncation_line

    table = house_table(title)
    cut_off = [s.get("truncated_in_reasoning") or {"n": 0, "share": 0.0} for s in summaries]
    columns = ["model", "mean", "95% interval", "items", "records", "errors"]
    columns += ["cut off thinking"] if any(c["n"] for c in cut_off) else []
    for col in columns:
        table.add_column(col, justify="left" if col == "model" else "right")
    for s, cut in zip(summaries, cut_off):
        lo, hi = s["ci95"]
        errors = str(s["errors"])
        if s["errors_by_type"]:
            errors += " (" + ", ".join(f"{k} {v}" for k, v in s["errors_by_type"].items()) + ")"
        cells = [s["label"], _fmt(s["mean"]), f"[{_fmt(lo)}, {_fmt(hi)}]", str(s["items"]), str(s["records"]), errors]
        cells += [f"{cut['n']} ({cut['share']:.0%})" if cut["n"] else "0"] if len(columns) > 6 else []
        table.add_row(*cells)
    console.print(table)
    for s, cut in zip(summaries, cut_off):
        if (line := truncation_line(s["label"], cut["n"], cut["share"])) is not None:
            console.print(line, highlight=False, markup=False, soft_wrap=True)


def render_items(console: Console, summary: GradeSummary, limit: int = 50) -> None:
    per_item = summary["per_item"]
    table = house_table(f"Per item: {summary['label']}")
    for col in ("item", "epochs", "mean", "sd"):
        table.add_column(col, justify="left" if col == "item" else "right")
    for row in per_item.head(limit).itertuples(index=False):
        sd = "" if row.n < 2 else _fmt(row.sd)
        table.add_row(str(row.item_id), str(row.n), _fmt(row.mean), sd)
    console.print(table)
    if len(per_item) > limit:
        console.print(f"({len(per_item) - limit} more items in the records file)")
