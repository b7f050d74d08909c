"""The simulated backend: hand-computed schedules on tiny literal graphs, memory, caching, errors, speed."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest

from placement_gym.backends import make_backend
from placement_gym.benchmarks import Benchmark
from placement_gym.coarsening import coarsen_ops
from placement_gym.errors import BackendError, PlacementError, UnknownNameError
from placement_gym.fusion import op_layer_index
from placement_gym.graph import NODE_ARRAYS, CompGraph
from placement_gym.platforms import load_platform, platform_from_dict
from placement_gym.simulation.backend import SimulatedBackend
from placement_gym.simulation.cost_model import CostModel, roofline_op_times

MS = 1e-3


def literal_graph(n: int, edges: list[tuple[int, int, int]], **features: list[float]) -> CompGraph:
    """A graph of ``n`` nodes, edges ``(src, dst, bytes)``, other features zero unless given."""
    nodes = {k: np.zeros(n) for k in NODE_ARRAYS}
    for key, values in features.items():
        nodes[key] = np.asarray(values, dtype=np.float64)
    return CompGraph.from_unordered(
        names=[f"n{i}" for i in range(n)],
        op_types=["Relu"] * n,
        out_shapes=[(1,)] * n,
        nodes=nodes,
        edges=edges,
        meta={"name": "literal"},
    )


def two_devices(
    memory: float = 1e12, latency: float = 0.5 * MS, bandwidth: float = 1e6, contention: float = 0.0
):
    """Two devices; the default link moves 1000 bytes in 0.5 ms + 1 ms."""
    device = {
        "kind": "cpu",
        "ov_device": "CPU",
        "precision": "f32",
        "memory_bytes": memory,
        "peak_flops": {"f32": 1e12},
        "mem_bandwidth": 1e10,
        "launch_overhead": 0.0,
        "contention": contention,
    }
    return platform_from_dict(
        {
            "name": "two",
            "devices": [{"name": "d0", **device}, {"name": "d1", **device}],
            "links": [{"src": "d0", "dst": "d1", "latency": latency, "bandwidth": bandwidth}],
        }
    )


def simulator(graph: CompGraph, compute_ms: list[float], platform=None, invoke: float = 0.0, **kwargs):
    """A backend whose op ``i`` takes ``compute_ms[i]`` on every device."""
    platform = platform or two_devices()
    coarse = coarsen_ops(graph)
    bench = Benchmark("literal", 0, graph, [], Path("unused.xml"))
    times = np.repeat(np.asarray(compute_ms, dtype=np.float64)[:, None] * MS, platform.num_devices, axis=1)
    cost = CostModel.from_op_times(coarse, platform, times)
    if invoke:
        cost = CostModel(**{**cost.__dict__, "invoke_overhead": np.full(platform.num_devices, invoke)})
    return SimulatedBackend(bench, coarse, platform, cost_model=cost, **kwargs)


# ---------------------------------------------------------------- hand-computed schedules
def test_chain_on_one_device_sums_compute() -> None:
    sim = simulator(literal_graph(3, [(0, 1, 1000), (1, 2, 1000)]), [1.0, 2.0, 3.0])
    assert sim.evaluate([0, 0, 0]).latency == pytest.approx(6 * MS)
    assert sim.evaluate([1, 1, 1]).latency == pytest.approx(6 * MS)


def test_parallel_branches_overlap_on_two_devices() -> None:
    # a -> {b, c} -> d; c on d1: a->c arrives 1 + 0.5 + 1 = 2.5, c ends 6.5, c->d arrives 8, d ends 9.
    graph = literal_graph(4, [(0, 1, 1000), (0, 2, 1000), (1, 3, 1000), (2, 3, 1000)])
    sim = simulator(graph, [1.0, 4.0, 4.0, 1.0])
    assert sim.evaluate([0, 0, 0, 0]).latency == pytest.approx(10 * MS)
    assert sim.evaluate([0, 0, 1, 0]).latency == pytest.approx(9 * MS)
    # Both branches away from a and d: b and c run in parallel but each edge crosses the link.
    # a->b arrives 2.5, a->c queues behind it on the link: 4.0; b ends 6.5, c waits for d1: 6.5 -> 10.5;
    # b->d 6.5 -> 8.0, c->d 10.5 -> 12.0; d ends 13.
    assert sim.evaluate([0, 1, 1, 0]).latency == pytest.approx(13 * MS)


def test_cross_device_transfer_inputs_and_results() -> None:
    graph = literal_graph(2, [(0, 1, 1000)], input_bytes=[2000, 0], result_bytes=[0, 3000])
    sim = simulator(graph, [1.0, 1.0])
    assert sim.evaluate([0, 0]).latency == pytest.approx(2 * MS)  # the host holds inputs and results
    # a on d0 (1), edge 0.5 + 1 (2.5), b (3.5), result back 0.5 + 3 -> 7.
    assert sim.evaluate([0, 1]).latency == pytest.approx(7 * MS)
    # input to d1: 0.5 + 2 (2.5), a (3.5), edge back 1.5 (5.0), b (6).
    assert sim.evaluate([1, 0]).latency == pytest.approx(6 * MS)


def test_link_carries_one_transfer_at_a_time() -> None:
    graph = literal_graph(3, [(0, 1, 1000), (0, 2, 1000)])
    sim = simulator(graph, [1.0, 1.0, 1.0])
    # Both edges leave d0 at 1: arrive 2.5 and 4.0; b 2.5 -> 3.5, c waits for d1 and the data: 4 -> 5.
    assert sim.evaluate([0, 1, 1]).latency == pytest.approx(5 * MS)


def test_invoke_overhead_once_per_subgraph() -> None:
    graph = literal_graph(3, [(0, 1, 0), (1, 2, 0)])
    sim = simulator(graph, [1.0, 1.0, 1.0], platform=two_devices(latency=0.0), invoke=0.25 * MS)
    assert sim.evaluate([0, 0, 0]).latency == pytest.approx(3.25 * MS)
    assert sim.evaluate([0, 1, 0]).latency == pytest.approx(3.75 * MS)  # three segments


def test_contention_between_devices_sharing_hardware() -> None:
    graph = literal_graph(4, [(0, 1, 0), (0, 2, 0), (1, 3, 0), (2, 3, 0)])
    plat = two_devices(latency=0.0, bandwidth=1e18, contention=0.5)
    sim = simulator(graph, [1.0, 4.0, 4.0, 1.0], platform=plat)
    # b on d0 runs 1 -> 5; c on d1 starts at 1 while d0 is busy for 4 more: 4 + 0.5 x 4 -> ends 7; d 7 -> 8.
    assert sim.evaluate([0, 0, 1, 0]).latency == pytest.approx(8 * MS)


# ---------------------------------------------------------------- memory
def test_weights_over_capacity_are_infeasible() -> None:
    graph = literal_graph(2, [(0, 1, 10)], param_bytes=[600, 600])
    sim = simulator(graph, [1.0, 1.0], platform=two_devices(memory=1000))
    result = sim.evaluate([0, 0])
    assert not result.feasible and result.latency == float("inf")
    assert "out of memory on device 'd0'" in result.reason
    assert sim.evaluate([0, 1]).feasible


def test_peak_of_live_activations() -> None:
    # a -> b -> c, 1000 B outputs: while b runs, a's and b's outputs are both live (2000 B).
    graph = literal_graph(3, [(0, 1, 1000), (1, 2, 1000)], out_bytes=[1000, 1000, 1000])
    assert not simulator(graph, [1.0] * 3, platform=two_devices(memory=1999)).evaluate([0, 0, 0]).feasible
    assert simulator(graph, [1.0] * 3, platform=two_devices(memory=2000)).evaluate([0, 0, 0]).feasible


@pytest.mark.parametrize("model, platform", [("tiny_bert", "model-parallel"), ("tiny_cnn", "multi-accel")])
def test_memory_peaks_follow_the_rule_interval_by_interval(model: str, platform: str) -> None:
    """The compiled check (difference arrays, received copies added without a branch) against the rule of
    :mod:`placement_gym.simulation.schedule` summed interval by interval: weights always; an output from its
    producer's position up to ``last_use``; a graph input from the start up to its consumer; a copy received
    from another device from after its producer up to its consumer."""
    from placement_gym.problem import PlacementProblem
    from placement_gym.simulation.schedule import _memory_overflow

    sched = PlacementProblem.make(model, platform, "simulated").backend.schedule
    c, g, d = sched.cost, sched.cost.num_groups, sched.cost.num_devices
    pred_dst = np.repeat(np.arange(g), np.diff(sched.pred_ptr))
    rng = np.random.default_rng(0)
    for dev in rng.integers(0, d, size=(50, g)):
        live = np.zeros((d, g + 1))  # bytes on each device at each schedule position
        for grp in range(g):
            live[dev[grp], sched.pos[grp] : sched.last_use[grp]] += c.out_bytes[grp]
            live[dev[grp], : sched.pos[grp] + 1] += c.input_bytes[grp]
        for src, dst, nbytes in zip(sched.pred_src, pred_dst, sched.pred_bytes):
            if dev[src] != dev[dst]:
                live[dev[dst], sched.pos[src] + 1 : sched.pos[dst] + 1] += nbytes
        weights = np.bincount(dev, weights=c.param_bytes, minlength=d)
        peaks = np.maximum(weights, weights + live.max(axis=1))
        for k in range(d):  # only device k can overflow: the check reports its peak
            capacity = np.full(d, np.inf)
            capacity[k] = -1.0
            over, peak = _memory_overflow(
                dev, sched.pos, sched.pred_ptr, sched.pred_src, sched.pred_bytes, sched.last_use,
                c.input_bytes, c.param_bytes, c.out_bytes, capacity,
            )  # fmt: skip
            assert over == k and peak == pytest.approx(peaks[k], rel=1e-12)


# ---------------------------------------------------------------- determinism, cache, errors
def test_deterministic_and_cached() -> None:
    graph = literal_graph(4, [(0, 1, 1000), (0, 2, 1000), (1, 3, 1000), (2, 3, 1000)])
    sim = simulator(graph, [1.0, 4.0, 4.0, 1.0])
    first = sim.evaluate([0, 1, 0, 1])
    again = sim.evaluate(np.array([0, 1, 0, 1], dtype=np.int32))
    assert not first.cached and again.cached and again.latency == first.latency
    other = simulator(graph, [1.0, 4.0, 4.0, 1.0])
    assert other.evaluate([0, 1, 0, 1]).latency == first.latency
    batch = np.array([[0, 1, 0, 1], [1, 1, 1, 1], [0, 0, 1, 0]])
    assert [r.latency for r in other.evaluate_batch(batch)] == [sim.evaluate(p).latency for p in batch]


def test_lru_cache_is_bounded() -> None:
    sim = simulator(literal_graph(2, [(0, 1, 1)]), [1.0, 1.0], cache_size=2)
    for p in ([0, 0], [0, 1], [1, 1]):
        sim.evaluate(p)
    assert not sim.evaluate([0, 0]).cached  # evicted
    assert sim.evaluate([1, 1]).cached
    with pytest.raises(BackendError):
        simulator(literal_graph(2, [(0, 1, 1)]), [1.0, 1.0], cache_size=-1)


def test_nan_cost_is_infeasible_and_not_cached() -> None:
    graph = literal_graph(2, [(0, 1, 1)])
    sim = simulator(graph, [1.0, 1.0])
    compute = sim.cost_model.compute.copy()
    compute[1, 1] = np.nan
    cost = CostModel(**{**sim.cost_model.__dict__, "compute": compute})
    sim = SimulatedBackend(sim.benchmark, sim.graph, sim.platform, cost_model=cost)
    for _ in range(2):
        result = sim.evaluate([0, 1])
        assert not result.feasible and "NaN" in result.reason and not result.cached
    assert sim.evaluate_batch(np.array([[0, 1]]))[0].reason == result.reason
    assert sim.evaluate([1, 0]).feasible


def test_bad_placements_raise() -> None:
    sim = simulator(literal_graph(3, [(0, 1, 1), (1, 2, 1)]), [1.0] * 3)
    for bad in ([0, 0], [0, 0, 0, 0], [0.0, 1.0, 0.0], [0, 2, 0], [-1, 0, 0]):
        with pytest.raises(PlacementError):
            sim.evaluate(bad)
    for bad in (np.zeros(3, dtype=np.int64), np.zeros((2, 4), dtype=np.int64), np.array([[0, 5, 0]])):
        with pytest.raises(PlacementError):
            sim.evaluate_batch(bad)
    assert sim.hits == 0 and sim.misses == 0


def test_cost_model_rejects_bad_shapes() -> None:
    sim = simulator(literal_graph(2, [(0, 1, 1)]), [1.0, 1.0])
    with pytest.raises(BackendError):
        CostModel(**{**sim.cost_model.__dict__, "capacity": np.ones(3)})
    with pytest.raises(BackendError):
        CostModel(**{**sim.cost_model.__dict__, "compute": -np.ones((2, 2))})
    for bad in (np.inf, np.nan, -1.0):  # byte counts: the memory check multiplies them by 0 and 1
        with pytest.raises(BackendError, match="edge_bytes must be finite byte counts"):
            CostModel(**{**sim.cost_model.__dict__, "edge_bytes": np.array([bad])})
    with pytest.raises(BackendError, match="out_bytes must be finite"):
        CostModel(**{**sim.cost_model.__dict__, "out_bytes": np.array([1.0, np.inf])})
    assert sim.cost_model.transfer_time(1000, 0, 1) == pytest.approx(1.5 * MS)
    assert sim.cost_model.transfer_time(1000, 1, 1) == 0.0


# ---------------------------------------------------------------- real (tiny) models
@pytest.mark.parametrize("model", ["tiny_cnn", "tiny_bert"])
@pytest.mark.parametrize("platform", ["cpu-dgpu", "cpu-igpu", "multi-accel"])
def test_tiny_models_on_data_platforms(model: str, platform: str, request: pytest.FixtureRequest) -> None:
    bench = request.getfixturevalue(model)
    coarse = bench.coarsen("fused")
    plat = load_platform(platform)
    sim = make_backend("simulated", bench, coarse, plat)
    assert sim.deterministic and sim.name == "simulated"
    cost = sim.cost_model
    assert cost.compute.shape == (coarse.num_groups, plat.num_devices)
    assert set(cost.meta["profile"].values()) == {"roofline"}
    rng = np.random.default_rng(0)
    batch = rng.integers(0, plat.num_devices, size=(64, coarse.num_groups))
    results = sim.evaluate_batch(batch)
    assert all(r.feasible and r.latency > 0 for r in results)
    for d in range(plat.num_devices):  # one device: never faster than its total compute
        single = sim.evaluate(np.full(coarse.num_groups, d)).latency
        assert single >= cost.compute[:, d].sum() * (1 - 1e-9)
    assert pickle.loads(pickle.dumps(sim.cost_model)).compute.tolist() == cost.compute.tolist()


def test_roofline_counts_launch_once_per_layer(tiny_bert: Benchmark) -> None:
    gpu = load_platform("cpu-dgpu").devices[1]
    layer = op_layer_index(tiny_bert.ops, tiny_bert.fused_layers)
    times = roofline_op_times(tiny_bert.ops, gpu, layer)
    assert times.shape == (tiny_bert.ops.num_nodes,) and np.all(times > 0)
    assert times.sum() >= len(np.unique(layer)) * gpu.launch_overhead * (1 - 1e-9)


def test_unknown_profile(tiny_cnn: Benchmark) -> None:
    with pytest.raises(UnknownNameError):
        SimulatedBackend(tiny_cnn, tiny_cnn.coarsen("fused"), load_platform("cpu-dgpu"), profile="guess")


def test_local_platform_uses_measured_profile(tiny_cnn: Benchmark) -> None:
    plat = load_platform("local")
    sim = SimulatedBackend(tiny_cnn, tiny_cnn.coarsen("fused"), plat)
    assert set(sim.cost_model.meta["profile"].values()) == {"measured"}
    assert sim.cost_model.compute.sum() > 0
    assert sim.evaluate([0] * sim.graph.num_groups).feasible


def test_blocked_layout_edges_cost_more_across_a_boundary():
    """Edges carrying rank-4 activations are weighted by the link's blocked factor; others are not."""
    from dataclasses import replace

    from placement_gym.benchmarks import load_benchmark
    from placement_gym.platforms import Link, load_platform
    from placement_gym.simulation.cost_model import effective_edge_bytes

    bench = load_benchmark("tiny_cnn")
    coarse = bench.coarsen("ops")
    base = load_platform("cpu-dgpu")
    plain = effective_edge_bytes(coarse, base)
    assert np.array_equal(plain, coarse.graph.edge_bytes)
    link = Link(latency=1e-6, bandwidth=8e9, blocked_bandwidth=2e9)
    slow = replace(base, links={key: link for key in base.links})
    weighted = effective_edge_bytes(coarse, slow)
    rank4 = np.array([len(coarse.ops.out_shapes[s]) >= 4 for s in coarse.graph.edge_src])
    assert rank4.any() and (~rank4).any()
    assert np.allclose(weighted[rank4], 4.0 * plain[rank4]) and np.allclose(weighted[~rank4], plain[~rank4])
