"""An agent comparison (rfteval.compare.agent) in every report of `rfteval compare`: the terminal's tables, Markdown,
HTML and JUnit properties, shown under the score's table.

Effort and stop-reason rows carry stats.direction's word as "higher" / "lower": more turns or tokens is not better
or worse in itself, so a row the test shows is marked in one neutral colour, whichever way it went, and a row it
does not show is never coloured (the score table's rule: colour only what the test shows).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from html import escape
from typing import TYPE_CHECKING

from rfteval.compare.agent import ROLES, ROWS, WORDS
from rfteval.report.format import fmt, fmt_ci, fmt_p, fmt_share

if TYPE_CHECKING:
    from rich.table import Table
    from rich.text import Text

    from rfteval.compare.agent import AgentComparison, AgentRow, ScoreGroup, StopShare
    from rfteval.compare.result import CompareResult

SHOWN = "cyan"  # the terminal's colour of a row the test shows (never green or red: neither way is "better")
CSS = ".shown{color:#1f5f99;font-weight:600}"  # HTML's; with the section, so a page without one is as it was
DIGITS = {"turns": 2, "tool_calls": 2, "tool_error_share": 3, "tokens": 0, "cost_usd": 6, "latency_s": 2}


def value(key: str, x: float | None, sign: bool = False) -> str:
    """One figure of an effort row, in its row's precision (tokens whole, cost to a millionth of a dollar)."""
    if key == "tokens" and x is not None and math.isfinite(x):
        return f"{x:+,.0f}" if sign else f"{x:,.0f}"
    return fmt(x, DIGITS.get(key, 3), sign)


def interval(key: str, ci: list[float]) -> str:
    lo, hi = ci
    if lo is None or hi is None or not (math.isfinite(lo) and math.isfinite(hi)):
        return "n/a"
    return f"[{value(key, lo, True)}, {value(key, hi, True)}]"


def shown(verdict: str) -> bool:
    """Whether the test shows the row's change (the only rows a report colours)."""
    return verdict in WORDS.values()


def _agent(result: CompareResult) -> AgentComparison | None:
    return getattr(result, "agent", None)


def heading(result: CompareResult, agent: AgentComparison) -> str:
    r = agent["rollouts"]
    return (f"agent: {result.baseline['label']} -> {result.candidate['label']}, per-item means over rollouts "
            f"({r['baseline']:,} / {r['candidate']:,} rollouts)")


def effort_cells(key: str, row: AgentRow) -> list[str]:
    """name, items, baseline, candidate, delta, interval, p adj., word."""
    d = row["delta"]
    return [ROWS[key], str(row["items"]), value(key, row["baseline"]["mean"]), value(key, row["candidate"]["mean"]),
            value(key, d["mean"], True), interval(key, d["ci95"]), fmt_p(d.get("p_adjusted", d["p_value"])),
            row["verdict"]]


def stop_cells(reason: str, row: StopShare) -> list[str]:
    """reason, baseline share (count), candidate share (count), delta, interval, p adj., word."""
    d = row["delta"]
    return [reason, f"{fmt_share(row['baseline'])} ({row['baseline_rollouts']})",
            f"{fmt_share(row['candidate'])} ({row['candidate_rollouts']})", fmt(d["mean"], 3, True),
            fmt_ci(d["ci95"]), fmt_p(d.get("p_adjusted", d["p_value"])), row["verdict"]]


ENDED = {"finished": "finished on its own", "limited": "stopped by a limit"}  # no_tool_calls / any other
SPLIT_HEADER = ("", "rollouts that", "score", "CI", "rollouts", "items")


def split_cells(result: CompareResult, agent: AgentComparison) -> list[list[str]]:
    """Per side, then per way of ending (on its own: no_tool_calls; by a limit: any other reason): label, how,
    the mean score with its interval, rollouts, items."""
    out = []
    for label, role in zip((result.baseline["label"], result.candidate["label"]), ROLES):
        for name in ("finished", "limited"):
            g: ScoreGroup = agent["score_by_stop"][role][name]
            out.append([label, ENDED[name], fmt(g["mean"]) if g["rollouts"] else "n/a",
                        fmt_ci(g["ci95"], sign=False) if g["rollouts"] else "n/a", str(g["rollouts"]),
                        str(g["items"])])
    return out


