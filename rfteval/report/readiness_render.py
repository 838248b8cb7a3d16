"""Readiness and probe reports for people: rich terminal text, and self-contained HTML fragments for the report."""

from __future__ import annotations

import math
from html import escape
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console

    from rfteval.baseline_readiness import BaselineReadiness
    from rfteval.readiness.probes import ProbeReport
    from rfteval.readiness.report import ExpectedZeroSignal, ReadinessErrors, ReadinessReport
    from rfteval.run.paths import RunReadiness

VERDICT_TEXT = {"ready": "READY", "risky": "RISKY", "inconclusive": "INCONCLUSIVE", "not_ready": "NOT READY"}
VERDICT_STYLE = {"ready": "bold green", "risky": "bold yellow", "inconclusive": "bold magenta", "not_ready": "bold red"}
STATUS_STYLE = {"ok": "green", "risky": "yellow", "not_ready": "red", "skipped": "dim", "flag": "red",
                "warning": "yellow", "inconclusive": "magenta"}
VERDICT_COLOR = {"ready": "#1a7f37", "risky": "#9a6700", "inconclusive": "#8250df", "not_ready": "#cf222e"}


def pct(x: float | None) -> str:
    return "n/a" if x is None or not math.isfinite(x) else f"{x:.0%}"


def num(x: float | None, digits: int = 3) -> str:
    return "n/a" if x is None or not math.isfinite(x) else f"{x:.{digits}g}"


def _esc(text: object) -> str:
    from rich.markup import escape as rich_escape

    return rich_escape(str(text))


def not_sampling_line(report: ReadinessReport) -> str | None:
    """The warning that the assessed epochs are one answer repeated (rich markup), or None."""
    flat = report.not_sampling
    return None if flat is None else f"[yellow]warning[/]: {_esc(flat['message'])}"


def summary_lines(report: ReadinessReport) -> list[str]:
    """The compact summary as rich-markup lines (the runner prints these after a run)."""
    zv, ez = report.zero_variance, report.expected_zero_signal
    v = report.verdict
    label = f" ({_esc(report.label)})" if report.label else ""
    provisional = f" (provisional: only {report.n_items} items)" if report.provisional else ""
    partial = f" ({incomplete_verdict(report)})" if report.incomplete else ""
    lines = [
        f"Readiness{label}: [{VERDICT_STYLE[v]}]{VERDICT_TEXT[v]}[/]{partial}{provisional}  mean {num(report.mean)} in "
        f"[{report.score_min:g}, {report.score_max:g}] ({pct(report.position)} of the range), "
        f"{report.n_items} items × {report.samples_min}"
        + (f"–{report.samples_max}" if report.samples_max != report.samples_min else "") + " samples",
        (f"  zero-signal items {pct(zv.get('share'))} (all-min {pct(zv.get('floor'))}, all-max "
        f"{pct(zv.get('ceiling'))}, other {pct(zv.get('other'))}); expected at G={report.group_size}: "
        f"{pct(ez.get('share'))}" + (f" ({_esc(ez.get('method'))})" if ez.get("method") else "")  # none: no estimate
        + (f"; {zv['errors']} item(s) of grading errors only, left out" if zv.get("errors") else "")),
        (f"  {report.distinct_levels} score level{'s' if report.distinct_levels != 1 else ''}"
        f"{' (binary)' if report.binary else ''}, mean within-item SD {num(report.mean_within_sd)}"),
    ]
    if report.incomplete:
        lines.insert(1, f"  [yellow]incomplete run[/]: {_esc(incomplete_text(report))}")
    for c in report.reasons if report.verdict != "ready" else []:
        lines.append(f"  [{STATUS_STYLE[c.status]}]{'not ready' if c.status == 'not_ready' else c.status}[/]: "
                     f"{_esc(c.message)}")
    if report.provisional and report.notes:  # the small-sample note is the first (readiness.assessment)
        lines.append(f"  [yellow]warning[/]: {_esc(report.notes[0])}")
    return lines


def incomplete_verdict(report: ReadinessReport) -> str:
    """'verdict on an incomplete run: 40 of 48 cells': what the verdict stands on, beside the verdict."""
    c = report.coverage
    return "" if c is None else f"verdict on an incomplete run: {c['answered']} of {c['expected']} cells"


