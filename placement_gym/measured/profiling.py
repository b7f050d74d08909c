"""Real per-op run times of a model on one OpenVINO device, from the runtime's per-layer profile.

The model is compiled exactly as the device's :meth:`~placement_gym.platforms.Device.compile_config`
says (threads, pinning, precision) plus ``PERF_COUNT``; after warm-up, each run's
``get_profiling_info()`` gives one time per executed layer, and a low percentile (``PERCENTILE``, the
20th) over the runs is kept: on a shared machine a layer is only ever slowed down by other work, so the
fast runs are the layer's own time. Layers are mapped back to IR ops through the runtime graph's rt_info
``originalLayersNames``:

* a fused layer's time is split over its IR ops in proportion to ``FLOPs + 8 x bytes`` (ops with neither
  share equally), so heavy ops carry most of it and zero-FLOP ops are not free;
* IR ops no layer names, and nodes the runtime adds (Reorder, Convert) that run no IR op, follow the one
  rule of :mod:`placement_gym.fusion` (:func:`layer_owners`): they join their consumers' layer when the
  consumers share one, else their producers'. On the CPU, whose profiled layers are the fusions the
  ``fused`` coarsening level reads, the ops that share a layer's time are exactly one ``fused`` group.

**Validation.** The per-op sum must agree with the whole-model time of the same compiled model (the same
percentile of the runs' wall times) within ``TOLERANCE`` (10%). If it does not, the model is profiled once
more; if the better of the two attempts still disagrees, its per-op times are rescaled to the whole-model
time. The record says which (``action``: ``"ok"``, ``"reprofiled"`` or ``"rescaled"``, with ``factor``).

**Storage.** Profiles are cached on disk (``<cache>/profile/<key>/``, written atomically by
:func:`placement_gym.cache.cached_entry`) with the machine's fingerprint
(:func:`~placement_gym.platforms.machine.machine_fingerprint`: CPU model, cores, ISA flags), the OpenVINO
version, the device's precision and the host load while profiling. A profile from another machine or
OpenVINO version, or one whose times are unreadable, is redone, never used; a corrupt file is detected by
its hash and rebuilt. ``placement-gym calibrate`` redoes profiles on demand (:func:`calibrate`). A profile
is also stored with how busy the host was while it was made; one made while other processes took more
than a quarter of this process's cores is not stored (:mod:`placement_gym.platforms.quiet`).

**Drift check.** When a stored profile is first used in a process, the model is timed afresh as the measured
backend runs it (no ``PERF_COUNT``); a per-op sum more than ``DRIFT_TOLERANCE`` (15%) away from it raises a
:class:`~placement_gym.errors.ProfileWarning`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from placement_gym.errors import BackendError, ProfileWarning
from placement_gym.fusion import op_layer_index, original_names, resolve_owners
from placement_gym.graph import CompGraph
from placement_gym.platforms import Device

#: Version of this profiling procedure (bump when it changes how times are measured or split).
PROFILE_VERSION = 3  # 3: low percentile, validated against the whole-model time, machine fingerprint
_BYTE_WEIGHT = 8.0  # FLOPs one byte of traffic counts as when splitting a fused layer's time
PERCENTILE = 20.0  # of the runs, per layer and for the whole model
TOLERANCE = 0.10  # per-op sum vs whole-model time, before re-profiling / rescaling
DRIFT_TOLERANCE = 0.15  # stored profile vs a fresh whole-model time, before warning
ACTIONS = ("ok", "reprofiled", "rescaled")
_log = logging.getLogger(__name__)
#: Profiles already checked against a fresh measurement by this process (key -> relative difference).
_CHECKED: dict[str, float] = {}


@dataclass(frozen=True)
class LayerProfile:
    """One profiling pass of a compiled model.

    Attributes:
        times: Seconds per executed layer name (the ``PERCENTILE`` over the runs).
        layers: ``(name, original IR op names, producer node names)`` per runtime node, in execution order.
        whole: The same percentile of the runs' wall times (one synchronous inference), seconds.
    """

    times: dict[str, float]
    layers: list[tuple[str, list[str], list[str]]]
    whole: float


def _example_inputs(compiled: Any) -> dict[str, np.ndarray]:
    """Ones of each input's shape and type (token id 1 and mask 1 are valid for text models)."""
    feeds = {}
    for port in compiled.inputs:
        feeds[port.any_name] = np.ones(list(port.shape), dtype=port.element_type.to_dtype())
    return feeds


def measure_layer_times(model: Any, device: Device, warmup: int = 3, runs: int = 15) -> LayerProfile:
    """Per-layer times of ``model`` compiled for ``device`` (``PERCENTILE`` over ``runs`` profiled runs).

    Args:
        model: An ``openvino.Model``.
        device: The device; compiled with ``device.compile_config()`` and ``PERF_COUNT``.
        warmup: Untimed runs first.
        runs: Profiled runs.

    Raises:
        BackendError: If the model does not compile or run on the device.
    """
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
    times = {name: float(np.percentile(ts, PERCENTILE)) for name, ts in samples.items()}
    return LayerProfile(times, layers, float(np.percentile(walls, PERCENTILE)))


