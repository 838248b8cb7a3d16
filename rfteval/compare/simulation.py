"""Simulated comparisons with a known truth: how often a gate fails on noise, how often it catches a real drop.

The same code paths as `rfteval compare` (compare_sides and the gate), fed with Bernoulli epochs drawn from item
success rates ~ Beta(a, b). The test suite checks issue 10's targets with it, `scripts/simulate_gate.py` prints
the figures the README quotes, and a team can ask the same question of its own eval size in a notebook:
`gate_failure_rate(40, Gate(max_drop=0.02), epochs=5)`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from rfteval.compare.comparison import compare_sides
from rfteval.compare.gate import Gate, evaluate_gate
from rfteval.compare.result import CompareOptions
from rfteval.compare.sides import Side
from rfteval.data.frame import normalise
from rfteval.stats import paired as stats

if TYPE_CHECKING:
    import numpy as np


def side_from_matrix(label: str, scores: np.ndarray) -> Side:
    """A side from an (items, epochs) score matrix, normalised as a loaded record file is."""
    import numpy as np
    import pandas as pd

    n, k = scores.shape
    frame = pd.DataFrame({
        "model_label": label, "item_id": np.repeat([f"q{i}" for i in range(n)], k),
        "epoch": np.tile(np.arange(k, dtype=np.float64), n), "score": scores.ravel().astype(np.float64),
        "error_stage": None, "error_type": None, "error_message": None, "error_present": False,
    })
    return normalise(frame, label, label)


@dataclass(frozen=True)
class Population:
    """Item success rates ~ Beta(a, b); each epoch is a Bernoulli draw; the candidate's mean is `drop` lower."""

    items: int
    epochs: int = 3
    a: float = 2.0
    b: float = 2.0
    drop: float = 0.0

    def draw(self, rng: np.random.Generator) -> tuple[Side, Side]:
        p = rng.beta(self.a, self.b, self.items)
        scale = 1.0 - self.drop * (self.a + self.b) / self.a  # multiplies every rate: the mean drops by `drop`
        base = (rng.random((self.items, self.epochs)) < p[:, None]).astype(float)
        cand = (rng.random((self.items, self.epochs)) < (p * scale)[:, None]).astype(float)
        return side_from_matrix("base", base), side_from_matrix("candidate", cand)


def gate_failure_rate(population: Population, gate: Gate, replicates: int = 300, seed: int = 0) -> float:
    """Share of replicates in which the gate fails: the false-alarm rate when drop = 0, the power otherwise."""
    import numpy as np

    rng = np.random.default_rng(seed)
    fails = sum(not evaluate_gate(compare_sides(*population.draw(rng)), gate)["passed"] for _ in range(replicates))
    return fails / replicates


def hardest_slice_null(population: Population, replicates: int = 400, seed: int = 0) -> tuple[float, float]:
    """(mean delta of the hardest slice, share of replicates whose interval excludes 0) on identical models."""
    import numpy as np

    rng = np.random.default_rng(seed)
    means, excluded = [], 0
    for _ in range(replicates):
        delta = compare_sides(*population.draw(rng)).slices["hardest"]["delta"]
        means.append(delta["mean"])
        lo, hi = delta["ci95"]
        excluded += lo > 0 or hi < 0
    return float(np.mean(means)), excluded / replicates


def random_slices_null(population: Population, slices: int = 4, replicates: int = 300, seed: int = 0) -> float:
    """Share of replicates in which at least one of `slices` random slices is called better or worse."""
    import numpy as np

    rng = np.random.default_rng(seed)
    hits = 0
    for _ in range(replicates):
        base, cand = population.draw(rng)
        labels = {f"q{i}": f"s{rng.integers(slices)}" for i in range(population.items)}
        result = compare_sides(base, cand, CompareOptions(by=("slice",)), {"slice": labels})
        words = [stats.direction(row["delta"]) for name, row in result.slices.items() if name.startswith("slice=")]
        hits += any(w in ("better", "worse") for w in words)
    return hits / replicates
