"""Per-model summaries of graded records: per-item means first, then their mean (statistics.md §2.9)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

    from rfteval.records import Record


def records_frame(records: list[Record]) -> pd.DataFrame:
    """The columns summaries need; error records score 0 (OpenAI's rule) and are counted."""
    import pandas as pd

    return pd.DataFrame({
        "model_label": [r.model_label for r in records],
        "item_id": [r.item_id for r in records],
        "epoch": [r.epoch for r in records],
        "score": [0.0 if r.error else (r.score or 0.0) for r in records],
        "error": [r.error["type"] if r.error else None for r in records],
    })


def summarize_models(frame: pd.DataFrame, level: float = 0.95) -> list[dict[str, Any]]:
    """One summary per model label: mean of item means, its interval, counts of items, records and errors."""
    from rfteval import stats

    out = []
    for label, df in frame.groupby("model_label", sort=False):
        per_item = stats.item_stats(df)
        side = stats.side_summary(per_item["mean"].to_numpy(), level=level)
        errors = df["error"].dropna()
        out.append({
            "label": str(label), "mean": side["mean"], "se": side["se"], "ci95": side["ci95"],
            "items": int(len(per_item)), "records": int(len(df)), "errors": int(len(errors)),
            "errors_by_type": {str(k): int(v) for k, v in errors.value_counts().items()},
            "per_item": per_item,
        })
    return out
