"""Platform data files, the schema's validation, and the local platform."""

from __future__ import annotations

import numpy as np
import pytest

from placement_gym.benchmarks import load_benchmark
from placement_gym.errors import ConfigError, PlacementGymError, UnknownNameError
from placement_gym.platforms import (
    Device,
    Link,
    load_platform,
    platform_from_dict,
    platform_names,
    resolve_memory,
)
from placement_gym.simulation.cost_model import CostModel
from tests.hardware import two_threads_run_in_parallel

DATA_PLATFORMS = ["cpu-dgpu", "cpu-igpu", "multi-accel", "model-parallel"]


def test_names_listed() -> None:
    assert set(DATA_PLATFORMS) | {"local"} <= set(platform_names())


@pytest.mark.parametrize("name", DATA_PLATFORMS)
def test_data_platform_is_complete(name: str) -> None:
    plat = load_platform(name)
    assert plat.name == name
    assert plat.devices[plat.host].kind == "cpu"
    assert len(plat.sources) >= 2
    for dev in plat.devices:
        assert dev.precision in dev.peak_flops
        assert "INFERENCE_PRECISION_HINT" in dev.compile_config()
        assert 0 < dev.efficiency("MatMul") <= 1 and 0 < dev.efficiency("Relu") <= 1
    for link in plat.links.values():
        assert link.bandwidth > 0 and link.latency >= 0
    assert len(plat.links) == plat.num_devices * (plat.num_devices - 1)


def test_hardware_figures() -> None:
    """The derived figures in cpu-dgpu.yaml (arithmetic in its comments)."""
    plat = load_platform("cpu-dgpu")
    cpu, gpu = plat.devices
    assert cpu.peak_flops["f32"] == pytest.approx(8 * 32 * 4.9e9 + 8 * 16 * 3.7e9)
    assert cpu.mem_bandwidth == pytest.approx(2 * 8 * 4.8e9)
    assert gpu.peak_flops["f32"] == pytest.approx(32 * 16 * 8 * 2 * 2.05e9, rel=1e-3)
    assert (cpu.precision, gpu.precision) == ("f32", "f16")
    assert 10e-6 <= gpu.launch_overhead <= 20e-6 and 1e-6 <= cpu.launch_overhead <= 3e-6


@pytest.mark.parametrize("model", ["tiny_cnn", "tiny_bert"])
def test_dgpu_favours_gpu_for_heavy_and_cpu_for_small_ops(model: str) -> None:
    bench = load_benchmark(model)
    coarse = bench.coarsen("ops")
    cost = CostModel.from_benchmark(bench, coarse, load_platform("cpu-dgpu"), profile="roofline")
    flops = coarse.graph.nodes["flops"]
    heavy, light = flops >= np.quantile(flops, 0.9), flops == 0
    assert np.all(cost.compute[heavy & (flops > 1e6), 1] <= cost.compute[heavy & (flops > 1e6), 0])
    assert np.all(cost.compute[light, 0] < cost.compute[light, 1])


def test_bad_platform_data_rejected() -> None:
    spec = {
        "name": "bad",
        "devices": [
            {"name": "a", "kind": "cpu", "ov_device": "CPU", "precision": "f32", "memory_bytes": 1e9,
             "peak_flops": {"f32": 1e12}, "mem_bandwidth": 1e10, "launch_overhead": 1e-6},
            {"name": "b", "kind": "cpu", "ov_device": "CPU", "precision": "f32", "memory_bytes": 1e9,
             "peak_flops": {"f32": 1e12}, "mem_bandwidth": "fast", "launch_overhead": 1e-6},
        ],
    }  # fmt: skip
    with pytest.raises(PlacementGymError, match=r"devices\[1\] 'b'.mem_bandwidth: .*valid number"):
        platform_from_dict(spec)
    spec["devices"][1]["mem_bandwidth"] = 1e10
    with pytest.raises(PlacementGymError, match="no link"):
        platform_from_dict(spec)
    spec["links"] = [{"src": "a", "dst": "c", "latency": 1e-6, "bandwidth": 1e9}]
    with pytest.raises(ConfigError, match="'c' names no device"):
        platform_from_dict(spec)
    spec["links"] = [{"src": "a", "dst": "b", "latency": 1e-6, "bandwidth": 1e9}]
    assert platform_from_dict(spec).num_devices == 2
    with pytest.raises(PlacementGymError, match="op_efficiency"):
        Device("x", "cpu", "CPU", "f32", 1, {"f32": 1e9}, 1e9, 0.0, op_efficiency={"MatMul": 1.5})
    with pytest.raises(PlacementGymError):
        Link(latency=-1.0, bandwidth=1.0)
    with pytest.raises(UnknownNameError, match="cpu-dgpu"):
        load_platform("cpu-dgp")


