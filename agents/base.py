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
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np

from placement_gym.budget import Run, TrackerListener
from placement_gym.errors import RunStalledError
from placement_gym.limits import BYTES_PER_EVALUATION
from placement_gym.problem import PlacementProblem, problem_of
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
    #: What the method reads (:mod:`placement_gym.sealing`): ``"black-box"`` (it only evaluates placements)
    #: or ``"white-box"`` (it reads the cost model: list schedulers, solvers, HEFT-started searches).
    track: ClassVar[str] = "black-box"
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
        except RunStalledError:  # the run ends as if its budget were spent: its best placement stands
            extra = {}
        finally:
            tracker.detach()
        extra.update(stalled=tracker.stalled, env_steps=tracker.requests)
        return tracker.result(self.name, time.perf_counter() - start, **extra)

    @abc.abstractmethod
    def _place(self, env: gym.Env, tracker: BudgetTracker, seed: int) -> dict[str, Any] | None:
        """Search, evaluating placements through ``tracker`` (its ``problem``; ``env`` for Gymnasium-driven
        learners); return method-specific extras."""
