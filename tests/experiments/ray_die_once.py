"""An agent whose first run kills its own process (as a lost Ray worker), for tests/experiments/test_ray_cells.py.

``die_once(problem, budget, seed, marker=PATH)`` exits the process at once if ``PATH`` does not exist yet
(creating it first), and otherwise evaluates ``budget`` seeded random placements and returns the best.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np


def die_once(problem, budget: int | None, seed: int, marker: str = "") -> np.ndarray:
    """Kill this process on the first call for ``marker``; a seeded random search on every later one."""
    path = Path(marker)
    if marker and not path.exists():
        path.touch()
        os._exit(1)  # no cleanup, no exception: the worker is simply gone
    rng = np.random.default_rng(seed)
    best, best_latency = None, float("inf")
    for _ in range(budget or 10):
        p = np.array([rng.choice(np.flatnonzero(row)) for row in problem.device_mask])
        latency = problem.evaluate(p).latency
        if latency < best_latency:
            best, best_latency = p, latency
    return best


def fail(problem, budget: int | None, seed: int) -> np.ndarray:
    """Raise at once: a cell whose agent fails (not a lost worker)."""
    raise RuntimeError("this agent always fails")
