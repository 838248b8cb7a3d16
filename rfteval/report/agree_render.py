"""`rfteval agree` rendered: terminal tables (80 columns), and one HTML page with a scatter and a Bland–Altman plot.

Renders an AgreeResult and computes nothing; plots are drawn as report/html.py draws (inline SVG, no script).
"""

from __future__ import annotations

import math
from html import escape
from pathlib import Path
from typing import TYPE_CHECKING

from rfteval.report.format import fmt, fmt_ci, fmt_cost, fmt_tokens, table
from rfteval.report.html import SCATTER_GRID, Axes, _n, _svg, score_range, write_page

if TYPE_CHECKING:
    from rich.console import Console

    from rfteval.compare.agree import AgreeResult, ItemRow

A_COLOR, B_COLOR, FLAT = "#7a8ca3", "#d9822b", "#888888"
OUTPUT_WIDTH = 60  # of an output's text in the terminal's per-item table (the JSON keeps more)


def _word(value: float) -> str:
    """Landis & Koch's reading of kappa: the words people quote next to the number."""
    if not math.isfinite(value):
        return ""
    for bound, word in ((0.8, "almost perfect"), (0.6, "substantial"), (0.4, "moderate"), (0.2, "fair"),
                        (0.0, "slight")):
        if value > bound:
            return word
    return "poor"


def summary_rows(result: AgreeResult) -> list[tuple[str, str, str]]:
    """(what, value, interval or note): the headline numbers, shared by the terminal and the HTML page."""
    s = result.scores
    e = result.errors
    rows = [("samples paired", f"{s['n_samples']} ({s['n_items']} items)", _unmatched_text(result)),
            ("error records A / B", f"{e['a']['errors']} / {e['b']['errors']}", _errors_text(result)),
            ("Pearson / Spearman", f"{fmt(s['pearson'])} / {fmt(s['spearman'])}", "per sample"),
            ("bias (B − A)", fmt(s["bias"]["mean"], 4, sign=True), f"95% CI {fmt_ci(s['bias']['ci95'], 4)}"),
            ("mean |B − A|", fmt(s["mae"], 4), ""),
            ("limits of agreement", f"{fmt(s['loa']['lower'], 3, True)} to {fmt(s['loa']['upper'], 3, True)}",
             "95% of samples' B − A")]
    p = result.pass_
    if p is not None:
        th = result.thresholds
        where = (f"at {th['a']:g}" if th["a"] is not None and th["a"] == th["b"] else
                 "at each grader's pass verdict")
        t = p["table"]
        rows += [("pass: both / A only", f"{t['both']} / {t['a_only']}", where),
                 ("pass: B only / neither", f"{t['b_only']} / {t['neither']}", f"agreement {fmt(p['agreement'])}"),
                 ("Cohen's kappa", fmt(p["kappa"]["value"]), f"95% CI {fmt_ci(p['kappa']['ci95'], sign=False)} "
                  f"{_word(p['kappa']['value'])}".rstrip()),
                 ("B's precision (A ref.)", fmt(p["precision"]["value"]),
                  f"95% CI {fmt_ci(p['precision']['ci95'], sign=False)}"),
                 ("B's recall (A ref.)", fmt(p["recall"]["value"]), f"95% CI {fmt_ci(p['recall']['ci95'], sign=False)}")]
    if result.labels is not None:
        k = result.labels["kappa"]
        rows.append(("kappa over labels", fmt(k["value"]), f"95% CI {fmt_ci(k['ci95'], sign=False)}"))
    return rows


def _errors_text(result: AgreeResult) -> str:
    e = result.errors
    if not (e["a"]["errors"] or e["b"]["errors"]):
        return "none on either side"
    if e["policy"] == "zero":
        return "each scored 0 (--errors zero)"
    return f"{e['pairs_left_out']} pairs left out (--errors exclude)"


