"""Real per-op run times of a model on one OpenVINO device, from the runtime's per-layer profile.

The model is compiled exactly as the device's :meth:`~placement_gym.platforms.Device.compile_config`
says (threads, pinning, precision) plus ``PERF_COUNT``; after warm-up, each run's
``get_profiling_info()`` gives one time per executed layer, and the median over the runs is kept. Layers
are mapped back to IR ops through the runtime graph's rt_info ``originalLayersNames``:

* a fused layer's time is split over its IR ops in proportion to ``FLOPs + 8 x bytes`` (ops with neither
  share equally), so heavy ops carry most of it and zero-FLOP ops are not free;
* IR ops no layer names, and nodes the runtime adds (Reorder, Convert) that run no IR op, follow the one
  rule of :mod:`placement_gym.fusion` (:func:`layer_owners`): they join their consumers' layer when the
  consumers share one, else their producers'. On the CPU, whose profiled layers are the fusions the
  ``fused`` coarsening level reads, the ops that share a layer's time are exactly one ``fused`` group.

Results are cached on disk (``<cache>/profile/<key>/``) keyed by model name, graph version, OpenVINO
version, device and a hash of its compile configuration and of the op graph.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np

from placement_gym.errors import BackendError
from placement_gym.fusion import op_layer_index, original_names, resolve_owners
from placement_gym.graph import CompGraph
from placement_gym.platforms import Device

#: Version of this profiling procedure (bump when it changes how times are measured or split).
PROFILE_VERSION = 2  # 2: one op -> layer rule shared with the fused coarsening level
_BYTE_WEIGHT = 8.0  # FLOPs one byte of traffic counts as when splitting a fused layer's time


def _example_inputs(compiled: Any) -> dict[str, np.ndarray]:
    """Ones of each input's shape and type (token id 1 and mask 1 are valid for text models)."""
    feeds = {}
    for port in compiled.inputs:
        feeds[port.any_name] = np.ones(list(port.shape), dtype=port.element_type.to_dtype())
    return feeds


def measure_layer_times(
    model: Any, device: Device, warmup: int = 3, runs: int = 7
) -> tuple[dict[str, float], list[tuple[str, list[str], list[str]]], float]:
    """Median per-layer times of ``model`` compiled for ``device``.

    Args:
        model: An ``openvino.Model``.
        device: The device; compiled with ``device.compile_config()`` and ``PERF_COUNT``.
        warmup: Untimed runs first.
        runs: Profiled runs; the median of each layer is kept.

    Returns:
        ``(times, layers, infer_median)``: seconds per executed layer name; for every runtime node in
        execution order ``(name, original IR op names, producer node names)``; the median wall time of one
        synchronous inference.

    Raises:
        BackendError: If the model does not compile or run on the device.
    """
    import time

    from placement_gym.zoo import core

    config = {**device.compile_config(), "PERF_COUNT": True}
    try:
        compiled = core().compile_model(model, device.ov_device, config)
        request = compiled.create_infer_request()
        feeds = _example_inputs(compiled)
        for _ in range(warmup):
            request.infer(feeds)
        samples: dict[str, list[float]] = {}
        walls = []
        for _ in range(runs):
            t0 = time.perf_counter()
            request.infer(feeds)
            walls.append(time.perf_counter() - t0)
            for info in request.get_profiling_info():
                samples.setdefault(info.node_name, []).append(info.real_time.total_seconds())
    except Exception as exc:
        raise BackendError(f"cannot profile the model on {device.name} ({device.ov_device}): {exc}") from exc
    layers = []
    for node in compiled.get_runtime_model().get_ordered_ops():
        producers = [i.get_source_output().get_node().get_friendly_name() for i in node.inputs()]
        layers.append((node.get_friendly_name(), original_names(node), producers))
    times = {name: float(np.median(ts)) for name, ts in samples.items()}
    return times, layers, float(np.median(walls))


