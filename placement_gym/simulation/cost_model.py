"""The cost model of a placement problem: what each group costs on each device and what moving data costs.

A :class:`CostModel` is the single numeric description of (coarse graph, platform) that every placement
method consumes: the simulator's list schedule, the classical baselines (HEFT, Baechi's m-ETF/m-SCT), the
exact MILP. It holds plain numpy arrays, no OpenVINO objects.

Per-op costs come from one of two sources (``profile=``):

* ``"measured"``: real per-layer times of the model compiled for the device (OpenVINO ``PERF_COUNT``; see
  :mod:`placement_gym.measured.profiling`). Needs the device on this machine.
* ``"roofline"``: the device's datasheet profile::

      time(op) = max(FLOPs / peak_flops[precision], bytes / mem_bandwidth) / efficiency(op_type)
                 + launch_overhead / (IR ops in the op's executed layer)

  where bytes = weights read + input and output activations, scaled from the IR's 4-byte elements to the
  device's precision (a Gather reads only the rows it outputs, not its whole table). The launch overhead is
  charged once per executed (fused) layer, split over the layer's ops.

``"auto"`` profiles the devices of the ``local`` platform and uses the roofline elsewhere.

A group's cost on a device is the sum of its ops' costs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from placement_gym import sealing
from placement_gym.coarsening import CoarseGraph
from placement_gym.errors import BackendError, UnknownNameError
from placement_gym.fusion import op_layer_index
from placement_gym.graph import CompGraph
from placement_gym.platforms import Device, Platform

PROFILES = ("auto", "measured", "roofline")
#: Bytes per element at each inference precision (the IR's tensors are 4-byte f32/i32, or i64 indices).
PRECISION_BYTES = {"f32": 4, "f16": 2, "bf16": 2, "i8": 1}
#: Ops that read only the rows they output from their constant table (embeddings).
_GATHERS = {"Gather", "GatherND", "GatherElements", "EmbeddingBagOffsetsSum", "EmbeddingSegmentsSum"}


@dataclass(frozen=True, eq=False)
class CostModel:
    """Costs of placing ``G`` groups on ``D`` devices (all times in seconds, sizes in bytes).

    Attributes:
        device_names: Names of the devices, length ``D``.
        compute: Run time of each group on each device, shape ``(G, D)``, float64 (``nan``/``inf`` mark a
            group a device cannot run).
        edge_src: Source group of each edge, shape ``(E,)``, int64, ``edge_src < edge_dst``.
        edge_dst: Destination group of each edge, shape ``(E,)``, int64.
        edge_bytes: Effective bytes each edge carries, shape ``(E,)``, float64: plain-layout bytes plus
            blocked-layout bytes (rank >= 4 activations) times the platform's blocked-layout factor (see
            :class:`~placement_gym.platforms.Link`), so that ``latency + edge_bytes / bandwidth`` is the
            cost of crossing a device boundary.
        link_latency: Fixed cost of one transfer from device ``i`` to ``j``, shape ``(D, D)``, 0 on the
            diagonal.
        link_bandwidth: Bandwidth of the link ``i -> j`` in bytes/s, shape ``(D, D)``, ``inf`` on the
            diagonal.
        param_bytes: Weights resident on the group's device, shape ``(G,)``, float64.
        out_bytes: Activations the group produces, shape ``(G,)``, float64.
        input_bytes: Bytes the group reads from the graph inputs (which arrive on the host), shape ``(G,)``.
        result_bytes: Bytes the group hands to the graph outputs (returned to the host), shape ``(G,)``.
        capacity: Memory of each device, shape ``(D,)``, float64.
        invoke_overhead: Fixed cost each time a device starts a subgraph, shape ``(D,)`` (see
            :attr:`placement_gym.platforms.Device.invoke_overhead`).
        host: Index of the host device.
        contention: Extra run time on device ``i`` per second of overlap with work on device ``j``, shape
            ``(D, D)`` (nonzero only between devices sharing hardware, e.g. two virtual CPUs; see
            :attr:`placement_gym.platforms.Device.contention`); zeros if not given.
        meta: Where the costs come from (profile source per device, model name...).
    """

    device_names: tuple[str, ...]
    compute: np.ndarray
    edge_src: np.ndarray
    edge_dst: np.ndarray
    edge_bytes: np.ndarray
    link_latency: np.ndarray
    link_bandwidth: np.ndarray
    param_bytes: np.ndarray
    out_bytes: np.ndarray
    input_bytes: np.ndarray
    result_bytes: np.ndarray
    capacity: np.ndarray
    invoke_overhead: np.ndarray
    host: int = 0
    contention: np.ndarray | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        g, d, e = self.compute.shape[0], len(self.device_names), len(self.edge_src)
        if self.contention is None:
            object.__setattr__(self, "contention", np.zeros((d, d)))
        shapes = {
            "compute": (self.compute, (g, d)),
            "edge_dst": (self.edge_dst, (e,)),
            "edge_bytes": (self.edge_bytes, (e,)),
            "link_latency": (self.link_latency, (d, d)),
            "link_bandwidth": (self.link_bandwidth, (d, d)),
            "param_bytes": (self.param_bytes, (g,)),
            "out_bytes": (self.out_bytes, (g,)),
            "input_bytes": (self.input_bytes, (g,)),
            "result_bytes": (self.result_bytes, (g,)),
            "capacity": (self.capacity, (d,)),
            "invoke_overhead": (self.invoke_overhead, (d,)),
            "contention": (self.contention, (d, d)),
        }
        for key, (arr, shape) in shapes.items():
            if np.shape(arr) != shape:
                raise BackendError(f"CostModel.{key} has shape {np.shape(arr)}, expected {shape}")
        if e and (
            np.any(self.edge_src >= self.edge_dst) or self.edge_src.min() < 0 or self.edge_dst.max() >= g
        ):
            raise BackendError("CostModel edges must satisfy 0 <= edge_src < edge_dst < G")
        if np.any(self.compute < 0):
            raise BackendError("CostModel.compute has negative times")
        for key in ("edge_bytes", "param_bytes", "out_bytes", "input_bytes", "result_bytes"):
            arr = np.asarray(getattr(self, key), dtype=np.float64)
            if not np.all(np.isfinite(arr) & (arr >= 0)):
                raise BackendError(f"CostModel.{key} must be finite byte counts >= 0")
        if not 0 <= self.host < d:
            raise BackendError(f"CostModel.host {self.host} is not a device index in [0, {d})")
        for arr in (self.compute, self.edge_src, self.edge_dst, self.edge_bytes, self.link_latency):
            arr.flags.writeable = False

    # ------------------------------------------------------------------ views
    @property
    def num_groups(self) -> int:
        return self.compute.shape[0]

    @property
    def num_devices(self) -> int:
        return len(self.device_names)

    @property
    def num_edges(self) -> int:
        return len(self.edge_src)

    @property
    def memory(self) -> np.ndarray:
        """Memory a group occupies on its device (weights + outputs), shape ``(G,)``."""
        return self.param_bytes + self.out_bytes

    def inverse_bandwidth(self) -> np.ndarray:
        """Seconds per byte of each link, shape ``(D, D)``, 0 where the bandwidth is infinite (diagonal)."""
        return np.where(np.isfinite(self.link_bandwidth), 1.0 / self.link_bandwidth, 0.0)

    def transfer_time(self, nbytes: float | np.ndarray, src: int, dst: int) -> float | np.ndarray:
        """Seconds to move ``nbytes`` from device ``src`` to ``dst`` (0 on the same device)."""
        if src == dst:
            return np.zeros_like(nbytes, dtype=np.float64) if np.ndim(nbytes) else 0.0
        return (
            self.link_latency[src, dst] + np.asarray(nbytes, dtype=np.float64) / self.link_bandwidth[src, dst]
        )

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_op_times(
        cls,
        coarse: CoarseGraph,
        platform: Platform,
        op_times: np.ndarray,
        meta: dict[str, Any] | None = None,
    ) -> CostModel:
        """Build from per-op costs.

        Args:
            coarse: The coarse graph whose groups are placed.
            platform: The devices and links.
            op_times: Seconds of each op of ``coarse.ops`` on each device, shape ``(n_ops, D)``.
            meta: Stored as :attr:`meta`.

        Raises:
            BackendError: If ``op_times`` has the wrong shape.
        """
        n, d = coarse.ops.num_nodes, platform.num_devices
        op_times = np.asarray(op_times, dtype=np.float64)
        if op_times.shape != (n, d):
            raise BackendError(f"op_times has shape {op_times.shape}, expected ({n}, {d})")
        a, q = coarse.assignment, coarse.graph
        compute = np.stack(
            [np.bincount(a, weights=op_times[:, j], minlength=q.num_nodes) for j in range(d)], 1
        )
        latency = np.zeros((d, d))
        bandwidth = np.full((d, d), np.inf)
        for (i, j), link in platform.links.items():
            latency[i, j], bandwidth[i, j] = link.latency, link.bandwidth
        f = {k: v.astype(np.float64) for k, v in q.nodes.items()}
        contention = np.zeros((d, d))
        for i, a_dev in enumerate(platform.devices):
            for j, b_dev in enumerate(platform.devices):
                if i != j and a_dev.ov_device == b_dev.ov_device:
                    contention[i, j] = a_dev.contention
        return cls(
            device_names=tuple(dev.name for dev in platform.devices),
            compute=np.ascontiguousarray(compute),
            edge_src=q.edge_src.copy(),
            edge_dst=q.edge_dst.copy(),
            edge_bytes=effective_edge_bytes(coarse, platform),
            link_latency=latency,
            link_bandwidth=bandwidth,
            param_bytes=f["param_bytes"],
            out_bytes=f["out_bytes"],
            input_bytes=f["input_bytes"],
            result_bytes=f["result_bytes"],
            capacity=np.array(platform.capacities(), dtype=np.float64),
            invoke_overhead=np.array([dev.invoke_overhead for dev in platform.devices], dtype=np.float64),
            host=platform.host,
            contention=contention,
            meta=dict(meta or {}),
        )

    @classmethod
    def from_benchmark(
        cls, benchmark: Any, coarse: CoarseGraph, platform: Platform, profile: str = "auto"
    ) -> CostModel:
        """Cost model of placing ``coarse`` (a coarsening of ``benchmark.ops``) on ``platform``.

        Args:
            benchmark: A :class:`placement_gym.benchmarks.Benchmark`.
            coarse: The coarse graph.
            platform: The devices.
            profile: ``"auto"``, ``"measured"`` or ``"roofline"`` (see the module docstring).

        Raises:
            UnknownNameError: For an unknown ``profile``.
            BackendError: If ``"measured"`` is asked for a device OpenVINO does not offer here.
            ProtocolAccessError: In a black-box protocol run (:mod:`placement_gym.sealing`).
        """
        sealing.require_white_box("building a cost model")
        if profile not in PROFILES:
            raise UnknownNameError("cost profile", profile, PROFILES)
        columns, sources = [], []
        layer = op_layer_index(benchmark.ops, benchmark.fused_layers)
        for device in platform.devices:
            measured = profile == "measured" or (profile == "auto" and platform.name == "local")
            if measured:
                from placement_gym.measured.profiling import profile_op_times

                columns.append(profile_op_times(benchmark, device))
            else:
                columns.append(roofline_op_times(benchmark.ops, device, layer))
            sources.append("measured" if measured else "roofline")
        meta = {"model": benchmark.name, "version": benchmark.version, "platform": platform.name}
        meta["profile"] = dict(zip([dev.name for dev in platform.devices], sources))
        return cls.from_op_times(coarse, platform, np.stack(columns, 1), meta)


def effective_edge_bytes(coarse: CoarseGraph, platform: Platform) -> np.ndarray:
    """Bytes of each quotient edge with blocked-layout tensors weighted by the links' blocked factor.

    An op edge carries a blocked-layout tensor when its source's output has rank >= 4 (the CPU plugin's
    nChw8c/16c activations). The factor is the mean over the platform's links (the ``local`` platform's
    links are all alike); platforms without ``blocked_bandwidth`` get the plain byte counts.

    Returns:
        Shape ``(E,)`` float64, aligned with ``coarse.graph``'s edges.
    """
    q, ops, a = coarse.graph, coarse.ops, coarse.assignment
    factors = [link.blocked_factor for link in platform.links.values()]
    factor = float(np.mean(factors)) if factors else 1.0
    if factor == 1.0 or q.num_edges == 0:
        return q.edge_bytes.astype(np.float64)
    blocked = np.array([len(shape) >= 4 for shape in ops.out_shapes], dtype=bool)[ops.edge_src]
    weight = np.where(blocked, factor, 1.0) * ops.edge_bytes
    gs, gd = a[ops.edge_src], a[ops.edge_dst]
    cross = gs != gd
    index = np.searchsorted(q.edge_src * q.num_nodes + q.edge_dst, gs[cross] * q.num_nodes + gd[cross])
    return np.bincount(index, weights=weight[cross], minlength=q.num_edges).astype(np.float64)


def roofline_op_times(ops: CompGraph, device: Device, layer: np.ndarray) -> np.ndarray:
    """Datasheet estimate of each op's run time on ``device`` (see the module docstring).

    Args:
        ops: The op graph.
        device: The device, with its peak FLOP/s, bandwidth, efficiencies and launch overhead.
        layer: Executed layer of each op, shape ``(n_ops,)`` (:func:`op_layer_index`).

    Returns:
        Seconds per op, shape ``(n_ops,)``.
    """
    nodes = ops.nodes
    scale = PRECISION_BYTES[device.precision] / 4.0
    weights = nodes["param_bytes"].astype(np.float64)
    gathers = np.array([t in _GATHERS for t in ops.op_types])
    weights[gathers] = np.minimum(weights[gathers], nodes["out_bytes"][gathers])
    inputs = np.bincount(ops.edge_dst, weights=ops.edge_bytes, minlength=ops.num_nodes) + nodes["input_bytes"]
    moved = (weights + inputs + nodes["out_bytes"]) * scale
    compute = nodes["flops"] / device.peak_flops[device.precision]
    efficiency = np.array([device.efficiency(t) for t in ops.op_types])
    members = np.bincount(layer)[layer]
    return np.maximum(compute, moved / device.mem_bandwidth) / efficiency + device.launch_overhead / members
