"""The costs of running a placement as separately compiled segments, as a few physical figures that can be
fitted to measurements and applied to a :class:`~placement_gym.simulation.cost_model.CostModel`.

The ``local`` platform measures these figures with micro-benchmarks (:mod:`placement_gym.platforms.local`);
:class:`PartitionCosts` lets them be replaced by figures fitted to measured placements
(``python -m experiments.fidelity.residuals``), to test whether the simulator's residual is one of them
mis-sized:

* ``invoke_overhead``: seconds each device pays per subgraph it starts (the schedule's connected
  components);
* ``transfer_latency``: fixed seconds per cut tensor (one quotient edge between devices);
* ``bandwidth`` / ``blocked_bandwidth``: bytes/s of a boundary for plain and for blocked-layout tensors;
* ``contention``: extra run time per second of overlap between two devices sharing hardware (0: they
  really run in parallel; 1: no speed-up at all).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from placement_gym.coarsening import CoarseGraph
from placement_gym.errors import ConfigError
from placement_gym.simulation.cost_model import CostModel

FIELDS = ("invoke_overhead", "transfer_latency", "bandwidth", "blocked_bandwidth", "contention")


@dataclass(frozen=True)
class PartitionCosts:
    """Figures of a segment boundary (see the module docstring); seconds, bytes/s, a fraction."""

    invoke_overhead: float
    transfer_latency: float
    bandwidth: float
    blocked_bandwidth: float
    contention: float

    def __post_init__(self) -> None:
        for name in FIELDS:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ConfigError(f"PartitionCosts.{name} must be a finite number, got {value!r}")
        if self.invoke_overhead < 0 or self.transfer_latency < 0:
            raise ConfigError(
                f"overheads must be >= 0 s, got invoke_overhead={self.invoke_overhead!r}, "
                f"transfer_latency={self.transfer_latency!r}"
            )
        if self.bandwidth <= 0 or self.blocked_bandwidth <= 0:
            raise ConfigError(
                f"bandwidths must be > 0, got bandwidth={self.bandwidth!r}, "
                f"blocked_bandwidth={self.blocked_bandwidth!r}"
            )
        if not 0 <= self.contention <= 1:
            raise ConfigError(f"contention must be in [0, 1], got {self.contention!r}")

    def as_dict(self) -> dict[str, float]:
        return {name: float(getattr(self, name)) for name in FIELDS}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PartitionCosts:
        """From :meth:`as_dict`'s keys.

        Raises:
            ConfigError: For a missing or unknown key, or a bad value.
        """
        if set(data) != set(FIELDS):
            raise ConfigError(f"PartitionCosts needs exactly the keys {FIELDS}, got {sorted(data)}")
        return cls(**{name: float(data[name]) for name in FIELDS})


def split_edge_bytes(coarse: CoarseGraph) -> tuple[np.ndarray, np.ndarray]:
    """Plain-layout and blocked-layout (rank >= 4 activations) bytes of each quotient edge, each ``(E,)``
    float64, aligned with ``coarse.graph``'s edges."""
    q, ops, a = coarse.graph, coarse.ops, coarse.assignment
    blocked = np.array([len(shape) >= 4 for shape in ops.out_shapes], dtype=bool)[ops.edge_src]
    gs, gd = a[ops.edge_src], a[ops.edge_dst]
    cross = gs != gd
    index = np.searchsorted(q.edge_src * q.num_nodes + q.edge_dst, gs[cross] * q.num_nodes + gd[cross])
    nbytes = ops.edge_bytes[cross].astype(np.float64)
    plain = np.bincount(index, weights=np.where(blocked[cross], 0.0, nbytes), minlength=q.num_edges)
    block = np.bincount(index, weights=np.where(blocked[cross], nbytes, 0.0), minlength=q.num_edges)
    return plain, block


def apply_partition_costs(cost: CostModel, coarse: CoarseGraph, costs: PartitionCosts) -> CostModel:
    """``cost`` with every link, device overhead and shared-hardware contention replaced by ``costs``
    (the compute times, memory and graph are kept). Contention applies to the device pairs that already
    had some (devices sharing hardware).

    Raises:
        ConfigError: If ``coarse`` is not the coarse graph of ``cost``.
    """
    if coarse.num_groups != cost.num_groups or coarse.graph.num_edges != cost.num_edges:
        raise ConfigError(
            f"the coarse graph ({coarse.num_groups} groups, {coarse.graph.num_edges} edges) is not the cost "
            f"model's ({cost.num_groups} groups, {cost.num_edges} edges)"
        )
    d = cost.num_devices
    off = ~np.eye(d, dtype=bool)
    plain, block = split_edge_bytes(coarse)
    contention = np.where(np.asarray(cost.contention) > 0, costs.contention, 0.0)
    return dataclasses.replace(
        cost,
        edge_bytes=plain + block * (costs.bandwidth / costs.blocked_bandwidth),
        link_latency=np.where(off, costs.transfer_latency, 0.0),
        link_bandwidth=np.where(off, costs.bandwidth, np.inf),
        invoke_overhead=np.full(d, costs.invoke_overhead),
        contention=contention,
        meta={**cost.meta, "partition_costs": costs.as_dict()},
    )
