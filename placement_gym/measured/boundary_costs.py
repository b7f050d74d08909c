"""Micro-benchmark of a segment boundary in the partitioned executor, for calibrating the simulator's
per-boundary figures (:class:`~placement_gym.simulation.partition_costs.PartitionCosts`) on a new machine.

A chain of ``layers`` identical layers is run by the real
:class:`~placement_gym.measured.dataflow.PartitionedExecutor` on the ``local`` platform's two virtual CPUs,
cut into ``k`` contiguous blocks on alternating devices (``k - 1`` boundaries, one tensor each, no
concurrency to gain), for a few ``k``. The least-squares slope of the median run time against ``k - 1``
is what one boundary costs. Three chains separate the fixed cost from the per-byte ones:

* ``tiny``: matrix products on a 1x16 activation (64 bytes): the fixed cost of a boundary (starting one
  more segment and handing it its input);
* ``plain``: matrix products on a 1x512x192 activation (plain layout, 384 KiB);
* ``blocked``: 1x1 convolutions on a 1x64x56x56 activation (kept in a blocked layout by the CPU plugin,
  reordered at a boundary; 784 KiB).

``bytes / (slope - fixed slope)`` is then the boundary bandwidth of each layout. Results are stored with
the machine's fingerprint, the OpenVINO version and the process's core set (``<cache>/platform/boundaries-...``) by
``placement-gym calibrate --boundaries``, with how busy the host was while they were measured (costs
measured on a busy host are not stored unless accepted, :mod:`placement_gym.platforms.quiet`).
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any

import numpy as np

from placement_gym.errors import BackendError
import placement_gym.platforms.quiet as quiet
from placement_gym.platforms.devices import Platform
from placement_gym.platforms.machine import cores_key, machine_fingerprint, process_cores

#: Version of the measurement below (bump when it changes).
BOUNDARY_VERSION = 1
#: What :func:`measure_boundary_costs` measures, in messages.
WHAT = "the segment-boundary costs of the local platform"
#: Chain kinds: activation shape and layer type.
CHAINS: dict[str, tuple[tuple[int, ...], str]] = {
    "tiny": ((1, 16), "matmul"),
    "plain": ((1, 512, 192), "matmul"),
    "blocked": ((1, 64, 56, 56), "conv"),
}


def chain_model(kind: str, layers: int, seed: int = 0) -> Any:
    """An ``ov.Model`` of ``layers`` chained layers of chain ``kind`` (see :data:`CHAINS`).

    Raises:
        BackendError: For an unknown kind or ``layers < 2``.
    """
    import openvino as ov
    import openvino.opset13 as ops

    if kind not in CHAINS:
        raise BackendError(f"unknown chain kind {kind!r}; known: {', '.join(CHAINS)}")
    if layers < 2:
        raise BackendError(f"a chain needs at least 2 layers, got {layers}")
    shape, layer = CHAINS[kind]
    rng = np.random.default_rng(seed)
    x = ops.parameter(list(shape), ov.Type.f32, name="x")
    y = x
    for _ in range(layers):
        if layer == "conv":
            w = (rng.standard_normal((shape[1], shape[1], 1, 1)) * 0.1).astype(np.float32)
            y = ops.convolution(y, ops.constant(w), [1, 1], [0, 0], [0, 0], [1, 1])
        else:
            w = (rng.standard_normal((shape[-1], shape[-1])) / np.sqrt(shape[-1])).astype(np.float32)
            y = ops.matmul(y, ops.constant(w), False, False)
    return ov.Model([y], [x], f"{kind}_chain")


def block_placement(num_ops: int, blocks: int) -> np.ndarray:
    """Per-op devices of a chain of ``num_ops`` ops cut into ``blocks`` contiguous, near-equal blocks on
    alternating devices 0, 1, 0, ..., shape ``(num_ops,)``.

    Raises:
        BackendError: If ``blocks`` is not in ``[1, num_ops]``.
    """
    if not 1 <= blocks <= num_ops:
        raise BackendError(f"blocks must be in [1, {num_ops}], got {blocks}")
    block_of = (np.arange(num_ops) * blocks) // num_ops
    return (block_of % 2).astype(np.int64)


def boundary_slope(boundaries: np.ndarray, times: np.ndarray) -> float:
    """Least-squares slope of ``times`` (seconds) against ``boundaries``, both shape ``(n,)``, ``n >= 2``
    with at least two distinct boundary counts: seconds per boundary.

    Raises:
        BackendError: For fewer than two distinct boundary counts or mismatched shapes.
    """
    b = np.asarray(boundaries, dtype=np.float64)
    t = np.asarray(times, dtype=np.float64)
    if b.shape != t.shape or len(np.unique(b)) < 2:
        raise BackendError(f"need times for at least two boundary counts, got {b.tolist()} / {t.tolist()}")
    return float(np.polyfit(b, t, 1)[0])


def measure_chain(
    kind: str,
    platform: Platform,
    ks: tuple[int, ...] = (1, 2, 4, 8),
    layers: int = 8,
    runs: int = 25,
) -> dict[str, Any]:
    """Median run time of chain ``kind`` cut into each ``k`` of ``ks`` blocks, and its slope per boundary.

    ``platform``: the two virtual CPUs to run on (``load_platform("local")``; the ``local`` platform
    passes its own devices while it is being built).

    Returns:
        ``{"ks", "times"`` (seconds per k), ``"slope"`` (seconds per boundary), ``"tensor_bytes"}``.
    """
    from placement_gym.measured.dataflow import PartitionedExecutor
    from placement_gym.measured.segments import split_segments
    from placement_gym.ov_graph import graph_from_ov
    from placement_gym.zoo.loading import core

    model = chain_model(kind, layers)
    graph = graph_from_ov(model)
    if platform.num_devices != 2 or platform.devices[0].ov_device != platform.devices[1].ov_device:
        raise BackendError("the boundary micro-benchmark needs the two virtual CPUs of a CPU-only machine")
    shape = CHAINS[kind][0]
    inputs = {model.inputs[0].get_any_name(): np.ones(shape, dtype=np.float32)}
    executor = PartitionedExecutor(
        model, graph, platform, core(), inputs, max_compiled_ops=4 * layers * len(ks)
    )
    times = []
    try:
        for k in ks:
            op_device = block_placement(graph.num_nodes, k)
            if len(split_segments(graph, op_device)) != k:
                raise BackendError(f"{kind} chain cut into {k} blocks did not give {k} segments")
            plan = executor.prepare(op_device)
            for _ in range(3):
                executor.run(plan)
            times.append(float(np.median([executor.run(plan) for _ in range(runs)])))
    finally:
        executor.close()
    return {
        "ks": list(ks),
        "times": times,
        "slope": boundary_slope(np.array(ks) - 1, np.array(times)),
        "tensor_bytes": 4 * int(np.prod(shape)),
    }


def measure_boundary_costs(
    platform: Platform, ks: tuple[int, ...] = (1, 2, 4, 8), layers: int = 8, runs: int = 25
) -> dict[str, Any]:
    """Each chain of :data:`CHAINS` measured by :func:`measure_chain` (on ``platform``), and the figures
    they give.

    Returns:
        ``{"chains": {kind: measure_chain(...)}, "fixed"`` (s per boundary), ``"bandwidth"``,
        ``"blocked_bandwidth"`` (B/s; inf when a boundary costs no more than the fixed part),
        ``"load_before", "load_after"}``.
    """
    load_before = os.getloadavg()[0]
    chains = {kind: measure_chain(kind, platform, ks, layers, runs) for kind in CHAINS}
    fixed = max(chains["tiny"]["slope"], 0.0)

    def rate(kind: str) -> float:
        extra = chains[kind]["slope"] - fixed
        return float(chains[kind]["tensor_bytes"] / extra) if extra > 0 else float("inf")

    return {
        "chains": chains,
        "fixed": fixed,
        "bandwidth": rate("plain"),
        "blocked_bandwidth": rate("blocked"),
        "load_before": load_before,
        "load_after": os.getloadavg()[0],
    }


def boundaries_key(cores: tuple[int, ...]) -> str:
    """The cache key (kind ``platform``) of the boundary costs of this machine and OpenVINO version on
    ``cores``."""
    import openvino as ov

    digest = hashlib.sha256(json.dumps(machine_fingerprint(), sort_keys=True).encode()).hexdigest()[:12]
    return f"boundaries-v{BOUNDARY_VERSION}-{digest}-{cores_key(cores)}-ov{ov.__version__.split('-')[0]}"


def boundary_costs_entry(
    platform: Platform, force: bool = False, allow_busy: bool | None = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """:func:`measure_boundary_costs` (on ``platform``, the ``local`` one), stored once per machine
    fingerprint, OpenVINO version and core set of this process (a boundary between two threads on one
    core is not one between two cores; ``force`` re-measures), with how busy the host was while they were
    measured (:mod:`placement_gym.platforms.quiet`: costs measured on a busy host are not stored unless
    ``allow_busy``).

    Returns:
        ``(record, activity)``: the measurement's record and its host-activity record
        (:func:`~placement_gym.platforms.quiet.host_activity`).

    Raises:
        BusyHostError: If the host was busy in every attempt and busy figures are not accepted.
    """
    import openvino as ov

    cores = process_cores()
    meta = {"fingerprint": machine_fingerprint(), "cores": list(cores), "openvino": ov.get_version()}
    return quiet.cached_calibration(
        boundaries_key(cores), "boundaries.json", lambda: measure_boundary_costs(platform), WHAT,
        "`placement-gym calibrate --boundaries-only`", meta, allow_busy, cores, force,
    )  # fmt: skip


def boundary_costs(platform: Platform, force: bool = False, allow_busy: bool | None = None) -> dict[str, Any]:
    """The record of :func:`boundary_costs_entry`, without its host activity."""
    return boundary_costs_entry(platform, force, allow_busy)[0]