def error_lines(result: AgreeResult) -> list[str]:
    """One line per side with error records: how many of its records, of which types, and what became of them."""
    e = result.errors
    out = []
    for name, side in (("A", e["a"]), ("B", e["b"])):
        if side["errors"]:
            kinds = ", ".join(f"{k} {n}" for k, n in side["by_kind"].items())
            out.append(f"errors in {name}: {side['errors']} of {side['records']} records ({side['share']:.1%}): "
                       f"{kinds}")
    if out:
        out.append(f"{e['pairs_left_out']} paired samples with an error are left out (--errors zero scores "
                   "them 0)" if e["policy"] == "exclude" else
                   "every error record scores 0 (--errors zero): a score by rule, not a grade")
    return out


def _unmatched_text(result: AgreeResult) -> str:
    u = result.unmatched
    if not (u["a_only"] or u["b_only"]):
        return "every sample matched"
    return f"unmatched: {u['a_only']} only in A, {u['b_only']} only in B"


def note_lines(result: AgreeResult) -> list[str]:
    """The notes under the table: B's grades rescaled, no pass verdicts, the samples only one side has."""
    out = [f"note: {note}" for note in (result.scale_note, result.pass_note) if note]
    u = result.unmatched
    for side, first, count in (("A", u["a_only_first"], u["a_only"]), ("B", u["b_only_first"], u["b_only"])):
        if first:
            out.append(f"only in {side}: {', '.join(first)}" + (" ..." if count > len(first) else ""))
    return out


def item_cells(row: ItemRow) -> tuple[str, str, str, str, str]:
    """One row of the items where A and B disagree most: item, A, B, B − A (item means), and its sample."""
    text = row["output"][:OUTPUT_WIDTH]
    return (row["item_id"], fmt(row["a_mean"], 2), fmt(row["b_mean"], 2), fmt(row["diff"], 2, sign=True),
            f"{row['model_label']}#{row['epoch']} {fmt(row['a_score'], 2)}→{fmt(row['b_score'], 2)}: {text}")


def verdict_rows(result: AgreeResult) -> list[tuple[str, str, str, str, str]]:
    """Does the verdict survive? Per candidate: its delta under A, under B, their difference and its interval."""
    return [(f"{v['candidate']}−{v['baseline']}", fmt(v["under_a"]["mean"], 3, True), fmt(v["under_b"]["mean"], 3, True),
             fmt(v["difference"]["mean"], 3, True), fmt_ci(v["difference"]["ci95"])) for v in result.verdict or []]


def verdict_lines(result: AgreeResult) -> list[str]:
    """The answer per candidate, with each grader's own word (the one verdict rule, stats.direction)."""
    return [f"verdict: {v['answer']} (A: {v['word_a']}, B: {v['word_b']})" for v in result.verdict or []]


def gate_lines(result: AgreeResult) -> list[str]:
    """One line per gate check given (none without a gate flag)."""
    return [f"gate {c['name']}: {'pass' if c['passed'] else 'FAIL'}: {c['detail']}" for c in result.gate["checks"]]


