"""Writes datasets/inventory/items.jsonl and grader.json: the agent example's items, their reference answers
computed from the catalogue in tools.py (so the two cannot disagree), and a python grader of the final answer.

    python datasets/inventory/make_inventory.py          # write
    python datasets/inventory/make_inventory.py --check  # exit 1 when a written file is out of date
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

HERE = Path(__file__).resolve().parent

SYSTEM = """You are the stock desk assistant of Brightwell Supply, an industrial parts distributor.
Answer from the tools, never from memory: stock and prices change every day.
- find_product(query) gives a product's SKU from words of its name.
- get_stock(sku) gives units on hand, units reserved for earlier orders, and the unit price.
- calculate(expression) does arithmetic (+ - * /, min, max).
Units of an order line that can ship today: the units ordered, at most the units on hand minus the units reserved.
A quote is the units ordered times the unit price, summed over the lines, in USD.
End your reply with one line: ANSWER: <number>"""

# id, task ("ship": units of the order that can ship today; "quote": its price), [(units, product as the customer
# wrote it)]
ORDERS: list[tuple[str, str, list[tuple[int, str]]]] = [
    ("inv-01", "ship", [(200, "M8 hex bolt, stainless")]),
    ("inv-02", "ship", [(50, "6204 ball bearing")]),
    ("inv-03", "ship", [(100, "M6 washer, nylon"), (800, "M6 hex nut")]),
    ("inv-04", "ship", [(20, "jaw coupling"), (4, "roller chain 08B")]),
    ("inv-05", "ship", [(6, "6205 ball bearing"), (30, "V-belt A42"), (10, "O-ring kit")]),
    ("inv-06", "quote", [(500, "M6 hex bolt, zinc-plated"), (500, "M6 hex nut")]),
    ("inv-07", "quote", [(12, "lithium grease")]),
    ("inv-08", "quote", [(3, "roller chain 08B"), (2, "jaw coupling")]),
    ("inv-09", "quote", [(250, "compression spring"), (40, "6204 ball bearing")]),
    ("inv-10", "quote", [(8, "V-belt A42"), (1000, "M6 washer, nylon"), (2, "O-ring kit")]),
    ("inv-11", "ship", [(40, "lithium grease"), (500, "M6 hex bolt, zinc-plated"), (20, "roller chain 08B")]),
    ("inv-12", "quote", [(150, "M8 hex bolt, stainless"), (6, "6205 ball bearing")]),
]
QUESTION = {"ship": "How many units of this order can ship today, all lines together?",
            "quote": "What does this order cost at list price?"}
DIFFICULTY = {1: "easy", 2: "medium", 3: "hard"}

TOOL_SCHEMAS = [
    {"type": "function", "function": {
        "name": "find_product", "description": "Products whose name holds every word of the query (SKU and name).",
        "parameters": {"type": "object", "properties": {"query": {"type": "string", "description": "words of the "
                       "product's name"}}, "required": ["query"], "additionalProperties": False}}},
    {"type": "function", "function": {
        "name": "get_stock", "description": "Units on hand, units reserved and the unit price of one SKU.",
        "parameters": {"type": "object", "properties": {"sku": {"type": "string", "description": "a SKU, as "
                       "find_product gives it"}}, "required": ["sku"], "additionalProperties": False}}},
    {"type": "function", "function": {
        "name": "calculate", "description": "Evaluate arithmetic: numbers, + - * /, parentheses, min(), max().",
        "parameters": {"type": "object", "properties": {"expression": {"type": "string"}},
                       "required": ["expression"], "additionalProperties": False}}},
]

GRADER_SOURCE = '''"""Inventory agent: 1 when the reply's last "ANSWER: <number>" line (or a reply that is only a number) equals
the reference answer within half a cent, else 0. The final turn is what is graded (sample.output_text), as Agent
RFT grades it."""

import re

NUMBER = r"\\$?\\s*(-?[0-9][0-9,]*(?:\\.[0-9]+)?)"
ANSWER = re.compile(r"ANSWER:\\s*" + NUMBER)
ONLY = re.compile(r"\\s*" + NUMBER + r"\\s*")


def grade(sample, item):
    text = sample.get("output_text") or ""
    found = ANSWER.findall(text) or [m.group(1) for m in [ONLY.fullmatch(text)] if m]
    if not found:
        return 0.0
    return 1.0 if abs(float(found[-1].replace(",", "")) - float(item["reference_answer"])) <= 0.005 else 0.0
'''


def load_tools() -> ModuleType:
    spec = importlib.util.spec_from_file_location("inventory_tools", HERE / "tools.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def reference(tools: ModuleType, task: str, lines: list[tuple[int, str]]) -> float:
    total = 0.0
    for units, product in lines:
        (hit, *_) = tools.find_product(product)
        stock = tools.get_stock(hit["sku"])
        if task == "ship":
            total += min(units, stock["on_hand"] - stock["reserved"])
        else:
            total += units * stock["unit_price"]
    return round(total, 2)


def items() -> list[dict[str, object]]:
    tools = load_tools()
    out: list[dict[str, object]] = []
    for item_id, task, lines in ORDERS:
        order = "\n".join(f"- {units} x {product}" for units, product in lines)
        number = f"{reference(tools, task, lines):.2f}" if task == "quote" else f"{reference(tools, task, lines):g}"
        out.append({
            "id": item_id,
            "messages": [{"role": "developer", "content": SYSTEM},
                         {"role": "user", "content": f"Order {item_id.upper()}:\n{order}\n{QUESTION[task]}"}],
            "tools": TOOL_SCHEMAS,
            "reference_answer": number,
            "task": task,
            "difficulty": DIFFICULTY[len(lines)],
        })
    return out


def files() -> dict[Path, str]:
    grader = {"type": "python", "name": "inventory_final_answer", "image_tag": "2025-05-08",
              "source": GRADER_SOURCE}
    return {HERE / "items.jsonl": "".join(json.dumps(it, ensure_ascii=False) + "\n" for it in items()),
            HERE / "grader.json": json.dumps(grader, indent=2, ensure_ascii=False) + "\n"}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="Write nothing; exit 1 when a file is out of date.")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(HERE.parents[1] / "scripts"))
    from generated_files import write_or_check

    return write_or_check(files(), args.check, "datasets/inventory/make_inventory.py")


if __name__ == "__main__":
    sys.exit(main())
