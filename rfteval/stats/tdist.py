"""Student's t distribution, computed here: scipy is an optional extra (and importing scipy.stats is slow).

The CDF from the regularized incomplete beta function (Lentz's continued fraction), inverted by Newton's method with a
bisection guard. Checked against scipy to 1e-10 in tests/stats/test_tdist.py.
"""

from __future__ import annotations

import math
from functools import lru_cache

NAN = float("nan")


def _betacf(a: float, b: float, x: float) -> float:
    tiny, eps = 1e-300, 1e-15
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 10_000):
        m2 = 2 * m
        for num in (m * (b - m) * x / ((a + m2 - 1) * (a + m2)), -(a + m) * (a + b + m) * x / ((a + m2) * (a + m2 + 1))):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < eps:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    lbt = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(lbt) * _betacf(a, b, x) / a
    return 1.0 - math.exp(lbt) * _betacf(b, a, 1.0 - x) / b


def t_cdf(x: float, df: float) -> float:
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + x * x))
    return 1.0 - tail if x > 0 else tail


def t_pdf(x: float, df: float) -> float:
    return math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
                    - (df + 1) / 2 * math.log1p(x * x / df))


@lru_cache(maxsize=4096)
def t_ppf(p: float, df: float) -> float:
    """Quantile of Student's t with `df` degrees of freedom (df > 0, 0 < p < 1)."""
    if not 0.0 < p < 1.0 or not df > 0:
        return NAN
    if p == 0.5:
        return 0.0
    if p < 0.5:
        return -t_ppf(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        lo, hi = hi, hi * 2.0
    x = min(max(z_quantile(p), lo), hi)
    for _ in range(200):
        f = t_cdf(x, df) - p
        if f > 0:
            hi = x
        else:
            lo = x
        step = f / t_pdf(x, df)
        nx = x - step
        if not lo < nx < hi:
            nx = (lo + hi) / 2.0
        if abs(nx - x) <= 1e-14 * max(1.0, abs(x)):
            return nx
        x = nx
    return x


def t_quantile(level: float, df: int) -> float:
    """The two-sided quantile of a `level` interval: t_{1-α/2} on `df` degrees of freedom."""
    return t_ppf(0.5 + level / 2.0, float(df))


def z_quantile(p: float) -> float:
    from statistics import NormalDist

    return NormalDist().inv_cdf(p)