def layer_owners(
    ops: CompGraph, layers: list[tuple[str, list[str], list[str]]]
) -> tuple[np.ndarray, np.ndarray]:
    """Which runtime node each op's time comes from, and which node's ops each node's time goes to.

    Both follow the one rule of :mod:`placement_gym.fusion`: an op belongs to the node that names it,
    else (:func:`~placement_gym.fusion.op_layer_index`) to its consumers' node, else its producers'; a
    node that runs no op of the graph (Reorder, Convert) hands its time to the node of its consumers, else
    of its producers (:func:`~placement_gym.fusion.resolve_owners` on the runtime graph).

    Args:
        ops: The op graph.
        layers: ``(name, original IR op names, producer names)`` per runtime node, in execution order.

    Returns:
        ``(op_node, node_owner)``: the runtime node of each op, shape ``(n_ops,)`` (``>= len(layers)`` for
        an op no node runs); the node whose ops receive each node's time, shape ``(len(layers),)``, -1 for
        none.
    """
    op_node = op_layer_index(ops, [originals for _, originals, _ in layers])
    runs_ops = np.bincount(op_node, minlength=len(layers))[: len(layers)] > 0
    position = {name: k for k, (name, _, _) in enumerate(layers)}
    preds = [[position[p] for p in producers if p in position] for _, _, producers in layers]
    succs: list[list[int]] = [[] for _ in layers]
    for k, ps in enumerate(preds):
        for p in ps:
            succs[p].append(k)
    owner = np.where(runs_ops, np.arange(len(layers)), -1)
    return op_node, resolve_owners(owner, succs, preds)


def split_layer_times(
    ops: CompGraph, times: dict[str, float], layers: list[tuple[str, list[str], list[str]]]
) -> np.ndarray:
    """Distribute executed-layer times over the IR ops of ``ops`` (see the module docstring).

    Args:
        ops: The op graph.
        times: Seconds per runtime node name.
        layers: ``(name, original IR op names, producer names)`` per runtime node, in execution order.

    Returns:
        Seconds per op, shape ``(n_ops,)``; sums to the profiled total of the nodes that have an owner.
    """
    op_node, owner = layer_owners(ops, layers)
    position = {name: k for k, (name, _, _) in enumerate(layers)}
    weight = ops.nodes["flops"] + _BYTE_WEIGHT * (ops.nodes["out_bytes"] + ops.nodes["param_bytes"])
    op_times = np.zeros(ops.num_nodes)
    for name, t in times.items():
        k = position.get(name)
        if t <= 0 or k is None or owner[k] < 0:
            continue
        idx = np.flatnonzero(op_node == owner[k])
        w = weight[idx]
        share = w / w.sum() if w.sum() > 0 else np.full(len(idx), 1.0 / len(idx))
        op_times[idx] += t * share
    return op_times


def profile_op_times(benchmark: Any, device: Device, warmup: int = 3, runs: int = 7) -> np.ndarray:
    """Measured seconds per op of ``benchmark.ops`` on ``device``, cached on disk.

    Args:
        benchmark: A :class:`placement_gym.benchmarks.Benchmark`.
        device: The device (must exist on this machine).
        warmup: Untimed runs.
        runs: Profiled runs (median per layer).

    Returns:
        Shape ``(n_ops,)``, float64.

    Raises:
        BackendError: If the device cannot compile or run the model.
    """
    import openvino as ov

    from placement_gym.cache import cached_entry

    config = json.dumps(device.compile_config(), sort_keys=True, default=str)
    graph_hash = hashlib.sha256("\n".join(benchmark.ops.names).encode()).hexdigest()[:10]
    config_hash = hashlib.sha256(f"{device.ov_device}|{config}|{warmup}|{runs}".encode()).hexdigest()[:10]
    device_tag = device.ov_device.replace(".", "")
    key = (
        f"{benchmark.name}-v{benchmark.version}-ov{ov.__version__.split('-')[0]}-p{PROFILE_VERSION}"
        f"-{device_tag}-{config_hash}-{graph_hash}"
    )

    def write(directory: Path) -> dict[str, Any]:
        times, layers, wall = measure_layer_times(benchmark.model, device, warmup, runs)
        op_times = split_layer_times(benchmark.ops, times, layers)
        np.save(directory / "op_times.npy", op_times)
        return {
            "model": benchmark.name,
            "version": benchmark.version,
            "openvino": ov.get_version(),
            "device": device.ov_device,
            "config": config,
            "warmup": warmup,
            "runs": runs,
            "layer_sum": float(sum(times.values())),
            "infer_median": wall,
        }

    directory, _ = cached_entry("profile", key, write)
    return np.load(directory / "op_times.npy")
