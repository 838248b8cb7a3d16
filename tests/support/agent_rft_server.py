"""A local Agent RFT tool server and endpoint grader (127.0.0.1 only), written from the published contract
(microsoft-foundry/fine-tuning, Demos/Agentic_RFT_PrivatePreview/README.md and its RFT_ToolCall demo; the retail
tools after Demos/ZavaRetailAgent, whose rft_tools-config.json lists tau-bench's retail tools at one server_url).
Nothing of Microsoft's code is copied: the shapes are the contract's, the data is invented.

- `POST /tools`: the ZavaRetailAgent-style dispatch: one URL for every tool, the call's `name` picks it. The body is
  Agent RFT's `{"type": "function_call", "id", "call_id", "name", "arguments": "<json>", "trace_id", "item"}`, the
  answer a Responses `{"type": "function_call_output", "call_id", "id", "output": "<string>"}`.
- `POST /tool/NAME`: one URL per tool (the RFT_ToolCall demo's `/tool/search_catalog`), the same body and answer.
- `POST /score`: an endpoint grader, `{"sample", "item", "trace_id"}` → `{"score"}`. It joins its own tool log on
  the trace_id, as Microsoft's demo grader does: 1.0 when the answer holds `item.reference_answer` and the rollout
  called every tool of `item.reference_tool_calls`, 0.5 for the answer alone, else 0.

The retail database is copied for each trace_id on its first call, so a rollout's changes (a cancelled order) are
its own, and a second rollout starts from the same shop. Tool errors the way tau-bench's tools report them:
"Error: ..." as a 200's output. A call of an unknown tool is a 404, arguments that are not JSON a 400.

Faults for tests, each for the next calls of one tool (or of the grader, name "score"): `fail(name, status, times)`
answers that status (a 5xx, a 4xx with a JSON payload), `drop(name, times)` closes the connection unanswered,
`delay(name, seconds)`, `huge(name)` answers an output over 1 MB, `echo(name)` a 400 quoting the request's headers
(a server echoing the credential it was sent). `key` set: a request without `X-Functions-Key: KEY` or
`Authorization: Bearer KEY` gets 401 {"detail": "Unauthorized"}, as the demo's app-level check answers.
"""

from __future__ import annotations

import ast
import copy
import json
import operator
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

HOST = "127.0.0.1"

USERS: dict[str, dict[str, Any]] = {
    "ava_moore_4721": {
        "name": {"first_name": "Ava", "last_name": "Moore"}, "email": "ava.moore@example.com",
        "address": {"address1": "12 Cedar Lane", "city": "San Antonio", "state": "TX", "zip": "78234"},
        "payment_methods": {"credit_card_1190": {"source": "credit_card", "brand": "visa", "last_four": "1190"},
                            "gift_card_3303": {"source": "gift_card", "balance": 60.0}},
        "orders": ["#W4817420", "#W2301877"]},
    "liam_chen_9055": {
        "name": {"first_name": "Liam", "last_name": "Chen"}, "email": "liam.chen@example.com",
        "address": {"address1": "400 Harbor St", "city": "Seattle", "state": "WA", "zip": "98101"},
        "payment_methods": {"paypal_5512": {"source": "paypal"}}, "orders": ["#W7710003"]},
}
PRODUCTS: dict[str, dict[str, Any]] = {
    "6938111410": {"name": "Hiking Boots", "variants": {"3812493782": {"options": {"size": "9", "material": "leather"},
                                                                        "price": 243.34, "available": True},
                                                         "4582956489": {"options": {"size": "10", "material": "leather"},
                                                                        "price": 241.68, "available": True}}},
    "1656367028": {"name": "Water Bottle", "variants": {"7661609223": {"options": {"capacity": "750ml"},
                                                                        "price": 46.51, "available": True}}},
}
ORDERS: dict[str, dict[str, Any]] = {
    "#W4817420": {"user_id": "ava_moore_4721", "status": "delivered", "delivered": "2026-11-20",
                  "items": [{"item_id": "3812493782", "product_id": "6938111410", "name": "Hiking Boots",
                             "price": 243.34}], "payment_method_id": "credit_card_1190"},
    "#W2301877": {"user_id": "ava_moore_4721", "status": "pending",
                  "items": [{"item_id": "7661609223", "product_id": "1656367028", "name": "Water Bottle",
                             "price": 46.51}], "payment_method_id": "gift_card_3303"},
    "#W7710003": {"user_id": "liam_chen_9055", "status": "processed",
                  "items": [{"item_id": "4582956489", "product_id": "6938111410", "name": "Hiking Boots",
                             "price": 241.68}], "payment_method_id": "paypal_5512"},
}
DB = {"users": USERS, "products": PRODUCTS, "orders": ORDERS}

