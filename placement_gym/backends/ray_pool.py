"""Evaluate placements on a pool of Ray actors, each holding its own backend (scale-out past one machine).

Measured evaluations are the bottleneck of every learner; Mirhoseini et al. measured placements on a
pool of workers. :class:`RayBackend` does the same with `Ray <https://docs.ray.io>`_: it starts
``num_workers`` actors, each of which loads the benchmark, builds the same coarse graph and platform and
an inner backend (``"measured"`` by default) on whatever node Ray schedules it, and spreads
:meth:`evaluate_batch` over them. Results are identical in form to the inner backend's.

Point it at a cluster with ``address="ray://head-node:10001"`` (Ray Client) or ``address="auto"`` on a
node of a running cluster (``ray start --head`` on one machine, ``ray start --address=<head>:6379`` on
the others); ``address=None`` starts a local instance. Each actor reserves ``cpus_per_worker`` CPUs, so
Ray never runs two measuring actors on the same cores of one machine unless told to. Worker nodes need
placement-gym installed and model files reachable (zoo models are rebuilt from their recipes, so a zoo
name is enough).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np

from placement_gym.backends.base import LatencyBackend, LatencyResult
from placement_gym.errors import BackendError, PlacementError


class _Evaluator:
    """The Ray actor's body: one inner backend, built where the actor runs."""

    def __init__(
        self, model: str, level: str, platform: Any, inner: str, inner_kwargs: dict[str, Any]
    ) -> None:
        from placement_gym.backends import make_backend
        from placement_gym.benchmarks import load_benchmark

        bench = load_benchmark(model)
        self.backend = make_backend(inner, bench, bench.coarsen_as(level), platform, **inner_kwargs)

    def evaluate_batch(self, placements: np.ndarray) -> list[LatencyResult]:
        out = []
        for p in placements:
            try:
                out.append(self.backend.evaluate(p))
            except PlacementError:
                raise
            except Exception as exc:  # a failed evaluation is an infeasible result, never a dead worker
                out.append(LatencyResult.infeasible(f"worker error: {type(exc).__name__}: {exc}"))
        return out


class RayBackend(LatencyBackend):
    """Spread evaluations over Ray actors.

    Args:
        benchmark: The benchmark; workers reload it from its zoo name or IR/ONNX path.
        graph: The coarse graph (workers rebuild it from ``graph.level``).
        platform: The platform (sent to the workers).
        inner: Backend each worker runs (``"measured"`` or ``"simulated"``).
        num_workers: Number of actors.
        address: Ray cluster address (``None``: start or reuse a local instance).
        cpus_per_worker: CPUs each actor reserves.
        inner_kwargs: Keyword arguments of the inner backend (warm-up, repeats...).

    Raises:
        BackendError: If Ray is not installed, cannot connect, or the model cannot be sent to workers.
    """

    name = "ray"

    def __init__(
        self,
        benchmark: Any,
        graph: Any,
        platform: Any,
        *,
        inner: str = "measured",
        num_workers: int = 2,
        address: str | None = None,
        cpus_per_worker: float = 1.0,
        inner_kwargs: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(benchmark, graph, platform)
        try:
            import ray
        except ImportError as exc:
            raise BackendError("the ray backend needs Ray: pip install 'placement-gym[ray]'") from exc
        from pathlib import Path

        source = benchmark.source
        if not isinstance(source, (str, Path)):
            raise BackendError(
                "the ray backend needs a zoo model or an IR/ONNX file path, not an in-memory model"
            )
        from placement_gym.zoo import MODELS

        model = benchmark.name if benchmark.name in MODELS else str(source)
        if num_workers < 1:
            raise BackendError(f"num_workers must be >= 1, got {num_workers}")
        try:
            if not ray.is_initialized():
                ray.init(address=address, ignore_reinit_error=True, log_to_driver=False)
        except Exception as exc:
            raise BackendError(f"cannot connect to Ray at {address!r}: {exc}") from exc
        from placement_gym.backends import backend_class

        self.deterministic = backend_class(inner).deterministic
        actor = ray.remote(num_cpus=cpus_per_worker)(_Evaluator)
        self._ray = ray
        self.workers = [
            actor.remote(model, graph.level, platform, inner, dict(inner_kwargs or {}))
            for _ in range(num_workers)
        ]
        self._next = itertools.cycle(range(num_workers))

    def evaluate(self, placement: Sequence[int] | np.ndarray) -> LatencyResult:
        p = self.validate(placement)
        worker = self.workers[next(self._next)]
        return self._ray.get(worker.evaluate_batch.remote(p[None, :]))[0]

    def evaluate_batch(self, placements: np.ndarray) -> list[LatencyResult]:
        placements = np.asarray(placements)
        if placements.ndim != 2:
            raise PlacementError(f"a batch of placements must have shape (B, G), got {placements.shape}")
        batch = np.stack([self.validate(p) for p in placements]) if len(placements) else placements
        chunks = np.array_split(np.arange(len(batch)), len(self.workers))
        futures = [w.evaluate_batch.remote(batch[idx]) for w, idx in zip(self.workers, chunks) if len(idx)]
        return [r for part in self._ray.get(futures) for r in part]

    def close(self) -> None:
        for w in getattr(self, "workers", []):
            self._ray.kill(w)
        self.workers = []
