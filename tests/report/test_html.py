"""rfteval.report.html: one self-contained page with inline SVG plots, opened in headless Chromium."""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import pytest

from rfteval.compare.gate import Gate
from rfteval.compare.paths import compare_paths
from rfteval.compare.result import CompareOptions
from rfteval.data.records import make_record, write_jsonl
from rfteval.report.html import MAX_FOREST, render_html, ticks, write_html
from tests.support.optional import missing
from tests.support.record_sides import write_side

WINDOW = (1200, 2400)


def make_result(tmp_path: Path, n: int = 24):
    base = {f"q{i}": [(i % 4) / 4, ((i + 1) % 4) / 4, (i % 3) / 3] for i in range(n)}
    tuned = {f"q{i}": [min(1.0, (i % 4) / 4 + 0.25), ((i + 2) % 4) / 4, (i % 2) / 1] for i in range(n)}
    base["<script>alert(1)</script>"] = [0.0]
    tuned["<script>alert(1)</script>"] = [1.0]
    b = write_side(tmp_path / "b.jsonl", "base", base)
    t = write_side(tmp_path / "t.jsonl", "tuned", tuned)
    return compare_paths(b, t, options=CompareOptions(gate=Gate(max_item_drop=0.3)))


def test_the_listed_items_samples_are_folded_and_escaped(tmp_path):
    """compare --html's drill-down (issue 29): each listed item's samples of both sides, epoch by epoch, in a
    closed <details>; hostile outputs stay text."""
    from rfteval.compare.samples import listed_samples

    result = make_result(tmp_path)
    b = write_side(tmp_path / "b.jsonl", "base", {"x": [0.0, 1.0]})
    recs = [make_record(run_id="t", model_label="tuned", model="m", item_id="x", epoch=e,
                        output_text="<img src=x onerror=alert(1)>" + "y" * 5000) for e in (0, 1)]
    for r in recs:
        r.score = 1.0
    t = tmp_path / "t2.jsonl"
    write_jsonl(recs, t)
    small = compare_paths(b, t)
    samples = listed_samples([(str(s["path"]), str(s["label"])) for s in (small.baseline, small.candidate)], ["x"])
    assert [len(side) for side in samples["x"]] == [2, 2] and samples["x"][1][0]["omitted"] == 5000 + 28 - 4000
    page = render_html(small, samples=samples)
    assert page.count('<details class="drill">') == 1 and "<img" not in page.lower()
    assert "&lt;img src=x onerror=alert(1)&gt;" in page and "1,028 more characters" in page
    ids = result.items["item_id"].head(50).tolist()
    full = listed_samples([(str(s["path"]), str(s["label"])) for s in (result.baseline, result.candidate)], ids)
    assert render_html(result, samples=full).count('<details class="drill">') == len(ids)


def test_self_contained_and_escaped(tmp_path):
    page = render_html(make_result(tmp_path))
    assert page.startswith("<!DOCTYPE html>")
    lowered = page.lower()
    for banned in ("<script", "<link", "<img", "<iframe", "src=", "url(", "@import"):
        assert banned not in lowered, banned
    # the only URL is the SVG namespace name, which is never fetched
    assert set(re.findall(r"https?://[^\s\"'<>]+", page)) == {"http://www.w3.org/2000/svg"}
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_plots_have_their_elements(tmp_path):
    result = make_result(tmp_path)
    page = render_html(result)
    for plot in ("scatter", "deltas", "distributions"):
        assert f'<svg id="{plot}"' in page
    scatter = page.split('<svg id="scatter"')[1].split("</svg>")[0]
    deltas = page.split('<svg id="deltas"')[1].split("</svg>")[0]
    dist = page.split('<svg id="distributions"')[1].split("</svg>")[0]
    # coincident items merge: one dot per distinct (baseline, candidate) pair, counts summing to all items
    pairs = {(round(b, 9), round(c, 9)) for b, c in zip(result.items["baseline"], result.items["candidate"])}
    assert scatter.count('class="item"') == len(pairs)
    counts = [int(m) for m in re.findall(r"<title>(\d+) item\(s\)", scatter)]
    assert sum(counts) == len(result.items)
    assert deltas.count('class="delta"') == len(result.items)
    assert deltas.count('class="overall-ci"') == 1
    assert dist.count('class="bar baseline"') == 10 and dist.count('class="bar candidate"') == 10
    heights = [float(h) for h in re.findall(r'class="bar baseline"[^>]*height="([\d.]+)"', dist)]
    assert sum(h > 0 for h in heights) >= 2


def test_many_items_are_capped(tmp_path):
    result = make_result(tmp_path, n=700)
    page = render_html(result)
    deltas = page.split('<svg id="deltas"')[1].split("</svg>")[0]
    assert deltas.count('class="delta"') == MAX_FOREST
    assert f"Showing {MAX_FOREST} of 701 items" in page
    assert len(page) < 400_000


def test_ticks():
    assert ticks(0, 1) == [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]
    assert ticks(-1, 1) == [-1.0, -0.5, 0.0, 0.5, 1.0]
    assert ticks(0, 10) == [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


def _png_info(path: Path) -> tuple[int, int, int]:
    """(width, height, distinct byte values in the decompressed image data)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    pos, idat = 8, b""
    while pos < len(data):
        length = struct.unpack(">I", data[pos:pos + 4])[0]
        kind = data[pos + 4:pos + 8]
        if kind == b"IDAT":
            idat += data[pos + 8:pos + 8 + length]
        pos += 12 + length
    return width, height, len(set(zlib.decompress(idat)))


@pytest.mark.slow
def test_opens_in_headless_chromium(tmp_path):
    browser = _chromium()
    if browser is None:
        missing("chromium is not installed (Debian's package, which `make test` installs when it may): the HTML "
                "screenshot check did not run", "browser")
    result = make_result(tmp_path)
    page = tmp_path / "report.html"
    write_html(result, page)
    shot = tmp_path / "shot.png"
    flags = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={tmp_path / 'profile'}", f"--window-size={WINDOW[0]},{WINDOW[1]}"]
    dom = subprocess.run(flags + ["--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    html = dom.stdout
    assert html.count("<svg") == 3
    for plot, element in (("scatter", "<circle"), ("deltas", "<circle"), ("distributions", "<rect")):
        body = html.split(f'id="{plot}"')[1].split("</svg>")[0]
        assert body.count(element) >= 5, plot
    assert 'id="summary"' in html and "Gate" in html
    run = subprocess.run(flags + [f"--screenshot={shot}", page.as_uri()], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and shot.exists(), run.stderr[-2000:]
    width, height, distinct = _png_info(shot)
    assert (width, height) == WINDOW
    assert shot.stat().st_size > 30_000  # a blank page compresses to a few KB
    assert distinct > 50
