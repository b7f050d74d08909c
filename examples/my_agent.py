"""An agent written outside placement-gym: a greedy improver, as a function and as a PlacementMethod.

Benchmark it without touching the package (from this folder):

    placement-gym bench --tier standard --methods my_agent:greedy heft
    placement-gym bench --tier tiny --tasks resnet50/cpu-dgpu --methods my_agent:GreedyAgent:passes=2

or from Python: ``placement_gym.benchmark.evaluate(greedy, tier="standard")``.
"""

from __future__ import annotations

import numpy as np

from agents.base import PlacementMethod
from placement_gym.problem import PlacementProblem


def greedy(problem: PlacementProblem, budget: int | None, seed: int, passes: int = 100) -> np.ndarray:
    """Start from the best single device; move one group at a time to another allowed device, in random
    order, keeping a move when it is faster; stop at a local optimum, after ``passes`` or at the budget.

    ``problem.evaluations`` counts distinct placements (read-only), so re-evaluating one is free."""
    rng = np.random.default_rng(seed)
    start = problem.evaluations
    best = problem.baseline_placement.copy()  # the baseline's evaluations are not charged to the budget
    best_latency = problem.evaluate(best).latency
    for _ in range(passes):
        improved = False
        for g in rng.permutation(problem.num_groups):
            for d in rng.permutation(np.flatnonzero(problem.device_mask[g])):
                if budget is not None and problem.evaluations - start >= budget:
                    return best
                trial = best.copy()
                trial[g] = d
                latency = problem.evaluate(trial).latency
                if latency < best_latency:
                    best, best_latency, improved = trial, latency, True
        if not improved:
            break
    return best


class GreedyAgent(PlacementMethod):
    """:func:`greedy` as a :class:`~agents.base.PlacementMethod` (the tracker keeps its history)."""

    name = "greedy_agent"

    def __init__(self, passes: int = 100) -> None:
        self.passes = passes

    def _place(self, env, tracker, seed):
        greedy(tracker.problem, tracker.budget, seed, self.passes)
        return {"passes": self.passes}
