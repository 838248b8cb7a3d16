"""The README's screenshots of `rfteval view` (docs/view-compare.png, docs/view-item.png), from the demo's ChipStack
run: `rfteval run` on the bundled replay recordings (as scripts/demo.sh runs it) into a temporary directory, the
viewer served on 127.0.0.1, Debian's headless Chromium driven by Playwright. docs/view-trajectory.png is an agent's
sample cards (issue 37) from the demo's agent run, made as scripts/demo.sh makes it: the inventory example's
`rfteval run --tools`, its tools executed in the python sandbox, its model turns from scripts/local_agent.py (a
scripted stand-in, not a model), labelled as such in the README.

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
# the base agent's epoch 2 passes a product name as a SKU, reads the error and recovers; the tuned one goes straight
TRAJECTORY_ITEM, TRAJECTORY_EPOCH = "inv-07", 2
TRAJECTORY = ("view-trajectory.png", ["trajectory", "stop: no_tool_calls", "LookupError ×1", "find_product",
                                      "get_stock", "ANSWER: 73.20"])


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


INVENTORY = ROOT / "datasets" / "inventory"


def agent_run(out: Path) -> Path:
    """The demo's agent run (scripts/demo.sh): the scripted local agent on 127.0.0.1, the tools in the sandbox."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import local_agent

    rfteval = Path(sys.executable).parent / "rfteval"
    cmd = [str(rfteval)] if rfteval.exists() else [sys.executable, "-m", "rfteval"]
    with local_agent.agent_server() as server:
        subprocess.run([*cmd, "run", "--dataset", str(INVENTORY / "items.jsonl"), "--grader",
                        str(INVENTORY / "grader.json"), "--model", "base=scripted-base", "--model",
                        "tuned=scripted-tuned", "--base-url", server.base_url, "--tools", str(INVENTORY / "tools.py"),
                        "--max-turns", "8", "--epochs", "3", "--seed", "7", "--out", str(out), "--no-readiness"],
                       check=True, capture_output=True, cwd=ROOT)
    return out


def shoot(out_dir: Path) -> dict[str, bytes]:
    """Every screenshot as PNG bytes, each page checked for its text first."""
    import uvicorn
    from playwright.sync_api import sync_playwright

    from rfteval.view import server
    from rfteval.view.model import ViewData

    with tempfile.TemporaryDirectory() as tmp:
        data = ViewData([demo_run(Path(tmp) / "demo-chipstack")])
        lowest = data.filtered(*data.default_pair)[0]
        agent = ViewData([agent_run(Path(tmp) / "demo-agent")])
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
                page.goto(agent_url + f"item?id={TRAJECTORY_ITEM}")
                page.wait_for_selector(".trajectory")
                text = page.inner_text("main")
                missing = [t for t in expected if t not in text]
                if missing:
                    raise SystemExit(f"make_screenshots: {name}: the page lacks {missing}")
                page.evaluate(f"document.querySelector('.pair[data-epoch=\"{TRAJECTORY_EPOCH}\"]').scrollIntoView()")
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