def render_terminal(console: Console, result: AgreeResult) -> None:
    """The tables `rfteval agree` prints: fit in 80 columns, text cut rather than wrapped."""
    console.print(f"A: {result.a.path}" + (f"  ({result.a.grader})" if result.a.grader else ""), markup=False,
                  highlight=False, soft_wrap=True)
    console.print(f"B: {result.b.path}" + (f"  ({result.b.grader})" if result.b.grader else ""), markup=False,
                  highlight=False, soft_wrap=True)
    t = table("Agreement of B with A")
    t.add_column("")
    t.add_column("value", justify="right")
    t.add_column("", overflow="fold")
    for row in summary_rows(result):
        t.add_row(*row)
    console.print(t)
    for line in error_lines(result):
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    for line in note_lines(result):
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    if result.labels is not None:
        _render_labels(console, result)
    if result.items:
        it = table("Items where A and B disagree most (B − A, item mean)")
        it.add_column("item", overflow="ellipsis", max_width=16)
        it.add_column("A", justify="right")
        it.add_column("B", justify="right")
        it.add_column("B−A", justify="right")
        it.add_column("sample: output", overflow="ellipsis", no_wrap=True, max_width=44)
        for r in result.items:
            it.add_row(*item_cells(r))
        console.print(it)
    if result.verdict:
        vt = table("Does the verdict survive? (paired delta over items)")
        vt.add_column("candidate", overflow="ellipsis", max_width=14)
        vt.add_column("under A", justify="right")
        vt.add_column("under B", justify="right")
        vt.add_column("B − A", justify="right")
        vt.add_column("95% CI", justify="right")
        for cells in verdict_rows(result):
            vt.add_row(*cells)
        console.print(vt)
        for line in verdict_lines(result):
            console.print(line, markup=False, highlight=False, soft_wrap=True)
    if result.usage:
        _render_usage(console, result)
    for line in gate_lines(result):
        console.print(line, markup=False, highlight=False, soft_wrap=True)


def _render_labels(console: Console, result: AgreeResult) -> None:
    assert result.labels is not None
    names = result.labels["labels"]
    lt = table("Labels: rows A, columns B")
    lt.add_column("A \\ B", overflow="ellipsis", max_width=16)
    for name in names:
        lt.add_column(name[:10], justify="right")
    for name, row in zip(names, result.labels["confusion"]):
        lt.add_row(name, *(str(v) for v in row))
    console.print(lt)


def _render_usage(console: Console, result: AgreeResult) -> None:
    ut = table("Judge usage (--regrade): calls, not grades")
    for col in ("model", "calls", "cached", "shared", "failed", "tokens in", "tokens out", "cost"):
        ut.add_column(col, justify="left" if col == "model" else "right")
    for model, u in result.usage.items():
        ut.add_row(model, str(u["calls"]), str(u["cache_hits"]), str(u.get("shared", 0)), str(u["errors"]),
                   fmt_tokens(u["input_tokens"]),
                   fmt_tokens(u["output_tokens"]), fmt_cost(u["cost_usd"]))
    console.print(ut)


# ---------------------------------------------------------------------------------------------- HTML


def _bounds(result: AgreeResult) -> tuple[float, float] | None:
    """Both graders' ranges together (each side's score_range), for the plots' axes; None when either is unknown."""
    ra, rb = result.a.score_range, result.b.score_range
    return None if ra is None or rb is None else (min(ra[0], rb[0]), max(ra[1], rb[1]))


def scatter_svg(result: AgreeResult) -> str:
    """Per sample: A's score (x) against B's (y); coincident samples merge into larger dots, as compare's scatter."""
    import numpy as np

    sa = result.paired["score_a"].to_numpy(np.float64)
    sb = result.paired["score_b"].to_numpy(np.float64)
    lo, hi = score_range(sa, sb, bounds=_bounds(result))
    ax = Axes(lo, hi, lo, hi, w=420, h=420)
    span = (hi - lo) or 1.0
    gx = np.clip(((sa - lo) / span * SCATTER_GRID).round().astype(np.int64), 0, SCATTER_GRID)
    gy = np.clip(((sb - lo) / span * SCATTER_GRID).round().astype(np.int64), 0, SCATTER_GRID)
    uniq, inverse, counts = np.unique(gx * (SCATTER_GRID + 1) + gy, return_inverse=True, return_counts=True)
    sx = np.bincount(inverse, weights=sa) / counts
    sy = np.bincount(inverse, weights=sb) / counts
    parts = [ax.frame("A's score (per sample)", "B's score (per sample)"),
             f'<line class="diagonal" x1="{_n(ax.x(lo))}" y1="{_n(ax.y(lo))}" x2="{_n(ax.x(hi))}" '
             f'y2="{_n(ax.y(hi))}" stroke="#999" stroke-dasharray="4 3"/>']
    for k in np.argsort(-counts, kind="stable"):
        x, y, n = sx[k], sy[k], int(counts[k])
        color = B_COLOR if y - x > 1e-9 else (A_COLOR if x - y > 1e-9 else FLAT)
        r = min(3.0 + 2.0 * math.sqrt(n - 1), 18.0)
        parts.append(f'<circle class="sample" cx="{_n(ax.x(x))}" cy="{_n(ax.y(y))}" r="{_n(r)}" fill="{color}" '
                     f'fill-opacity="0.6"><title>{n} sample(s): A {fmt(x)}, B {fmt(y)}</title></circle>')
    return _svg("scatter", ax, "".join(parts), "per-sample scores, A against B")


