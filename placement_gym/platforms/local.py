"""The ``local`` platform: the devices OpenVINO offers on this machine.

Built from ``openvino.Core().available_devices`` when first asked for:

* Only a CPU (the usual case on CI and laptops without a supported GPU): two *virtual* CPU devices
  ``cpu0`` and ``cpu1`` (kind ``virtual``, OpenVINO device ``"CPU"``), each compiled with one inference
  thread (``INFERENCE_NUM_THREADS=1``), ``ENABLE_CPU_PINNING=False`` and an explicit ``f32`` precision.
  Without disabling pinning, two 1-thread models started concurrently are pinned to the same core and run
  one after the other; with it, the OS scheduler puts them on different cores and they really overlap
  (``ov::hint::enable_cpu_pinning`` in OpenVINO's CPU-device guide, "Performance Hints and Thread
  Scheduling"; ``tests/platforms/test_platforms.py::test_virtual_cpus_run_concurrently`` checks it here).
  f32 is explicit because the CPU plugin would otherwise pick bf16 on CPUs with avx512_bf16/AMX, silently
  changing what is measured. Each gets half of 80% of the physical RAM.
* A CPU plus GPUs/NPUs: one ``cpu`` device (all cores, f32) plus one device per GPU (``gpu0``...; f16,
  the GPU plugin's native precision) and an ``npu`` (f16).

The platform is built for the cores this process may run on (its affinity set: all of them unless the
process was started under ``taskset`` or pinned as a measuring worker, :mod:`placement_gym.measured.workers`)
and records them (``Platform.cores``). Virtual CPUs of a process with one core share that core (a different
platform: its measured contention is about 1); with two or more they run on different cores.

Links between virtual CPU devices are segment boundaries inside one process. Their figures are measured
once per machine, OpenVINO version and core set and cached (``<cache>/platform/local-...`` and
``<cache>/platform/boundaries-...``; a key names its cores, so figures calibrated under ``taskset`` never
describe another core set): what a boundary costs when the partitioned executor runs chains of
layers cut into 1-8 segments (:func:`executor_boundary_link`; the fixed cost beyond a segment start, and
the rates for plain-layout tensors and for the blocked layouts the CPU plugin keeps convolution
activations in, reordered to plain and back at a boundary, see :class:`~placement_gym.platforms.Link`).
With accelerators, the links keep the older figures: a small copy's time, and a chain split into two
compiled models run back to back. The same measurement gives each virtual CPU's ``invoke_overhead``,
what every extra subgraph costs: the time of one ``start_async`` -> completion callback -> queue handoff of
a one-op model, which is how the partitioned executor of the measured backend starts each segment. Last,
two 1-thread models of convolutions run at once against one alone give the speed-up ``s`` the two
virtual CPUs really reach together (a VM's vCPUs may be hyper-threads or contended: ``s`` was 1.3-1.8 on
the reference machine), recorded as each device's ``contention = 2 - s``.
Both are stored with how busy the host was while they were measured; figures measured while other
processes took more than a quarter of the cores are measured again and, if the host stays busy, refused
unless accepted (:mod:`placement_gym.platforms.quiet`).
Peak FLOP/s come from the CPU's vector width and clock (only used by the roofline fallback; the
simulator profiles local devices for real, see :mod:`placement_gym.measured.profiling`).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import queue
import time
from functools import lru_cache
from typing import Any

import numpy as np

from placement_gym.measured.boundary_costs import WHAT as BOUNDARIES_WHAT
from placement_gym.measured.boundary_costs import boundary_costs
from placement_gym.platforms import quiet
from placement_gym.platforms.devices import Device, Link, Platform
from placement_gym.platforms.machine import core_span, cores_key, cpu_info, process_cores

#: Compile properties of a virtual CPU device (one core each, able to run concurrently).
VIRTUAL_CPU_CONFIG: dict[str, Any] = {"INFERENCE_NUM_THREADS": 1, "ENABLE_CPU_PINNING": False}
#: Virtual CPU devices of the platform of a CPU-only machine.
VIRTUAL_CPUS = 2
#: Version of the link/overhead measurement below (bump when it changes).
MEASURE_VERSION = 4
#: What :func:`measure_local_figures` measures, in messages.
FIGURES_WHAT = "the local platform's figures (copies, segment starts, overlap of its virtual CPUs)"
_RAM_SHARE = 0.8  # of physical RAM usable for the model across all virtual devices


def _core_peak_flops(ghz: float, flags: set[str]) -> dict[str, float]:
    """Peak FLOP/s of one core: 2 FMA units x f32 lanes x 2 FLOP x clock (bf16 doubles with avx512_bf16)."""
    lanes = 16 if "avx512f" in flags else 8 if "avx2" in flags else 4
    f32 = 2 * lanes * 2 * ghz * 1e9
    peaks = {"f32": f32}
    if "avx512_bf16" in flags or "amx_bf16" in flags:
        peaks["bf16"] = 2 * f32
    return peaks


def _physical_ram() -> int:
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 8 * 2**30


def _median_time(fn: Any, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def _boundary_bandwidth(
    core: Any, config: dict[str, Any], layers: list[Any], make: Any, shape: list[int]
) -> float:
    """Bytes/s of a segment boundary: ``tensor bytes / (t(half 1) + t(half 2) - t(whole))`` for a chain of
    ``layers`` split in two, each part compiled as the partitioned executor compiles a segment."""
    import openvino as ov

    def compiled(part: list[Any]) -> Any:
        request = core.compile_model(make(part), "CPU", config).create_infer_request()
        return request

    whole, first, second = (
        compiled(layers),
        compiled(layers[: len(layers) // 2]),
        compiled(layers[len(layers) // 2 :]),
    )
    x = ov.Tensor(np.ones(shape, dtype=np.float32))
    whole.set_input_tensor(x)
    first.set_input_tensor(x)

    def split() -> None:
        first.infer()
        second.set_input_tensor(first.get_output_tensor())
        second.infer()

    whole.infer()
    split()
    extra = _median_time(split, 15) - _median_time(whole.infer, 15)
    nbytes = 4 * float(np.prod(shape))
    return nbytes / max(extra, nbytes / 100e9)  # floor the cost at a 100 GB/s copy


def measure_local_figures() -> dict[str, float]:
    """Measure copy bandwidth, copy latency, segment-boundary bandwidths and the per-segment dispatch
    overhead of 1-thread f32 CPU models.

    A segment boundary costs more than a copy: the CPU plugin keeps convolution activations in blocked
    layouts (nChw8c/16c), which a boundary reorders to a plain layout and back. Both rates are measured by
    splitting a chain of layers into two compiled models: 1x1 convolutions on a 256x56x56 activation
    (blocked) and matrix products on a 128x768 activation (plain).

    Returns:
        ``{"copy_bandwidth", "copy_latency", "boundary_bandwidth", "blocked_boundary_bandwidth"`` (B/s or
        s), ``"invoke_overhead"`` (s), ``"parallel_speedup"`` (1..2)``}``.
    """
    import openvino as ov
    import openvino.opset13 as ops

    big = np.ones(16 * 2**20 // 8)  # 16 MiB
    dst = np.empty_like(big)
    np.copyto(dst, big)  # fault the pages in
    bandwidth = big.nbytes / _median_time(lambda: np.copyto(dst, big), 9)
    small, small_dst = np.ones(128), np.empty(128)
    latency = _median_time(lambda: np.copyto(small_dst, small), 201)

    # The partitioned executor hands work between segments with start_async, a completion callback and a
    # queue; time that handoff, alternating between two compiled 1-op models as between two segments.
    param = ops.parameter([1, 16], ov.Type.f32, name="x")
    model = ov.Model([ops.relu(param)], [param], "one_op")
    config = {**VIRTUAL_CPU_CONFIG, "INFERENCE_PRECISION_HINT": "f32"}
    core = ov.Core()
    done: queue.Queue = queue.Queue()
    requests = []
    for i in range(2):
        request = core.compile_model(model, "CPU", config).create_infer_request()
        request.set_input_tensor(ov.Tensor(np.ones((1, 16), dtype=np.float32)))
        request.set_callback(done.put, i)
        requests.append(request)

    def handoffs(n: int = 50) -> None:
        for k in range(n):
            requests[k % 2].start_async()
            done.get()
            requests[k % 2].wait()

    handoffs()
    invoke = _median_time(handoffs, 15) / 50

    # Two 1-thread models of real work (convolutions) at once vs one: how much the two cores overlap.
    x = ops.parameter([1, 64, 56, 56], ov.Type.f32, name="x")
    y = x
    rng = np.random.default_rng(0)
    for _ in range(4):
        w = ops.constant((rng.standard_normal((64, 64, 3, 3)) * 0.05).astype(np.float32))
        y = ops.relu(ops.convolution(y, w, [1, 1], [1, 1], [1, 1], [1, 1]))
    convs = ov.Model([y], [x], "convs")
    pair = []
    for _ in range(2):
        request = core.compile_model(convs, "CPU", config).create_infer_request()
        request.set_input_tensor(ov.Tensor(np.ones((1, 64, 56, 56), dtype=np.float32)))
        pair.append(request)

    def together() -> None:
        for request in pair:
            request.start_async()
        for request in pair:
            request.wait()

    pair[0].infer()
    together()
    alone = _median_time(pair[0].infer, 7)
    both = _median_time(together, 7)
    speedup = float(np.clip(2 * alone / both, 1.0, 2.0))

    def conv_chain(weights: list[np.ndarray]) -> Any:
        x = ops.parameter([1, 256, 56, 56], ov.Type.f32, name="x")
        y = x
        for w in weights:
            y = ops.relu(ops.convolution(y, ops.constant(w), [1, 1], [0, 0], [0, 0], [1, 1]))
        return ov.Model([y], [x], "conv_chain")

    def matmul_chain(weights: list[np.ndarray]) -> Any:
        x = ops.parameter([1, 128, 768], ov.Type.f32, name="x")
        y = x
        for w in weights:
            y = ops.relu(ops.matmul(y, ops.constant(w), False, False))
        return ov.Model([y], [x], "matmul_chain")

    blocked = _boundary_bandwidth(
        core,
        config,
        [(rng.standard_normal((256, 256, 1, 1)) * 0.05).astype(np.float32) for _ in range(4)],
        conv_chain,
        [1, 256, 56, 56],
    )
    plain = _boundary_bandwidth(
        core,
        config,
        [(rng.standard_normal((768, 768)) * 0.02).astype(np.float32) for _ in range(4)],
        matmul_chain,
        [1, 128, 768],
    )
    return {
        "copy_bandwidth": bandwidth,
        "copy_latency": latency,
        "boundary_bandwidth": min(plain, bandwidth),
        "blocked_boundary_bandwidth": min(blocked, plain, bandwidth),
        "invoke_overhead": invoke,
        "parallel_speedup": speedup,
    }


def figures_key(cores: tuple[int, ...]) -> str:
    """The cache key (kind ``platform``) of the figures of this machine and OpenVINO version on ``cores``."""
    import openvino as ov

    name, _, _ = cpu_info()
    machine = hashlib.sha256(f"{name}|{os.cpu_count()}".encode()).hexdigest()[:12]
    return f"local-v{MEASURE_VERSION}-{machine}-{cores_key(cores)}-ov{ov.__version__.split('-')[0]}"


def local_figures_entry(
    force: bool = False, allow_busy: bool | None = None
) -> tuple[dict[str, float], dict[str, Any]]:
    """:func:`measure_local_figures`, measured once per machine, OpenVINO version and core set (this
    process's affinity, :func:`process_cores`) and cached on disk, with how busy the host was while they
    were measured (:mod:`placement_gym.platforms.quiet`: figures measured on a busy host are not stored
    unless ``allow_busy``). ``force`` re-measures; a platform built before in this process keeps the
    figures it was built with, see :func:`recalibrate`.

    Returns:
        ``(figures, record)``: the figures and their host-activity record
        (:func:`~placement_gym.platforms.quiet.host_activity`).

    Raises:
        BusyHostError: If the host was busy in every attempt and busy figures are not accepted.
    """
    import openvino as ov

    name, _, _ = cpu_info()
    cores = process_cores()
    meta = {"cpu": name, "cpu_count": os.cpu_count(), "cores": list(cores), "openvino": ov.get_version()}
    return quiet.cached_calibration(
        figures_key(cores), "figures.json", measure_local_figures, FIGURES_WHAT,
        "`placement-gym calibrate --boundaries-only`", meta, allow_busy, cores, force,
    )  # fmt: skip


def local_figures(force: bool = False, allow_busy: bool | None = None) -> dict[str, float]:
    """The figures of :func:`local_figures_entry`, without their record."""
    return local_figures_entry(force, allow_busy)[0]


def recalibrate(allow_busy: bool | None = None) -> Platform:
    """Re-measure the ``local`` platform's figures and segment-boundary costs on this process's cores
    (stored for the next processes too) and return the platform built from them.

    Raises:
        BusyHostError: If the host was busy while either was measured (in every attempt) and busy figures
            are not accepted (``allow_busy``; default
            :func:`~placement_gym.platforms.quiet.allow_busy_default`).
    """
    with contextlib.nullcontext() if allow_busy is None else quiet.accept_busy(allow_busy):
        local_figures(force=True)
        _local_platform.cache_clear()
        platform = local_platform()
        boundary_costs(platform, force=True)
        _local_platform.cache_clear()
        return local_platform()


def calibration_records(cores: tuple[int, ...] | None = None) -> list[tuple[str, dict[str, Any]]]:
    """``(what, host-activity record)`` of each stored calibration the ``local`` platform of ``cores``
    (default this process's) is built from: its own figures and its segment-boundary costs. Only reads
    the cache, never measures: a calibration not stored there has status ``unknown``."""
    from placement_gym.cache import cache_root, verify_entry
    from placement_gym.errors import CorruptModelError
    from placement_gym.measured.boundary_costs import boundaries_key

    cores = process_cores() if cores is None else tuple(cores)
    records = []
    for what, key in ((FIGURES_WHAT, figures_key(cores)), (BOUNDARIES_WHAT, boundaries_key(cores))):
        directory = cache_root() / "platform" / key
        try:
            record = quiet.host_activity(verify_entry(directory, kind="platform", key=key), directory)
        except CorruptModelError:  # missing or damaged: the next use measures it again
            record = {"status": "unknown", "reason": "not in the cache: measured again on next use"}
        records.append((what, record))
    return records


def _virtual_cpus(figures: dict[str, float], ghz: float, flags: set[str]) -> list[Device]:
    memory = int(_physical_ram() * _RAM_SHARE / 2)
    return [
        Device(
            name=f"cpu{i}",
            kind="virtual",
            ov_device="CPU",
            precision="f32",
            memory_bytes=memory,
            peak_flops=_core_peak_flops(ghz, flags),
            mem_bandwidth=figures["copy_bandwidth"],
            # PERF_COUNT layer times include each layer's own dispatch: nothing to add per layer.
            launch_overhead=0.0,
            ov_config=dict(VIRTUAL_CPU_CONFIG),
            invoke_overhead=figures["invoke_overhead"],
            contention=2.0 - figures["parallel_speedup"],
        )
        for i in range(VIRTUAL_CPUS)
    ]


def executor_boundary_link(figures: dict[str, float], platform: Platform) -> Link:
    """The link between the virtual CPUs of ``platform`` as the partitioned executor crosses it: the
    segment-boundary micro-benchmark (:func:`~placement_gym.measured.boundary_costs.boundary_costs`, chains
    cut into 1-8 segments and run by the executor itself, measured once per machine and OpenVINO version).

    Its fixed cost per boundary is one segment start (the devices' ``invoke_overhead``) plus the link's
    latency, so the latency is the rest (at least a small copy's); its bandwidths are the plain- and
    blocked-layout rates of the chains (a copy's bandwidth where a boundary cost no more than its fixed
    part). These are the figures the segment schedule
    (:mod:`placement_gym.simulation.segment_schedule`) was validated with.
    """
    record = boundary_costs(platform=platform)

    def rate(key: str) -> float:
        value = float(record[key])
        return value if np.isfinite(value) and value > 0 else figures["copy_bandwidth"]

    return Link(
        latency=max(float(record["fixed"]) - figures["invoke_overhead"], figures["copy_latency"]),
        bandwidth=rate("bandwidth"),
        blocked_bandwidth=rate("blocked_bandwidth"),
    )


def local_platform() -> Platform:
    """The platform of this machine's OpenVINO devices on the cores this process may run on (see the
    module docstring); built once per process and core set.

    Returns:
        A :class:`Platform` named ``"local"`` whose host is the (first) CPU device.
    """
    return _local_platform(process_cores())


def local_accelerators() -> list[str]:
    """The OpenVINO GPU and NPU devices of this machine (none: the ``local`` platform is two virtual CPUs)."""
    import openvino as ov

    return [d for d in ov.Core().available_devices if d.startswith(("GPU", "NPU"))]


@lru_cache(maxsize=4)
def _local_platform(cores: tuple[int, ...]) -> Platform:
    import openvino as ov

    figures = local_figures()
    name, ghz, flags = cpu_info()
    accelerators = local_accelerators()
    cpu_link = Link(
        latency=figures["copy_latency"],
        bandwidth=figures["boundary_bandwidth"],
        blocked_bandwidth=figures["blocked_boundary_bandwidth"],
    )
    if not accelerators:
        on = f"core {cores[0]}, shared by both" if len(cores) == 1 else f"cores {core_span(cores)}"
        devices = tuple(_virtual_cpus(figures, ghz, flags))
        description = f"two 1-thread virtual CPU devices (f32) on {name}, {on}"
        sources = ("measured on this machine by placement_gym.platforms.local",)
        first = Platform(
            "local", description, devices, {(0, 1): cpu_link, (1, 0): cpu_link}, 0, sources, cores
        )
        link = executor_boundary_link(figures, first)  # measured on these cores
        return Platform("local", description, devices, {(0, 1): link, (1, 0): link}, 0, sources, cores)
    cpu = Device(
        name="cpu",
        kind="cpu",
        ov_device="CPU",
        precision="f32",
        memory_bytes=int(_physical_ram() * _RAM_SHARE / 2),
        peak_flops={k: v * len(cores) for k, v in _core_peak_flops(ghz, flags).items()},
        mem_bandwidth=figures["copy_bandwidth"],
        launch_overhead=0.0,
        invoke_overhead=figures["invoke_overhead"],
    )
    devices = [cpu]
    core = ov.Core()
    for dev in accelerators:
        kind = "gpu" if dev.startswith("GPU") else "npu"
        try:
            memory = int(core.get_property(dev, "GPU_DEVICE_TOTAL_MEM_SIZE")) if kind == "gpu" else 0
        except Exception:  # property missing on some drivers
            memory = 0
        # Without a vendor sheet the accelerator's roofline figures are unknown; profiling measures it.
        devices.append(
            Device(
                name=dev.lower().replace(".", ""),
                kind=kind,
                ov_device=dev,
                precision="f16",
                memory_bytes=memory or int(_physical_ram() * _RAM_SHARE / 2),
                peak_flops={"f16": cpu.peak_flops["f32"], "f32": cpu.peak_flops["f32"]},
                mem_bandwidth=figures["copy_bandwidth"],
                launch_overhead=0.0,
                invoke_overhead=figures["invoke_overhead"],
            )
        )
    # Accelerator transfers cross PCIe or a driver copy: the in-process figures are a lower bound.
    links = {(i, j): cpu_link for i in range(len(devices)) for j in range(len(devices)) if i != j}
    return Platform(
        name="local",
        description=f"{name} (cores {core_span(cores)}) + {', '.join(accelerators)} (OpenVINO devices of "
        "this machine)",
        devices=tuple(devices),
        links=links,
        host=0,
        sources=("measured on this machine by placement_gym.platforms.local",),
        cores=cores,
    )