def incomplete_text(report: ReadinessReport) -> str:
    """Why cells are not answered: missing ones (the run stopped before them) and generation errors."""
    c = report.coverage
    if c is None:
        return ""
    why = []
    if c["missing"]:
        why.append(f"{c['missing']} have no record (the run stopped before them: re-running the same command "
                   "finishes it)")
    if c["generation_errors"]:
        why.append(f"{c['generation_errors']} ended in a generation error")
    return (f"{c['answered']} of {c['expected']} cells ({c['items']} items × {c['epochs']} epochs) answered; "
            + " and ".join(why))


def estimator_text(ez: ExpectedZeroSignal) -> str:
    """How the expected zero-signal share was estimated, in one phrase: the method, its item counts, the prior."""
    method = ez.get("method") or "n/a"
    parts = []
    if ez.get("n_unbiased") and ez.get("n_empirical_bayes"):
        parts.append(f"{ez['n_unbiased']} items with K ≥ G unbiased, {ez['n_empirical_bayes']} with K < G pooled")
    prior = ez.get("prior")
    if prior:
        alpha = ", ".join(num(a) for a in prior.get("alpha", [])[:6])
        levels = [f"{v:g}" for v in prior.get("levels", [])] + (["once-seen scores"] if prior.get("diffuse") else [])
        more = "…" if len(levels) > 6 else ""
        parts.append(f"prior α over ({', '.join(levels[:6])}{more}) = ({alpha}{more})")
    return f"{method}" + (f": {'; '.join(parts)}" if parts else "")


def errors_text(err: ReadinessErrors) -> str:
    """The error counts and what the policy did with each kind."""
    fate = "reward 0, --errors zero" if err.get("policy") == "zero" else "left out"
    refusals = err.get("refusal") or 0
    out = [f"{err.get('generate', 0) - refusals} generation ({fate})"]
    if refusals:
        out.append(f"{refusals} model refusal{'s' if refusals != 1 else ''} (reward 0)")
    out.append(f"{err.get('grade', 0)} grading (reward 0)")
    types = ", ".join(f"{k} {v}" for k, v in {**err.get("generate_types", {}), **err.get("grade_types", {})}.items())
    return ", ".join(out) + (f" — {types}" if types else "")


def render_summary(report: ReadinessReport, console: Console, not_sampling: bool = True) -> None:
    """A few lines: the verdict, where the mean sits, zero-signal shares, and the reasons (end of `rfteval run`);
    then the not-sampling warning, one line however wide, unless the caller printed it already (`not_sampling`)."""
    for line in summary_lines(report):
        console.print(line, highlight=False)
    if not_sampling and (warning := not_sampling_line(report)) is not None:
        console.print(warning, highlight=False, soft_wrap=True)


def text_histogram(counts: list[int], low: float, high: float, width: int = 30) -> list[str]:
    """One line per bin: its range, a bar, its count."""
    top = max(counts) if counts else 0
    step = (high - low) / len(counts) if counts else 0
    out = []
    for i, c in enumerate(counts):
        a, b = low + i * step, low + (i + 1) * step
        bar = "█" * (round(c / top * width) if top else 0)
        out.append(f"  {a:5.2f}–{b:<5.2f} {bar} {c}")
    return out


