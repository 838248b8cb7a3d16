"""A scripted local agent for the demo: it plays the model turns of the inventory example (datasets/inventory) on an
OpenAI-compatible server, so that `make demo` shows an agent run offline and free.

IT IS NOT A MODEL. It is a scripted stand-in, as the demo's local judge (scripts/local_judge.py) is: a transparent,
deterministic script that reads the order in the prompt and the tool results in the history, and answers with the
next tool calls or the final answer. The tools themselves are real: rfteval runs datasets/inventory/tools.py in
its python sandbox and sends their results back here, and every number in a final answer is computed from those
results (or, where the script plays a mistake, from none). Its two model names:

- `scripted-tuned` looks up every line's SKU in one turn (parallel calls), their stock in the next, has `calculate`
  do the arithmetic of an order of several lines, and answers (about 8 rollouts in 10); in about 1 of 8 it first
  calls get_stock with the product's name instead of its SKU, reads the error and goes on; in the rest it skips
  `calculate` and slips as the base model does (below).
- `scripted-base` takes one call a turn, does its own arithmetic, and in each rollout plays one of: the right steps
  (about 3 in 10); get_stock with the product's name first, then the right steps (2 in 10); an answer without any
  tool call, the order taken as all in stock at $1 a unit (1 in 7); the right calls, then an answer that forgets the
  reserved units (an order to ship) or drops the order's last line (a quote) (1 in 7); the same find_product call
  again and again until the run's --max-turns stops it (the rest).

Which one a rollout plays (and which of three openings its answer has) is fixed by a hash of (model, order, seed):
`rfteval run --seed N` sends N + epoch - 1, so epochs differ and a re-run is the same. The history is all it reads:
each reply depends only on the request.

It is a responder of the tests' OpenAI-compatible server (tests/support/fake_openai.py). Run: `python
scripts/local_agent.py --port 0` prints its base_url (http://127.0.0.1:PORT/v1) on the first line and serves until
killed. 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# The server is the tests' OpenAI-compatible server: this checkout's tests/ first, ahead of any installed `tests`.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.support.fake_openai import FakeOpenAI, Reply, Request, serve_until_stopped  # noqa: E402

BASE, TUNED = "scripted-base", "scripted-tuned"
STAND_IN = "scripted stand-in, not a model"

_ORDER = re.compile(r"^Order ([A-Z0-9-]+):", re.M)
_LINE = re.compile(r"^- (\d+) x (.+?)\s*$", re.M)

# the share of rollouts that plays each course, cumulative, in order (the docstring says them in words)
BASE_COURSES = (("right", 0.30), ("name_as_sku", 0.50), ("no_tools", 0.64), ("slip", 0.78), ("loop", 1.0))
TUNED_COURSES = (("right", 0.80), ("name_as_sku", 0.93), ("slip", 1.0))
# how a final answer opens: one of these per rollout (by the same hash), so that epochs read differently
OPENINGS = {"ship": ("Order {id}: what can ship today", "Here is what ships today for order {id}",
                     "Order {id}, today's shipment"),
            "quote": ("Order {id}: the list price", "Here is the quote for order {id}", "Order {id}, priced")}


@dataclass
class Order:
    """What the prompt asks: the order's id, its task ("ship" or "quote") and lines (units, product)."""

    id: str
    task: str
    lines: list[tuple[int, str]]


@dataclass
class Seen:
    """What the history holds: the SKU found for each product, each SKU's stock, the last calculation, whether a
    call failed, and how many turns were taken."""

    sku: dict[str, str] = field(default_factory=dict)
    stock: dict[str, dict[str, Any]] = field(default_factory=dict)
    calculated: str | None = None
    failed: bool = False
    turns: int = 0


def read_order(messages: list[dict[str, Any]]) -> Order | None:
    user = next((m for m in messages if m.get("role") == "user" and isinstance(m.get("content"), str)), None)
    if user is None:
        return None
    text = user["content"]
    order, lines = _ORDER.search(text), _LINE.findall(text)
    if order is None or not lines:
        return None
    return Order(order.group(1), "ship" if "ship" in text.lower() else "quote", [(int(n), p) for n, p in lines])


def read_history(messages: list[dict[str, Any]]) -> Seen:
    """The tool results so far, each matched to the call it answers."""
    seen = Seen()
    calls: dict[str, tuple[str, dict[str, Any]]] = {}
    for message in messages:
        if message.get("role") == "assistant":
            seen.turns += 1
            for call in message.get("tool_calls") or []:
                fn = call.get("function") or {}
                try:
                    args = json.loads(fn.get("arguments") or "{}")
                except ValueError:
                    args = {}
                calls[str(call.get("id"))] = (str(fn.get("name")), args if isinstance(args, dict) else {})
        elif message.get("role") == "tool":
            name, args = calls.get(str(message.get("tool_call_id")), ("", {}))
            content = message.get("content")
            text = content if isinstance(content, str) else ""
            if text.startswith("error:"):
                seen.failed = True
                continue
            if name == "find_product" and (hits := json.loads(text)):
                seen.sku[str(args.get("query"))] = hits[0]["sku"]
            elif name == "get_stock":
                stock = json.loads(text)
                seen.stock[stock["sku"]] = stock
            elif name == "calculate":
                seen.calculated = text
    return seen


