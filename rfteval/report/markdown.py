"""A comparison as GitHub-flavoured Markdown: for a CI job summary ($GITHUB_STEP_SUMMARY) or a PR comment."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from rfteval.data.outfile import write_text_atomic
from rfteval.data.reasoning import truncation_line
from rfteval.report.agent_render import agent_markdown
from rfteval.report.format import fmt, fmt_ci, fmt_p
from rfteval.report.terminal import errors_text, metric_suffix, shown_p, summary_rows, verdict, wtl

if TYPE_CHECKING:
    from rfteval.compare.result import CompareResult
    from rfteval.compare.series import SeriesResult


def cell(text: object) -> str:
    """Table-cell safe: pipes escaped, newlines flattened, Markdown emphasis characters neutralised."""
    s = str(text).replace("\\", "\\\\").replace("|", "\\|").replace("\r", " ").replace("\n", " ")
    for ch in "*_`[]<>":
        s = s.replace(ch, "\\" + ch)
    return s


def code(text: str) -> str:
    """A code span showing `text` verbatim: the fence is one backtick longer than any run inside."""
    import re

    text = text.replace("\n", " ")
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if longest else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def render_markdown(result: CompareResult, top: int = 10) -> str:
    b, c = result.baseline, result.candidate
    level = int(result.options.level * 100)
    out = [f"## rfteval compare: {cell(b['label'])} → {cell(c['label'])}{cell(metric_suffix(result))}", ""]
    gate = result.gate
    if gate.get("checks"):
        if gate["passed"]:
            out.append(f"**Gate: passed** ({', '.join(ch['name'] for ch in gate['checks'])})")
        else:
            out.append("**Gate: FAILED**")
            out.append("")
            out += [f"- ❌ {code(line)}" for line in gate["failures"]]
        out += [f"- ⚠️ {code(line)}" for line in gate.get("warnings", [])]
        out.append("")
    d = result.delta
    out.append(f"Delta **{fmt(d['mean'], sign=True)}** {fmt_ci(d['ci95'])} ({level}% CI), p {fmt_p(d['p_value'])}: "
               f"{verdict(d)}. Won/tied/lost on {wtl(d)} of {d['n']} items.")
    out.append("")
    out.append(f"| | items | {cell(b['label'])} | {cell(c['label'])} | delta | {level}% CI | p adj. | W/T/L |")
    out.append("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, row in summary_rows(result):
        dd = row["delta"]
        out.append(f"| {cell(name)} | {row['items']} | {fmt(row['baseline']['mean'])} | "
                   f"{fmt(row['candidate']['mean'])} | {fmt(dd['mean'], sign=True)} | {fmt_ci(dd['ci95'])} | "
                   f"{fmt_p(shown_p(dd))} | {wtl(dd)} |")
    out.append("")
    out += agent_markdown(result, cell)
    for role, side in (("baseline", b), ("candidate", c)):
        errs = errors_text(side, result.options)
        out.append(f"- {role} {cell(side['label'])}: {fmt(side['mean'])} {fmt_ci(side['ci95'], sign=False)}, "
                   f"{side['items']} items, {side['records']} records, {errs}")
        cut = truncation_line(side["label"], side.get("truncated_in_reasoning", 0),
                              side.get("truncated_in_reasoning_share", 0.0))
        if cut:
            out.append(f"- {cell(cut)}")
    out.append(f"- p-value: {d['p_method']} (slices of one field and sub-scores: Holm-adjusted); "
               f"minimum detectable effect at 80% power {fmt(d['mde'])}; "
               f"paired SE {fmt(d['se'])} (unpaired would be {fmt(d['se_unpaired'])})")
    if "hardest" in result.slices:
        out.append(f"- hardest: {cell(result.slices['hardest']['rule'])}")
    for role, ids in (("baseline", result.unpaired["baseline_only"]), ("candidate", result.unpaired["candidate_only"])):
        if ids:
            shown = ", ".join(cell(i) for i in ids[:10]) + (f" and {len(ids) - 10} more" if len(ids) > 10 else "")
            out.append(f"- only in the {role}, left out: {shown}")
    out += [f"- note: {cell(n)}" for n in result.notes]
    out.append("")
    if top > 0:
        items = result.items.head(top)
        out += [f"<details><summary>Per item, lowest delta first ({len(items)} of {len(result.items)})</summary>", "",
                f"| item | {cell(b['label'])} | {cell(c['label'])} | delta | errors b/c |",
                "|---|---:|---:|---:|---:|"]
        for r in items.itertuples(index=False):
            out.append(f"| {cell(r.item_id)} | {fmt(r.baseline)} | {fmt(r.candidate)} | {fmt(r.delta, sign=True)} | "
                       f"{r.baseline_errors}/{r.candidate_errors} |")
        out += ["", "</details>", ""]
    return "\n".join(out)


def write_markdown(result: CompareResult, path: str | Path, top: int = 10) -> None:
    """Atomic: the file is whole or absent."""
    write_text_atomic(path, render_markdown(result, top))


def render_series_markdown(series: SeriesResult) -> str:
    """A checkpoint series: the baseline, one row per candidate (Holm across them), the best, the gate."""
    from rfteval.compare.series import verdict as series_verdict
    from rfteval.report.terminal import series_lines

    o = series.options
    level = int(o.level * 100)
    b = series.baseline
    metric = "" if series.metric == "mean" else f" ({series.metric})"
    out = [f"## rfteval compare: series against {cell(b['label'])}{cell(metric)}", ""]
    gate = series.gate
    if any(c.gated and c.result.gate.get("checks") for c in series.candidates):
        out.append("**Gate: passed**" if gate["passed"] else "**Gate: FAILED**")
        out.append("")
        out += [f"- ❌ {code(line)}" for line in gate["failures"]]
        out += [f"- ⚠️ {code(line)}" for line in gate.get("warnings", [])]
        out.append("")
    out.append(f"| model | items | mean | {level}% CI | delta | delta {level}% CI | p adj. | W/T/L | verdict |")
    out.append("|---|---:|---:|---:|---:|---:|---:|---:|---|")
    out.append(f"| {cell(b['label'])} (baseline) | {b['items']} | {fmt(b['mean'])} | {fmt_ci(b['ci95'], sign=False)} "
               "| | | | | |")
    best = series.best["label"] if series.best and len(series.candidates) > 1 else None
    for c in series.candidates:
        r, d = c.result, c.result.delta
        mark = " \\*" if c.label == best else ""
        out.append(f"| {cell(c.label)}{mark} | {d['n']} | {fmt(r.candidate['mean'])} | "
                   f"{fmt_ci(r.candidate['ci95'], sign=False)} | {fmt(d['mean'], sign=True)} | {fmt_ci(d['ci95'])} | "
                   f"{fmt_p(c.p_adjusted)} | {wtl(d)} | {series_verdict(c, o.level)} |")
    out.append("")
    out += [f"- {cell(line)}" for line in series_lines(series)]
    out.append("")
    return "\n".join(out)


def write_series_markdown(series: SeriesResult, path: str | Path) -> None:
    write_text_atomic(path, render_series_markdown(series))