def agent_lines(result: CompareResult, agent: AgentComparison) -> list[str]:
    """The tool errors by type and the comparison's notes, one line each."""
    lines = []
    for label, role in zip((result.baseline["label"], result.candidate["label"]), ROLES):
        kinds = agent["tool_errors"][role]
        if kinds:
            lines.append(f"tool errors, {label}: " + ", ".join(f"{k} {n}" for k, n in kinds.items()))
    lines.append("p adj.: Holm across the rows of each table; higher/lower only where the test shows it "
                 "(p adj. < 0.05, interval off 0)")
    return lines + [f"note: {n}" for n in agent["notes"]]


# ---------------------------------------------------------------------------------------------- terminal


def agent_tables(result: CompareResult) -> list[Table | Text]:
    """The terminal's agent section: effort, stop reasons, the score by how rollouts ended, then its lines."""
    from rich.markup import escape as markup
    from rich.text import Text

    from rfteval.report.format import table as house_table

    agent = _agent(result)
    if agent is None:
        return []
    level = f"{int(result.options.level * 100)}% CI"
    b, c = markup(result.baseline["label"]), markup(result.candidate["label"])
    if b == c:
        b, c = f"{b} (baseline)", f"{c} (candidate)"
    effort = house_table(markup(heading(result, agent)))
    effort.add_column("", no_wrap=True)
    for name in ("items", b, c, "delta", level, "p adj.", ""):
        effort.add_column(name, justify="left" if name == "" else "right", no_wrap=True)
    for key, row in agent["rows"].items():
        cells = effort_cells(key, row)
        style = SHOWN if shown(row["verdict"]) else ""
        effort.add_row(*[Text(cell, style=style if i in (4, 7) else "") for i, cell in enumerate(cells)])
    stops = house_table("how rollouts ended: share of each side's rollouts (count)")
    stops.add_column("stop reason", no_wrap=True)
    for name in (b, c, "delta", level, "p adj.", ""):
        stops.add_column(name, justify="left" if name == "" else "right", no_wrap=True)
    for reason, stop in agent["stop_reasons"].items():
        cells = stop_cells(reason, stop)
        style = SHOWN if shown(stop["verdict"]) else ""
        stops.add_row(*[Text(cell, style=style if i in (3, 6) else "") for i, cell in enumerate(cells)])
    split = house_table("score by how rollouts ended (per-item means)")
    for name in SPLIT_HEADER:
        split.add_column(name, justify="left" if name in ("", "rollouts that") else "right", no_wrap=True)
    for cells in split_cells(result, agent):
        split.add_row(*[Text(cell) for cell in cells])
    return [effort, stops, split, *(Text(line) for line in agent_lines(result, agent))]


# ---------------------------------------------------------------------------------------------- Markdown


def agent_markdown(result: CompareResult, cell: Callable[[object], str]) -> list[str]:
    """The Markdown section; `cell` makes a text table-cell safe (rfteval.report.markdown's, which imports this)."""
    agent = _agent(result)
    if agent is None:
        return []
    level = f"{int(result.options.level * 100)}% CI"
    b, c = cell(result.baseline["label"]), cell(result.candidate["label"])
    out = [f"### {cell(heading(result, agent).replace(' -> ', ' → '))}", "",
           f"| | items | {b} | {c} | delta | {level} | p adj. | |", "|---|---:|---:|---:|---:|---:|---:|---|"]
    for key, row in agent["rows"].items():
        cells = [cell(x) for x in effort_cells(key, row)]
        if shown(row["verdict"]):
            cells[4], cells[7] = f"**{cells[4]}**", f"**{cells[7]}**"
        out.append("| " + " | ".join(cells) + " |")
    out += ["", f"| stop reason | {b} | {c} | delta | {level} | p adj. | |", "|---|---:|---:|---:|---:|---:|---|"]
    for reason, stop in agent["stop_reasons"].items():
        cells = [cell(x) for x in stop_cells(reason, stop)]
        if shown(stop["verdict"]):
            cells[3], cells[6] = f"**{cells[3]}**", f"**{cells[6]}**"
        out.append("| " + " | ".join(cells) + " |")
    out += ["", "| score by how rollouts ended | rollouts that | score | CI | rollouts | items |",
            "|---|---|---:|---:|---:|---:|"]
    out += ["| " + " | ".join(cell(x) for x in cells) + " |" for cells in split_cells(result, agent)]
    out.append("")
    out += [f"- {cell(line)}" for line in agent_lines(result, agent)]
    return out + [""]


