"""How numbers read in every report (terminal, Markdown, HTML, JUnit): one place, so the same figure reads the same."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.table import Table


def fmt(x: float | None, digits: int = 3, sign: bool = False) -> str:
    """A number, or 'n/a' for a missing or non-finite one."""
    if x is None or not math.isfinite(x):
        return "n/a"
    return f"{x:+.{digits}f}" if sign else f"{x:.{digits}f}"


def fmt_ci(ci: Sequence[float | None] | None, digits: int = 3, sign: bool = True) -> str:
    """An interval `[lo, hi]`, or 'n/a' when either end is missing."""
    if not ci:
        return "n/a"
    lo, hi = ci
    if lo is None or hi is None or not (math.isfinite(lo) and math.isfinite(hi)):
        return "n/a"
    return f"[{fmt(lo, digits, sign)}, {fmt(hi, digits, sign)}]"


def fmt_p(p: float | None) -> str:
    if p is None or not math.isfinite(p):
        return "n/a"
    return "<0.001" if p < 0.001 else f"{p:.3f}"


def fmt_share(x: float | None, digits: int = 1) -> str:
    """A share as a percentage ('20.8%'), as the error lines print it; 'n/a' for a missing one."""
    if x is None or not math.isfinite(x):
        return "n/a"
    return f"{x:.{digits}%}"


def fmt_tokens(n: int) -> str:
    if n >= 10_000_000:
        return f"{n / 1e6:.0f}M"
    if n >= 100_000:
        return f"{n / 1e3:.0f}k"
    return f"{n:,}"


def fmt_cost(usd: float | None) -> str:
    if usd is None:
        return "—"
    return f"${usd:.4f}" if usd < 1 else f"${usd:,.2f}"


def table(title: str | None = None) -> Table:
    """Every terminal table in one style: a rule under the header, no outer edge, one space between columns, so a
    report reads the same whichever command printed it and fits 80 columns where its content can."""
    from rich import box
    from rich.table import Table

    return Table(title=title, box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, collapse_padding=True,
                 title_justify="left")
