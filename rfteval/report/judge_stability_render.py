"""`rfteval validate-grader --stability`'s plain-text table: one line per item, then the verdict."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rfteval.readiness.judge_stability import StabilityReport


def render_report(report: StabilityReport) -> str:
    """Plain-text table for the terminal: one line per item, then the verdict."""
    o = report["overall"]
    lines = [
        f"judge stability: {report['grader']} ({report['type']}), {o['repeats']} repeats of {o['outputs']} outputs "
        f"over {o['items']} items; spread on the range {report['scale']} scaled to 0..1",
        f"{'item':<24} {'outputs':>7} {'sd':>7} {'range':>7} {'flips':>6} {'errors':>6}",
    ]
    for it in report["items"]:
        mark = "  <- above threshold" if it["flagged"] else ""
        lines.append(
            f"{str(it['item_id'])[:24]:<24} {it['outputs']:>7} {_fmt(it['sd']):>7} {_fmt(it['range']):>7} "
            f"{'yes' if it['flipped'] else 'no':>6} {it['errors']:>6}{mark}"
        )
    types = ", ".join(f"{k} ×{v}" for k, v in o["error_types"].items())
    errors = f"{o['errors']} grading errors ({types}), left out" if o["errors"] else "0 errors"
    verdict = ("INCONCLUSIVE: no output was scored twice, every other grade an error" if o["inconclusive"] else
               "FLAGGED: too unstable to train on" if o["flagged"] else "stable")
    lines.append(
        f"overall: mean sd {_fmt(o['mean_sd'])} (threshold {o['threshold']:g}), widest range {_fmt(o['max_range'])}, "
        f"pass/fail flips on {_pct(o['flip_share'])} of items (pass at {o['pass_threshold']:g}), "
        f"{o['flagged_items']} items flagged, {errors} -> {verdict}"
    )
    return "\n".join(lines)


def _fmt(x: float) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.3f}"


def _pct(x: float) -> str:
    return "-" if math.isnan(x) else f"{100 * x:.0f}%"
