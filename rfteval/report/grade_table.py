"""Terminal tables for graded records: per model overall, and per item (ChipStack's 'per sample')."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from rfteval.report.format import table as house_table


def _fmt(x: float) -> str:
    return f"{x:.4f}"


def render_models(console: Console, summaries: list[dict[str, Any]], title: str = "Scores") -> None:
    table = house_table(title)
    for col in ("model", "mean", "95% interval", "items", "records", "errors"):
        table.add_column(col, justify="left" if col == "model" else "right")
    for s in summaries:
        lo, hi = s["ci95"]
        errors = str(s["errors"])
        if s["errors_by_type"]:
            errors += " (" + ", ".join(f"{k} {v}" for k, v in s["errors_by_type"].items()) + ")"
        table.add_row(s["label"], _fmt(s["mean"]), f"[{_fmt(lo)}, {_fmt(hi)}]", str(s["items"]), str(s["records"]),
                      errors)
    console.print(table)


def render_items(console: Console, summary: dict[str, Any], limit: int = 50) -> None:
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