def course(model: str, order: Order, seed: object) -> tuple[str, int]:
    """The course a rollout plays and its answer's opening, fixed by (model, order, seed)."""
    digest = hashlib.sha256(f"{model}|{order.id}|{seed}".encode()).digest()
    u = int.from_bytes(digest[:8], "big") / 2**64
    courses = TUNED_COURSES if model == TUNED else BASE_COURSES
    return next(name for name, upto in courses if u < upto), digest[8] % 3


def call(turn: int, k: int, name: str, **arguments: Any) -> dict[str, Any]:
    return {"id": f"call_{turn}_{k}", "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments)}}


def calls(turn: int, wanted: list[tuple[str, dict[str, Any]]], text: str | None = None) -> Reply:
    return Reply(text=text, tool_calls=[call(turn, k, name, **args) for k, (name, args) in enumerate(wanted)])


def number(value: float, task: str) -> str:
    return f"{value:.2f}" if task == "quote" else f"{value:g}"


def answer(order: Order, seen: Seen, opening: int, slip: bool = False) -> Reply:
    """The final answer from the stock seen: one line per order line, then ANSWER (from `calculate` when it ran)."""
    rows, total = [], 0.0
    lines = order.lines[:-1] if slip and order.task == "quote" and len(order.lines) > 1 else order.lines
    for units, product in lines:
        stock = seen.stock[seen.sku[product]]
        if order.task == "ship":
            free = stock["on_hand"] if slip else stock["on_hand"] - stock["reserved"]
            ships = min(units, free)
            total += ships
            rows.append(f"- {product} ({stock['sku']}): {stock['on_hand']} on hand, {stock['reserved']} reserved; "
                        f"{ships} of {units} ship today")
        else:
            total += units * stock["unit_price"]
            rows.append(f"- {units} x {product} ({stock['sku']}) at ${stock['unit_price']:.2f} = "
                        f"${units * stock['unit_price']:.2f}")
    result = number(float(seen.calculated), order.task) if seen.calculated is not None else number(total, order.task)
    head = OPENINGS[order.task][opening].format(id=order.id)
    return Reply(text=f"{head}:\n" + "\n".join(rows) + f"\nANSWER: {result}")


def expression(order: Order, seen: Seen) -> str:
    parts = []
    for units, product in order.lines:
        stock = seen.stock[seen.sku[product]]
        parts.append(f"min({units}, {stock['on_hand']} - {stock['reserved']})" if order.task == "ship"
                     else f"{units} * {stock['unit_price']}")
    return " + ".join(parts)


def play(model: str, order: Order, seen: Seen, plan: str, opening: int = 0) -> Reply:
    """The next reply of a rollout on course `plan`, from what its history holds."""
    turn = seen.turns + 1
    first = order.lines[0][1]
    if plan == "no_tools":
        units = sum(n for n, _ in order.lines)
        guess = units if order.task == "ship" else float(units)
        return Reply(text=f"Order {order.id}: all lines are in stock at about $1.00 a unit.\n"
                          f"ANSWER: {number(guess, order.task)}")
    if plan == "loop":
        return calls(turn, [("find_product", {"query": first})])
    if plan == "name_as_sku" and turn == 1:
        return calls(turn, [("get_stock", {"sku": first})])
    missing_sku = [p for _, p in order.lines if p not in seen.sku]
    missing_stock = [seen.sku[p] for _, p in order.lines if p in seen.sku and seen.sku[p] not in seen.stock]
    if model == TUNED:  # a turn's calls together, the arithmetic by calculate
        if missing_sku:
            return calls(turn, [("find_product", {"query": p}) for p in missing_sku],
                         "Looking up the SKUs." if not seen.failed else "That was a name, not a SKU: looking it up.")
        if missing_stock:
            return calls(turn, [("get_stock", {"sku": s}) for s in missing_stock])
        if seen.calculated is None and plan != "slip" and len(order.lines) > 1:
            return calls(turn, [("calculate", {"expression": expression(order, seen)})])
        return answer(order, seen, opening, slip=plan == "slip")
    if missing_sku:  # one call a turn, its own arithmetic
        return calls(turn, [("find_product", {"query": missing_sku[0]})])
    if missing_stock:
        return calls(turn, [("get_stock", {"sku": missing_stock[0]})])
    return answer(order, seen, opening, slip=plan == "slip")


def responder(request: Request) -> Reply:
    body = request.body
    messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
    order = read_order(messages)
    if order is None or not body.get("tools"):
        return Reply(text=f"({STAND_IN}: it answers the inventory example's orders only)")
    model = str(body.get("model"))
    return play(model, order, read_history(messages), *course(model, order, body.get("seed")))


def agent_server() -> FakeOpenAI:
    """The one OpenAI-compatible test server (tests/support/fake_openai.py) answering with `responder`: the two
    scripted models, no request kept (it may serve for long)."""
    server = FakeOpenAI(responder, models=[BASE, TUNED])
    server.keep_requests = False
    return server


def serve(port: int = 0) -> FakeOpenAI:
    """Start the agent in a daemon thread on 127.0.0.1; `.base_url` is its URL, `.stop()` ends it."""
    return agent_server().start(port)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=f"A local agent for the demo ({STAND_IN}); 127.0.0.1 only.")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    return serve_until_stopped(agent_server(), args.port)


if __name__ == "__main__":
    sys.exit(main())