# The tools' schemas as a dataset line declares them (chat shape), after tau-bench's retail domain.
def _fn(name: str, description: str, **params: str) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "description": description, "parameters": {
        "type": "object", "properties": {k: {"type": "array" if t == "array" else "string", **(
            {"items": {"type": "string"}} if t == "array" else {})} for k, t in params.items()},
        "required": list(params)}}}


RETAIL_TOOLS: list[dict[str, Any]] = [
    _fn("find_user_id_by_email", "Find a user id by email.", email="string"),
    _fn("find_user_id_by_name_zip", "Find a user id by first name, last name and zip code.", first_name="string",
        last_name="string", zip="string"),
    _fn("get_user_details", "Get a user's profile and orders.", user_id="string"),
    _fn("list_user_orders", "List a user's order ids.", user_id="string"),
    _fn("get_order_details", "Get an order's status and items.", order_id="string"),
    _fn("get_product_details", "Get a product's variants.", product_id="string"),
    _fn("cancel_pending_order", "Cancel a pending order.", order_id="string", reason="string"),
    _fn("policy_verify_return", "Is a return of these items eligible?", order_id="string", item_ids="array",
        reason="string"),
    _fn("return_delivered_order_items", "Return items of a delivered order.", order_id="string", item_ids="array",
        payment_method_id="string"),
    _fn("calculate", "Calculate an arithmetic expression.", expression="string"),
    _fn("transfer_to_human_agents", "Transfer the user to a human agent.", summary="string"),
]
TOOL_NAMES = [t["function"]["name"] for t in RETAIL_TOOLS]


def tools_config(server_url: str, headers: dict[str, str] | None = None,
                 names: list[str] | None = None) -> list[dict[str, Any]]:
    """Agent RFT's tools list for these tools, every one at `server_url` (ZavaRetailAgent's shape)."""
    return [{"name": n, "server_url": server_url, "headers": dict(headers or {})} for n in names or TOOL_NAMES]


_OPS: dict[type[ast.AST], Callable[..., float]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.USub: operator.neg}


def _arith(node: ast.AST) -> float:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        return float(node.value)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        return float(_OPS[type(node.op)](_arith(node.left), _arith(node.right)))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _OPS:
        return float(_OPS[type(node.op)](_arith(node.operand)))
    raise ValueError("only numbers, + - * / and parentheses")