def bland_altman_svg(result: AgreeResult) -> str:
    """Per sample: the mean of A and B (x) against B − A (y), with the bias and the limits of agreement."""
    import numpy as np

    sa = result.paired["score_a"].to_numpy(np.float64)
    sb = result.paired["score_b"].to_numpy(np.float64)
    mean, diff = (sa + sb) / 2, sb - sa
    s = result.scores
    lo, hi = score_range(sa, sb, bounds=_bounds(result))
    marks = [v for v in (s["loa"]["lower"], s["loa"]["upper"], s["bias"]["mean"]) if math.isfinite(v)]
    dmax = max([abs(v) for v in marks] + [float(np.abs(diff).max()) if diff.size else 0.0, 0.1]) * 1.1
    ax = Axes(lo, hi, -dmax, dmax, w=560, h=420)
    span = (hi - lo) or 1.0
    gx = np.clip(((mean - lo) / span * SCATTER_GRID).round().astype(np.int64), 0, SCATTER_GRID)
    gy = np.clip(((diff + dmax) / (2 * dmax) * SCATTER_GRID).round().astype(np.int64), 0, SCATTER_GRID)
    uniq, inverse, counts = np.unique(gx * (SCATTER_GRID + 1) + gy, return_inverse=True, return_counts=True)
    sx = np.bincount(inverse, weights=mean) / counts
    sy = np.bincount(inverse, weights=diff) / counts
    parts = [ax.frame("mean of A and B (per sample)", "B − A")]

    def hline(v: float, cls: str, dash: str, label: str) -> str:
        return (f'<line class="{cls}" x1="{_n(ax.x(lo))}" x2="{_n(ax.x(hi))}" y1="{_n(ax.y(v))}" y2="{_n(ax.y(v))}" '
                f'stroke="#555" stroke-dasharray="{dash}"/><text x="{_n(ax.x(hi) - 4)}" y="{_n(ax.y(v) - 4)}" '
                f'text-anchor="end">{escape(label)}</text>')

    parts.append(hline(0.0, "zero", "1 3", ""))
    if math.isfinite(s["bias"]["mean"]):
        parts.append(hline(s["bias"]["mean"], "bias", "6 3", f"bias {s['bias']['mean']:+.3f}"))
    for name in ("lower", "upper"):
        v = s["loa"][name]
        if math.isfinite(v):
            parts.append(hline(v, "loa", "2 2", f"{name} limit {v:+.3f}"))
    for k in np.argsort(-counts, kind="stable"):
        x, y, n = sx[k], sy[k], int(counts[k])
        color = B_COLOR if y > 1e-9 else (A_COLOR if y < -1e-9 else FLAT)
        r = min(3.0 + 2.0 * math.sqrt(n - 1), 18.0)
        parts.append(f'<circle class="sample" cx="{_n(ax.x(x))}" cy="{_n(ax.y(y))}" r="{_n(r)}" fill="{color}" '
                     f'fill-opacity="0.6"><title>{n} sample(s): mean {fmt(x)}, B − A {fmt(y, 3, True)}</title>'
                     "</circle>")
    return _svg("bland-altman", ax, "".join(parts), "Bland–Altman plot: B − A against the mean of A and B")


