"""The agent's view of a task: what a function agent receives under the benchmark protocol.

A :class:`TaskView` exposes the protocol's surface of a :class:`~placement_gym.problem.PlacementProblem`
and nothing else: evaluating placements (each distinct one counted against the run's budget) and a
read-only count of them, their validation, the device masks, the baseline, the graph and its features, and, for a white-box agent only,
the cost model. It holds no backend, counter, run guard or stored optimum; the problem behind it is sealed
while the agent runs (:meth:`~placement_gym.problem.PlacementProblem.seal`), so the same holds for an env
built over it with :func:`~placement_gym.problem.problem_of`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from placement_gym import sealing
from placement_gym.backends import LatencyResult
from placement_gym.coarsening import CoarseGraph
from placement_gym.features import DeviceFeatures, StaticFeatures
from placement_gym.platforms import Platform
from placement_gym.problem import Evaluation, PlacementProblem


class TaskView:
    """One protocol task as an agent sees it.

    Args:
        problem: The run's problem (sealed while the agent runs).
        track: ``"black-box"`` or ``"white-box"``: whether :meth:`cost_model` and :attr:`device_features`
            are readable.
    """

    __slots__ = ("__problem", "track")

    def __init__(self, problem: PlacementProblem, track: str) -> None:
        self.__problem = problem
        self.track = sealing.check_track(track)

    # ------------------------------------------------------------------ evaluating (counted)
    def evaluate(self, placement: Sequence[int] | np.ndarray) -> Evaluation:
        """Evaluate one ``(G,)`` placement (a new one costs one unit of the budget; a repeat is free)."""
        return self.__problem.evaluate(placement)

    def evaluate_valid(self, placement: np.ndarray) -> Evaluation:
        """:meth:`evaluate` of a placement :meth:`validate` returned."""
        return self.__problem.evaluate_valid(placement)

    def evaluate_batch(self, placements: Sequence[Sequence[int]] | np.ndarray) -> list[Evaluation]:
        """Evaluate a ``(B, G)`` batch (its new placements must fit in the budget left)."""
        return self.__problem.evaluate_batch(placements)

    def seen(self, placement: Sequence[int] | np.ndarray) -> bool:
        """True if evaluating ``placement`` again is free."""
        return self.__problem.seen(placement)

    def validate(self, placement: Sequence[int] | np.ndarray, length: int | None = None) -> np.ndarray:
        """``placement`` as an int64 ``(G,)`` array (:meth:`PlacementProblem.validate`)."""
        return self.__problem.validate(placement, length)

    def validate_batch(self, placements: Sequence[Sequence[int]] | np.ndarray) -> np.ndarray:
        """``placements`` as an int64 ``(B, G)`` array."""
        return self.__problem.validate_batch(placements)

    @property
    def evaluations(self) -> int:
        """Distinct placements evaluated so far (read-only; the run's budget counts those of this run)."""
        return self.__problem.evaluations

    # ------------------------------------------------------------------ static facts
    @property
    def num_groups(self) -> int:
        return self.__problem.num_groups

    @property
    def num_devices(self) -> int:
        return self.__problem.num_devices

    @property
    def host(self) -> int:
        return self.__problem.host

    @property
    def deterministic(self) -> bool:
        return self.__problem.deterministic

    @property
    def device_mask(self) -> np.ndarray:
        """``(G, D)`` bool, read-only: the device can hold the group's weights and outputs."""
        return self.__problem.device_mask

    @property
    def baseline(self) -> LatencyResult:
        """The best single-device placement's result (not charged to the budget)."""
        return self.__problem.baseline

    @property
    def has_baseline(self) -> bool:
        return self.__problem.has_baseline

    @property
    def baseline_placement(self) -> np.ndarray:
        """The ``(G,)`` placement of :attr:`baseline`."""
        return self.__problem.baseline_placement.copy()

    @property
    def coarse(self) -> CoarseGraph:
        """The placed graph: its groups, edges and per-group features (flops, bytes)."""
        return self.__problem.coarse

    @property
    def platform(self) -> Platform:
        """The devices and links."""
        return self.__problem.platform

    @property
    def features(self) -> StaticFeatures:
        """The graph's static observation arrays (as the env's observation has them)."""
        return self.__problem.features

    # ------------------------------------------------------------------ white-box only
    def cost_model(self) -> Any:
        """The analytic cost model (white-box agents only).

        Raises:
            ProtocolAccessError: For a black-box agent.
        """
        if self.track != "white-box":
            sealing.require_white_box("view.cost_model()")
        return self.__problem.cost_model()

    @property
    def device_features(self) -> DeviceFeatures:
        """Device-aware features from the cost model (white-box agents only)."""
        if self.track != "white-box":
            sealing.require_white_box("view.device_features")
        return self.__problem.device_features

    def __placement_problem__(self) -> PlacementProblem:
        """The (sealed) problem behind the view, for building an env over it
        (:func:`~placement_gym.problem.problem_of`)."""
        return self.__problem

    def __repr__(self) -> str:
        p = self.__problem
        return f"TaskView({p.num_groups} groups, {p.num_devices} devices, {self.track})"