def run_tool(db: dict[str, Any], name: str, args: dict[str, Any]) -> str:
    """One retail tool against a rollout's copy of the database; its output as the model is shown it."""
    users, orders, products = db["users"], db["orders"], db["products"]
    if name == "find_user_id_by_email":
        found = [uid for uid, u in users.items() if u["email"] == args.get("email")]
        return found[0] if found else "Error: user not found"
    if name == "find_user_id_by_name_zip":
        found = [uid for uid, u in users.items() if u["name"]["first_name"].lower() == str(args.get(
            "first_name", "")).lower() and u["name"]["last_name"].lower() == str(args.get("last_name", "")).lower()
            and u["address"]["zip"] == args.get("zip")]
        return found[0] if found else "Error: user not found"
    if name in ("get_user_details", "list_user_orders"):
        user = users.get(args.get("user_id"))
        if user is None:
            return "Error: user not found"
        return json.dumps(user if name == "get_user_details" else user["orders"])
    if name == "get_order_details":
        order = orders.get(args.get("order_id"))
        return json.dumps({"order_id": args["order_id"], **order}) if order else "Error: order not found"
    if name == "get_product_details":
        product = products.get(args.get("product_id"))
        return json.dumps(product) if product else "Error: product not found"
    if name == "cancel_pending_order":
        order = orders.get(args.get("order_id"))
        if order is None:
            return "Error: order not found"
        if order["status"] != "pending":
            return f"Error: non-pending order cannot be cancelled (status: {order['status']})"
        order["status"] = "cancelled"
        order["cancel_reason"] = args.get("reason")
        return json.dumps({"order_id": args["order_id"], **order})
    if name == "policy_verify_return":
        order = orders.get(args.get("order_id"))
        if order is None:
            return "Error: order not found"
        ok = order["status"] == "delivered"
        return json.dumps([{"item_id": i, "eligibility": ok, "reason": "delivered within 30 days" if ok else
                            f"order is {order['status']}"} for i in args.get("item_ids") or []])
    if name == "return_delivered_order_items":
        order = orders.get(args.get("order_id"))
        if order is None or order["status"] != "delivered":
            return "Error: non-delivered order cannot be returned"
        order["status"] = "return requested"
        return json.dumps({"order_id": args["order_id"], **order})
    if name == "calculate":
        try:
            return str(round(_arith(ast.parse(str(args.get("expression", "")), mode="eval").body), 2))
        except (ValueError, SyntaxError, ZeroDivisionError) as exc:
            return f"Error: {exc}"
    if name == "transfer_to_human_agents":
        return "Transfer successful"
    raise KeyError(name)


@dataclass
class Fault:
    kind: str  # "status", "drop", "delay", "huge", "echo", "bad_score"
    status: int = 503
    seconds: float = 0.0


@dataclass
class Logged:
    """One request the server received: its path, headers (lower-case names), body, and the status it answered."""

    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    status: int = 0
    at: float = field(default_factory=time.monotonic)


