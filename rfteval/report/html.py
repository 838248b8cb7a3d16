"""A comparison as one self-contained HTML page: tables plus three inline SVG plots, readable offline.

No script, no font or stylesheet from the network: the file is the whole report. Plots are drawn here
(matplotlib is not a dependency) and stay small for 10^5 items: the scatter bins coincident points
and the per-item plot shows at most MAX_FOREST items, evenly spaced by rank.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from html import escape
from pathlib import Path
from typing import TYPE_CHECKING

from rfteval.data.outfile import write_text_atomic
from rfteval.report.agent_render import agent_html
from rfteval.report.format import fmt, fmt_ci, fmt_p
from rfteval.report.terminal import errors_text, metric_suffix, shown_p, summary_rows, verdict, wtl

if TYPE_CHECKING:
    import numpy as np

    from rfteval.compare.result import CompareResult
    from rfteval.compare.samples import SampleBrief
    from rfteval.compare.series import SeriesResult

MAX_FOREST = 300
SCATTER_GRID = 100
BASE_COLOR, CAND_COLOR = "#7a8ca3", "#d9822b"
UP, DOWN, FLAT = "#2e8b57", "#c0392b", "#888888"


def _n(x: float) -> str:
    return f"{x:.1f}"


class Axes:
    """Linear maps from data to pixels inside a plot frame, plus its ticks and frame as SVG."""

    def __init__(self, x0: float, x1: float, y0: float, y1: float, w: int = 560, h: int = 360, pad: int = 48):
        self.x0, self.x1, self.y0, self.y1, self.w, self.h, self.pad = x0, x1, y0, y1, w, h, pad

    def x(self, v: float) -> float:
        return self.pad + (v - self.x0) / ((self.x1 - self.x0) or 1) * (self.w - 1.5 * self.pad)

    def y(self, v: float) -> float:
        return self.h - self.pad + (self.y0 - v) / ((self.y1 - self.y0) or 1) * (self.h - 1.6 * self.pad)

    def frame(self, xlabel: str, ylabel: str, xticks: bool = True, integer_y: bool = False) -> str:
        p, parts = self.pad, []
        parts.append(f'<rect class="frame" x="{p}" y="{_n(self.y(self.y1))}" width="{_n(self.x(self.x1) - p)}" '
                     f'height="{_n(self.y(self.y0) - self.y(self.y1))}" fill="none" stroke="#bbb"/>')
        for t in ticks(self.y0, self.y1):
            if integer_y and t != int(t):
                continue
            parts.append(f'<line x1="{p - 4}" x2="{p}" y1="{_n(self.y(t))}" y2="{_n(self.y(t))}" stroke="#888"/>'
                         f'<text x="{p - 6}" y="{_n(self.y(t) + 4)}" text-anchor="end">{t:g}</text>')
        if xticks:
            for t in ticks(self.x0, self.x1):
                yb = self.y(self.y0)
                parts.append(f'<line x1="{_n(self.x(t))}" x2="{_n(self.x(t))}" y1="{_n(yb)}" y2="{_n(yb + 4)}" '
                             f'stroke="#888"/><text x="{_n(self.x(t))}" y="{_n(yb + 16)}" '
                             f'text-anchor="middle">{t:g}</text>')
        mid_x = (p + self.x(self.x1)) / 2
        parts.append(f'<text class="xlabel" x="{_n(mid_x)}" y="{self.h - 8}" text-anchor="middle">{escape(xlabel)}'
                     "</text>")
        mid_y = (self.y(self.y0) + self.y(self.y1)) / 2
        parts.append(f'<text class="ylabel" transform="translate(14,{_n(mid_y)}) rotate(-90)" '
                     f'text-anchor="middle">{escape(ylabel)}</text>')
        return "".join(parts)


def ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """Round tick values (1, 2 or 5 × 10^k apart) covering [lo, hi]."""
    span = hi - lo
    if span <= 0 or not math.isfinite(span):
        return [lo]
    raw = span / count
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step - 1e-9) * step
    out, t = [], first
    while t <= hi + 1e-9 * span:
        out.append(round(t, 10) + 0.0)
        t += step
    return out


def score_range(*arrays: np.ndarray, bounds: tuple[float, float] | None = None) -> tuple[float, float]:
    """The grader's range the comparison cut its intervals to (`bounds`), else [0, 1]; widened to scores outside
    it (a python grader's, with no declared range)."""
    import numpy as np

    lo, hi = bounds if bounds is not None else (0.0, 1.0)
    for a in arrays:
        if a.size:
            lo, hi = min(lo, float(np.nanmin(a))), max(hi, float(np.nanmax(a)))
    return lo, hi


def _svg(id_: str, ax: Axes, body: str, label: str) -> str:
    return (f'<svg id="{id_}" xmlns="http://www.w3.org/2000/svg" width="{ax.w}" height="{ax.h}" '
            f'viewBox="0 0 {ax.w} {ax.h}" role="img" aria-label="{escape(label)}">{body}</svg>')


def scatter_svg(result: CompareResult) -> str:
    """Per item: baseline mean (x) against candidate mean (y); coincident points merge into larger dots."""
    import numpy as np

    items = result.items
    bm, cm = items["baseline"].to_numpy(), items["candidate"].to_numpy()
    lo, hi = score_range(bm, cm, bounds=result.bounds)
    ax = Axes(lo, hi, lo, hi, w=420, h=420)
    span = (hi - lo) or 1.0
    gx = np.clip(((bm - lo) / span * SCATTER_GRID).round().astype(np.int64), 0, SCATTER_GRID)
    gy = np.clip(((cm - lo) / span * SCATTER_GRID).round().astype(np.int64), 0, SCATTER_GRID)
    key = gx * (SCATTER_GRID + 1) + gy
    uniq, inverse, counts = np.unique(key, return_inverse=True, return_counts=True)
    sx = np.bincount(inverse, weights=bm) / counts
    sy = np.bincount(inverse, weights=cm) / counts
    first = np.full(len(uniq), -1)
    first[inverse[::-1]] = np.arange(len(inverse))[::-1]
    what = "mean" if result.metric == "mean" else result.metric
    parts = [ax.frame(f"{result.baseline['label']} (baseline) per-item {what}",
                      f"{result.candidate['label']} (candidate) per-item {what}"),
             f'<line class="diagonal" x1="{_n(ax.x(lo))}" y1="{_n(ax.y(lo))}" x2="{_n(ax.x(hi))}" '
             f'y2="{_n(ax.y(hi))}" stroke="#999" stroke-dasharray="4 3"/>']
    tie = max(result.options.tie, 1e-12)
    ids = items["item_id"].to_numpy()
    for k in np.argsort(-counts, kind="stable"):
        x, y, n = sx[k], sy[k], int(counts[k])
        color = UP if y - x > tie else (DOWN if x - y > tie else FLAT)
        r = min(3.0 + 2.0 * math.sqrt(n - 1), 18.0)
        parts.append(f'<circle class="item" cx="{_n(ax.x(x))}" cy="{_n(ax.y(y))}" r="{_n(r)}" fill="{color}" '
                     f'fill-opacity="0.6"><title>{n} item(s), e.g. {escape(str(ids[first[k]]))}: '
                     f'{fmt(x)} → {fmt(y)}</title></circle>')
    return _svg("scatter", ax, "".join(parts), "per-item baseline vs candidate scatter")


def forest_svg(result: CompareResult) -> str:
    """Each item's delta with its interval across epochs, sorted; the overall delta and its interval as a band."""
    import numpy as np

    items = result.items
    n = len(items)
    idx = np.unique(np.linspace(0, n - 1, min(n, MAX_FOREST)).round().astype(np.int64)) if n else np.array([], int)
    shown = items.iloc[idx]
    lo, hi = score_range(items["baseline"].to_numpy(), items["candidate"].to_numpy(), bounds=result.bounds)
    span = hi - lo
    d = shown["delta"].to_numpy()
    dlo = np.clip(np.nan_to_num(shown["delta_lo"].to_numpy(), nan=0.0) if len(d) else d, -span, span)
    dhi = np.clip(np.nan_to_num(shown["delta_hi"].to_numpy(), nan=0.0) if len(d) else d, -span, span)
    ymin = min(-0.05 * span, float(np.min(np.minimum(dlo, d))) if len(d) else 0.0)
    ymax = max(0.05 * span, float(np.max(np.maximum(dhi, d))) if len(d) else 0.0)
    ax = Axes(-0.5, max(len(idx) - 0.5, 1), ymin, ymax, w=720, h=360)
    parts = [ax.frame(f"items sorted by delta ({len(idx)} of {n} shown)", "delta (candidate - baseline)",
                      xticks=False)]
    overall = result.delta
    cl, ch = overall["ci95"]
    if cl is not None and ch is not None and math.isfinite(cl) and math.isfinite(ch):
        y_top, y_bot = ax.y(min(max(ch, ymin), ymax)), ax.y(min(max(cl, ymin), ymax))
        parts.append(f'<rect class="overall-ci" x="{ax.pad}" y="{_n(y_top)}" width="{_n(ax.x(ax.x1) - ax.pad)}" '
                     f'height="{_n(max(y_bot - y_top, 0.5))}" fill="{CAND_COLOR}" fill-opacity="0.15">'
                     f'<title>overall delta interval {fmt_ci(overall["ci95"])}</title></rect>')
    parts.append(f'<line class="zero" x1="{ax.pad}" x2="{_n(ax.x(ax.x1))}" y1="{_n(ax.y(0))}" y2="{_n(ax.y(0))}" '
                 'stroke="#444"/>')
    if math.isfinite(overall["mean"]):
        parts.append(f'<line class="overall" x1="{ax.pad}" x2="{_n(ax.x(ax.x1))}" y1="{_n(ax.y(overall["mean"]))}" '
                     f'y2="{_n(ax.y(overall["mean"]))}" stroke="{CAND_COLOR}" stroke-dasharray="6 3"/>')
    tie = result.options.tie
    for pos, r in enumerate(shown.itertuples(index=False)):
        x = ax.x(pos)
        color = UP if r.delta > tie else (DOWN if r.delta < -tie else FLAT)
        if math.isfinite(r.delta_lo) and math.isfinite(r.delta_hi):
            parts.append(f'<line class="interval" x1="{_n(x)}" x2="{_n(x)}" y1="{_n(ax.y(dlo[pos]))}" '
                         f'y2="{_n(ax.y(dhi[pos]))}" stroke="{color}" stroke-opacity="0.5"/>')
        parts.append(f'<circle class="delta" cx="{_n(x)}" cy="{_n(ax.y(r.delta))}" r="2.5" fill="{color}">'
                     f'<title>{escape(str(r.item_id))}: {fmt(r.delta, sign=True)} '
                     f'{fmt_ci((r.delta_lo, r.delta_hi))}</title></circle>')
    return _svg("deltas", ax, "".join(parts), "per-item delta with intervals")


def histogram_svg(result: CompareResult, bins: int = 10) -> str:
    """The distribution of per-item means, baseline and candidate side by side in each bin."""
    import numpy as np

    bm, cm = result.items["baseline"].to_numpy(), result.items["candidate"].to_numpy()
    lo, hi = score_range(bm, cm, bounds=result.bounds)
    edges = np.linspace(lo, hi, bins + 1)
    hb, _ = np.histogram(bm, edges)
    hc, _ = np.histogram(cm, edges)
    top = max(int(hb.max(initial=0)), int(hc.max(initial=0)), 1)
    ax = Axes(lo, hi, 0, top * 1.1, w=560, h=360)
    parts = [ax.frame("per-item mean score" if result.metric == "mean" else f"per-item {result.metric}", "items",
                      integer_y=True)]
    width = (ax.x(edges[1]) - ax.x(edges[0])) * 0.42
    for k in range(bins):
        x = ax.x(edges[k]) + (ax.x(edges[k + 1]) - ax.x(edges[k])) * 0.08
        for j, (counts, color, label) in enumerate(((hb, BASE_COLOR, result.baseline["label"]),
                                                    (hc, CAND_COLOR, result.candidate["label"]))):
            y = ax.y(counts[k])
            parts.append(f'<rect class="bar {"baseline" if j == 0 else "candidate"}" x="{_n(x + j * width)}" '
                         f'y="{_n(y)}" width="{_n(width)}" height="{_n(ax.y(0) - y)}" fill="{color}">'
                         f'<title>{escape(label)}: {counts[k]} item(s) in [{edges[k]:.2f}, {edges[k + 1]:.2f}'
                         f'{"]" if k == bins - 1 else ")"}</title></rect>')
    legend_x = float(ax.pad)
    for color, label in ((BASE_COLOR, result.baseline["label"]), (CAND_COLOR, result.candidate["label"])):
        parts.append(f'<rect class="legend" x="{_n(legend_x)}" y="6" width="10" height="10" fill="{color}"/>'
                     f'<text x="{_n(legend_x + 14)}" y="15">{escape(label[:40])}</text>')
        legend_x += 30 + 7 * min(len(label), 40)
    return _svg("distributions", ax, "".join(parts), "distributions of per-item mean scores")


CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:24px auto;max-width:1100px;
color:#222;padding:0 16px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px}
table{border-collapse:collapse;margin:8px 0}th,td{padding:4px 10px;border-bottom:1px solid #e3e3e3;text-align:right}
th:first-child,td:first-child{text-align:left}thead th{border-bottom:2px solid #999}
.gate{padding:10px 14px;border-radius:6px;margin:12px 0;font-weight:600}
.pass{background:#e7f5ec;color:#1d6b3c}.fail{background:#fbeaea;color:#9b2222}
.better{color:#1d6b3c}.worse{color:#9b2222}
figure{display:inline-block;margin:8px 16px 8px 0;vertical-align:top}figcaption{color:#555;max-width:720px}
svg text{font-size:11px;fill:#333}.muted{color:#666}ul{margin:6px 0}
table.samples{table-layout:fixed;width:100%}table.samples td{text-align:left;vertical-align:top;width:50%}
.drill pre{white-space:pre-wrap;word-break:break-word;background:#f6f8fa;padding:6px;max-height:24em;overflow:auto}
"""


def _summary_html(result: CompareResult) -> str:
    level = int(result.options.level * 100)
    b, c = escape(result.baseline["label"]), escape(result.candidate["label"])
    rows = []
    for name, row in summary_rows(result):
        d = row["delta"]
        cls = {"better": "better", "worse": "worse"}.get(verdict(d), "")  # descriptive rows are never coloured
        rows.append(f"<tr><td>{escape(name)}</td><td>{row['items']}</td><td>{fmt(row['baseline']['mean'])}</td>"
                    f"<td>{fmt(row['candidate']['mean'])}</td><td class=\"{cls}\">{fmt(d['mean'], sign=True)}</td>"
                    f"<td>{fmt_ci(d['ci95'])}</td><td>{fmt_p(shown_p(d))}</td><td>{wtl(d)}</td></tr>")
    return (f'<table id="summary"><thead><tr><th></th><th>items</th><th>{b}</th><th>{c}</th><th>delta</th>'
            f"<th>{level}% CI</th><th>p adj.</th><th>W/T/L</th></tr></thead><tbody>{''.join(rows)}</tbody></table>")


def _items_html(result: CompareResult, top: int) -> str:
    items = result.items.head(top)
    b, c = escape(result.baseline["label"]), escape(result.candidate["label"])
    rows = "".join(
        f"<tr><td>{escape(str(r.item_id))}</td><td>{fmt(r.baseline)}</td><td>{fmt(r.candidate)}</td>"
        f"<td>{fmt(r.delta, sign=True)}</td><td>{r.baseline_n}/{r.candidate_n}</td>"
        f"<td>{r.baseline_errors}/{r.candidate_errors}</td></tr>" for r in items.itertuples(index=False))
    return (f'<table id="items"><thead><tr><th>item</th><th>{b}</th><th>{c}</th><th>delta</th>'
            f"<th>epochs b/c</th><th>errors b/c</th></tr></thead><tbody>{rows}</tbody></table>")


def _sample_html(s: SampleBrief) -> str:
    head = f"epoch {s['epoch']}: score {fmt(s['score'])}" + ("" if s["passed"] is None else f", passed {s['passed']}")
    parts = [f"<div class=\"sample\"><b>{escape(head)}</b>"]
    if s["error"]:
        parts.append(f"<div class=\"worse\">{escape(s['error'])}</div>")
    more = f"<div class=\"muted\">{s['omitted']:,} more characters (rfteval view shows them)</div>" if s["omitted"] else ""
    parts.append(f"<pre>{escape(s['output_text'])}</pre>{more}")
    for name, text in (("reasoning", s["reasoning_text"]), ("grader stdout", s["grader_stdout"])):
        if text:
            parts.append(f"<details><summary>{name}</summary><pre>{escape(text)}</pre></details>")
    return "".join(parts) + "</div>"


def _drilldown_html(result: CompareResult, samples: Mapping[str, list[list[SampleBrief]]]) -> str:
    """Each listed item's samples, folded: the baseline's and the candidate's, epoch by epoch."""
    b, c = escape(result.baseline["label"]), escape(result.candidate["label"])
    deltas = dict(zip(result.items["item_id"], result.items["delta"]))
    out = []
    for item_id, (base, cand) in samples.items():
        cells = "".join(f"<tr><td>{''.join(_sample_html(s) for s in base[k:k + 1])}</td>"
                        f"<td>{''.join(_sample_html(s) for s in cand[k:k + 1])}</td></tr>"
                        for k in range(max(len(base), len(cand))))
        out.append(f"<details class=\"drill\"><summary>{escape(str(item_id))}: delta "
                   f"{fmt(deltas.get(item_id, float('nan')), sign=True)}</summary><table class=\"samples\"><thead><tr>"
                   f"<th>{b}</th><th>{c}</th></tr></thead><tbody>{cells}</tbody></table></details>")
    return f'<div id="drilldown">{"".join(out)}</div>'


def page_html(title: str, body: str) -> str:
    """One self-contained page (no script, no network) around report fragments."""
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>{escape(title)}</title><style>{CSS}</style></head>
<body>
<h1>{escape(title)}</h1>
{body}
</body></html>
"""


def write_page(path: str | Path, title: str, body: str) -> None:
    """Atomic: the file is whole or absent."""
    write_text_atomic(path, page_html(title, body))


def render_html(result: CompareResult, top: int = 50, sections: Sequence[tuple[str, str]] = (),
                samples: Mapping[str, list[list[SampleBrief]]] | None = None) -> str:
    """The compare report; `sections` are (heading, HTML fragment) pairs added after the plots (readiness);
    `samples` (compare.samples.listed_samples) the listed items' samples, folded under the items table."""
    b, c, d = result.baseline, result.candidate, result.delta
    title = f"rfteval compare: {b['label']} → {c['label']}{metric_suffix(result)}"
    gate = result.gate
    gate_html = ""
    if gate.get("checks"):
        if gate["passed"]:
            gate_html = (f'<div class="gate pass" id="gate">Gate passed '
                         f"({escape(', '.join(ch['name'] for ch in gate['checks']))})</div>")
        else:
            lines = "".join(f"<li>{escape(line)}</li>" for line in gate["failures"])
            gate_html = f'<div class="gate fail" id="gate">Gate FAILED<ul>{lines}</ul></div>'
        if gate.get("warnings"):
            gate_html += "<ul>" + "".join(f"<li>warning: {escape(w)}</li>" for w in gate["warnings"]) + "</ul>"
    facts = []
    for role, side in (("baseline", b), ("candidate", c)):
        errs = errors_text(side, result.options)
        facts.append(f"{role} <b>{escape(side['label'])}</b>: {fmt(side['mean'])} {fmt_ci(side['ci95'], sign=False)}, "
                     f"{side['items']} items, {side['records']} records, {errs}")
    facts.append(f"delta {fmt(d['mean'], sign=True)} {fmt_ci(d['ci95'])}, p {fmt_p(d['p_value'])} "
                 f"({escape(d['p_method'])}); MDE at 80% power {fmt(d['mde'])}; paired SE {fmt(d['se'])} vs "
                 f"unpaired {fmt(d['se_unpaired'])}; item correlation {fmt(d['correlation'], 2)}")
    if "hardest" in result.slices:
        facts.append(f"hardest: {escape(result.slices['hardest']['rule'])}")
    for role, ids in (("baseline", result.unpaired["baseline_only"]), ("candidate", result.unpaired["candidate_only"])):
        if ids:
            more = f" and {len(ids) - 20} more" if len(ids) > 20 else ""
            facts.append(f"only in the {role}, left out: {escape(', '.join(ids[:20]))}{more}")
    facts += [f"note: {escape(n)}" for n in result.notes]
    n_items = len(result.items)
    drill = (f"<h2>The listed items' samples</h2>\n<p class=\"muted\">Each item folded; open one for both models' "
             f"outputs epoch by epoch (`rfteval view` shows every item).</p>{_drilldown_html(result, samples)}"
             if samples else "")
    extra = "".join(f"<h2>{escape(heading)}</h2>\n{fragment}\n" for heading, fragment in sections)
    return page_html(title, f"""<div class="muted">{escape(str(b.get('path', '')))} → {escape(str(c.get('path', '')))}</div>
{gate_html}
<h2>Summary</h2>
{_summary_html(result)}
{agent_html(result)}<ul id="facts">{''.join(f'<li>{f}</li>' for f in facts)}</ul>
<h2>Plots</h2>
<figure>{scatter_svg(result)}<figcaption>Per-item mean, baseline (x) against candidate (y). Above the dashed
diagonal the candidate did better. Coincident items merge into larger dots (hover for counts).</figcaption></figure>
<figure>{histogram_svg(result)}<figcaption>Distribution of per-item mean scores.</figcaption></figure>
<figure>{forest_svg(result)}<figcaption>Per-item delta, sorted, with each item's interval across its epochs
(clipped to the score range); the shaded band is the overall delta's {int(result.options.level * 100)}%
interval, the dashed line its mean.{f' Showing {MAX_FOREST} of {n_items} items, evenly spaced by rank.'
 if n_items > MAX_FOREST else ''}</figcaption></figure>
{extra}<h2>Per item, lowest delta first ({min(top, n_items)} of {n_items})</h2>
{_items_html(result, top)}{drill}""")


def write_html(result: CompareResult, path: str | Path, top: int = 50,
               sections: Sequence[tuple[str, str]] = (),
               samples: Mapping[str, list[list[SampleBrief]]] | None = None) -> None:
    """Atomic: the file is whole or absent."""
    write_text_atomic(path, render_html(result, top, sections, samples))


# ---------------------------------------------------------------------------------------------- checkpoint series


def _x_labels(ax: Axes, labels: Sequence[str]) -> str:
    """Category names under the x axis, slanted when there are many."""
    yb = ax.y(ax.y0)
    slant = len(labels) > 6 or max((len(s) for s in labels), default=0) > 10
    parts = []
    for i, label in enumerate(labels):
        x = ax.x(i)
        text = escape(label[:24])
        if slant:
            parts.append(f'<text x="{_n(x)}" y="{_n(yb + 14)}" text-anchor="end" '
                         f'transform="rotate(-30 {_n(x)} {_n(yb + 14)})">{text}</text>')
        else:
            parts.append(f'<text x="{_n(x)}" y="{_n(yb + 16)}" text-anchor="middle">{text}</text>')
    return "".join(parts)


def _points_with_intervals(ax: Axes, rows: Sequence[tuple[float, float, float, str]], color: str, cls: str,
                           line: bool = True) -> str:
    """(mean, lo, hi, tooltip) per position 0, 1, ...: a polyline through the means and a bar per interval."""
    parts = []
    pts = [(ax.x(i), ax.y(m)) for i, (m, _, _, _) in enumerate(rows) if math.isfinite(m)]
    if line and len(pts) > 1:
        path = " ".join(f"{_n(x)},{_n(y)}" for x, y in pts)
        parts.append(f'<polyline class="{cls}-line" points="{path}" fill="none" stroke="{color}" stroke-width="2"/>')
    for i, (m, lo, hi, tip) in enumerate(rows):
        x = ax.x(i)
        if math.isfinite(lo) and math.isfinite(hi):
            parts.append(f'<line class="{cls}-interval" x1="{_n(x)}" x2="{_n(x)}" y1="{_n(ax.y(lo))}" '
                         f'y2="{_n(ax.y(hi))}" stroke="{color}" stroke-width="2" stroke-opacity="0.55"/>'
                         f'<line x1="{_n(x - 5)}" x2="{_n(x + 5)}" y1="{_n(ax.y(lo))}" y2="{_n(ax.y(lo))}" '
                         f'stroke="{color}" stroke-opacity="0.55"/><line x1="{_n(x - 5)}" x2="{_n(x + 5)}" '
                         f'y1="{_n(ax.y(hi))}" y2="{_n(ax.y(hi))}" stroke="{color}" stroke-opacity="0.55"/>')
        if math.isfinite(m):
            parts.append(f'<circle class="{cls}" cx="{_n(x)}" cy="{_n(ax.y(m))}" r="4" fill="{color}">'
                         f"<title>{escape(tip)}</title></circle>")
    return "".join(parts)


def _finite_span(values: Sequence[float], pad: float, floor: tuple[float, float]) -> tuple[float, float]:
    vals = [v for v in values if v is not None and math.isfinite(v)]
    lo, hi = min(vals + [floor[0]]), max(vals + [floor[1]])
    span = (hi - lo) or 1.0
    return lo - pad * span, hi + pad * span


def series_svg(series: SeriesResult) -> str:
    """The series as a line: the baseline then each candidate, mean with its interval."""
    b = series.baseline
    rows = [(_f(b["mean"]), _f(b["ci95"][0]), _f(b["ci95"][1]),
             f"{b['label']} (baseline): {fmt(b['mean'])} {fmt_ci(b['ci95'], sign=False)}")]
    for c in series.candidates:
        s = c.result.candidate
        rows.append((_f(s["mean"]), _f(s["ci95"][0]), _f(s["ci95"][1]),
                     f"{c.label}: {fmt(s['mean'])} {fmt_ci(s['ci95'], sign=False)}"))
    lo, hi = _finite_span([v for r in rows for v in r[:3]], 0.05, (rows[0][0], rows[0][0]))
    if series.candidates and series.candidates[0].result.bounds is not None:
        blo, bhi = series.candidates[0].result.bounds
        lo, hi = max(lo, blo), min(hi, bhi)
    ax = Axes(-0.5, len(rows) - 0.5, lo, hi, w=max(420, 90 * len(rows)), h=340)
    metric = "mean score" if series.metric == "mean" else series.metric
    parts = [ax.frame("", metric, xticks=False), _x_labels(ax, [b["label"]] + [c.label for c in series.candidates])]
    parts.append(f'<line class="baseline-level" x1="{ax.pad}" x2="{_n(ax.x(ax.x1))}" y1="{_n(ax.y(rows[0][0]))}" '
                 f'y2="{_n(ax.y(rows[0][0]))}" stroke="{BASE_COLOR}" stroke-dasharray="4 3"/>'
                 if math.isfinite(rows[0][0]) else "")
    parts.append(_points_with_intervals(ax, rows, CAND_COLOR, "series"))
    return _svg("series", ax, "".join(parts), "the series: mean with interval per model")


def series_delta_svg(series: SeriesResult) -> str:
    """Each candidate's paired delta with its interval; the held-out estimate of the best one beside it."""
    rows, held = [], None
    for c in series.candidates:
        d = c.result.delta
        rows.append((_f(d["mean"]), _f(d["ci95"][0]), _f(d["ci95"][1]),
                     f"{c.label}: {fmt(d['mean'], sign=True)} {fmt_ci(d['ci95'])}, p adj. {fmt_p(c.p_adjusted)}"))
    if series.best is not None and "held_out" in series.best:
        h = series.best["held_out"]
        held = ([c.label for c in series.candidates].index(h["label"]),
                (_f(h["delta"]["mean"]), _f(h["delta"]["ci95"][0]), _f(h["delta"]["ci95"][1])))
    values = [v for r in rows for v in r[:3]] + (list(held[1]) if held else [])
    lo, hi = _finite_span(values, 0.08, (0.0, 0.0))
    ax = Axes(-0.5, len(rows) - 0.5, lo, hi, w=max(420, 90 * len(rows) + 60), h=340)
    parts = [ax.frame("", "delta (candidate - baseline)", xticks=False),
             _x_labels(ax, [c.label for c in series.candidates]),
             f'<line class="zero" x1="{ax.pad}" x2="{_n(ax.x(ax.x1))}" y1="{_n(ax.y(0))}" y2="{_n(ax.y(0))}" '
             'stroke="#444"/>',
             _points_with_intervals(ax, rows, CAND_COLOR, "delta")]
    if held:
        i, (m, h_lo, h_hi) = held
        x = ax.x(i) + 14
        if math.isfinite(h_lo) and math.isfinite(h_hi):
            parts.append(f'<line class="held-out-interval" x1="{_n(x)}" x2="{_n(x)}" y1="{_n(ax.y(h_lo))}" '
                         f'y2="{_n(ax.y(h_hi))}" stroke="{BASE_COLOR}" stroke-width="2" stroke-dasharray="3 2"/>')
        if math.isfinite(m):
            parts.append(f'<rect class="held-out" x="{_n(x - 4)}" y="{_n(ax.y(m) - 4)}" width="8" height="8" '
                         f'fill="{BASE_COLOR}"><title>held out: {fmt(m, sign=True)} {fmt_ci((h_lo, h_hi))}'
                         '</title></rect>')
    return _svg("series-delta", ax, "".join(parts), "paired delta per candidate")


def _f(x: float | None) -> float:
    return float("nan") if x is None else float(x)


def render_series_html(series: SeriesResult) -> str:
    from rfteval.compare.series import verdict as series_verdict
    from rfteval.report.terminal import series_lines

    o = series.options
    level = int(o.level * 100)
    b = series.baseline
    metric = "" if series.metric == "mean" else f" ({series.metric})"
    title = f"rfteval compare: series against {b['label']}{metric}"
    gate = series.gate
    gate_html = ""
    if any(c.gated and c.result.gate.get("checks") for c in series.candidates):
        if gate["passed"]:
            gate_html = '<div class="gate pass" id="gate">Gate passed</div>'
        else:
            lines = "".join(f"<li>{escape(line)}</li>" for line in gate["failures"])
            gate_html = f'<div class="gate fail" id="gate">Gate FAILED<ul>{lines}</ul></div>'
        if gate.get("warnings"):
            gate_html += "<ul>" + "".join(f"<li>warning: {escape(w)}</li>" for w in gate["warnings"]) + "</ul>"
    rows = [f"<tr><td>{escape(b['label'])} (baseline)</td><td>{b['items']}</td><td>{fmt(b['mean'])}</td>"
            f"<td>{fmt_ci(b['ci95'], sign=False)}</td><td></td><td></td><td></td><td></td><td></td></tr>"]
    for c in series.candidates:
        r, d = c.result, c.result.delta
        word = series_verdict(c, o.level)
        cls = {"better": "better", "worse": "worse"}.get(word, "")
        rows.append(f"<tr><td>{escape(c.label)}</td><td>{d['n']}</td><td>{fmt(r.candidate['mean'])}</td>"
                    f"<td>{fmt_ci(r.candidate['ci95'], sign=False)}</td><td class=\"{cls}\">"
                    f"{fmt(d['mean'], sign=True)}</td><td>{fmt_ci(d['ci95'])}</td><td>{fmt_p(c.p_adjusted)}</td>"
                    f"<td>{wtl(d)}</td><td class=\"{cls}\">{escape(word)}</td></tr>")
    table = (f'<table id="series-table"><thead><tr><th>model</th><th>items</th><th>mean</th><th>{level}% CI</th>'
             f"<th>delta</th><th>delta {level}% CI</th><th>p adj.</th><th>W/T/L</th><th>verdict</th></tr></thead>"
             f"<tbody>{''.join(rows)}</tbody></table>")
    facts = "".join(f"<li>{escape(line)}</li>" for line in series_lines(series))
    return page_html(title, f"""<div class="muted">{escape(series.run_dir)}</div>
{gate_html}
<h2>Summary</h2>
{table}
<ul id="facts">{facts}</ul>
<h2>Plots</h2>
<figure>{series_svg(series)}<figcaption>Each model's {escape(series.metric)} with its {level}% interval, in the
run's order; the dashed line is the baseline.</figcaption></figure>
<figure>{series_delta_svg(series)}<figcaption>Each candidate's paired delta with its {level}% interval (not adjusted
for the choice among candidates). The grey square beside the best candidate, when shown, is its delta on items
held out from choosing it.</figcaption></figure>""")


def write_series_html(series: SeriesResult, path: str | Path) -> None:
    """Atomic: the file is whole or absent."""
    write_text_atomic(path, render_series_html(series))
