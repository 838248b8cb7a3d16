"""The training curve as a small SVG: the mean reward of each step's completions as TRL logged it (curve.jsonl,
written by train.py), with the band of one standard deviation across them and the steps a checkpoint was saved at.
Drawn with the axes of rfteval's HTML report (rfteval.report.html.Axes), so no plotting package is needed."""

from __future__ import annotations

import json
from html import escape
from pathlib import Path

from rfteval.report.html import Axes

LINE, BAND, SAVED = "#0969da", "#0969da", "#6e7781"


def read_curve(path: Path) -> list[dict[str, float]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def curve_svg(rows: list[dict[str, float]], saved: list[int], title: str) -> str:
    """Mean reward per step (a line), ± one SD (a band), saved checkpoints (dashed verticals), on the grader's 0..1."""
    steps = [int(r["step"]) for r in rows]
    ax = Axes(0.5, max(steps + [1]) + 0.5, 0.0, 1.0, w=560, h=300)
    parts = ["<style>text{font:11px sans-serif;fill:#24292f}</style>",
             f'<text x="{ax.pad}" y="16" font-weight="600">{escape(title)}</text>',
             ax.frame("training step", "mean reward")]
    upper = [(ax.x(s), ax.y(min(1.0, r["reward"] + (r.get("reward_std") or 0.0)))) for s, r in zip(steps, rows)]
    lower = [(ax.x(s), ax.y(max(0.0, r["reward"] - (r.get("reward_std") or 0.0)))) for s, r in zip(steps, rows)]
    if len(rows) > 1:
        band = " ".join(f"{x:.1f},{y:.1f}" for x, y in upper + lower[::-1])
        parts.append(f'<polygon points="{band}" fill="{BAND}" fill-opacity="0.12" stroke="none"/>')
    for step in saved:
        x = ax.x(step)
        parts.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{ax.y(1.0):.1f}" y2="{ax.y(0.0):.1f}" stroke="{SAVED}" '
                     f'stroke-dasharray="4 3"><title>checkpoint-{step}</title></line>')
    points = " ".join(f"{ax.x(s):.1f},{ax.y(r['reward']):.1f}" for s, r in zip(steps, rows))
    parts.append(f'<polyline points="{points}" fill="none" stroke="{LINE}" stroke-width="2"/>')
    for s, r in zip(steps, rows):
        parts.append(f'<circle cx="{ax.x(s):.1f}" cy="{ax.y(r["reward"]):.1f}" r="2.5" fill="{LINE}">'
                     f'<title>step {s}: {r["reward"]:.3f}</title></circle>')
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{ax.w}" height="{ax.h}" viewBox="0 0 {ax.w} {ax.h}" '
            f'role="img" aria-label="{escape(title)}">{"".join(parts)}</svg>\n')


def write_curve(curve: Path, saved: list[int], out: Path, title: str) -> None:
    out.write_text(curve_svg(read_curve(curve), saved, title))
