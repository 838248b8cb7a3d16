"""What a run's tokens cost: a small default price table that a spec's [pricing] table overrides.

Prices are USD per million tokens (standard tier, no cached-input discount), as listed on OpenAI's
pricing page when this table was written; they change, so a spec can set its own. Reasoning tokens are
part of `output_tokens` in OpenAI's usage and are billed as output. A model with no price gets no cost
(shown as "—"), never a guessed one.

The batch column: what the Batch API (and flex processing, billed at batch rates) charges. OpenAI's batch
price is half the standard one for the models here, so an entry without its own batch prices gets half;
an override may give `batch_input` / `batch_output`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

BATCH_DISCOUNT = 0.5
# Response tiers billed at batch prices: the Batch API, flex processing, and imported Batch API output.
DISCOUNTED_TIERS = frozenset({"batch", "flex", "import"})
Price = tuple[float, float, float, float]  # input, output, batch input, batch output; USD per 1M tokens

# model (or model prefix) → (input, output) USD per 1M tokens; batch prices default to half.
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


class PriceLike(Protocol):
    """A spec's price entry (rfteval.run.spec.PriceSpec; this module does not import the spec)."""

    @property
    def input(self) -> float: ...

    @property
    def output(self) -> float: ...


def _with_batch(inp: float, out: float, batch_in: float | None = None, batch_out: float | None = None) -> Price:
    return (inp, out, float(batch_in) if batch_in is not None else inp * BATCH_DISCOUNT,
            float(batch_out) if batch_out is not None else out * BATCH_DISCOUNT)


def price_table(overrides: Mapping[str, PriceLike | Mapping[str, float]] | None = None) -> dict[str, Price]:
    """The default table with a spec's [pricing] entries ({"input", "output", "batch_input"?, "batch_output"?}
    or PriceSpec) on top; every entry gets its batch column."""
    table = {model: _with_batch(*p) for model, p in DEFAULT_PRICES.items()}
    for model, price in (overrides or {}).items():
        if isinstance(price, Mapping):
            table[model] = _with_batch(float(price["input"]), float(price["output"]), price.get("batch_input"),
                                       price.get("batch_output"))
        else:
            table[model] = _with_batch(float(price.input), float(price.output), getattr(price, "batch_input", None),
                                       getattr(price, "batch_output", None))
    return table


def find_price(model: str, table: Mapping[str, tuple[float, ...]]) -> tuple[float, ...] | None:
    """Exact name first, else the longest key that prefixes the name at a '-' or ':' boundary."""
    if model in table:
        return table[model]
    best = None
    for key in table:
        if model.startswith(key) and model[len(key)] in "-:" and (best is None or len(key) > len(best)):
            best = key
    return table[best] if best is not None else None


def cost_usd(model: str, input_tokens: int, output_tokens: int, table: Mapping[str, tuple[float, ...]],
             batch: bool = False) -> float | None:
    """USD for these tokens; `batch`: at the batch column's prices (half the standard ones unless set)."""
    price = find_price(model, table)
    if price is None:
        return None
    if batch:
        p_in, p_out = (price[2], price[3]) if len(price) >= 4 else (price[0] * BATCH_DISCOUNT, price[1] * BATCH_DISCOUNT)
    else:
        p_in, p_out = price[0], price[1]
    return (input_tokens * p_in + output_tokens * p_out) / 1_000_000
