"""The latency-backend contract: evaluate a placement of a coarse graph's groups on a platform's devices.

A placement is an int array of shape ``(G,)``: ``placement[g]`` is the index (into
``platform.devices``) of the device that runs group ``g``. Backends never raise for a placement that is
merely bad (does not fit in memory, fails to compile): they return an infeasible :class:`LatencyResult`
with the reason. Malformed placements (wrong shape, dtype, index out of range) raise
:class:`~placement_gym.errors.PlacementError`.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from placement_gym.benchmarks import Benchmark
from placement_gym.coarsening import CoarseGraph
from placement_gym.errors import PlacementError
from placement_gym.platforms import Platform


@dataclass(frozen=True)
class LatencyResult:
    """The outcome of evaluating one placement.

    Attributes:
        latency: Estimated end-to-end latency of one inference in seconds (median for measured
            backends); ``inf`` when infeasible.
        spread: Spread of the measurement in seconds (interquartile range; 0 for a simulator).
        feasible: False if the placement cannot run (memory, compile failure, runtime error).
        reason: Why the placement is infeasible ("" when feasible).
        cached: True if the result came from the backend's cache without a new evaluation.
        samples: Number of timed runs behind ``latency`` (0 for a simulator).
    """

    latency: float
    spread: float = 0.0
    feasible: bool = True
    reason: str = ""
    cached: bool = False
    samples: int = 0

    @classmethod
    def infeasible(cls, reason: str) -> LatencyResult:
        return cls(latency=float("inf"), spread=0.0, feasible=False, reason=reason)


class LatencyBackend(abc.ABC):
    """Evaluates placements of one coarse graph on one platform.

    Attributes:
        name: Registry name of the backend kind (``"simulated"``, ``"measured"``...).
        deterministic: True if the same placement always gets the same latency.
        benchmark: The model (op graph, fused layers, the OpenVINO model for execution/profiling).
        graph: The coarse graph of ``benchmark.ops`` whose groups are placed.
        platform: The devices.
    """

    name: str = "backend"
    deterministic: bool = False

    def __init__(self, benchmark: Benchmark, graph: CoarseGraph, platform: Platform) -> None:
        if graph.ops is not benchmark.ops and graph.ops.names != benchmark.ops.names:
            raise ValueError("graph must be a coarsening of benchmark.ops")
        self.benchmark = benchmark
        self.graph = graph
        self.platform = platform

    @property
    def num_devices(self) -> int:
        return len(self.platform.devices)

    def validate(self, placement: Sequence[int] | np.ndarray) -> np.ndarray:
        """Return ``placement`` as an int64 array of shape ``(G,)``.

        Raises:
            PlacementError: Wrong shape, non-integer dtype, or a device index out of range.
        """
        arr = np.asarray(placement)
        g = self.graph.num_groups
        if arr.shape != (g,):
            raise PlacementError(f"placement must have shape ({g},) (one device per group), got {arr.shape}")
        if not (np.issubdtype(arr.dtype, np.integer) or arr.dtype == np.bool_):
            raise PlacementError(f"placement must hold integer device indices, got dtype {arr.dtype}")
        if g and (arr.min() < 0 or arr.max() >= self.num_devices):
            bad = int(arr[(arr < 0) | (arr >= self.num_devices)][0])
            raise PlacementError(
                f"device index {bad} out of range: platform {self.platform.name!r} has {self.num_devices} "
                f"devices ({', '.join(d.name for d in self.platform.devices)})"
            )
        return arr.astype(np.int64, copy=False)

    @abc.abstractmethod
    def evaluate(self, placement: Sequence[int] | np.ndarray) -> LatencyResult:
        """Latency of one placement of shape ``(G,)``."""

    def evaluate_batch(self, placements: np.ndarray) -> list[LatencyResult]:
        """Latencies of a batch of placements, shape ``(B, G)``; backends may override for speed."""
        placements = np.asarray(placements)
        if placements.ndim != 2:
            raise PlacementError(f"a batch of placements must have shape (B, G), got {placements.shape}")
        return [self.evaluate(p) for p in placements]

    def close(self) -> None:
        """Release compiled models, worker threads and files."""