def test_local_platform() -> None:
    import openvino as ov

    plat = load_platform("local")
    assert plat.name == "local" and plat.host == 0
    if ov.Core().available_devices == ["CPU"]:
        assert [d.name for d in plat.devices] == ["cpu0", "cpu1"]
        for dev in plat.devices:
            config = dev.compile_config()
            assert dev.kind == "virtual" and dev.ov_device == "CPU"
            assert config["INFERENCE_NUM_THREADS"] == 1
            assert config["ENABLE_CPU_PINNING"] is False
            assert config["INFERENCE_PRECISION_HINT"] == "f32"
            assert 0 < dev.invoke_overhead < 0.01
    link = plat.links[(0, 1)]
    assert 1e8 < link.bandwidth < 1e12 and 0 <= link.latency < 1e-3
    assert load_platform("local") is plat  # measured once per process (and cached on disk)


def test_executor_boundary_link_takes_the_micro_benchmark(monkeypatch: pytest.MonkeyPatch) -> None:
    """The virtual CPUs' link: the boundary's fixed cost beyond one segment start, at least a copy's
    latency; the chains' rates, a copy's bandwidth where a chain showed no per-byte cost."""
    from placement_gym.platforms import local

    figures = {"invoke_overhead": 50e-6, "copy_latency": 1e-6, "copy_bandwidth": 10e9}
    record = {"fixed": 80e-6, "bandwidth": float("inf"), "blocked_bandwidth": 2e9}
    monkeypatch.setattr(local, "boundary_costs", lambda platform, force=False: record)
    executor_boundary_link = local.executor_boundary_link
    link = executor_boundary_link(figures, None)
    assert link.latency == pytest.approx(30e-6)
    assert link.bandwidth == 10e9 and link.blocked_bandwidth == 2e9
    record["fixed"] = 20e-6  # less than a segment start: the latency floors at a copy's
    assert executor_boundary_link(figures, None).latency == pytest.approx(1e-6)


@pytest.mark.slow
def test_virtual_cpus_run_concurrently() -> None:
    """Two 1-thread models compiled as cpu0/cpu1 overlap: both together take well under twice one."""
    import time

    import openvino as ov

    plat = load_platform("local")
    if len(plat.devices) < 2 or plat.devices[0].ov_device != plat.devices[1].ov_device:
        pytest.skip("no virtual devices on this machine")
    import openvino.opset13 as ops

    # ~2-4 ms of MatMuls per inference: long enough that dispatch overhead does not matter.
    x = ops.parameter([64, 512], ov.Type.f32, name="x")
    y = x
    rng = np.random.default_rng(0)
    for _ in range(10):
        y = ops.matmul(
            y, ops.constant(rng.standard_normal((512, 512)).astype(np.float32) * 0.04), False, False
        )
    model = ov.Model([y], [x], "matmuls")
    core = ov.Core()
    requests = []
    for dev in plat.devices[:2]:
        request = core.compile_model(model, dev.ov_device, dev.compile_config()).create_infer_request()
        request.set_input_tensor(ov.Tensor(np.ones((64, 512), dtype=np.float32)))
        requests.append(request)

    def one() -> float:
        t0 = time.perf_counter()
        for _ in range(20):
            requests[0].infer()
        return time.perf_counter() - t0

    def both() -> float:
        t0 = time.perf_counter()
        for _ in range(20):
            requests[0].start_async()
            requests[1].start_async()
            requests[0].wait()
            requests[1].wait()
        return time.perf_counter() - t0

    one(), both()
    single, pair = min(one() for _ in range(3)), min(both() for _ in range(3))
    # The host's parallelism can change between any probe and this measurement: probe after a miss.
    if pair >= 1.6 * single and not two_threads_run_in_parallel():
        pytest.skip(
            f"this machine does not run two threads in parallel now (pair/single {pair / single:.2f})"
        )
    assert pair < 1.6 * single


