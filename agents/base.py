"""What every placement method shares: one entry point, one result type, one evaluation budget.

A method places the groups of a :class:`~placement_gym.problem.PlacementProblem`. It gets either the
problem itself or an env (``place(env_or_problem, ...)``); classical methods only use the problem (its
``cost_model()``, ``device_mask``, ``coarse``, ``platform``), learners that act through the Gymnasium API
also get an env (a ``DevicePlacementEnv`` built around the problem when only the problem was given). Every
distinct placement the problem evaluates while a method runs counts against the method's ``budget``; a
placement evaluated again in the same run is answered from the run's memo at no cost (also through
``env.step``). The problem counts and refuses new placements past the budget; the :class:`BudgetTracker`
starts the run, watches, and keeps the method's history and best placement.
"""

from __future__ import annotations

import abc
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

from placement_gym.budget import Run, TrackerListener
from placement_gym.problem import PlacementProblem, problem_of


@dataclass
class PlacementResult:
    """The outcome of running a method on a problem.

    Attributes:
        method: The method's registry name.
        placement: Best placement found, shape ``(G,)``, int64 device indices.
        latency: Its latency in seconds according to the problem's backend (``inf`` if none was feasible).
        evaluations: Distinct placements the problem evaluated for the method (the budget spent).
        wall_time: Seconds the method ran.
        history: ``(evaluations so far, best latency so far)`` after each distinct placement evaluated, for
            learning curves (repeats answered from the run's memo add no entry).
        extra: Method-specific facts (optimality gap of the MILP, training losses...).
    """

    method: str
    placement: np.ndarray
    latency: float
    evaluations: int
    wall_time: float
    history: list[tuple[int, float]] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)


class BudgetTracker(Run):
    """A method's :class:`~placement_gym.budget.Run` (budget, history, best placement) and its result.

    Args:
        problem: The problem whose evaluations are counted.
        budget: Maximum number of distinct placements evaluated; ``None`` for no limit.
    """

    def result(self, method: str, wall_time: float, **extra: Any) -> PlacementResult:
        placement = self.best_placement
        if placement is None:  # nothing feasible: report the host placement as the fallback answer
            placement = np.full(self.problem.num_groups, self.problem.host, dtype=np.int64)
        return PlacementResult(
            method, placement, self.best_latency, self.used, wall_time, self.history, extra
        )


class PlacementMethod(abc.ABC):
    """A placement method. Subclasses set ``name`` and implement :meth:`_place`."""

    name: str = "method"

    def place(
        self,
        target: gym.Env | PlacementProblem,
        budget: int | None = None,
        seed: int = 0,
        listeners: Sequence[TrackerListener] = (),
    ) -> PlacementResult:
        """Find a placement of the problem's groups using at most ``budget`` evaluations.

        Args:
            target: A ``DevicePlacement*`` env (possibly wrapped) or a :class:`PlacementProblem`.
            budget: Evaluation budget (``None``: the method's own stopping rule).
            seed: Seed of all the method's randomness.
            listeners: Called after every evaluation (see :attr:`BudgetTracker.listeners`).
        """
        problem = problem_of(target)
        if isinstance(target, gym.Env):
            env = target
        else:
            from placement_gym.envs import DevicePlacementEnv

            env = DevicePlacementEnv(problem=problem)
        tracker = BudgetTracker(problem, budget)
        tracker.listeners.extend(listeners)
        start = time.perf_counter()
        try:
            extra = self._place(env, tracker, seed) or {}
        finally:
            tracker.detach()
        return tracker.result(self.name, time.perf_counter() - start, **extra)

    @abc.abstractmethod
    def _place(self, env: gym.Env, tracker: BudgetTracker, seed: int) -> dict[str, Any] | None:
        """Search, evaluating placements through ``tracker`` (its ``problem``; ``env`` for Gymnasium-driven
        learners); return method-specific extras."""
