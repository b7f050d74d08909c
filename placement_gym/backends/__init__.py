"""Latency backends behind one interface (:class:`LatencyBackend`), selected by name."""

from __future__ import annotations

import importlib
import inspect
from typing import Any

from placement_gym.backends.base import LatencyBackend, LatencyResult
from placement_gym.errors import UnknownNameError

#: Backend name -> "module:class", imported on first use (the measured backend pulls in OpenVINO runtime).
BACKENDS = {
    "simulated": "placement_gym.simulation.backend:SimulatedBackend",
    "measured": "placement_gym.measured.backend:MeasuredBackend",
    "ray": "placement_gym.backends.ray_pool:RayBackend",
}


def backend_class(name: str) -> type[LatencyBackend]:
    """The backend class registered as ``name``.

    Raises:
        UnknownNameError: If ``name`` is not in :data:`BACKENDS`.
    """
    if name not in BACKENDS:
        raise UnknownNameError("backend", name, BACKENDS)
    module, cls = BACKENDS[name].split(":")
    return getattr(importlib.import_module(module), cls)


def backend_options(name: str) -> list[str]:
    """The keyword options (``backend_kwargs``) backend ``name`` accepts."""
    params = inspect.signature(backend_class(name).__init__).parameters.values()
    return [p.name for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY]


def make_backend(name: str, benchmark: Any, graph: Any, platform: Any, **options: Any) -> LatencyBackend:
    """Instantiate backend ``name`` for ``graph`` (a coarsening of ``benchmark.ops``) on ``platform``.

    Raises:
        UnknownNameError: For an unknown backend, or an option the backend does not have (lists its options).
    """
    known = backend_options(name)
    for key in options:
        if key not in known:
            raise UnknownNameError(f"option of the {name} backend", key, known)
    return backend_class(name)(benchmark, graph, platform, **options)


__all__ = ["BACKENDS", "LatencyBackend", "LatencyResult", "backend_class", "backend_options", "make_backend"]
