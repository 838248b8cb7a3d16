"""`rfteval view PATH --bundle DIR`: the viewer's pages as static files that open from disk, with no server.

The same page (static/app.js) reads the same JSON the server sends, written into DIR/data.js: the Runs page, the
default pair's Compare page with its N lowest-delta items and each of their Item pages, and the plots as SVG
files. Filters select among those rows by flags the library computed (model.ViewData.filtered), so a bundle's
"regressed" is the server's. What does not fit is said on every page ("the 500 lowest-delta items of 100,000")
with the command that shows the rest.

An agent run's item pages carry each tool result's first characters (sample_card.RESULT_CHARS), as the server sends
them. The rest of every cut result is in DIR/results/<n>.js, one file per item, which the page loads when "show
all" is clicked (a script, since a page opened from disk may fetch nothing): the whole results of 500 items can
reach hundreds of MB (500 items x 3 epochs x 2 models x 10 calls x 20,000 characters, the default output limit,
is 600 MB), which data.js, read by every page, must not carry.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from pathlib import Path

from rfteval.data.outfile import write_text_atomic
from rfteval.errors import InputError
from rfteval.view.model import AGENT_FILTERS, FILTERS, SORTS, Page, ViewData
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


def _rest_of_results(data: ViewData, page: Page, part: int) -> list[str]:
    """The whole text of every cut tool result on an item page, each result marked with where its text is in the
    bundle (`part`: [the item's file number, its position there])."""
    from rfteval.compare.samples import tool_results, transcript_messages

    texts: list[str] = []
    samples = page.get("samples")
    for label, records in (samples.items() if isinstance(samples, dict) else []):
        for s in records if isinstance(records, list) else []:
            rollout = s.get("rollout") if isinstance(s, dict) else None
            turns = rollout.get("trajectory") if isinstance(rollout, dict) else None
            cut = [r for t in (turns if isinstance(turns, list) else []) if isinstance(t, dict)
                   for r in [*(c.get("result") for c in t["calls"] if isinstance(c, dict)), *t["unasked"]]
                   if isinstance(r, dict) and isinstance(r.get("text"), dict)]
            if not cut:
                continue
            assert isinstance(s, dict)
            epoch = s.get("epoch")
            record = data.sources[label].samples.record(str(page["id"]), epoch if isinstance(epoch, int) else -1)
            messages = transcript_messages(record) if record is not None else None
            full = tool_results(messages) if messages is not None else []
            for r in cut:
                index = r["index"]
                content = full[index].get("content") if isinstance(index, int) and index < len(full) else None
                if isinstance(content, str):
                    r["part"] = [part, len(texts)]
                    texts.append(content)
    return texts


def bundle_data(data: ViewData, limit: int, command: str, parts: dict[int, list[str]] | None = None) -> Page:
    """Every page's JSON a bundle carries, and what it left out; the whole texts of cut tool results go to `parts`
    (by item file number) when given."""
    a, b = data.default_pair
    compare = data.compare_page(a, b, limit=limit)
    total = compare["all_items"]
    assert isinstance(total, int)
    agent = "agent" in compare
    names = FILTERS + AGENT_FILTERS if agent else FILTERS
    flags = {f: set(data.filtered(a, b, [f])) for f in names}
    if agent:  # an agent pair: its stop reasons as flags, and its orders among the bundle's rows
        reasons = compare["agent"]["stop_reasons"]  # type: ignore[index]
        flags.update({f"stop={r}": set(data.filtered(a, b, stop=r)) for r in reasons})
    rows = compare["items"]
    assert isinstance(rows, list)
    items: Page = {}
    haystack: Page = {}
    for n, row in enumerate(rows):
        assert isinstance(row, dict)
        item_id = str(row["item_id"])
        row["flags"] = [f for f in flags if item_id in flags[f]]
        page = data.item_page(item_id, a, b)
        if agent and parts is not None:
            texts = _rest_of_results(data, page, n)
            if texts:
                parts[n] = texts
        items[item_id] = page
        haystack[item_id] = _haystack(page)
    if agent:
        here = {str(r["item_id"]) for r in rows if isinstance(r, dict)}
        compare["orders"] = {s: [i for i in data.filtered(a, b, sort=s) if i in here] for s in SORTS}
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
    parts: dict[int, list[str]] = {}
    payload = bundle_data(data, limit, f"rfteval view {paths}", parts)
    out.mkdir(parents=True, exist_ok=True)
    (out / "static").mkdir(exist_ok=True)
    (out / "plots").mkdir(exist_ok=True)
    a, b = data.default_pair
    for name in ("scatter", "deltas", "distributions"):
        write_text_atomic(out / "plots" / f"{name}.svg", data.plot(a, b, name))
    for name in ("app.js", "app.css"):
        write_text_atomic(out / "static" / name, static_text(name))
    if parts:
        (out / "results").mkdir(exist_ok=True)
    for n, texts in parts.items():
        write_text_atomic(out / "results" / f"{n}.js",
                          f"(window.RFTEVAL_RESULTS = window.RFTEVAL_RESULTS || {{}})[{n}] = {dumps(texts)};\n")
    write_text_atomic(out / "data.js", "window.RFTEVAL_BUNDLE = " + dumps(payload) + ";\n")
    write_text_atomic(out / "index.html", bundle_index())
    return str(payload["left_out"])
