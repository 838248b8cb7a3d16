"""Rich tables for a comparison: the summary (overall, hardest, slices, sub-scores), per item, the gate.

`summary_table` is shared with `rfteval run`, which prints the same base → tuned table after a run.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from rfteval.data.reasoning import truncation_line
from rfteval.report.format import fmt, fmt_ci, fmt_p
from rfteval.report.format import table as house_table

if TYPE_CHECKING:
    from rich.console import Console, RenderableType
    from rich.table import Table
    from rich.text import Text

    from rfteval.compare.result import CompareOptions, CompareResult, PairRow, SideReport
    from rfteval.compare.series import SeriesResult
    from rfteval.data.sampling_check import NotSampling
    from rfteval.stats.paired import PairedDelta


def wtl(delta: PairedDelta) -> str:
    return f"{delta['wins']}/{delta['ties']}/{delta['losses']}"


def verdict(delta: PairedDelta) -> str:
    """The row's word, from the same rule the gate uses (rfteval.stats.paired.direction)."""
    from rfteval.stats.paired import direction

    return direction(delta, float(delta.get("level", 0.95)))


def shown_p(delta: PairedDelta) -> float | None:
    """The p-value the verdict follows: Holm-adjusted within its family of slices or sub-scores."""
    p = delta.get("p_adjusted")
    return delta.get("p_value") if p is None else p


def errors_text(side: SideReport, options: CompareOptions) -> str:
    """How a side's error records entered its mean, under the error policy in force."""
    total = side.get("errors", 0)
    if not total:
        return "no errors"
    if options.exclude_errors:
        return f"{total} error record(s) left out"
    generation = side.get("generation_errors", 0)
    zero = total - generation if options.errors == "exclude" else total
    parts = []
    if options.errors == "exclude" and generation:
        parts.append(f"{generation} generation error(s) left out")
    if zero:
        parts.append(f"{zero} error record(s) scored 0")
    return ", ".join(parts)


def metric_suffix(result: CompareResult) -> str:
    """' (pass@3)' when the comparison is not on mean scores, else ''."""
    metric = getattr(result, "metric", "mean")
    return "" if metric == "mean" else f" ({metric})"


def summary_rows(result: CompareResult) -> list[tuple[str, PairRow]]:
    """(row name, paired row) for overall, the hardest slice, each --by slice and each sub-score."""
    overall: PairRow = {"items": result.delta["n"], "baseline": result.baseline, "candidate": result.candidate,
                        "delta": result.delta}
    rows: list[tuple[str, PairRow]] = [("overall", overall)]
    for name, row in result.slices.items():
        rows.append((name, row))
    rows += [(f"sub:{key}", row) for key, row in result.sub_scores.items()]
    return rows


def summary_table(result: CompareResult, title: str | None = None) -> Table:
    """Baseline and candidate means, delta, its interval, p and win/tie/loss: one row per overall/slice/sub-score."""
    from rich.markup import escape
    from rich.text import Text

    b, c = escape(result.baseline["label"]), escape(result.candidate["label"])
    same = b == c
    rows = summary_rows(result)
    # Readable at 80 columns: no cell wraps (a slice name is cut with an ellipsis past 32 characters, never split
    # mid-word), and the edges carry no padding.
    table = house_table(title or f"{b} -> {c}{escape(metric_suffix(result))}")
    longest = max((len(name) for name, _ in rows), default=8)
    table.add_column("", no_wrap=True, overflow="ellipsis", min_width=min(longest, 32), max_width=32)
    for header in ("items", f"{b} (baseline)" if same else b, f"{c} (candidate)" if same else c, "delta",
                   f"{int(result.options.level * 100)}% CI", "p adj.", "W/T/L"):
        table.add_column(header, justify="right", no_wrap=True)
    for name, row in rows:
        d = row["delta"]
        style = {"better": "green", "worse": "red"}.get(verdict(d), "")
        table.add_row(Text(name), str(row["items"]), fmt(row["baseline"]["mean"]), fmt(row["candidate"]["mean"]),
                      f"[{style}]{fmt(d['mean'], sign=True)}[/]" if style else fmt(d["mean"], sign=True),
                      fmt_ci(d["ci95"]), fmt_p(shown_p(d)), wtl(d))
    return table


