"""Helpers the classical baselines share: allowed devices, a static memory ledger, a rank-ordered
topological order (from :mod:`placement_gym.heuristics.common`, where the env's heuristics need them too),
and budget-aware evaluation.
"""

from __future__ import annotations

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


__all__ = [
    "MemoryLedger",
    "allowed_devices",
    "evaluate_within_budget",
    "predecessors",
    "priority_topological_order",
    "successors",
    "transfer",
]