# ---------------------------------------------------------------------- cpu-dgpu against HSDAG's figures
#: Duan et al. (HSDAG, NeurIPS 2024) measured their placements on an i9-12900K + Flex 170 "up to 58.2%
#: faster" than CPU-only, and faster than GPU-only. Read as ``t_cpu / t - 1`` (the stricter reading).
HSDAG_BEST_SPEEDUP = 1.582


def _cpu_and_gpu_only(model: str, platform: str) -> tuple[float, float]:
    from placement_gym.envs.device_placement import DevicePlacementEnv

    env = DevicePlacementEnv(model, platform, "simulated", reward="neg_latency_ms")
    cpu, gpu = (env.problem.evaluate(np.full(env.num_groups, d, dtype=np.int64)).latency for d in (0, 1))
    return cpu, gpu


@pytest.mark.parametrize("model", ["inception_v3", "resnet50", "bert"])
def test_cpu_dgpu_gpu_only_does_not_beat_hsdag(model: str) -> None:
    """GPU-only is faster than CPU-only but not by more than HSDAG's best placement was; the first
    calibration (``cpu-dgpu-v0``) broke that bound on every model."""
    cpu, gpu = _cpu_and_gpu_only(model, "cpu-dgpu")
    assert 1.0 < cpu / gpu <= HSDAG_BEST_SPEEDUP
    cpu, gpu = _cpu_and_gpu_only(model, "cpu-dgpu-v0")
    assert cpu / gpu > 4.0


def test_cpu_dgpu_allows_hsdag_speedup() -> None:
    """Some benchmark model has a placement at least HSDAG's 58.2% faster than CPU-only (the stored
    reference optima, re-evaluated by tests/tasks/test_tasks.py)."""
    from placement_gym.tasks import reference_optimum

    speedups = []
    for model in ("inception_v3", "resnet50", "bert"):
        cpu, _ = _cpu_and_gpu_only(model, "cpu-dgpu")
        speedups.append(cpu / reference_optimum(model, 1, "cpu-dgpu").latency)
    assert max(speedups) >= HSDAG_BEST_SPEEDUP


def test_relative_memory_is_resolved_per_model() -> None:
    """model-parallel sizes every device by the model's weights: no model fits one device, whatever its size."""
    plat = load_platform("model-parallel")
    assert plat.unresolved
    with pytest.raises(ConfigError, match="fractions of the model's weights"):
        plat.capacities()
    bench = load_benchmark("tiny_cnn")
    with pytest.raises(ConfigError, match="fractions of the model's weights"):
        CostModel.from_benchmark(bench, bench.coarsen("fused"), plat, profile="roofline")
    resolved = resolve_memory(plat, 1e9)
    assert resolved.capacities() == [int(d.memory_fraction * 1e9) for d in plat.devices]
    assert all(d.memory_fraction < 1 for d in plat.devices)
    assert resolve_memory(load_platform("cpu-dgpu"), 1e9) == load_platform("cpu-dgpu")
    with pytest.raises(ConfigError, match="must be > 0 bytes"):
        resolve_memory(plat, 0.0)


def test_device_memory_is_absolute_or_relative() -> None:
    device = {"name": "a", "kind": "cpu", "ov_device": "CPU", "precision": "f32", "peak_flops": {"f32": 1e12},
              "mem_bandwidth": 1e10, "launch_overhead": 1e-6}  # fmt: skip
    for memory in ({}, {"memory_bytes": 1e9, "memory_fraction": 0.5}):
        with pytest.raises(ConfigError, match="exactly one of memory_bytes"):
            platform_from_dict({"name": "m", "devices": [device | memory]})
    with pytest.raises(ConfigError, match="memory_fraction"):
        platform_from_dict({"name": "m", "devices": [device | {"memory_fraction": -0.5}]})
    assert platform_from_dict({"name": "m", "devices": [device | {"memory_fraction": 0.5}]}).unresolved
