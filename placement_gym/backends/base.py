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

import numba
import numpy as np

from placement_gym.benchmarks import Benchmark
from placement_gym.coarsening import CoarseGraph
from placement_gym.errors import PlacementError
from placement_gym.platforms import Platform
from placement_gym.validation import as_index_array


@numba.njit(cache=True)
def _out_of_range(arr: np.ndarray, num_devices: int) -> int:
    """Flat index of the first entry of ``arr`` outside ``[0, num_devices)``, or -1 (one pass, no temporaries)."""
    flat = arr.reshape(-1)
    for i in range(flat.shape[0]):
        if flat[i] < 0 or flat[i] >= num_devices:
            return i
    return -1


def placement_key_dtype(num_devices: int) -> type[np.signedinteger]:
    """The dtype of a placement's bytes as a cache or memo key: int8 where the device indices fit (8x shorter
    to hash and to keep than int64), else int64."""
    return np.int8 if num_devices <= 127 else np.int64


def check_placements(
    placements: Sequence[Sequence[int]] | np.ndarray, num_groups: int, platform: Platform
) -> np.ndarray:
    """The one validation of placements: a ``(B, num_groups)`` batch of device indices of ``platform``.

    Returns:
        The batch as a contiguous int64 array.

    Raises:
        PlacementError: Not ``(B, num_groups)``, ragged, not integers (booleans and floats included: see
            :func:`~placement_gym.validation.as_index_array`), or a device index out of range.
    """
    arr = as_index_array(placements, what="placement")
    if arr.ndim != 2 or arr.shape[1] != num_groups:
        raise PlacementError(f"a batch of placements must have shape (B, {num_groups}), got {arr.shape}")
    d = platform.num_devices
    arr = np.ascontiguousarray(arr)
    first = _out_of_range(arr, d)
    if first >= 0:
        bad = int(arr.reshape(-1)[first])
        raise PlacementError(
            f"device index {bad} out of range [0, {d}): platform {platform.name!r} has devices "
            f"{', '.join(dev.name for dev in platform.devices)}"
        )
    return arr


def check_placement(placement: Sequence[int] | np.ndarray, num_groups: int, platform: Platform) -> np.ndarray:
    """One placement: :func:`check_placements` of a single row of shape ``(num_groups,)``, with a fast path
    for what the envs pass (a contiguous int64 array in range is returned as it is).

    Raises:
        PlacementError: Not ``(num_groups,)``, ragged, not integers (see
            :func:`~placement_gym.validation.as_index_array`), or a device index out of range.
    """
    arr = placement if type(placement) is np.ndarray else as_index_array(placement, what="placement")
    if arr.shape != (num_groups,):
        raise PlacementError(f"placement must have shape ({num_groups},) (one device per group), got {arr.shape}")
    if arr.dtype == np.int64 and arr.flags.c_contiguous and _out_of_range(arr, platform.num_devices) < 0:
        return arr
    return check_placements(arr[None, :], num_groups, platform)[0]


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
        ci: Half-width of the 95% confidence interval of ``latency`` in seconds (0 for a simulator).
        host_load: The host's 1-minute load average when the measurement ended (None for a simulator).
    """

    latency: float
    spread: float = 0.0
    feasible: bool = True
    reason: str = ""
    cached: bool = False
    samples: int = 0
    ci: float = 0.0
    host_load: float | None = None

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
        """Return ``placement`` as a contiguous int64 array of shape ``(G,)`` (see :func:`check_placement`)."""
        return check_placement(placement, self.graph.num_groups, self.platform)

    def validate_batch(self, placements: np.ndarray) -> np.ndarray:
        """Return ``placements`` as a contiguous int64 array of shape ``(B, G)`` (:func:`check_placements`)."""
        return check_placements(placements, self.graph.num_groups, self.platform)

    @abc.abstractmethod
    def evaluate(self, placement: Sequence[int] | np.ndarray) -> LatencyResult:
        """Latency of one placement of shape ``(G,)``."""

    def evaluate_valid(self, placement: np.ndarray) -> LatencyResult:
        """:meth:`evaluate` of a placement that :meth:`validate` (or :func:`check_placement`) returned: a
        contiguous int64 array of shape ``(G,)`` in range, which is not checked again. The default calls
        :meth:`evaluate`; a backend whose :meth:`evaluate` validates first overrides it to skip that (the
        problem validates each placement once, then calls this)."""
        return self.evaluate(placement)

    def evaluate_batch(self, placements: np.ndarray) -> list[LatencyResult]:
        """Latencies of a batch of placements, shape ``(B, G)``; backends may override for speed."""
        return [self.evaluate(p) for p in self.validate_batch(placements)]

    def close(self) -> None:
        """Release compiled models, worker threads and files."""
