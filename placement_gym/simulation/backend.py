"""The simulated backend: latency of a placement from a cost model and a list schedule, in seconds.

Costs come from :class:`~placement_gym.simulation.cost_model.CostModel` (real per-layer profiles for the
``local`` platform's devices, datasheet rooflines elsewhere); the latency of a placement is the makespan of
an event-driven schedule (``schedule=``):

* ``"groups"``: the list schedule of single groups in :mod:`placement_gym.simulation.schedule`
  (per-device and per-link queues, transfers overlapping compute, inputs from and results to the host);
* ``"segments"``: the schedule of the same-device segments the measured backend's partitioned executor
  compiles and runs (:mod:`placement_gym.simulation.segment_schedule`; boundaries paid by the segments'
  devices);
* ``"auto"`` (default): ``"segments"`` on the ``local`` platform, whose placements the partitioned
  executor measures, ``"groups"`` elsewhere.

Both check peak memory the same way. The same
placement always gets the same latency, so the backend is deterministic and caches results in a bounded
LRU keyed by the placement's bytes.

Example:
    >>> from placement_gym.benchmarks import load_benchmark
    >>> from placement_gym.platforms import load_platform
    >>> bench = load_benchmark("tiny_cnn")
    >>> sim = SimulatedBackend(bench, bench.coarsen("fused"), load_platform("cpu-dgpu"))
    >>> sim.evaluate([0] * sim.graph.num_groups).feasible
    True
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

from placement_gym.backends.base import LatencyBackend, LatencyResult, placement_key_dtype
from placement_gym.benchmarks import Benchmark
from placement_gym.coarsening import CoarseGraph
from placement_gym.errors import BackendError, UnknownNameError
from placement_gym.platforms import Platform
from placement_gym.simulation.cost_model import CostModel
from placement_gym.simulation.schedule import Schedule
from placement_gym.simulation.segment_schedule import SegmentSchedule

SCHEDULES = ("auto", "groups", "segments")
DEFAULT_CACHE_SIZE = 2**16
#: Reason of a NaN simulated latency: a broken cost model, never cached so that it cannot stick.
NAN_REASON = "simulated latency is NaN (the cost model has a NaN cost)"


class SimulatedBackend(LatencyBackend):
    """Deterministic latency estimates from a cost model and a list schedule.

    Args:
        benchmark: The model.
        graph: A coarsening of ``benchmark.ops``; its groups are placed.
        platform: The devices and links.
        profile: Source of per-op costs: ``"auto"`` (measured on the ``local`` platform, roofline
            elsewhere), ``"measured"`` or ``"roofline"``.
        cache_size: Most placements kept in the LRU result cache (0 disables it). It bounds the memory a
            long run grows to: on ``bert`` (206 groups) one entry costs about 0.4 KB (its key is the
            placement as int8 bytes, a feasible result its latency as a float), so the default 65,536
            entries hold about 27 MB (``python -m experiments.speed.memory --steps 100000``).
        cost_model: Use this cost model instead of building one (it must match ``graph`` and
            ``platform``); for hand-built problems and for sharing one model between backends.
        schedule: ``"auto"``, ``"groups"`` or ``"segments"`` (see the module docstring).

    Attributes:
        cost_model: The :class:`CostModel` every evaluation uses.
        schedule: The placement-independent schedule arrays (a :class:`Schedule` or a
            :class:`SegmentSchedule`).
        schedule_kind: ``"groups"`` or ``"segments"``.

    Raises:
        UnknownNameError: For an unknown ``schedule``.
    """

    name = "simulated"
    deterministic = True

    def __init__(
        self,
        benchmark: Benchmark,
        graph: CoarseGraph,
        platform: Platform,
        *,
        profile: str = "auto",
        cache_size: int = DEFAULT_CACHE_SIZE,
        cost_model: CostModel | None = None,
        schedule: str = "auto",
    ) -> None:
        super().__init__(benchmark, graph, platform)
        if schedule not in SCHEDULES:
            raise UnknownNameError("schedule", schedule, SCHEDULES)
        if isinstance(cache_size, bool) or not isinstance(cache_size, (int, np.integer)) or cache_size < 0:
            raise BackendError(f"cache_size must be an integer >= 0, got {cache_size!r}")
        if cost_model is None:
            cost_model = CostModel.from_benchmark(benchmark, graph, platform, profile=profile)
        elif cost_model.num_groups != graph.num_groups or cost_model.num_devices != platform.num_devices:
            raise BackendError(
                f"cost model is for {cost_model.num_groups} groups x {cost_model.num_devices} devices, "
                f"graph/platform have {graph.num_groups} x {platform.num_devices}"
            )
        self.cost_model = cost_model
        if schedule == "auto":
            schedule = "segments" if platform.name == "local" else "groups"
        self.schedule_kind = schedule
        self.schedule: Schedule | SegmentSchedule = (
            SegmentSchedule.build(cost_model) if schedule == "segments" else Schedule.build(cost_model)
        )
        self.cache_size = int(cache_size)
        self._cache: OrderedDict[bytes, float | LatencyResult] = OrderedDict()  # see _store
        self._key_dtype = placement_key_dtype(platform.num_devices)  # of the cache's keys
        self.hits = 0
        self.misses = 0

    # ------------------------------------------------------------------ evaluation
    def evaluate(self, placement: Sequence[int] | np.ndarray) -> LatencyResult:
        """Simulated latency of one placement of shape ``(G,)``.

        Raises:
            PlacementError: Wrong shape, dtype or a device index out of range.
        """
        return self.evaluate_valid(self.validate(placement))

    def evaluate_valid(self, placement: np.ndarray) -> LatencyResult:
        """:meth:`evaluate` of a placement :meth:`validate` returned (contiguous int64, in range: unchecked,
        the compiled schedule indexes with it)."""
        key = placement.astype(self._key_dtype).tobytes()
        hit = self._hit(key)
        if hit is not None:
            self.hits += 1
            return hit
        self.misses += 1
        return self._store(key, self._result(*self.schedule.run(placement)))

    def evaluate_batch(self, placements: np.ndarray) -> list[LatencyResult]:
        """Simulated latencies of a batch of shape ``(B, G)``, misses simulated in one compiled loop.

        Raises:
            PlacementError: If the batch is not ``(B, G)`` or any row is not a valid placement.
        """
        batch = self.validate_batch(placements)
        keys = [row.tobytes() for row in batch.astype(self._key_dtype)]
        results: list[LatencyResult | None] = [None] * len(keys)
        todo = []
        for i, key in enumerate(keys):
            hit = self._hit(key)
            if hit is None:
                todo.append(i)
            else:
                results[i] = hit
        self.hits += len(keys) - len(todo)
        self.misses += len(todo)
        if todo:
            lat, over, peak = self.schedule.run_batch(batch[todo])
            for i, latency, device, nbytes in zip(todo, lat.tolist(), over.tolist(), peak.tolist()):
                results[i] = self._store(keys[i], self._result(latency, device, nbytes))
        return results  # type: ignore[return-value]

    @property
    def num_cached(self) -> int:
        """Results currently in the LRU cache (at most ``cache_size``)."""
        return len(self._cache)

    def clear_cache(self) -> None:
        """Forget all cached results."""
        self._cache.clear()

    # ------------------------------------------------------------------ helpers
    def _hit(self, key: bytes) -> LatencyResult | None:
        """The cached result of ``key`` (``cached=True``), most recently used now; ``None`` if not cached."""
        hit = self._cache.get(key)
        if hit is None:
            return None
        self._cache.move_to_end(key)
        if type(hit) is float:  # a feasible result, kept as its latency (see _store)
            return LatencyResult(hit, cached=True)
        return hit

    def _result(self, latency: float, over: int, peak: float) -> LatencyResult:
        if over < 0 and latency < np.inf:  # feasible (a NaN fails the test): the common case, built directly
            return LatencyResult(latency)
        if over >= 0:
            cap = self.cost_model.capacity[over]
            return LatencyResult.infeasible(
                f"out of memory on device {self.cost_model.device_names[over]!r}: {memory_over(peak, cap)}"
            )
        if np.isnan(latency):
            return LatencyResult.infeasible(NAN_REASON)
        if not np.isfinite(latency):
            return LatencyResult.infeasible(
                "a group is placed on a device that cannot run it (infinite cost)"
            )
        return LatencyResult(latency=latency)

    def _store(self, key: bytes, result: LatencyResult) -> LatencyResult:
        """Cache ``result`` (unless it came from a NaN) and return it (``cached=False``)."""
        if self.cache_size and result.reason != NAN_REASON:
            # a feasible result (its latency alone) is kept as a float, which the garbage collector does not
            # track: its full collections walked every cached result object otherwise
            self._cache[key] = float(result.latency) if result.feasible else dataclasses.replace(result, cached=True)
            if len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)
        return result


def memory_over(peak: float, capacity: float) -> str:
    """``peak 1.4 KiB > capacity 1.2 KiB``: both in the unit that suits the capacity (a tiny model's
    devices hold kilobytes), and in bytes when that unit would show them equal."""
    units = (("B", 1), ("KiB", 2**10), ("MiB", 2**20), ("GiB", 2**30), ("TiB", 2**40))
    name, size = next(((n, s) for n, s in reversed(units) if capacity >= s), units[0])
    text = f"peak {peak / size:.1f} {name} > capacity {capacity / size:.1f} {name}"
    if size == 1 or f"{peak / size:.1f}" == f"{capacity / size:.1f}":
        text = f"peak {peak:,.0f} B > capacity {capacity:,.0f} B"
    return text