def render_readiness(report: ReadinessReport, console: Console) -> None:
    """The full report: summary, histograms, labels, determinism and every check with its threshold."""
    from rfteval.report.format import table as house_table

    ez = report.expected_zero_signal
    render_summary(report, console)
    console.print(f"  range: {_esc(report.range_source)}", style="dim", highlight=False)
    console.print(f"\nItem means ({report.n_items} items)", style="bold")
    for line in text_histogram(report.mean_histogram, report.score_min, report.score_max):
        console.print(line, highlight=False)
    console.print("Within-item SD", style="bold")
    for line in text_histogram(report.sd_histogram, 0.0, report.sd_histogram_max):
        console.print(line, highlight=False)
    console.print(
        f"scores at the minimum {pct(report.share_at_min)}, at the maximum {pct(report.share_at_max)}; "
        f"mean item variance (ddof=1; unbiased p(1−p) for binary) {num(report.mean_item_variance)}", highlight=False)
    console.print(f"expected zero-signal at G={report.group_size}: {pct(ez.get('share'))} (all-min "
                  f"{pct(ez.get('floor'))}, all-max {pct(ez.get('ceiling'))}); {_esc(estimator_text(ez))}",
                  highlight=False)
    err = report.errors
    if err.get("generate") or err.get("grade"):
        console.print(f"errors: {_esc(errors_text(err))}", highlight=False)
    lab = report.labels
    if lab is not None:
        console.print("\nLabels", style="bold")
        if lab.reference_counts:
            counts = ", ".join(f"{_esc(k)} {v}" for k, v in list(lab.reference_counts.items())[:8])
            console.print(f"  references ({_esc(lab.reference_path)}): {counts}; majority share "
                          f"{pct(lab.majority_share)}, chance {pct(lab.chance)}", highlight=False)
            errs = lab.constant_answer_errors
            left_out = (f"; {sum(errs.values())} grading error(s) left out ({', '.join(f'{k} ×{v}' for k, v in errs.items())})"
                        if errs else "")
            console.print(f"  always answering {_esc(repr(lab.majority_label))} scores "
                          f"{num(lab.constant_answer_score)} ({_esc(lab.constant_answer_method)}{_esc(left_out)})",
                          highlight=False)
            per = ", ".join(f"{_esc(k)} {num(v, 2)}" for k, v in (lab.per_label_mean or {}).items())
            console.print(f"  mean score per reference label: {per}", highlight=False)
        if lab.answer_counts:
            counts = ", ".join(f"{_esc(k)} {v}" for k, v in list(lab.answer_counts.items())[:8])
            console.print(f"  answers ({_esc(lab.answer_path)}): {counts}; majority share "
                          f"{pct(lab.answer_majority_share)}", highlight=False)
    det = report.determinism
    if det is not None:
        console.print("\nDeterminism", style="bold")
        left_out = (f"; {sum(det.errors.values())} with a grading error left out "
                    f"({', '.join(f'{k} ×{v}' for k, v in det.errors.items())})" if det.errors else "")
        console.print(f"  re-graded {det.n_regraded} stored outputs: {det.n_changed} of {det.n_compared} compared "
                      f"changed (flip rate {pct(det.flip_rate)}, largest change {num(det.max_abs_diff)}){_esc(left_out)}",
                      highlight=False)
        for ch in det.changed[:10]:
            console.print(f"    item {_esc(ch['item_id'])} epoch {ch.get('epoch')}: {num(ch['stored'])} → "
                          f"{num(ch['regraded'])}", highlight=False)
    table = house_table("Checks")
    for col in ("check", "status", "value", "threshold (heuristic)", "why"):
        table.add_column(col, overflow="fold")
    for c in report.checks:
        table.add_row(c.name, f"[{STATUS_STYLE[c.status]}]{c.status.replace('_', ' ')}[/]",
                      num(c.value), _esc(c.threshold), _esc(c.message))
    console.print()
    console.print(table)
    for note in report.notes:
        console.print(f"note: {_esc(note)}", style="dim", highlight=False)