def whole_model_time(model: Any, device: Device, warmup: int = 2, runs: int = 10) -> float:
    """``PERCENTILE`` of the wall time of ``runs`` inferences of ``model`` compiled for ``device`` as the
    measured backend compiles it (no ``PERF_COUNT``), seconds.

    Raises:
        BackendError: If the model does not compile or run on the device.
    """
    from placement_gym.zoo import core

    try:
        request = (
            core().compile_model(model, device.ov_device, device.compile_config()).create_infer_request()
        )
        feeds = _example_inputs(request.get_compiled_model())
        for _ in range(warmup):
            request.infer(feeds)
        walls = []
        for _ in range(runs):
            t0 = time.perf_counter()
            request.infer(feeds)
            walls.append(time.perf_counter() - t0)
    except Exception as exc:
        raise BackendError(f"cannot time the model on {device.name} ({device.ov_device}): {exc}") from exc
    return float(np.percentile(walls, PERCENTILE))


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


def validated_op_times(
    benchmark: Any, device: Device, warmup: int = 3, runs: int = 15
) -> tuple[np.ndarray, dict[str, Any]]:
    """Profile ``benchmark`` on ``device`` and validate the per-op sum against the whole-model time.

    Returns:
        ``(op_times, record)``: seconds per op, shape ``(n_ops,)``; the record of the validation
        (``layer_sum``, ``whole``, ``ratio`` = layer sum / whole before any rescaling, ``action``,
        ``factor``, ``attempts``, and the host load before and after).

    Raises:
        BackendError: If the device cannot compile or run the model.
    """
    load_before = os.getloadavg()[0]
    attempts: list[tuple[np.ndarray, float]] = []
    for _ in range(2):
        profile = measure_layer_times(benchmark.model, device, warmup, runs)
        op_times = split_layer_times(benchmark.ops, profile.times, profile.layers)
        attempts.append((op_times, profile.whole))
        if abs(op_times.sum() / profile.whole - 1.0) <= TOLERANCE:
            break
    op_times, whole = min(attempts, key=lambda a: abs(a[0].sum() / a[1] - 1.0))
    layer_sum = float(op_times.sum())
    ratio = layer_sum / whole if whole > 0 else float("inf")
    factor = 1.0
    if abs(ratio - 1.0) <= TOLERANCE:
        action = "ok" if len(attempts) == 1 else "reprofiled"
    elif layer_sum > 0:
        action, factor = "rescaled", whole / layer_sum
        op_times = op_times * factor
    else:
        raise BackendError(
            f"profiling {benchmark.name} on {device.name} gave no layer times (whole model {whole * 1e3:.3f} ms)"
        )
    record = {
        "layer_sum": layer_sum,
        "whole": whole,
        "ratio": ratio,
        "action": action,
        "factor": factor,
        "attempts": len(attempts),
        "load_before": load_before,
        "load_after": os.getloadavg()[0],
    }
    return op_times, record


def _profile_key(benchmark: Any, device: Device, warmup: int, runs: int) -> str:
    """The cache key of a profile: model content, graph, device and its compile configuration, protocol.
    The machine and the OpenVINO version are checked against the stored record instead (see
    :func:`_current`), so that a profile from elsewhere is found and redone rather than silently kept
    beside the right one."""
    config = json.dumps(device.compile_config(), sort_keys=True, default=str)
    graph = "\n".join(benchmark.ops.names)
    graph_hash = hashlib.sha256(f"{benchmark.content_sha256}|{graph}".encode()).hexdigest()[:10]
    config_hash = hashlib.sha256(f"{device.ov_device}|{config}|{warmup}|{runs}".encode()).hexdigest()[:10]
    device_tag = device.ov_device.replace(".", "")
    return f"{benchmark.name}-v{benchmark.version}-p{PROFILE_VERSION}-{device_tag}-{config_hash}-{graph_hash}"


def _current(benchmark: Any, directory: Path, meta: dict[str, Any]) -> bool:
    """Whether a stored profile may be used here: same machine and OpenVINO, readable finite times."""
    import openvino as ov

    from placement_gym.platforms.machine import machine_fingerprint

    reason = ""
    if meta.get("machine") != machine_fingerprint():
        reason = f"it was taken on another machine ({meta.get('machine')})"
    elif meta.get("openvino") != ov.get_version():
        reason = f"it was taken with OpenVINO {meta.get('openvino')}, this is {ov.get_version()}"
    elif meta.get("action") not in ACTIONS:
        reason = "its record has no validation"
    else:
        try:
            times = np.load(directory / "op_times.npy", allow_pickle=False)
            if (
                times.shape != (benchmark.ops.num_nodes,)
                or not np.all(np.isfinite(times))
                or np.any(times < 0)
            ):
                reason = f"its times have shape {times.shape} or invalid values"
        except (OSError, ValueError) as exc:
            reason = f"its times cannot be read ({exc})"
    if reason:
        _log.info(
            "re-profiling %s: the stored profile %s is not used because %s", benchmark.name, directory, reason
        )
    return not reason


