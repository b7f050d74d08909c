"""What every placement method shares: one entry point, one result type, one evaluation budget.

A method places the groups of an env's graph. It talks to the env through the Gymnasium API
(``reset``/``step``/``action_masks``); classical methods may also read ``env.unwrapped.cost_model()``
(the documented accessor of the simulator's cost model) and ``env.unwrapped.coarse``. Every placement a
method has the env evaluate counts against its ``budget``; the best feasible one found is the result.
"""

from __future__ import annotations

import abc
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np


@dataclass
class PlacementResult:
    """The outcome of running a method on an env.

    Attributes:
        method: The method's registry name.
        placement: Best placement found, shape ``(G,)``, int64 device indices.
        latency: Its latency in seconds according to the env's backend (``inf`` if none was feasible).
        evaluations: Placements the env evaluated (the budget spent).
        wall_time: Seconds the method ran.
        history: ``(evaluations so far, best latency so far)`` after each evaluation, for learning curves.
        extra: Method-specific facts (optimality gap of the MILP, training losses...).
    """

    method: str
    placement: np.ndarray
    latency: float
    evaluations: int
    wall_time: float
    history: list[tuple[int, float]] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)


class BudgetTracker:
    """Evaluates placements through the env, counting them and keeping the best.

    Args:
        env: The env (any wrappers; its unwrapped env must be a ``DevicePlacementEnv``).
        budget: Maximum number of evaluations; ``None`` for no limit.
    """

    def __init__(self, env: gym.Env, budget: int | None) -> None:
        self.env = env.unwrapped
        self.budget = budget
        self.used = 0
        self.best_latency = float("inf")
        self.best_placement: np.ndarray | None = None
        self.history: list[tuple[int, float]] = []
        #: Called as ``fn(tracker, placement, latency, feasible)`` after every evaluation (progress bars,
        #: TensorBoard); set by the caller of :meth:`PlacementMethod.place`.
        self.listeners: list[Callable[[BudgetTracker, np.ndarray, float, bool], None]] = []

    @property
    def exhausted(self) -> bool:
        return self.budget is not None and self.used >= self.budget

    def record(self, placement: np.ndarray, latency: float, feasible: bool) -> None:
        """Count one evaluation made elsewhere (e.g. by ``env.step`` inside an RL library)."""
        self.used += 1
        if feasible and latency < self.best_latency:
            self.best_latency, self.best_placement = float(latency), np.array(placement, dtype=np.int64)
        self.history.append((self.used, self.best_latency))
        for listener in self.listeners:
            listener(self, placement, latency, feasible)

    def evaluate(self, placement: np.ndarray) -> tuple[float, float]:
        """Evaluate ``placement`` (shape ``(G,)``): returns ``(latency, reward)``."""
        res, reward = self.env.evaluate(np.asarray(placement, dtype=np.int64))
        self.record(placement, res.latency, res.feasible)
        return res.latency, reward

    def result(self, method: str, wall_time: float, **extra: Any) -> PlacementResult:
        placement = self.best_placement
        if placement is None:  # nothing feasible: report the host placement as the fallback answer
            placement = np.full(self.env.num_groups, self.env.platform.host, dtype=np.int64)
        return PlacementResult(
            method, placement, self.best_latency, self.used, wall_time, self.history, extra
        )


class PlacementMethod(abc.ABC):
    """A placement method. Subclasses set ``name`` and implement :meth:`_place`."""

    name: str = "method"

    def place(
        self,
        env: gym.Env,
        budget: int | None = None,
        seed: int = 0,
        listeners: Sequence[Callable[[BudgetTracker, np.ndarray, float, bool], None]] = (),
    ) -> PlacementResult:
        """Find a placement for ``env``'s graph using at most ``budget`` evaluations.

        Args:
            env: A ``DevicePlacement*`` env (possibly wrapped).
            budget: Evaluation budget (``None``: the method's own stopping rule).
            seed: Seed of all the method's randomness.
            listeners: Called after every evaluation (see :attr:`BudgetTracker.listeners`).
        """
        tracker = BudgetTracker(env, budget)
        tracker.listeners.extend(listeners)
        start = time.perf_counter()
        extra = self._place(env, tracker, seed) or {}
        return tracker.result(self.name, time.perf_counter() - start, **extra)

    @abc.abstractmethod
    def _place(self, env: gym.Env, tracker: BudgetTracker, seed: int) -> dict[str, Any] | None:
        """Search, evaluating placements through ``tracker``; return method-specific extras."""