def render_probes(report: ProbeReport, console: Console) -> None:
    """One row per probe: its status in a word, what it scored, its errors, the items where it was flagged. What a
    cell at 80 columns would split mid-word goes on lines of its own below the table: why a probe was skipped or
    decided on part of its grades, and each kind of grading error with its first message (what the grader is
    debugged from: `KeyError: 'answer_num'`, not only `python_grader_runtime_error`)."""
    from rfteval.report.format import table as house_table

    console.print(f"Grader probes: {_esc(report.grader_name)} ({_esc(report.grader_type)}), {report.n_items} items; "
                  f"floor {report.score_min:g}, maximum {report.score_max:g}, a cheat is flagged above "
                  f"{report.score_min + report.margin * (report.score_max - report.score_min):g}", highlight=False)
    console.print(f"reference → output: {_esc(report.template_source)}", style="dim", highlight=False)
    table = house_table()
    for col in ("probe", "expect", "status", "mean", "max", "errors"):  # a name, a word, a number: never split
        table.add_column(col, no_wrap=True)
    table.add_column("flagged items", overflow="fold")  # item ids, wrapped at their commas
    details: dict[tuple[str, str], list[str]] = {}
    for p in report.probes:
        items = ", ".join(p.flagged_items[:6]) + (f" … (+{len(p.flagged_items) - 6})" if len(p.flagged_items) > 6
                                                  else "")
        table.add_row(p.name, p.expect.replace("_", " "), f"[{STATUS_STYLE.get(p.status, '')}]{p.status}[/]",
                      num(p.mean), num(p.max), f"{p.n_errors} of {p.n_graded}" if p.n_errors else "", _esc(items))
        if p.status_text != p.status:  # skipped (why), inconclusive or decided on part of its grades (which errors)
            details.setdefault((p.status, p.status_text), []).append(p.name)
    console.print(table)
    for (status, text), names in details.items():
        console.print(f"{', '.join(names)}: [{STATUS_STYLE.get(status, '')}]{status}[/]"
                      f"{_esc(text.removeprefix(status))}", highlight=False)
    error_lines(report, console)
    if report.ignores_output:  # the probes' own verdicts mean nothing then: say why (and what to do) instead
        console.print(f"[bold red]{_esc(report.notes[0])}[/]; every scored probe is flagged", highlight=False)
    elif report.flags:
        console.print(f"[bold red]{len(report.flags)} flag(s):[/] {', '.join(p.name for p in report.flags)}")
    if report.inconclusive:  # errors are no verdict: never "no flags" while a probe has no grade but errors
        console.print(f"[bold {STATUS_STYLE['inconclusive']}]{len(report.inconclusive)} probe(s) inconclusive[/] "
                      "(every grade an error, so not a pass)", highlight=False)  # named on the lines above
    elif not report.flags and not report.ignores_output:
        console.print("[bold green]no flags[/]")
    for note in report.notes[1:] if report.ignores_output else report.notes:
        console.print(f"note: {_esc(note)}", style="dim", highlight=False)


def error_lines(report: ProbeReport, console: Console) -> None:
    """Each kind of grading error over the probes, how many, and its first message on one line: what the grader is
    debugged from (`KeyError: 'answer_num'`, not only `python_grader_runtime_error`)."""
    from rfteval.data.grades import message_line

    messages = report.error_messages
    if not messages:
        return
    console.print("grading errors, the first message of each kind:", highlight=False)
    for kind, n in report.error_types.items():
        if kind in messages:
            console.print(f"  {kind} ×{n}: {message_line(messages[kind])}", markup=False, highlight=False)


# ---------------------------------------------------------------- HTML

_STYLE = """<style>
.rfteval-readiness{font-family:system-ui,sans-serif;font-size:14px;color:#1f2328;margin:1em 0}
.rfteval-readiness h3{margin:.2em 0 .5em}
.rfteval-readiness .verdict{display:inline-block;padding:.15em .6em;border-radius:4px;color:#fff;font-weight:600}
.rfteval-readiness table{border-collapse:collapse;margin:.5em 0}
.rfteval-readiness td,.rfteval-readiness th{border-bottom:1px solid #d0d7de;padding:.25em .6em;text-align:left;
vertical-align:top}
.rfteval-readiness .ok{color:#1a7f37}.rfteval-readiness .risky,.rfteval-readiness .warning{color:#9a6700}
.rfteval-readiness .not_ready,.rfteval-readiness .flag{color:#cf222e}.rfteval-readiness .skipped{color:#6e7781}
.rfteval-readiness .inconclusive{color:#8250df}
.rfteval-readiness .plots{display:flex;flex-wrap:wrap;gap:1.5em}
.rfteval-readiness .note{color:#6e7781}
</style>"""


