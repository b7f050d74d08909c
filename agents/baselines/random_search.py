"""Uniform random search over placements: the sanity baseline every learner must beat at equal budget
(the random-placement baseline of Mirhoseini et al., ICML 2017, and of Placeto, Addanki et al., 2019).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from agents.base import BudgetTracker, PlacementMethod

DEFAULT_BUDGET = 500  # HSDAG's training budget: 25 episodes x 20 measured placements


class RandomSearch(PlacementMethod):
    """Sample placements uniformly (each group independently over the devices ``env.action_masks()``
    allows) and keep the best. Repeats are free (the run's memo), so the search stops early when 50
    batches in a row find no new placement (a space smaller than the budget).

    Args:
        budget: Evaluations when :meth:`place` gets ``budget=None``.
        batch_size: Placements sampled and evaluated per batch (one backend call; parallel on Ray).
    """

    name = "random_search"

    def __init__(self, budget: int = DEFAULT_BUDGET, batch_size: int = 32) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.budget, self.batch_size = budget, int(batch_size)

    def _place(self, env: gym.Env, tracker: BudgetTracker, seed: int) -> dict[str, Any]:
        if tracker.budget is None:
            tracker.budget = self.budget
        rng = np.random.default_rng(seed)
        mask = tracker.problem.device_mask  # (G, D): the devices that hold each group (black-box: no cost model)
        counts = mask.sum(axis=1)  # (G,)
        choices = np.argsort(~mask, axis=1, kind="stable")  # (G, D): allowed devices first, in index order
        rows = np.arange(mask.shape[0])
        stale = 0
        while not tracker.exhausted and stale < 50:
            k = min(self.batch_size, tracker.remaining)
            pick = (rng.random((k, mask.shape[0])) * counts).astype(np.int64)  # (k, G) uniform in [0, count)
            used = tracker.used
            tracker.evaluate_batch(choices[rows, pick])
            stale = 0 if tracker.used > used else stale + 1
        return {"budget": tracker.budget}