# ---------------------------------------------------------------------------------------------- HTML


def agent_html(result: CompareResult) -> str:
    agent = _agent(result)
    if agent is None:
        return ""
    level = f"{int(result.options.level * 100)}% CI"
    b, c = escape(result.baseline["label"]), escape(result.candidate["label"])

    def tr(cells: list[str], marked: tuple[int, ...], on: bool) -> str:
        return "<tr>" + "".join(f'<td class="shown">{escape(x)}</td>' if on and i in marked else f"<td>{escape(x)}</td>"
                                for i, x in enumerate(cells)) + "</tr>"

    effort = "".join(tr(effort_cells(k, r), (4, 7), shown(r["verdict"])) for k, r in agent["rows"].items())
    stops = "".join(tr(stop_cells(k, r), (3, 6), shown(r["verdict"])) for k, r in agent["stop_reasons"].items())
    split = "".join(tr(cells, (), False) for cells in split_cells(result, agent))
    lines = "".join(f"<li>{escape(line)}</li>" for line in agent_lines(result, agent))
    return (f"<style>{CSS}</style>\n<h2>{escape(heading(result, agent).replace(' -> ', ' → '))}</h2>\n"
            f'<table id="agent-effort"><thead><tr><th></th><th>items</th><th>{b}</th><th>{c}</th><th>delta</th>'
            f"<th>{level}</th><th>p adj.</th><th></th></tr></thead><tbody>{effort}</tbody></table>\n"
            f'<table id="agent-stops"><thead><tr><th>stop reason</th><th>{b}</th><th>{c}</th><th>delta</th>'
            f"<th>{level}</th><th>p adj.</th><th></th></tr></thead><tbody>{stops}</tbody></table>\n"
            f'<table id="agent-score"><thead><tr><th>score by how rollouts ended</th><th>rollouts that</th>'
            f"<th>score</th><th>{level}</th><th>rollouts</th><th>items</th></tr></thead><tbody>{split}</tbody>"
            "</table>\n"
            f'<ul id="agent-notes">{lines}</ul>\n')


# ---------------------------------------------------------------------------------------------- JUnit


def agent_properties(result: CompareResult) -> dict[str, object]:
    """The items suite's properties for an agent comparison: each effort row's means, delta, interval, p and word,
    each stop reason's shares, the score split (a CI system shows them beside the score's)."""
    agent = _agent(result)
    if agent is None:
        return {}
    out: dict[str, object] = {f"agent.rollouts.{role}": n for role, n in agent["rollouts"].items()}
    for key, row in agent["rows"].items():
        d = row["delta"]
        out.update({f"agent.{key}.baseline": row["baseline"]["mean"], f"agent.{key}.candidate": row["candidate"]["mean"],
                    f"agent.{key}.delta": d["mean"], f"agent.{key}.ci95": interval(key, d["ci95"]),
                    f"agent.{key}.p_adjusted": d.get("p_adjusted", d["p_value"]), f"agent.{key}.verdict": row["verdict"]})
    for reason, stop in agent["stop_reasons"].items():
        out.update({f"agent.stop.{reason}.baseline": stop["baseline"], f"agent.stop.{reason}.candidate": stop["candidate"],
                    f"agent.stop.{reason}.verdict": stop["verdict"]})
    for role in ROLES:
        for name in ("finished", "limited"):
            g = agent["score_by_stop"][role][name]
            out[f"agent.score.{name}.{role}"] = g["mean"] if g["rollouts"] else "n/a"
    return out