def svg_histogram(counts: list[int], low: float, high: float, title: str, width: int = 360,
                  height: int = 150) -> str:
    """An inline SVG bar chart of binned counts, with a tooltip per bar."""
    pad_l, pad_r, pad_b, pad_t = 16, 20, 22, 30  # room for the title, the count over the tallest bar, the axis
    plot_w, plot_h = width - pad_l - pad_r, height - pad_b - pad_t
    top = max(counts) if counts and max(counts) > 0 else 1
    n = max(len(counts), 1)
    bw = plot_w / n
    step = (high - low) / n
    parts = [(f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
             f'aria-label="{escape(title)}">'),
             f'<text x="{pad_l}" y="12" font-size="12" font-weight="600">{escape(title)}</text>']
    for i, c in enumerate(counts):
        h = c / top * plot_h
        x = pad_l + i * bw
        y = pad_t + plot_h - h
        a, b = low + i * step, low + (i + 1) * step
        parts.append(f'<rect x="{x + 1:.1f}" y="{y:.1f}" width="{bw - 2:.1f}" height="{h:.1f}" fill="#0969da">'
                     f'<title>{a:.2f}–{b:.2f}: {c}</title></rect>')
        if c:
            parts.append(f'<text x="{x + bw / 2:.1f}" y="{y - 2:.1f}" font-size="10" text-anchor="middle">{c}</text>')
    base = pad_t + plot_h
    parts.append(f'<line x1="{pad_l}" y1="{base}" x2="{pad_l + plot_w}" y2="{base}" stroke="#57606a"/>')
    for frac in (0.0, 0.5, 1.0):
        x = pad_l + frac * plot_w
        parts.append(f'<text x="{x:.1f}" y="{base + 14}" font-size="10" text-anchor="middle">'
                     f'{low + frac * (high - low):.2g}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _cls(status: str) -> str:
    return escape(status, quote=True)


def readiness_html(report: ReadinessReport) -> str:
    """A self-contained fragment (scoped style, inline SVG, no scripts) for the HTML report to embed."""
    v = report.verdict
    zv, ez = report.zero_variance, report.expected_zero_signal
    rows = [
        ("base mean", (f"{num(report.mean)} ± {num(report.se)} (SE) in [{report.score_min:g}, {report.score_max:g}]"
                      f" — {pct(report.position)} of the range")),
        ("items × samples", f"{report.n_items} × {report.samples_min}"
                            + (f"–{report.samples_max}" if report.samples_max != report.samples_min else "")),
        ("zero-signal items", (f"{pct(zv.get('share'))} (all-min {pct(zv.get('floor'))}, all-max "
                              f"{pct(zv.get('ceiling'))}, other {pct(zv.get('other'))})"
                              + (f"; {zv['errors']} item(s) of grading errors only, left out"
                                 if zv.get("errors") else ""))),
        (f"expected zero-signal at G={report.group_size}", (f"{pct(ez.get('share'))} (all-min {pct(ez.get('floor'))},"
                                                           f" all-max {pct(ez.get('ceiling'))}); {estimator_text(ez)}")),
        ("score levels", f"{report.distinct_levels}{' (binary)' if report.binary else ''}"),
        ("mean within-item SD", num(report.mean_within_sd)),
        ("mean item variance (ddof=1)", num(report.mean_item_variance)),
    ]
    err = report.errors
    if err.get("generate") or err.get("grade"):
        rows.append(("errors", errors_text(err)))
    lab = report.labels
    if lab is not None and lab.majority_share is not None:
        rows.append(("majority label", (f"{lab.majority_label} {pct(lab.majority_share)} (chance {pct(lab.chance)});"
                                       f" constant answer scores {num(lab.constant_answer_score)}")))
    if lab is not None and lab.answer_majority_share is not None:
        rows.append(("majority answer", f"{lab.answer_majority_label} {pct(lab.answer_majority_share)}"))
    det = report.determinism
    if det is not None:
        rows.append(("determinism", f"{det.n_changed} of {det.n_compared} re-graded outputs changed"
                     + (f"; {sum(det.errors.values())} with a grading error left out" if det.errors else "")))
    html = [_STYLE, '<section class="rfteval-readiness">',
            (f'<h3>RFT readiness{" — " + escape(report.label) if report.label else ""} '
            f'<span class="verdict" style="background:{VERDICT_COLOR[v]}">{VERDICT_TEXT[v]}</span>'
            f'{" (provisional)" if report.provisional else ""}'
            f'{" (" + escape(incomplete_verdict(report)) + ")" if report.incomplete else ""}</h3>'),
            "<table>"]
    if report.incomplete:
        rows.insert(0, ("incomplete run", incomplete_text(report)))
    html += [f"<tr><th>{escape(k)}</th><td>{escape(val)}</td></tr>" for k, val in rows]
    html.append("</table>")
    html.append('<div class="plots">'
                + svg_histogram(report.mean_histogram, report.score_min, report.score_max, "Item means")
                + svg_histogram(report.sd_histogram, 0.0, report.sd_histogram_max, "Within-item SD")
                + "</div>")
    html.append("<table><tr><th>check</th><th>status</th><th>value</th><th>threshold (heuristic)</th>"
                "<th>why</th></tr>")
    for c in report.checks:
        html.append(f'<tr><td>{escape(c.name)}</td><td class="{_cls(c.status)}">{escape(c.status.replace("_", " "))}'
                    f"</td><td>{escape(num(c.value))}</td><td>{escape(c.threshold)}</td><td>{escape(c.message)}"
                    "</td></tr>")
    html.append("</table>")
    if report.not_sampling is not None:
        html.append(f'<p class="warning">{escape(report.not_sampling["message"])}</p>')
    html += [f'<p class="note">{escape(n)}</p>' for n in report.notes]
    html.append("</section>")
    return "\n".join(html)


def probes_html(report: ProbeReport) -> str:
    """The probe table as a self-contained fragment."""
    cut = report.score_min + report.margin * (report.score_max - report.score_min)
    html = [_STYLE, '<section class="rfteval-readiness">',
            f"<h3>Grader probes — {escape(str(report.grader_name))} ({escape(str(report.grader_type))})</h3>",
            (f"<p>{report.n_items} items; floor {report.score_min:g}, maximum {report.score_max:g}; a cheat is flagged "
            f"above {cut:g}. Reference → output: {escape(report.template_source)}.</p>"),
            ("<table><tr><th>probe</th><th>expect</th><th>status</th><th>mean</th><th>max</th><th>errors</th>"
            "<th>flagged items</th></tr>")]
    for p in report.probes:
        status = p.status_text
        items = ", ".join(p.flagged_items[:10]) + (" …" if len(p.flagged_items) > 10 else "")
        html.append(f'<tr><td title="{escape(p.description)}">{escape(p.name)}</td>'
                    f"<td>{escape(p.expect.replace('_', ' '))}</td><td class=\"{_cls(p.status)}\">{escape(status)}</td>"
                    f"<td>{num(p.mean)}</td><td>{num(p.max)}</td><td>{p.n_errors or ''}</td><td>{escape(items)}</td>"
                    "</tr>")
    html.append("</table>")
    if report.error_messages:
        from rfteval.data.grades import message_line

        html.append("<p>Grading errors, the first message of each kind:</p><ul>")
        html += [f"<li><code>{escape(kind)}</code> ×{n}: <code>{escape(message_line(report.error_messages[kind]))}"
                 "</code></li>" for kind, n in report.error_types.items() if kind in report.error_messages]
        html.append("</ul>")
    html += [f'<p class="note">{escape(n)}</p>' for n in report.notes]
    html.append("</section>")
    return "\n".join(html)


def readiness_sections(readiness: BaselineReadiness | None) -> list[tuple[str, str]]:
    """The compare HTML report's section on the baseline's RFT readiness (rfteval.baseline_readiness):
    the report, or why it is not there; none when the baseline has fewer than 2 epochs per item."""
    from rfteval.baseline_readiness import READINESS_MAX_RECORDS

    if readiness is None:
        return []
    title = f"RFT readiness of the baseline ({readiness.label})"
    if readiness.skipped_records is not None:
        return [(title, f"<p>Not computed here for {readiness.skipped_records:,} records (more than "
                        f"{READINESS_MAX_RECORDS:,}): run <code>rfteval readiness {escape(str(readiness.path))} "
                        f"--html FILE</code>.</p>")]
    if readiness.report is None:
        return [(title, f"<p>Not assessed: {escape(str(readiness.failed))}.</p>")]
    return [(title, readiness_html(readiness.report))]


def print_run_readiness(readiness: RunReadiness, console: Console) -> None:
    """`rfteval run`'s closing readiness lines: the verdict and where the details are, or why there is none."""
    if readiness.report is None:
        console.print(f"readiness: not assessed ({readiness.reason})")
        return
    render_summary(readiness.report, console, not_sampling=False)  # the run's table printed it
    console.print(f"(details: rfteval readiness {readiness.out_dir} --label {readiness.label})")