class AgentRFTServer:
    """The server; `calls` and `grades` log every tool and grader request, in order."""

    def __init__(self, key: str | None = None, grader_key: str | None = None):
        self.key, self.grader_key = key, grader_key
        self.calls: list[Logged] = []
        self.grades: list[Logged] = []
        self.faults: dict[str, deque[Fault]] = {}
        self.traces: dict[str, dict[str, Any]] = {}  # trace_id → that rollout's copy of the database
        self.tool_log: dict[str, list[str]] = {}  # trace_id → the tools called, in order (what /score joins on)
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.base_url = ""

    # -- faults
    def _add(self, name: str, fault: Fault, times: int) -> None:
        with self._lock:
            self.faults.setdefault(name, deque()).extend(fault for _ in range(times))

    def fail(self, name: str, status: int = 503, times: int = 1) -> None:
        self._add(name, Fault("status", status), times)

    def drop(self, name: str, times: int = 1) -> None:
        self._add(name, Fault("drop"), times)

    def delay(self, name: str, seconds: float, times: int = 1) -> None:
        self._add(name, Fault("delay", seconds=seconds), times)

    def huge(self, name: str, times: int = 1) -> None:
        self._add(name, Fault("huge"), times)

    def echo(self, name: str, times: int = 1) -> None:
        self._add(name, Fault("echo"), times)

    def bad_score(self, times: int = 1) -> None:
        self._add("score", Fault("bad_score"), times)

    def _fault(self, name: str) -> Fault | None:
        with self._lock:
            queue = self.faults.get(name)
            return queue.popleft() if queue else None

    # -- lifecycle
    def url(self, path: str) -> str:
        return f"{self.base_url}{path}"

    def start(self) -> AgentRFTServer:
        owner = self

        class Handler(_Handler):
            server_owner = owner

        self._server = ThreadingHTTPServer((HOST, 0), Handler)
        self._server.daemon_threads = True
        self.base_url = f"http://{HOST}:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.005},
                                        name="agent-rft-server", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> AgentRFTServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- what the handler asks
    def authorized(self, headers: dict[str, str], key: str | None) -> bool:
        return key is None or headers.get("x-functions-key") == key or headers.get("authorization") == f"Bearer {key}"

    def call(self, name: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """A tool call's status and answer."""
        trace = str(body.get("trace_id") or "")
        try:
            args = json.loads(body.get("arguments") or "{}")
        except ValueError:
            return 400, {"error": {"message": "arguments are not JSON"}}
        if name not in TOOL_NAMES:
            return 404, {"detail": f"unknown tool {name!r}"}
        with self._lock:
            db = self.traces.setdefault(trace, copy.deepcopy(DB))
            self.tool_log.setdefault(trace, []).append(name)
            output = run_tool(db, name, args if isinstance(args, dict) else {})
        return 200, {"type": "function_call_output", "call_id": body.get("call_id"), "id": body.get("id"),
                     "output": output}

    def score(self, body: dict[str, Any]) -> dict[str, Any]:
        sample, item = body.get("sample") or {}, body.get("item") or {}
        answer = str(sample.get("output_text") or "")
        reference = str(item.get("reference_answer") or "")
        with self._lock:
            called = set(self.tool_log.get(str(body.get("trace_id")), []))
        right = bool(reference) and reference.lower() in answer.lower()
        tools_ok = set(item.get("reference_tool_calls") or []) <= called
        return {"score": 1.0 if right and tools_ok else 0.5 if right else 0.0}


class _Handler(BaseHTTPRequestHandler):
    server_owner: AgentRFTServer
    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # no Nagle delay between header and body
        super().setup()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - silence per-request logging
        pass

    def handle(self) -> None:
        try:
            super().handle()
        except (ConnectionError, OSError):
            pass

    def _send(self, status: int, obj: Any, raw: bytes | None = None) -> None:
        body = raw if raw is not None else json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        self.wfile.flush()

    def do_POST(self) -> None:
        owner = self.server_owner
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        headers = {k.lower(): v for k, v in self.headers.items()}
        path = self.path.split("?")[0]
        try:
            body = json.loads(raw)
        except ValueError:
            body = {}
        logged = Logged(path, headers, body if isinstance(body, dict) else {})
        grading = path == "/score"
        with owner._lock:
            (owner.grades if grading else owner.calls).append(logged)
        name = "score" if grading else path.removeprefix("/tool/") if path.startswith("/tool/") else str(
            logged.body.get("name") or "")
        fault = owner._fault(name)
        if fault is not None and fault.kind == "drop":
            logged.status = -1
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)  # no answer at all: a dropped connection
            return
        if fault is not None and fault.kind == "delay":
            time.sleep(fault.seconds)
        if not owner.authorized(headers, owner.grader_key if grading else owner.key):
            logged.status = 401
            self._send(401, {"detail": "Unauthorized"})
            return
        if fault is not None and fault.kind == "status":
            logged.status = fault.status
            self._send(fault.status, {"error": {"message": f"scripted {fault.status}"}})
            return
        if fault is not None and fault.kind == "echo":  # an error page quoting what it was sent
            logged.status = 400
            self._send(400, {"error": "bad request", "received_headers": headers})
            return
        if grading:
            logged.status = 200
            if fault is not None and fault.kind == "bad_score":
                self._send(200, {"score": "high"})
            else:
                self._send(200, owner.score(logged.body))
            return
        if path not in ("/tools",) and not path.startswith("/tool/"):
            logged.status = 404
            self._send(404, {"detail": "Not Found"})
            return
        status, answer = owner.call(name, logged.body)
        if fault is not None and fault.kind == "huge":
            answer["output"] = "x" * 1_100_000
        logged.status = status
        self._send(status, answer)
