"""HEFT as a placement method: :func:`placement_gym.heuristics.heft.heft_placement` (Topcuoglu, Hariri and
Wu, IEEE TPDS 13(3), 2002; its deviations are listed there) on the problem's cost model, one evaluation.

The placement itself lives in :mod:`placement_gym.heuristics.heft`, because the env starts improvement
episodes from it; ``heft_placement`` is re-exported here.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from agents.base import BudgetTracker, PlacementMethod
from agents.baselines.common import allowed_devices, evaluate_within_budget
from placement_gym.heuristics.heft import heft_placement


class HEFT(PlacementMethod):
    """HEFT list scheduling on the env's cost model; one evaluation (see the module docstring).

    Args:
        insertion: HEFT's insertion policy (default); ``False`` for the non-insertion variant.
    """

    name = "heft"
    track = "white-box"  # reads the cost model

    def __init__(self, insertion: bool = True) -> None:
        if not isinstance(insertion, bool):
            raise ValueError(f"insertion must be true or false, got {insertion!r}")
        self.insertion = insertion

    def _place(self, env: gym.Env, tracker: BudgetTracker, seed: int) -> dict[str, Any]:
        cost = tracker.problem.cost_model()
        placement, makespan = heft_placement(cost, allowed_devices(tracker.problem), self.insertion)
        evaluate_within_budget(tracker, placement)
        return {"heft_makespan": makespan}


__all__ = ["HEFT", "heft_placement"]
