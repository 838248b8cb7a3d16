"""What a run's tokens cost: a small default price table that a spec's [pricing] table overrides.

Prices are USD per million tokens (standard tier, no batch or cached-input discount), as listed on
OpenAI's pricing page when this table was written; they change, so a spec can set its own. Reasoning
tokens are part of `output_tokens` in OpenAI's usage and are billed as output. A model with no price
gets no cost (shown as "—"), never a guessed one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# model (or model prefix) → (input, output) USD per 1M tokens.
DEFAULT_PRICES: dict[str, tuple[float, float]] = {
    "gpt-4o": (2.50, 10.00),
    "gpt-4o-mini": (0.15, 0.60),
    "gpt-4.1": (2.00, 8.00),
    "gpt-4.1-mini": (0.40, 1.60),
    "gpt-4.1-nano": (0.10, 0.40),
    "o1": (15.00, 60.00),
    "o3": (2.00, 8.00),
    "o3-mini": (1.10, 4.40),
    "o4-mini": (1.10, 4.40),
    # fine-tuned models: inference price of the tuned model, matched by prefix ("ft:gpt-4o-mini:org::id")
    "ft:gpt-4o": (3.75, 15.00),
    "ft:gpt-4o-mini": (0.30, 1.20),
    "ft:gpt-4.1": (3.00, 12.00),
    "ft:gpt-4.1-mini": (0.80, 3.20),
    "ft:gpt-4.1-nano": (0.20, 0.80),
    "ft:o4-mini": (4.00, 16.00),
}


def price_table(overrides: Mapping[str, Any] | None = None) -> dict[str, tuple[float, float]]:
    """The default table with a spec's [pricing] entries ({"input", "output"} or PriceSpec) on top."""
    table = dict(DEFAULT_PRICES)
    for model, price in (overrides or {}).items():
        if isinstance(price, Mapping):
            table[model] = (float(price["input"]), float(price["output"]))
        else:
            table[model] = (float(price.input), float(price.output))
    return table


def find_price(model: str, table: Mapping[str, tuple[float, float]]) -> tuple[float, float] | None:
    """Exact name first, else the longest key that prefixes the name at a '-' or ':' boundary."""
    if model in table:
        return table[model]
    best = None
    for key in table:
        if model.startswith(key) and model[len(key)] in "-:" and (best is None or len(key) > len(best)):
            best = key
    return table[best] if best is not None else None


def cost_usd(model: str, input_tokens: int, output_tokens: int,
             table: Mapping[str, tuple[float, float]]) -> float | None:
    price = find_price(model, table)
    if price is None:
        return None
    return (input_tokens * price[0] + output_tokens * price[1]) / 1_000_000
