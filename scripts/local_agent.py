"""A scripted local agent for the demo: it plays the model turns of the inventory example (datasets/inventory) and of
the support agent (datasets/support/agent_items.jsonl) on an OpenAI-compatible server, so that `make demo` shows
agent runs offline and free.

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

It also plays the support agent example (datasets/support/agent_items.jsonl, tools datasets/support/tools.py: a
help-centre search and an article reader), where the answers are the articles' own sentences, as retrieved:

- `scripted-tuned` searches with the customer's question, reads the hits that matched more than one word (at most
  three; else the best one) in one turn (parallel calls) and answers from them, greeting the customer by name,
  citing each article it read by its id and closing as the system prompt asks (about 85 rollouts in 100); in the
  rest it reads the best hit only and forgets the closing.
- `scripted-base` takes one call a turn and plays one of: search, read the best hit, answer from it citing it,
  without the closing line (1 in 4); an answer without any tool call, promising a credit no article states (1 in
  5); a search with the question's first four words only and an answer from the hits' titles (1 in 5); search and
  read the best hit, then cite a neighbouring id it never read and promise a credit (1 in 5); the same vague
  search again and again until --max-turns stops it (the rest).

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


# ---- the support agent (datasets/support/agent_items.jsonl) ----------------------------------------------------

BASE_SUPPORT = (("right", 0.25), ("no_tools", 0.45), ("titles_only", 0.65), ("wrong_cite", 0.85), ("loop", 1.0))
TUNED_SUPPORT = (("right", 0.85), ("slip", 1.0))
_NAME = re.compile(r'first name is "([^"]+)"')
_CLOSING = re.compile(r'End with "([^"]+)"')
_KB = re.compile(r"^([A-Z]+-)(\d+)$")


@dataclass
class Desk:
    """What a support rollout's history holds: the search hits, the articles read, how many turns were taken."""

    hits: list[dict[str, Any]] | None = None  # None: not searched yet; [] also when the search failed
    read: dict[str, dict[str, Any]] = field(default_factory=dict)
    turns: int = 0


def read_desk(messages: list[dict[str, Any]]) -> Desk:
    desk = Desk()
    names: dict[str, str] = {}
    for message in messages:
        if message.get("role") == "assistant":
            desk.turns += 1
            for c in message.get("tool_calls") or []:
                names[str(c.get("id"))] = str((c.get("function") or {}).get("name"))
        elif message.get("role") == "tool":
            content = message.get("content")
            text = content if isinstance(content, str) else ""
            name = names.get(str(message.get("tool_call_id")), "")
            value = None if text.startswith("error:") else json.loads(text)
            if name == "search_articles":
                desk.hits = value if isinstance(value, list) else []
            elif name == "get_article" and isinstance(value, dict):
                desk.read[str(value.get("id"))] = value
    return desk


def _neighbour(aid: str) -> str:
    """The id next to `aid` (KB-104 → KB-105): the base model's misremembered citation."""
    m = _KB.match(aid)
    return f"{m.group(1)}{int(m.group(2)) + 1}" if m else aid + "-1"


def _sentence(article: dict[str, Any]) -> str:
    text = str(article.get("text", ""))
    return text[:1].upper() + text[1:]


def support_reply(model: str, messages: list[dict[str, Any]], seed: object) -> Reply:
    prompt = "\n".join(str(m.get("content")) for m in messages if m.get("role") in ("system", "developer"))
    question = next((str(m.get("content")) for m in messages if m.get("role") == "user"), "")
    found_name, found_closing = _NAME.search(prompt), _CLOSING.search(prompt)
    name = found_name.group(1) if found_name else "there"
    closing = found_closing.group(1) if found_closing else "Anything else I can help with?"
    digest = hashlib.sha256(f"{model}|{question}|{seed}".encode()).digest()
    u = int.from_bytes(digest[:8], "big") / 2**64
    plan = next(n for n, upto in (TUNED_SUPPORT if model == TUNED else BASE_SUPPORT) if u < upto)
    desk = read_desk(messages)
    turn = desk.turns + 1
    vague = " ".join(question.split()[:4])
    if plan == "no_tools":
        return Reply(text="Hello there! Sorry about the trouble. This is usually sorted quickly, and we will add a "
                          "credit to your bill for the inconvenience. Hope this helps!")
    if plan == "loop":
        return calls(turn, [("search_articles", {"query": vague})])
    if desk.hits is None:
        return calls(turn, [("search_articles", {"query": vague if plan == "titles_only" else question})])
    hits = [h for h in desk.hits if isinstance(h, dict)]
    if plan == "titles_only":
        if not hits:
            return Reply(text=f"Hello {name}. I could not find anything on that, but it should sort itself out. "
                              "Hope this helps!")
        seen = " and ".join(f"{h['title']} [{h['id']}]" for h in hits[:2])
        return Reply(text=f"Hello {name}. Have a look at our articles on {seen}; they should sort this out. "
                          "Hope this helps!")
    # tuned reads every hit that matched more than one word (at most 3), else the best; base the best only
    many = [str(h["id"]) for h in hits[:3] if int(h.get("score", 0)) >= 2] or [str(h["id"]) for h in hits[:1]]
    wanted = many if model == TUNED and plan == "right" else [str(h["id"]) for h in hits[:1]]
    unread = [a for a in wanted if a not in desk.read]
    if unread:
        if model == TUNED:
            return calls(turn, [("get_article", {"id": a}) for a in unread], "Reading the best matches.")
        return calls(turn, [("get_article", {"id": unread[0]})])
    used = [desk.read[a] for a in wanted if a in desk.read]
    if not used:
        return Reply(text=f"Hi {name}! Our help centre does not cover this; I can connect you with a human agent. "
                          f"{closing}")
    if plan == "wrong_cite":
        body = " ".join(f"{_sentence(a)} [{_neighbour(str(a['id']))}]" for a in used)
        return Reply(text=f"Hello {name}. {body} We will also add a credit to your bill. Hope this helps!")
    body = " ".join(f"{_sentence(a)} [{a['id']}]" for a in used)
    end = closing if model == TUNED and plan == "right" else "Hope this helps!"
    return Reply(text=f"Hi {name}! {body} {end}")


def responder(request: Request) -> Reply:
    body = request.body
    messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
    tool_names = {str((t.get("function") or {}).get("name")) for t in body.get("tools") or [] if isinstance(t, dict)}
    if "search_articles" in tool_names:
        return support_reply(str(body.get("model")), messages, body.get("seed"))
    order = read_order(messages)
    if order is None or not body.get("tools"):
        return Reply(text=f"({STAND_IN}: it answers the inventory and support examples only)")
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
