"""GRPO advantages of a frame of records: what a GRPO trainer would compute from these rewards, per group."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rfteval.data.records import effective_scores
from rfteval.readiness.report import LEVEL_DECIMALS

if TYPE_CHECKING:
    import pandas as pd


def scored_mask(df: pd.DataFrame, errors: str = "exclude") -> pd.Series:
    """Rows that are a reward training would see (see `effective_scores`): graded, or scored 0 by the policy."""
    return effective_scores(df, errors).notna()


def grpo_advantages(records_df: pd.DataFrame, errors: str = "exclude") -> pd.Series:
    """(r − group mean) / group std per (model_label, item_id), aligned to the rows; 0 for a zero-signal group.

    The std is the sample std (ddof=1): what TRL's GRPOTrainer and verl compute (torch's `std()` is Bessel-corrected
    by default), so the signs and sizes match what a GRPO trainer would see. Rewards are the score levels the
    zero-signal share counts (rounded to `LEVEL_DECIMALS` decimals), so a group is zero-signal exactly when its
    advantages are 0, and a group of one sample gets 0. Rows left out by the error policy (`effective_scores`)
    get NaN.
    """
    import pandas as pd

    out = pd.Series(float("nan"), index=records_df.index, dtype="float64", name="advantage")
    rewards = effective_scores(records_df, errors)
    mask = rewards.notna()
    if not mask.any():
        return out
    scores = rewards[mask].round(LEVEL_DECIMALS)
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