def side_lines(result: CompareResult) -> list[str]:
    lines = []
    what = "" if result.metric == "mean" else f"{result.metric} "
    for role, side in (("baseline", result.baseline), ("candidate", result.candidate)):
        errs = ", " + errors_text(side, result.options)
        lines.append(f"{role} {side['label']}: {what}{fmt(side['mean'])} {fmt_ci(side['ci95'], sign=False)} over "
                     f"{side['items']} items, {side['records']} records{errs}")
        cut = truncation_line(side["label"], side.get("truncated_in_reasoning", 0),
                              side.get("truncated_in_reasoning_share", 0.0))
        if cut:
            lines.append(cut)
    d = result.delta
    lines.append(f"delta: {fmt(d['mean'], sign=True)} {fmt_ci(d['ci95'])}, {verdict(d)}, p {fmt_p(d['p_value'])} "
                 f"({d['p_method']}), MDE at 80% power {fmt(d['mde'])}, item correlation {fmt(d['correlation'], 2)}"
                 f", paired SE {fmt(d['se'])} vs unpaired {fmt(d['se_unpaired'])}")
    return lines


def items_table(result: CompareResult, top: int = 10) -> Table:
    """The `top` items with the lowest delta (largest drops first)."""
    from rich.markup import escape
    from rich.text import Text

    items = result.items
    table = house_table(f"per item, lowest delta first ({min(top, len(items))} of {len(items)})")
    for name, justify in (("item", "left"), (escape(result.baseline["label"]), "right"),
                          (escape(result.candidate["label"]), "right"), ("delta", "right"),
                          ("epochs b/c", "right"), ("errors b/c", "right")):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for r in items.head(top).itertuples(index=False):
        style = "red" if r.delta < -result.options.tie else ("green" if r.delta > result.options.tie else "")
        delta = fmt(r.delta, sign=True)
        table.add_row(Text(str(r.item_id)), fmt(r.baseline), fmt(r.candidate), f"[{style}]{delta}[/]" if style else delta,
                      f"{r.baseline_n}/{r.candidate_n}", f"{r.baseline_errors}/{r.candidate_errors}")
    return table


def gate_text(result: CompareResult) -> list[Text]:
    """One line when the gate passed, else one line per failure (empty when no gate flag was given)."""
    from rich.text import Text

    gate = result.gate
    if not gate.get("checks"):
        return []
    warnings = [Text.assemble(("  ! ", "yellow"), line) for line in gate.get("warnings", [])]
    if gate["passed"]:
        names = ", ".join(c["name"] for c in gate["checks"])
        return [Text.assemble(("gate passed", "green"), f" ({names}; {gate.get('mode', 'evidence')} mode)")] + warnings
    failures = [Text.assemble(("  x ", "red"), line) for line in gate["failures"]]
    return [Text("gate FAILED", style="bold red"), *failures, *warnings]


def not_sampling_lines(checks: Iterable[NotSampling]) -> list[str]:
    """The not-sampling warnings (rfteval.data.sampling_check), each once: both sides may be the same records."""
    return ["warning: " + line for line in dict.fromkeys(c.line for c in checks)]


def render_compare(result: CompareResult, top: int = 10) -> list[RenderableType]:
    """Everything `rfteval compare` prints, in order, as rich renderables."""
    from rich.text import Text

    from rfteval.report.agent_render import agent_tables

    out: list[RenderableType] = [summary_table(result), *agent_tables(result)]
    out += [Text(line) for line in side_lines(result)]
    out += [Text(line, style="yellow") for line in not_sampling_lines(result.not_sampling.values())]
    if top > 0:
        out.append(items_table(result, top))
    for role, ids in (("baseline", result.unpaired["baseline_only"]), ("candidate", result.unpaired["candidate_only"])):
        if ids:
            shown = ", ".join(ids[:10]) + (f" and {len(ids) - 10} more" if len(ids) > 10 else "")
            out.append(Text(f"only in the {role}, left out: {shown}", style="yellow"))
    hardest = result.slices.get("hardest")
    if hardest:
        out.append(Text(f"hardest: {hardest['rule']}"))
    out += [Text(f"note: {n}") for n in result.notes]
    out += gate_text(result)
    return out


def print_compare(result: CompareResult, console: Console | None = None, top: int = 10) -> None:
    from rich.console import Console
    from rich.text import Text

    console = console or Console()
    whole = set(not_sampling_lines(result.not_sampling.values()))
    for part in render_compare(result, top):  # a warning is one line however wide: a log is searched for it
        console.print(part, soft_wrap=isinstance(part, Text) and part.plain in whole)


# ---------------------------------------------------------------------------------------------- checkpoint series


