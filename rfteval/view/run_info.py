"""A run directory for the Runs page: its spec (spec.resolved.toml) and its summary (summary.json) as tables of
text, each figure as `rfteval run` prints it."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from rfteval.data import rundir
from rfteval.data.records import json_safe

if TYPE_CHECKING:
    from rfteval.data.json_types import JSONObject
    from rfteval.run.summary import RunSummary


def run_info(run_dir: Path) -> JSONObject:
    """A run directory's spec (spec.resolved.toml) and its summary (summary.json, read as the typed RunSummary) as
    tables of text: the run, each model, the judge's calls, the spec's settings."""
    import tomllib

    import msgspec

    from rfteval.run.summary import as_run_summary

    out: JSONObject = {"dir": str(run_dir), "spec": None, "about": None, "models": None, "judge": None}
    try:
        spec = tomllib.loads((run_dir / rundir.RESOLVED_SPEC).read_text(encoding="utf-8"))
        out["spec"] = [[k, v] for k, v in _flat(spec)]
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        pass
    try:
        summary = as_run_summary(msgspec.json.decode((run_dir / rundir.SUMMARY).read_bytes()))
    except (OSError, msgspec.DecodeError, msgspec.ValidationError):
        return out
    out.update(_summary_tables(summary))
    return out


def _flat(value: object, key: str = "") -> list[tuple[str, str]]:
    """A spec's settings as (dotted key, value) rows: tables opened into their keys, a list of plain values joined."""
    if isinstance(value, dict):
        return [row for k, v in value.items() for row in _flat(v, f"{key}.{k}" if key else str(k))]
    if isinstance(value, list):
        if all(not isinstance(v, (dict, list)) for v in value):
            return [(key, ", ".join(_flat_value(v) for v in value))]
        return [row for i, v in enumerate(value) for row in _flat(v, f"{key}[{i}]")]
    return [(key, _flat_value(value))]


def _flat_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"  # as the spec's TOML writes it
    return "" if value is None else str(value)


def _summary_tables(s: RunSummary) -> JSONObject:
    """summary.json as the page's tables: the run's facts, a row per model (the figures as `rfteval run` prints
    them: report/format.py's formats, run_table's error counts), a row per judge model."""
    from rfteval.report.format import fmt, fmt_ci, fmt_cost, fmt_share, fmt_tokens
    from rfteval.report.run_table import fmt_errors

    g = s.grader
    rule = s.pass_rule
    threshold = rule.get("threshold")
    about = [["name", s.name or ""], ["run id", s.run_id], ["dataset", s.dataset],
             ["items × epochs", f"{s.items} × {s.epochs}"],
             ["grader", f"{g.name} ({g.type}, hash {g.hash})" if g.hash else f"{g.name} ({g.type})"],
             ["complete", "yes" if s.complete else f"no: {s.missing} of {s.cells} cells missing"],
             ["finished", s.finished_at],
             ["error records", f"{s.errors} of {s.cells} cells ({fmt_share(s.error_rate)}); max error rate "
                               f"{s.max_error_rate:g}"]]
    if rule:
        about.append(["pass rule", (f"threshold {threshold:g}: " if isinstance(threshold, (int, float)) else "")
                      + str(rule.get("source") or "")])
    top = str(s.epochs or 1)
    columns = ["label", "model", "mean", "95% CI", "pass@1", f"pass@{top}", "items", "records", "errors",
               "error rate", "tokens in/out (reasoning)", "cost", "cut off thinking"]
    rows = []
    for label, m in s.models.items():
        tok = m.tokens
        tokens = (f"{fmt_tokens(tok.input)}/{fmt_tokens(tok.output)}"
                  + (f" ({fmt_tokens(tok.reasoning)})" if tok.reasoning is not None else "")
                  if tok.input or tok.output or tok.reasoning else "—")  # replayed outputs report no usage
        curve = m.pass_at_k or {}
        cut = m.truncated_in_reasoning
        rows.append([label, m.model + (f" ({m.provider})" if m.provider else ""), fmt(m.mean),
                     fmt_ci(m.ci95, sign=False), fmt(curve.get("1")), fmt(curve.get(top)), str(m.items),
                     str(m.records) if m.records == m.cells else f"{m.records}/{m.cells}",
                     fmt_errors(m.errors.by_type), fmt_share(m.error_rate), tokens, fmt_cost(m.cost_usd),
                     f"{cut.n} ({fmt_share(cut.share, 0)})" if cut and cut.n else "0"])
    judge_rows = []
    now = s.judge or {}
    for model, u in now.items():
        judge_rows.append([model, "this invocation", *_judge_cells(u)])
    for model, u in (s.judge_results or {}).items():
        here = now.get(model) or {}
        if (u.get("calls"), u.get("input_tokens")) != (here.get("calls"), here.get("input_tokens")):
            judge_rows.append([model, "behind these results (all invocations)", *_judge_cells(u)])
    return json_safe({"about": about, "models": {"columns": columns, "rows": rows, "text": [0, 1, 8]},  # text: left
                      "judge": {"columns": ["judge model", "calls of", "calls", "cached", "shared", "errors",
                                            "tokens in", "tokens out", "cost"], "rows": judge_rows, "text": [0, 1]}
                      if judge_rows else None})


def _judge_cells(u: Mapping[str, object]) -> list[str]:
    """A judge model's calls, as `rfteval run` prints them (its judge lines), cost as every report prints one."""
    from rfteval.report.format import fmt_cost

    def count(name: str) -> str:
        value = u.get(name)
        return str(value) if isinstance(value, int) else "—"

    cost = u.get("cost_usd")
    return [count("calls"), count("cache_hits"), count("shared"), count("errors"), count("input_tokens"),
            count("output_tokens"), fmt_cost(float(cost) if isinstance(cost, (int, float)) else None)]
