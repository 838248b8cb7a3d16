"""`rfteval view PATH --bundle DIR`: the viewer's pages as static files that open from disk, with no server.

The same page (static/app.js) reads the same JSON the server sends, written into DIR/data.js: the Runs page, the
default pair's Compare page with its N lowest-delta items and each of their Item pages, and the plots as SVG
files. Filters select among those rows by flags the library computed (model.ViewData.filtered), so a bundle's
"regressed" is the server's. What does not fit is said on every page ("the 500 lowest-delta items of 100,000")
with the command that shows the rest.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from pathlib import Path

from rfteval.data.outfile import write_text_atomic
from rfteval.errors import InputError
from rfteval.view.model import FILTERS, Page, ViewData
from rfteval.view.server import dumps, static_text

CSP_META = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'none'; "
            "base-uri 'none'; form-action 'none'")


def bundle_index() -> str:
    """The server's index.html with relative paths, the data script first, and the policy as a meta tag."""
    html = static_text("index.html")
    html = html.replace('<link rel="stylesheet" href="/static/app.css">',
                        f'<meta http-equiv="Content-Security-Policy" content="{CSP_META}">\n'
                        '<link rel="stylesheet" href="static/app.css">')
    return html.replace('<script src="/static/app.js" defer></script>',
                        '<script src="data.js" defer></script>\n<script src="static/app.js" defer></script>')


def _haystack(page: Page) -> str:
    """What a bundle's search looks through for one item: its prompt and fields, both models' texts."""
    import json

    parts = [json.dumps(page.get("item"), ensure_ascii=False)]
    samples = page.get("samples")
    if isinstance(samples, dict):
        for records in samples.values():
            for s in records if isinstance(records, list) else []:
                if isinstance(s, dict):
                    for name in ("output_text", "reasoning_text", "grader_stdout"):
                        v = s.get(name)
                        parts.append(v if isinstance(v, str) else json.dumps(v, ensure_ascii=False))
    return "\n".join(parts).lower()


def bundle_data(data: ViewData, limit: int, command: str) -> Page:
    """Every page's JSON a bundle carries, and what it left out."""
    a, b = data.default_pair
    compare = data.compare_page(a, b, limit=limit)
    total = compare["all_items"]
    assert isinstance(total, int)
    flags = {f: set(data.filtered(a, b, [f])) for f in FILTERS}
    rows = compare["items"]
    assert isinstance(rows, list)
    items: Page = {}
    haystack: Page = {}
    for row in rows:
        assert isinstance(row, dict)
        item_id = str(row["item_id"])
        row["flags"] = [f for f in FILTERS if item_id in flags[f]]
        page = data.item_page(item_id, a, b)
        items[item_id] = page
        haystack[item_id] = _haystack(page)
    left = (f"all {total:,} items" if len(rows) >= total else
            f"the {len(rows):,} lowest-delta items of {total:,}; the rest: {command}")
    out: Page = {"runs": data.runs_page(), "compare": compare, "items": items, "haystack": haystack,
                       "left_out": left}
    from rfteval.baseline_readiness import READINESS_MAX_RECORDS

    records = data.comparison(a, b).baseline["records"]
    pages: list[tuple[str, Callable[[], Page]]] = []
    if data.options.agree is not None:  # asked for: a flag it refuses (--min-kappa with no verdict) is one line, exit 2
        out["agree"] = data.agree_page()
    else:  # only the pairs found among the paths, if any
        pages.append(("agree", data.agree_page))
    if records <= READINESS_MAX_RECORDS:  # as compare --html: re-reading every record costs more than the rest
        pages.append(("readiness", lambda: data.readiness_page(None)))
    if len(data.labels) > 2:  # with two models the series is the Compare page's comparison
        pages.append(("series", data.series_page))
    for name, build in pages:
        try:
            out[name] = build()
        except InputError:
            out[name] = None
    return out


def write_bundle(data: ViewData, out: Path, limit: int = 500) -> str:
    """Write DIR/index.html, DIR/data.js, DIR/static/ and DIR/plots/; returns what the bundle holds."""
    given = dict.fromkeys(str(s.given or s.path) for s in data.sources.values())
    paths = " ".join(shlex.quote(p) for p in given)
    payload = bundle_data(data, limit, f"rfteval view {paths}")
    out.mkdir(parents=True, exist_ok=True)
    (out / "static").mkdir(exist_ok=True)
    (out / "plots").mkdir(exist_ok=True)
    a, b = data.default_pair
    for name in ("scatter", "deltas", "distributions"):
        write_text_atomic(out / "plots" / f"{name}.svg", data.plot(a, b, name))
    for name in ("app.js", "app.css"):
        write_text_atomic(out / "static" / name, static_text(name))
    write_text_atomic(out / "data.js", "window.RFTEVAL_BUNDLE = " + dumps(payload) + ";\n")
    write_text_atomic(out / "index.html", bundle_index())
    return str(payload["left_out"])
