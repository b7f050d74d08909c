"""What every placement method shares: one entry point, one result type, one evaluation budget.

A method places the groups of a :class:`~placement_gym.problem.PlacementProblem`. It gets either the
problem itself or an env (``place(env_or_problem, ...)``); classical methods only use the problem (its
``cost_model()``, ``device_mask``, ``coarse``, ``platform``), learners that act through the Gymnasium API
also get an env (a ``DevicePlacementEnv`` built around the problem when only the problem was given). Every
placement the problem evaluates while a method runs counts against the method's ``budget``; the problem
counts, the :class:`BudgetTracker` watches and keeps the method's history and best placement.
"""

from __future__ import annotations

import abc
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np

from placement_gym.errors import PlacementGymError
from placement_gym.limits import BYTES_PER_EVALUATION, require_memory
from placement_gym.problem import Evaluation, PlacementProblem, problem_of
from placement_gym.validation import Range


@dataclass
class PlacementResult:
    """The outcome of running a method on a problem.

    Attributes:
        method: The method's registry name.
        placement: Best placement found, shape ``(G,)``, int64 device indices.
        latency: Its latency in seconds according to the problem's backend (``inf`` if none was feasible).
        evaluations: Distinct placements the problem evaluated for the method (the budget spent).
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


#: Called as ``fn(tracker, placement, latency, feasible)`` after every evaluation the tracker sees.
TrackerListener = Callable[["BudgetTracker", np.ndarray, float, bool], None]


class BudgetTracker:
    """A method's evaluation budget on one problem: counts, history and the best placement.

    While attached (between construction and :meth:`detach`), every evaluation the problem makes is
    observed here, whoever asked for it (the method, or an RL library through ``env.step``). Evaluations
    made in other processes (a ``SubprocVecEnv``'s workers) are reported with :meth:`record`.

    Args:
        problem: The problem whose evaluations are counted.
        budget: Maximum number of evaluations; ``None`` for no limit.
    """

    def __init__(self, problem: PlacementProblem, budget: int | None) -> None:
        if budget is not None and (isinstance(budget, bool) or not isinstance(budget, (int, np.integer))):
            raise PlacementGymError(
                f"budget must be an integer number of evaluations or None, got {budget!r}"
            )
        if budget is not None:
            if budget < 1:
                raise PlacementGymError(f"budget must be >= 1 evaluation (or None for no limit), got {budget}")
            require_memory(int(budget) * BYTES_PER_EVALUATION, f"budget={budget} (its per-evaluation history)")
        self.problem = problem
        self.budget = None if budget is None else int(budget)
        self.used = 0
        self.best_latency = float("inf")
        self.best_placement: np.ndarray | None = None
        self.history: list[tuple[int, float]] = []
        #: Called after every evaluation (progress bars, TensorBoard); set by the caller of ``place``.
        self.listeners: list[TrackerListener] = []
        problem.listeners.append(self._observe)

    def detach(self) -> None:
        """Stop observing the problem's evaluations."""
        if self._observe in self.problem.listeners:
            self.problem.listeners.remove(self._observe)

    @property
    def remaining(self) -> int | None:
        """Evaluations left (``None``: no limit)."""
        return None if self.budget is None else max(self.budget - self.used, 0)

    @property
    def exhausted(self) -> bool:
        return self.budget is not None and self.used >= self.budget

    def _observe(self, placement: np.ndarray, evaluation: Evaluation) -> None:
        self.record(placement, evaluation.latency, evaluation.feasible)

    def record(self, placement: np.ndarray, latency: float, feasible: bool) -> None:
        """Count one evaluation (called by the problem, or for evaluations made in another process)."""
        self.used += 1
        if feasible and latency < self.best_latency:
            self.best_latency, self.best_placement = float(latency), np.array(placement, dtype=np.int64)
        self.history.append((self.used, self.best_latency))
        for listener in self.listeners:
            listener(self, placement, latency, feasible)

    def evaluate(self, placement: np.ndarray) -> tuple[float, float]:
        """Evaluate one ``(G,)`` placement: returns ``(latency, reward)``.

        Raises:
            PlacementGymError: If the budget is exhausted.
        """
        if self.exhausted:
            raise PlacementGymError(f"the evaluation budget of {self.budget} is spent")
        evaluation = self.problem.evaluate(placement)
        return evaluation.latency, evaluation.reward

    def evaluate_batch(self, placements: np.ndarray) -> list[Evaluation]:
        """Evaluate a ``(B, G)`` batch in one call, cut to the budget.

        The problem evaluates each distinct placement of a batch once, so the budget pays for distinct
        placements; rows past the budget are dropped (the result is shorter than the batch).
        """
        batch = self.problem.validate_batch(placements)
        remaining = self.remaining
        if remaining is not None and len(batch) > remaining:  # fewer rows than the budget left: no cut
            _, first = np.unique(batch, axis=0, return_index=True)
            if len(first) > remaining:
                cut = int(np.sort(first)[remaining])  # the first row holding the (remaining + 1)-th new placement
                batch = batch[:cut]
        return self.problem.evaluate_batch(batch) if len(batch) else []

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
    #: Bounds of constructor arguments, by name, checked by :mod:`agents.specs` before a method is built
    #: from a spec (a name that is not a parameter of the class is ignored). Sizes say what memory they
    #: need at least, so an absurd one is refused with the figure instead of failing in an allocation.
    argument_ranges: ClassVar[dict[str, Range]] = {
        "budget": Range(1, memory=lambda n: n * BYTES_PER_EVALUATION),
        "default_budget": Range(1, memory=lambda n: n * BYTES_PER_EVALUATION),
        "batch_size": Range(1, memory=lambda n: 64.0 * n),
        "samples_per_update": Range(1, memory=lambda n: 64.0 * n),
        "noise_samples": Range(0, memory=lambda n: 64.0 * n),
        "hidden": Range(1, memory=lambda h: 4.0 * h * h),
        "grouping_hidden": Range(1, memory=lambda h: 4.0 * h * h),
        # loop counts get an upper bound too: a huge one hangs instead of allocating. HSDAG's parsing
        # contracts the graph at every level (32 levels leave one cluster of any graph that fits in memory);
        # Placeto's message passing over more rounds than a graph's diameter repeats itself.
        "levels": Range(1, 32),
        "rounds": Range(1, 256),
        "num_groups": Range(1),
        "parts_per_device": Range(1),
        "max_assignments": Range(1),
        "max_segment": Range(1),
        "enumerate_limit": Range(1, memory=lambda n: 8.0 * n),
        "baseline_window": Range(1),
        "num_threads": Range(1, 1024),
        "threads": Range(1, 1024),
        "lr": Range(0, low_open=True),
        "time_limit": Range(0, low_open=True),
        "segment_time_limit": Range(0, low_open=True),
        "t_start": Range(0, low_open=True),
        "t_end": Range(0, low_open=True),
        "temperature": Range(0, low_open=True),
        "max_grad_norm": Range(0, low_open=True),
        "mip_rel_gap": Range(0),
        "dropout": Range(0, 1, high_open=True),
        "discount": Range(0, 1),
        "baseline_decay": Range(0, 1, high_open=True),
        "walk": Range(0, 1),
        "noise_std": Range(0),
        "tanh_constant": Range(0),
        "entropy_coef": Range(0),
        "failing_ratio": Range(0),
        "kick": Range(0),
        "depth": Range(0),
        "fine_tune": Range(0),
        "late": Range(0),
    }

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