def series_table(series: SeriesResult) -> Table:
    """The baseline, then each candidate: mean and interval, paired delta and interval, Holm p, verdict, gate."""
    from rich.text import Text

    from rfteval.compare.series import verdict as series_verdict

    o = series.options
    level = int(o.level * 100)
    b = series.baseline
    metric = "" if series.metric == "mean" else f" ({series.metric})"
    table = house_table(f"series: {b['label']} (baseline) -> {len(series.candidates)} candidate(s){metric}")
    gated = any(c.gated and c.result.gate.get("checks") for c in series.candidates)
    widest = min(24, 2 + max(len(c.label) for c in series.candidates))
    for name in ("model", "items", "mean", f"{level}% CI", "delta", f"delta {level}% CI", "p adj.", "W/T/L",
                 "verdict", *(("gate",) if gated else ())):
        table.add_column(name, justify="left" if name in ("model", "verdict", "gate") else "right",
                         no_wrap=name != "model", overflow="fold",
                         min_width=widest if name == "model" else None)
    table.add_row(Text(b["label"]), str(b["items"]), fmt(b["mean"]), fmt_ci(b["ci95"], sign=False),
                  "", "", "", "", "baseline", *(("",) if gated else ()))
    best = series.best["label"] if series.best else None
    for c in series.candidates:
        r, d = c.result, c.result.delta
        word = series_verdict(c, o.level)
        style = {"better": "green", "worse": "red"}.get(word, "")
        gate = "—" if not c.gated or not r.gate.get("checks") else ("pass" if r.gate["passed"] else "FAIL")
        name = c.label + (" *" if c.label == best and len(series.candidates) > 1 else "")
        table.add_row(Text(name), str(d["n"]), fmt(r.candidate["mean"]), fmt_ci(r.candidate["ci95"], sign=False),
                      f"[{style}]{fmt(d['mean'], sign=True)}[/]" if style else fmt(d["mean"], sign=True),
                      fmt_ci(d["ci95"]), fmt_p(c.p_adjusted), wtl(d), word,
                      *((Text(gate, style="red" if gate == "FAIL" else ""),) if gated else ()))
    return table


def series_lines(series: SeriesResult) -> list[str]:
    """The best candidate (and its held-out delta), each candidate's own notes, the series' notes."""
    lines = ["p adj.: Holm across the candidates" + (" (* the largest delta)" if len(series.candidates) > 1 else "")]
    best = series.best
    if best and best.get("held_out"):
        h = best["held_out"]
        d = h["delta"]
        same = "the same candidate" if h["label"] == best["label"] else f"{h['label']}, not {best['label']}"
        lines.append(f"held out: chosen on {h['choose_items']} random items, the best is {same}; on the other "
                     f"{h['measure_items']} items its delta is {fmt(d['mean'], sign=True)} {fmt_ci(d['ci95'])}, "
                     f"p {fmt_p(d['p_value'])}")
    elif best and len(series.candidates) > 1:
        from rfteval.compare.series import HELD_OUT_MIN_ITEMS

        lines.append(f"held out: not estimated ({best.get('shared_items', 0)} shared items; "
                     f"{HELD_OUT_MIN_ITEMS} are needed to choose on half and measure on the other)")
    for c in series.candidates:
        lines += [f"{c.label}: {n}" for n in c.result.notes]
    sides = [series.candidates[0].result.baseline] + [c.result.candidate for c in series.candidates] \
        if series.candidates else []
    for side in sides:  # each model once: the baseline is every candidate's other side
        cut = truncation_line(side["label"], side.get("truncated_in_reasoning", 0),
                              side.get("truncated_in_reasoning_share", 0.0))
        if cut:
            lines.append(cut)
    lines += [f"note: {n}" for n in series.notes]
    return lines + not_sampling_lines(series.not_sampling.values())


def series_gate_text(series: SeriesResult) -> list[Text]:
    from rich.text import Text

    gate = series.gate
    if not any(c.gated and c.result.gate.get("checks") for c in series.candidates):
        return []
    warnings = [Text.assemble(("  ! ", "yellow"), line) for line in gate.get("warnings", [])]
    gated = ", ".join(c.label for c in series.candidates if c.gated)
    if gate["passed"]:
        return [Text.assemble(("gate passed", "green"), f" ({gated}; {gate.get('mode', 'evidence')} mode)")] + warnings
    failures = [Text.assemble(("  x ", "red"), line) for line in gate["failures"]]
    return [Text("gate FAILED", style="bold red"), *failures, *warnings]


def print_series(series: SeriesResult, console: Console | None = None) -> None:
    from rich.console import Console
    from rich.text import Text

    console = console or Console()
    console.print(series_table(series))
    whole = set(not_sampling_lines(series.not_sampling.values()))
    for line in series_lines(series):
        console.print(Text(line, style="yellow" if line in whole else ""), soft_wrap=line in whole)
    for part in series_gate_text(series):
        console.print(part)
