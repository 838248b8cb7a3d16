"""The tools of the inventory agent example (`rfteval run --tools datasets/inventory/tools.py`).

A stock desk's three tools over a small, made-up catalogue of Brightwell Supply (not real data): the answers to
the items depend on numbers only these tools give, so an agent that answers without calling them, or calls them
with a product name where a SKU is wanted, gets them wrong. rfteval runs each turn's calls in the python sandbox.
"""

from __future__ import annotations

import ast
import re

# SKU: (name, units on hand, units reserved for earlier orders, unit price in USD)
CATALOGUE: dict[str, tuple[str, int, int, float]] = {
    "BLT-M6-ZN": ("M6 hex bolt, zinc-plated", 1200, 450, 0.12),
    "BLT-M8-SS": ("M8 hex bolt, stainless", 300, 120, 0.35),
    "NUT-M6-ZN": ("M6 hex nut, zinc-plated", 2500, 600, 0.05),
    "WSH-M6-NY": ("M6 washer, nylon", 800, 790, 0.03),
    "BRG-6204": ("6204 ball bearing, sealed", 64, 20, 4.80),
    "BRG-6205": ("6205 ball bearing, sealed", 12, 12, 5.40),
    "VBT-A42": ("V-belt A42", 40, 5, 7.25),
    "GRS-LI-400": ("lithium grease, 400 g cartridge", 90, 30, 6.10),
    "CPL-JAW-19": ("jaw coupling, 19 mm bore", 25, 9, 18.50),
    "SPR-CMP-20": ("compression spring, 20 mm", 500, 0, 0.40),
    "CHN-08B-5M": ("roller chain 08B, 5 m", 18, 4, 42.00),
    "ORK-NBR": ("O-ring kit, NBR", 35, 35, 12.90),
}

_WORD = re.compile(r"[a-z0-9]+")


def find_product(query: str) -> list[dict[str, str]]:
    """The catalogue's products whose name holds every word of `query`, best first (at most 5)."""
    words = _WORD.findall(query.lower())
    if not words:
        raise ValueError("query is empty: give words of the product's name")
    hits = [(sku, name) for sku, (name, *_) in CATALOGUE.items() if all(w in _WORD.findall(name.lower()) for w in words)]
    return [{"sku": sku, "name": name} for sku, name in sorted(hits, key=lambda h: len(h[1]))[:5]]


def get_stock(sku: str) -> dict[str, object]:
    """Stock and price of one SKU: units on hand, units reserved for earlier orders, unit price."""
    if sku not in CATALOGUE:
        raise LookupError(f"no product with SKU {sku!r} (find_product gives SKUs)")
    name, on_hand, reserved, price = CATALOGUE[sku]
    return {"sku": sku, "name": name, "on_hand": on_hand, "reserved": reserved, "unit_price": price}


_BINARY = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
           ast.Div: lambda a, b: a / b}
_CALLS = {"min": min, "max": max}


def _value(node: ast.AST) -> float:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        return _BINARY[type(node.op)](_value(node.left), _value(node.right))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        return -_value(node.operand) if isinstance(node.op, ast.USub) else _value(node.operand)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _CALLS and node.args \
            and not node.keywords:
        return _CALLS[node.func.id](_value(a) for a in node.args)
    raise ValueError(f"not arithmetic: {ast.unparse(node)}")


def calculate(expression: str) -> float:
    """Arithmetic: numbers, + - * / and parentheses, min(...) and max(...); the result rounded to 2 decimals."""
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError:
        raise ValueError(f"not arithmetic: {expression!r}") from None
    value = _value(tree.body)
    return int(value) if value == int(value) else round(value, 2)