def render_html(result: AgreeResult) -> str:
    rows = "".join(f"<tr><td>{escape(a)}</td><td>{escape(b)}</td><td>{escape(c)}</td></tr>"
                   for a, b, c in summary_rows(result))
    gate = result.gate
    gate_html = ""
    if gate["checks"]:
        cls, word = ("pass", "Gate passed") if gate["passed"] else ("fail", "Gate failed")
        lines = "".join(f"<li>{escape(c['name'])}: {'pass' if c['passed'] else 'FAIL'}: {escape(c['detail'])}</li>"
                        for c in gate["checks"])
        gate_html = f'<div class="gate {cls}">{word}</div><ul>{lines}</ul>'
    items = "".join(
        f"<tr><td>{escape(r['item_id'])}</td><td>{fmt(r['a_mean'])}</td><td>{fmt(r['b_mean'])}</td>"
        f"<td>{fmt(r['diff'], 3, True)}</td><td>{escape(r['model_label'])}#{r['epoch']}: {fmt(r['a_score'])} → "
        f"{fmt(r['b_score'])}</td><td style=\"text-align:left\">{escape(r['output'])}</td></tr>" for r in result.items)
    verdict = ""
    if result.verdict:
        vrows = "".join(
            f"<tr><td>{escape(v['candidate'])} − {escape(v['baseline'])}</td><td>{fmt(v['under_a']['mean'], 3, True)}"
            f"</td><td>{fmt(v['under_b']['mean'], 3, True)}</td><td>{fmt(v['difference']['mean'], 3, True)}</td>"
            f"<td>{fmt_ci(v['difference']['ci95'])}</td><td style=\"text-align:left\">{escape(v['answer'])}</td></tr>"
            for v in result.verdict)
        verdict = ("<h2>Does the verdict survive?</h2><table id=\"verdict\"><thead><tr><th>candidate</th>"
                   "<th>delta under A</th><th>under B</th><th>B − A</th><th>95% CI</th><th>answer</th></tr></thead>"
                   f"<tbody>{vrows}</tbody></table>")
    usage = ""
    if result.usage:
        urows = "".join(f"<tr><td>{escape(m)}</td><td>{u['calls']}</td><td>{u['cache_hits']}</td>"
                        f"<td>{u.get('shared', 0)}</td>"
                        f"<td>{u['input_tokens']}</td><td>{u['output_tokens']}</td><td>{fmt_cost(u['cost_usd'])}</td>"
                        "</tr>" for m, u in result.usage.items())
        usage = ("<h2>Judge usage</h2><table><thead><tr><th>model</th><th>calls</th><th>cached</th><th>shared</th><th>tokens in"
                 f"</th><th>tokens out</th><th>cost</th></tr></thead><tbody>{urows}</tbody></table>")
    notes = "".join(f'<p class="muted">{escape(line)}</p>' for line in
                    [*error_lines(result), *([f"note: {result.scale_note}"] if result.scale_note else [])])
    return f"""<p class="muted">A: {escape(result.a.path)} · B: {escape(result.b.path)}</p>
{gate_html}{notes}
<table id="summary"><tbody>{rows}</tbody></table>
<figure>{scatter_svg(result)}<figcaption>Each sample's score under A (x) and B (y). On the dashed diagonal the two
agree; above it B scores higher.</figcaption></figure>
<figure>{bland_altman_svg(result)}<figcaption>Bland–Altman: B − A against the mean of the two, with the bias (dashed)
and the limits within which 95% of samples' differences fall.</figcaption></figure>
<h2>Items where A and B disagree most</h2>
<table id="items"><thead><tr><th>item</th><th>A</th><th>B</th><th>B − A</th><th>sample</th><th>output</th></tr>
</thead><tbody>{items}</tbody></table>
{verdict}{usage}"""


def write_html(result: AgreeResult, path: str | Path) -> None:
    write_page(path, "rfteval agree: does B grade like A?", render_html(result))
