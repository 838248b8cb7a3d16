"""The README's screenshots of `rfteval view` (docs/view-compare.png, docs/view-item.png), from the demo's ChipStack
run: `rfteval run` on the bundled replay recordings (as scripts/demo.sh runs it) into a temporary directory, the
viewer served on 127.0.0.1, Debian's headless Chromium driven by Playwright. docs/view-trajectory.png is an agent's
sample card (issue 37) from scripted records written here (agent_example: a support agent with three tools, its
turns written out, no model behind them), labelled as such in the README.

Each page is checked before it is shot: the text it must show is there (the summary's delta, both models' samples)
and the picture is not blank. With --check nothing is written: the pages are shot into a temporary directory and
checked, and the committed files must exist, be PNGs of the same size and not blank. Pixels are not compared:
fonts and anti-aliasing differ between Chromium builds, so a byte-for-byte check would fail on a correct page.
Usage: python scripts/make_screenshots.py [--check]
"""

from __future__ import annotations

import argparse
import struct
import subprocess
import sys
import tempfile
import threading
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
CHIP = ROOT / "datasets" / "chipstack"
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
WIDTH, HEIGHT = 1280, 900
SHOTS = {"view-compare.png": ("compare", ["+0.115", "24 of 24 items", "Items, lowest delta first"]),
         "view-item.png": ("item", ["Prompt, as the model saw it", "base · epoch 1", "tuned · epoch 1"])}
TRAJECTORY = ("view-trajectory.png", ["trajectory", "4 turns", "stop: no_tool_calls", "ValueError ×1",
                                      "PermissionError ×1", "show all"])


def png_info(data: bytes) -> tuple[int, int, int]:
    """(width, height, distinct byte values of the decompressed image data): a blank page has a handful."""
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG")
    width, height = struct.unpack(">II", data[16:24])
    pos, idat = 8, b""
    while pos < len(data):
        length = struct.unpack(">I", data[pos:pos + 4])[0]
        if data[pos + 4:pos + 8] == b"IDAT":
            idat += data[pos + 8:pos + 8 + length]
        pos += 12 + length
    return width, height, len(set(zlib.decompress(idat)))


def demo_run(out: Path) -> Path:
    rfteval = Path(sys.executable).parent / "rfteval"
    cmd = [str(rfteval)] if rfteval.exists() else [sys.executable, "-m", "rfteval"]
    subprocess.run([*cmd, "run", "--dataset", str(CHIP / "items.jsonl"), "--grader", str(ROOT / "graders/chipstack.json"),
                    "--model", f"base=replay:{CHIP / 'recordings/base.jsonl'}",
                    "--model", f"tuned=replay:{CHIP / 'recordings/tuned.jsonl'}", "--epochs", "3", "--out", str(out)],
                   check=True, capture_output=True, cwd=ROOT)
    return out


Turns = list[tuple[str | None, list[tuple[str, dict[str, object], str]]]]  # (text, [(tool, arguments, result)])


def _turns(turns: Turns) -> dict[str, object]:
    """A record's agent fields (the contract of issue 37) from scripted turns: (text, [(tool, arguments, result)])."""
    import json
    import re

    messages: list[dict[str, object]] = []
    errors: dict[str, int] = {}
    calls = 0
    for n, (text, listed) in enumerate(turns, 1):
        message: dict[str, object] = {"role": "assistant", "content": text}
        if listed:
            message["tool_calls"] = [{"id": f"call_{n}_{k}", "type": "function",
                                      "function": {"name": name, "arguments": json.dumps(args)}}
                                     for k, (name, args, _) in enumerate(listed)]
        messages.append(message)
        for k, (_, _, result) in enumerate(listed):
            calls += 1
            messages.append({"role": "tool", "tool_call_id": f"call_{n}_{k}", "content": result})
            kind = re.match(r"error: (\w+):", result)
            if kind:
                errors[kind.group(1)] = errors.get(kind.group(1), 0) + 1
    return {"turns": len(turns), "stop_reason": "no_tool_calls", "tool_calls": calls, "tool_errors": errors,
            "transcript": json.dumps(messages)}


