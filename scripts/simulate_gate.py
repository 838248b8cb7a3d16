"""Print the gate's simulated error rates (README "Statistics"): false alarms on identical models, power on a drop.

Run: .venv/bin/python scripts/simulate_gate.py [replicates]. Item rates ~ Beta(2, 2), 3 Bernoulli epochs a side.
"""

from __future__ import annotations

import sys

from rfteval.compare.gate import Gate
from rfteval.compare.simulation import Population, gate_failure_rate, hardest_slice_null, random_slices_null


def main(replicates: int = 1000) -> None:
    recipe = Gate(max_drop=0.02, max_item_drop=0.5)
    print(f"replicates per figure: {replicates}; item rates ~ Beta(2, 2); 3 epochs a side")
    for n in (20, 200):
        print(f"identical models, {n} items, --max-drop 0.02 --max-item-drop 0.5: fails "
              f"{gate_failure_rate(Population(n), recipe, replicates, seed=n):.1%}")
        print(f"identical models, {n} items, --max-drop 0.02 --gate strict: fails "
              f"{gate_failure_rate(Population(n), Gate(max_drop=0.02, mode='strict'), replicates, seed=n):.1%}")
    for drop in (0.05, 0.10):
        print(f"true drop {drop:.2f}, 200 items, --max-drop 0.02: caught "
              f"{gate_failure_rate(Population(200, drop=drop), Gate(max_drop=0.02), replicates, seed=7):.1%}")
    mean, excluded = hardest_slice_null(Population(40), replicates, seed=5)
    print(f"hardest slice, identical models, 40 items: mean delta {mean:+.3f}, interval excludes 0 in {excluded:.1%}")
    print(f"4 random slices, identical models, 80 items: at least one called better/worse in "
          f"{random_slices_null(Population(80), 4, replicates, seed=11):.1%}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 1000)
