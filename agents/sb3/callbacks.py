"""SB3 callbacks for plain SB3 scripts: keep the best placement any env step evaluated."""

from __future__ import annotations

import numpy as np
from stable_baselines3.common.callbacks import BaseCallback


class BestPlacementCallback(BaseCallback):
    """Keeps the fastest feasible placement evaluated during training (RL policies wander: the last or the
    deterministic placement is often not the best one seen).

    Reads each step's ``info``: ``latency``, ``feasible`` and ``placement`` (the placement envs), or
    ``best_latency`` and ``best_placement`` (the improvement env). Works with any vectorised env.

    Attributes:
        best_latency: Seconds (``inf`` until a feasible placement was seen).
        best_placement: ``(G,)`` int64 device indices, or ``None``.
        evaluations: Infos that reported an evaluated placement.
    """

    def __init__(self, verbose: int = 0) -> None:
        super().__init__(verbose)
        self.best_latency = float("inf")
        self.best_placement: np.ndarray | None = None
        self.evaluations = 0

    def _on_step(self) -> bool:
        for info in self.locals.get("infos", ()):
            if "best_latency" in info:
                latency, placement, feasible = info["best_latency"], info["best_placement"], True
            elif "latency" in info:
                latency, placement, feasible = info["latency"], info["placement"], bool(info["feasible"])
            else:
                continue
            self.evaluations += 1
            if feasible and latency < self.best_latency:
                self.best_latency, self.best_placement = float(latency), np.array(placement, dtype=np.int64)
        return True
