"""Helpers the classical baselines share: allowed devices, a static memory ledger, a rank-ordered
topological order (from :mod:`placement_gym.heuristics.common`, where the env's heuristics need them too),
budget-aware evaluation, and the deadline of a solver's ``time_limit``.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from agents.base import BudgetTracker
from placement_gym.heuristics.common import (
    MemoryLedger,
    allowed_devices,
    predecessors,
    priority_topological_order,
    successors,
    transfer,
)


def evaluate_within_budget(tracker: BudgetTracker, placement: np.ndarray) -> float | None:
    """Latency of ``placement`` via ``tracker``, or ``None`` (not evaluated) if the budget is spent."""
    if tracker.exhausted:
        return None
    latency, _ = tracker.evaluate(np.asarray(placement, dtype=np.int64))
    return latency


@dataclass(frozen=True)
class Deadline:
    """The moment a solver's ``time_limit`` runs out (a ``time.perf_counter()`` value; ``inf``: never).

    Solvers check it between steps and cap each MILP's own time limit by :meth:`left`, so a solve stops
    within its limit plus the slack of one step (see ``docs/agents.md``).
    """

    at: float = math.inf

    @classmethod
    def after(cls, seconds: float | None) -> Deadline:
        """The deadline ``seconds`` from now (``None``: no deadline)."""
        return cls(math.inf if seconds is None else time.perf_counter() + float(seconds))

    def left(self) -> float:
        """Seconds left (``inf`` without a deadline; 0 once it has passed)."""
        return max(0.0, self.at - time.perf_counter())

    def expired(self) -> bool:
        return time.perf_counter() >= self.at

    def cap(self, seconds: float) -> float:
        """``seconds`` capped by the time left (at least 0.01 s: HiGHS refuses a limit of 0)."""
        return max(0.01, min(float(seconds), self.left()))


NO_DEADLINE = Deadline()

__all__ = [
    "NO_DEADLINE",
    "Deadline",
    "MemoryLedger",
    "allowed_devices",
    "evaluate_within_budget",
    "predecessors",
    "priority_topological_order",
    "successors",
    "transfer",
]
