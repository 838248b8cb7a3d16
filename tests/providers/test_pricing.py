"""rfteval.providers.pricing: the dollar figures in summary.json (exact prices, prefixes, the batch column, overrides)."""

from __future__ import annotations

import pytest

from rfteval.providers.pricing import cost_usd, find_price, price_table
from rfteval.run.spec import PriceSpec


def test_exact_name_then_the_longest_prefix_at_a_boundary():
    table = price_table()
    assert find_price("gpt-4.1-mini", table)[:2] == (0.40, 1.60)
    assert find_price("gpt-4.1-mini-2025-04-14", table)[:2] == (0.40, 1.60)  # not gpt-4.1's
    assert find_price("ft:gpt-4.1-mini:acme::abc", table)[:2] == (0.80, 3.20)  # the fine-tuned price
    assert find_price("gpt-4.1x", table) is None  # a prefix only counts at '-' or ':'
    assert find_price("Qwen/Qwen3-8B", table) is None  # a self-hosted model has no price, never a guess


def test_cost_standard_and_batch():
    table = price_table()
    assert cost_usd("gpt-4.1-mini", 1_000_000, 500_000, table) == pytest.approx(0.40 + 0.80)
    assert cost_usd("gpt-4.1-mini", 1_000_000, 500_000, table, batch=True) == pytest.approx((0.40 + 0.80) / 2)
    assert cost_usd("unknown-model", 10, 10, table) is None


def test_spec_overrides_with_and_without_their_own_batch_prices():
    table = price_table({"my-model": PriceSpec(input=2.0, output=4.0),
                         "gpt-4.1-mini": {"input": 1.0, "output": 2.0, "batch_input": 0.9, "batch_output": 1.9}})
    assert table["my-model"] == (2.0, 4.0, 1.0, 2.0)
    assert table["gpt-4.1-mini"] == (1.0, 2.0, 0.9, 1.9)
    assert cost_usd("my-model", 1_000_000, 0, table, batch=True) == pytest.approx(1.0)
    with_batch = price_table({"m": PriceSpec(input=1.0, output=1.0, batch_input=0.3, batch_output=0.4)})
    assert with_batch["m"] == (1.0, 1.0, 0.3, 0.4)
