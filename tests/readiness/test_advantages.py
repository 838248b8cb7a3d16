"""readiness/advantages.py: the GRPO advantages per group (sample standard deviation), which records are scored, and
zero signal exactly where every advantage is 0."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from rfteval.readiness.advantages import grpo_advantages
from rfteval.readiness.assessment import assess
from tests.support.readiness_records import records


def test_grpo_advantages_sample_std_per_group():
    df = records({"a": [1, 0, 0, 1], "b": [1, 1, 1, 1], "c": [0.2, 0.5, 0.8, 0.5]})
    tuned = records({"a": [1, 1, 1, 0]}, label="tuned")
    both = pd.concat([df, tuned], ignore_index=True)
    adv = grpo_advantages(both)
    assert adv.index.equals(both.index)
    for _, rows in both.groupby(["model_label", "item_id"]):
        s = rows["score"].to_numpy(float)
        sd = np.std(s, ddof=1)
        want = np.zeros_like(s) if sd == 0 else (s - s.mean()) / sd
        np.testing.assert_allclose(adv.loc[rows.index].to_numpy(), want)
    assert adv.loc[both["item_id"] == "a"].tolist()[:4] == pytest.approx([math.sqrt(3) / 2 * x for x in (1, -1, -1, 1)])


def test_grpo_advantages_skip_generation_errors_and_single_samples():
    df = records({"a": [1, 0, 1], "solo": [1]}, errors={("a", 2): "generate"})
    adv = grpo_advantages(df)
    assert math.isnan(adv.iloc[2])
    assert adv.iloc[:2].tolist() == pytest.approx([1 / math.sqrt(0.5) * 0.5, -1 / math.sqrt(0.5) * 0.5])
    assert adv.iloc[3] == 0.0


def test_zero_signal_iff_advantages_are_zero():
    """Issue 10: std > 1e-12 gave ±0.97 advantages to an item the 9-decimal levels call zero-signal."""
    df = records({"tie": [0.5, 0.5 + 1e-11, 0.5, 0.5 - 1e-11], "apart": [0.5, 0.5 + 1e-8, 0.5, 0.5]})
    rep = assess(df, group_size=2)
    kinds = {it.item_id: it.kind for it in rep.items}
    assert kinds == {"tie": "other", "apart": "mixed"}
    adv = grpo_advantages(df)
    tie = adv[df["item_id"] == "tie"]
    apart = adv[df["item_id"] == "apart"]
    assert (tie == 0).all()
    assert (apart != 0).any() and apart.abs().max() == pytest.approx(1.5)
    # the rule holds for every item: zero signal exactly when every advantage is 0
    for it in rep.items:
        assert (it.kind != "mixed") == bool((adv[df["item_id"] == it.item_id] == 0).all())
