"""Real per-op run times of a model on one OpenVINO device, from the runtime's per-layer profile.

The model is compiled exactly as the device's :meth:`~placement_gym.platforms.Device.compile_config`
says (threads, pinning, precision) plus ``PERF_COUNT``; after warm-up, each run's
``get_profiling_info()`` gives one time per executed layer, and the median over the runs is kept. Layers
are mapped back to IR ops through the runtime graph's rt_info ``originalLayersNames``:

* a fused layer's time is split over its IR ops in proportion to ``FLOPs + 8 x bytes`` (ops with neither
  share equally), so heavy ops carry most of it and zero-FLOP ops are not free;
* layers the runtime adds (Reorder, Convert) name no IR op: their time goes to the nearest consumer layer
  that has IR ops, else the nearest producer;
* IR ops no layer names take their layer through :func:`~placement_gym.fusion.op_layer_index`.

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
from placement_gym.fusion import op_layer_index
from placement_gym.platforms import Device

#: Version of this profiling procedure (bump when it changes how times are measured or split).
PROFILE_VERSION = 1
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
        rt = node.get_rt_info()
        names = rt["originalLayersNames"].astype(str) if "originalLayersNames" in rt else ""
        producers = [i.get_source_output().get_node().get_friendly_name() for i in node.inputs()]
        layers.append((node.get_friendly_name(), [n for n in names.split(",") if n], producers))
    times = {name: float(np.median(ts)) for name, ts in samples.items()}
    return times, layers, float(np.median(walls))


def split_layer_times(
    ops: Any,
    fused_layers: list[list[str]],
    times: dict[str, float],
    layers: list[tuple[str, list[str], list[str]]],
) -> np.ndarray:
    """Distribute executed-layer times over the IR ops of ``ops`` (see the module docstring).

    Args:
        ops: The op graph (:class:`~placement_gym.graph.CompGraph`).
        fused_layers: IR op names per executed layer, used to place ops no profiled layer names.
        times: Seconds per runtime layer name.
        layers: ``(name, original IR op names, producer names)`` per runtime node, in execution order.

    Returns:
        Seconds per op, shape ``(n_ops,)``; sums to the profiled total.
    """
    index = {name: i for i, name in enumerate(ops.names)}
    members = {name: [index[n] for n in originals if n in index] for name, originals, _ in layers}
    consumers: dict[str, list[str]] = {}
    for name, _, producers in layers:
        for p in producers:
            consumers.setdefault(p, []).append(name)
    producers_of = {name: producers for name, _, producers in layers}

    def nearest(start: str) -> str | None:
        for step in (lambda n: consumers.get(n, []), lambda n: producers_of.get(n, [])):
            frontier, seen = [start], {start}
            while frontier:
                nxt = []
                for n in frontier:
                    for m in step(n):
                        if m in seen:
                            continue
                        if members.get(m):
                            return m
                        seen.add(m)
                        nxt.append(m)
                frontier = nxt
        return None

    # Ops named by no runtime layer join the layer of a neighbour (same rule as the cost model).
    layer_of = op_layer_index(ops, fused_layers)
    by_fused = {}
    for name, _, _ in layers:
        if members.get(name):
            by_fused[int(layer_of[members[name][0]])] = name
    for i in range(ops.num_nodes):
        owner = by_fused.get(int(layer_of[i]))
        if owner is not None and i not in members[owner]:
            members[owner].append(i)

    weight = ops.nodes["flops"] + _BYTE_WEIGHT * (ops.nodes["out_bytes"] + ops.nodes["param_bytes"])
    op_times = np.zeros(ops.num_nodes)
    for name, t in times.items():
        if t <= 0 or name not in members:
            continue
        owner = name if members[name] else nearest(name)
        if owner is None:
            continue
        idx = np.array(members[owner], dtype=np.int64)
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
        op_times = split_layer_times(benchmark.ops, benchmark.fused_layers, times, layers)
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