def agent_example(out: Path) -> list[Path]:
    """Scripted records of a support agent (find_orders, get_order, refund), base and tuned, 4 items x 2 epochs:
    the base model fumbles its refund calls, the tuned one reads the order first. Written for the screenshot."""
    import json

    out.mkdir(parents=True, exist_ok=True)
    order = {"order_id": "A-1042", "customer": "dana@example.com", "currency": "USD", "items": [
        {"sku": f"SKU-{k:03d}", "name": f"replacement filter, pack of {k}", "qty": 1, "price": 10.75}
        for k in range(1, 7)], "payments": [
        {"event": "charge", "amount": 64.5, "at": "2026-11-30T10:02:11Z", "card": "visa ****4242"},
        {"event": "charge", "amount": 64.5, "at": "2026-11-30T10:02:13Z", "card": "visa ****4242"}],
        "shipping": {"carrier": "UPS", "status": "delivered", "events": [
            {"at": f"2026-12-0{d}T08:00:00Z", "where": w} for d, w in enumerate(
                ["Reno, NV", "Sacramento, CA", "Oakland, CA", "Berkeley, CA"], 1)]},
        "notes": "customer reports a duplicate charge; " * 40}
    order_text = json.dumps(order, indent=2)
    found = json.dumps([{"order_id": "A-1042", "total": 64.5}, {"order_id": "A-0977", "total": 19.0}])
    rows: dict[str, list[dict[str, object]]] = {"base": [], "tuned": []}
    for i in range(4):
        item = f"refund-{i + 1}"
        base: Turns = [
            ("Let me look up your orders.", [("find_orders", {"email": "dana@example.com"}, found)]),
            (None, [("refund", {"order_id": "A-1042", "amount": "all"},
                     "error: ValueError: amount must be a number, got 'all'")]),
            (None, [("refund", {"order_id": "A-1042", "amount": 129.0},
                     "error: PermissionError: refunds over 100.00 need a supervisor")]),
            ("I have requested a refund for order A-1042.", [])]
        tuned: Turns = [
            (None, [("get_order", {"order_id": "A-1042"}, order_text)]),
            (None, [("refund", {"order_id": "A-1042", "amount": 64.5, "reason": "duplicate charge"},
                     '{"refund_id": "R-7781", "status": "approved", "amount": 64.5}')]),
            ("You were charged twice for order A-1042. I refunded the duplicate charge of $64.50 "
             "(refund R-7781); it reaches your card in 3-5 business days.", [])]
        for label, turns, score in (("base", base, 0.0 if i < 3 else 1.0), ("tuned", tuned, 1.0)):
            for epoch in (1, 2):
                rows[label].append({
                    "run_id": "scripted-agent", "model_label": label, "model": f"scripted-{label}", "item_id": item,
                    "epoch": epoch, "output_text": turns[-1][0], "output_json": None, "score": score,
                    "sub_scores": None, "error": None,
                    "usage": {"input_tokens": 812 * len(turns), "output_tokens": 64 * len(turns),
                              "reasoning_tokens": None},
                    "latency_s": 0.4 * len(turns), "cached": False, "finished_at": "2026-12-07T00:00:00Z",
                    **_turns(turns)})
    paths = []
    for label, records in rows.items():
        paths.append(out / f"{label}.jsonl")
        paths[-1].write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return paths


def shoot(out_dir: Path) -> dict[str, bytes]:
    """Every screenshot as PNG bytes, each page checked for its text first."""
    import uvicorn
    from playwright.sync_api import sync_playwright

    from rfteval.view import server
    from rfteval.view.model import ViewData

    with tempfile.TemporaryDirectory() as tmp:
        data = ViewData([demo_run(Path(tmp) / "demo-chipstack")])
        lowest = data.filtered(*data.default_pair)[0]
        agent = ViewData(agent_example(Path(tmp) / "agent"))
        sock = server.bind("127.0.0.1", 0)
        url = server.url_of(sock)
        srv = uvicorn.Server(uvicorn.Config(server.make_app(data), log_level="warning", lifespan="off"))
        thread = threading.Thread(target=srv.run, kwargs={"sockets": [sock]}, daemon=True)
        thread.start()
        agent_sock = server.bind("127.0.0.1", 0)
        agent_url = server.url_of(agent_sock)
        agent_srv = uvicorn.Server(uvicorn.Config(server.make_app(agent), log_level="warning", lifespan="off"))
        agent_thread = threading.Thread(target=agent_srv.run, kwargs={"sockets": [agent_sock]}, daemon=True)
        agent_thread.start()
        shots: dict[str, bytes] = {}
        try:
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
                page = browser.new_page(viewport={"width": WIDTH, "height": HEIGHT})
                for name, (path, expected) in SHOTS.items():
                    page.goto(url + (path if path == "compare" else f"item?id={lowest}"))
                    page.wait_for_selector("main h1")
                    # a function, not an expression: polling a string evals it, which the viewer's CSP forbids
                    page.wait_for_function("() => [...document.images].every(i => i.complete)")
                    text = page.inner_text("main")
                    missing = [t for t in expected if t not in text]
                    if missing:
                        raise SystemExit(f"make_screenshots: {name}: the page lacks {missing}")
                    if path == "item":  # the samples side by side, not only the prompt: scroll them to the top
                        page.evaluate("document.getElementById('samples').scrollIntoView()")
                    shots[name] = page.screenshot()
                name, expected = TRAJECTORY
                page.goto(agent_url + "item?id=refund-1")
                page.wait_for_selector(".trajectory")
                text = page.inner_text("main")
                missing = [t for t in expected if t not in text]
                if missing:
                    raise SystemExit(f"make_screenshots: {name}: the page lacks {missing}")
                page.evaluate("document.getElementById('samples').scrollIntoView()")
                shots[name] = page.screenshot()
                browser.close()
        finally:
            for s, t in ((srv, thread), (agent_srv, agent_thread)):
                s.should_exit = True
                t.join(timeout=30)
    for name, png in shots.items():
        width, height, distinct = png_info(png)
        if (width, height) != (WIDTH, HEIGHT) or distinct < 50 or len(png) < 30_000:
            raise SystemExit(f"make_screenshots: {name} looks blank ({width}x{height}, {distinct} values)")
    return shots


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="Shoot and check, write nothing; the committed files "
                    "must exist, be the same size and not blank.")
    args = ap.parse_args(argv)
    if not Path(CHROMIUM).exists():
        print(f"make_screenshots: {CHROMIUM} is missing (make browser installs it)", file=sys.stderr)
        return 2
    shots = shoot(DOCS)
    if args.check:
        bad = []
        for name in shots:
            path = DOCS / name
            try:
                width, height, distinct = png_info(path.read_bytes())
            except (OSError, ValueError):
                bad.append(f"{path}: missing or not a PNG")
                continue
            if (width, height) != (WIDTH, HEIGHT) or distinct < 50:
                bad.append(f"{path}: {width}x{height}, {distinct} values")
        for line in bad:
            print(f"out of date: {line} (run scripts/make_screenshots.py)", file=sys.stderr)
        return 1 if bad else 0
    for name, png in shots.items():
        (DOCS / name).write_bytes(png)
        print(f"wrote {DOCS / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