def profile_record(
    benchmark: Any,
    device: Device,
    warmup: int = 3,
    runs: int = 15,
    *,
    force: bool = False,
    allow_busy: bool | None = None,
) -> tuple[np.ndarray, dict[str, Any], bool]:
    """The validated profile of ``benchmark`` on ``device`` from the disk cache, made if missing, stale or
    corrupt (or ``force``). A profile made while the host was busy is not stored unless ``allow_busy``
    (:mod:`placement_gym.platforms.quiet`).

    Returns:
        ``(op_times, record, made)``: seconds per op, shape ``(n_ops,)``; the stored record (see
        :func:`validated_op_times`, plus model, versions, device, precision, machine, time, and
        ``host_activity``: how busy the host was, status ``unknown`` for a profile stored before it was
        recorded); whether it was made by this call.

    Raises:
        BackendError: If the device cannot compile or run the model.
        BusyHostError: If the host was busy in every attempt and busy figures are not accepted.
    """
    import openvino as ov

    from placement_gym.cache import cached_entry
    import placement_gym.platforms.quiet as quiet
    from placement_gym.platforms.machine import machine_fingerprint

    made = []
    what = f"the profile of {benchmark.name} on {device.name}"

    def write(directory: Path) -> dict[str, Any]:
        (op_times, record), activity = quiet.measure_quietly(
            lambda: validated_op_times(benchmark, device, warmup, runs), what, allow_busy=allow_busy
        )
        record[quiet.FIELD] = activity
        np.save(directory / "op_times.npy", op_times)
        made.append(True)
        return {
            "model": benchmark.name,
            "version": benchmark.version,
            "model_sha256": benchmark.content_sha256,
            "openvino": ov.get_version(),
            "machine": machine_fingerprint(),
            "device": device.ov_device,
            "precision": device.precision,
            "config": json.dumps(device.compile_config(), sort_keys=True, default=str),
            "warmup": warmup,
            "runs": runs,
            "percentile": PERCENTILE,
            "profiled_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            **record,
        }

    key = _profile_key(benchmark, device, warmup, runs)
    directory, meta = cached_entry(
        "profile", key, write, accept=lambda d, m: _current(benchmark, d, m), force=force
    )
    meta = {**meta, quiet.FIELD: quiet.host_activity(meta, directory)}
    fix = f"`placement-gym calibrate --model {benchmark.name}`"
    quiet.note_if_busy(key, meta[quiet.FIELD], what, fix, bool(made))
    return np.load(directory / "op_times.npy", allow_pickle=False), meta, bool(made)


def check_profile(benchmark: Any, device: Device, op_times: np.ndarray, runs: int = 10) -> float:
    """Time ``benchmark`` afresh on ``device`` and warn if the profile's per-op sum is off by more than
    ``DRIFT_TOLERANCE``.

    Returns:
        The relative difference ``sum(op_times) / fresh - 1``.

    Warns:
        ProfileWarning: If ``|difference| > DRIFT_TOLERANCE``.
    """
    fresh = whole_model_time(benchmark.model, device, runs=runs)
    diff = float(op_times.sum() / fresh - 1.0)
    if abs(diff) > DRIFT_TOLERANCE:
        warnings.warn(
            f"the stored profile of {benchmark.name} on {device.name} sums to {op_times.sum() * 1e3:.2f} ms, "
            f"{100 * diff:+.0f}% from a fresh whole-model time of {fresh * 1e3:.2f} ms (load "
            f"{os.getloadavg()[0]:.2f}); if the machine is quiet, redo it with `placement-gym calibrate "
            f"--model {benchmark.name}`",
            ProfileWarning,
            stacklevel=3,
        )
    return diff


def profile_op_times(
    benchmark: Any, device: Device, warmup: int = 3, runs: int = 15, *, check: bool = True
) -> np.ndarray:
    """Measured seconds per op of ``benchmark.ops`` on ``device``, validated and cached on disk.

    Args:
        benchmark: A :class:`placement_gym.benchmarks.Benchmark`.
        device: The device (must exist on this machine).
        warmup: Untimed runs.
        runs: Profiled runs (``PERCENTILE`` per layer).
        check: Compare a stored profile, once per process, with a fresh whole-model time
            (:func:`check_profile`).

    Returns:
        Shape ``(n_ops,)``, float64.

    Raises:
        BackendError: If the device cannot compile or run the model.
    """
    op_times, _, made = profile_record(benchmark, device, warmup, runs)
    key = _profile_key(benchmark, device, warmup, runs)
    if check and not made and key not in _CHECKED:
        _CHECKED[key] = check_profile(benchmark, device, op_times)
    return op_times
