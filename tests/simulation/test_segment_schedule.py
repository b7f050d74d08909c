"""The segment schedule (placement_gym.simulation.segment_schedule): hand-computed latencies on tiny literal
graphs, the executor's segment rule, and the backend's choice of schedule."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from placement_gym.errors import UnknownNameError
from placement_gym.measured.segments import split_segments
from placement_gym.platforms import load_platform
from placement_gym.simulation.backend import SimulatedBackend
from placement_gym.simulation.segment_schedule import SegmentSchedule
from tests.simulation.test_backend import MS, literal_graph, simulator, two_devices


def segments_of(sim: SimulatedBackend, placement: list[int]) -> list[int]:
    return sim.schedule.segments(np.array(placement)).tolist()


def test_one_device_is_one_segment_paying_one_invoke() -> None:
    graph = literal_graph(3, [(0, 1, 1000), (1, 2, 1000)])
    sim = simulator(graph, [1.0, 2.0, 3.0], invoke=0.25 * MS, schedule="segments")
    assert isinstance(sim.schedule, SegmentSchedule)
    assert segments_of(sim, [0, 0, 0]) == [0, 0, 0]
    assert sim.evaluate([0, 0, 0]).latency == pytest.approx(6.25 * MS)


def test_a_boundary_is_paid_half_by_each_segment() -> None:
    # a chain cut twice: each boundary is 0.5 + 1000 B / 1 MB/s = 1.5 ms, 0.75 on each side; three invokes
    graph = literal_graph(3, [(0, 1, 1000), (1, 2, 1000)])
    sim = simulator(graph, [1.0, 1.0, 1.0], invoke=0.25 * MS, schedule="segments")
    assert segments_of(sim, [0, 1, 0]) == [0, 1, 2]
    assert sim.evaluate([0, 1, 0]).latency == pytest.approx((3 + 3 * 0.25 + 4 * 0.75) * MS)


def test_the_executor_splits_a_device_where_another_device_joins() -> None:
    """a -> {b, c} -> d with c on d1: the executor runs a, b and d as three segments of d0 (d waits for c,
    b does not), so d0 pays three invokes; the group schedule counts one subgraph per device."""
    graph = literal_graph(4, [(0, 1, 0), (0, 2, 0), (1, 3, 0), (2, 3, 0)])
    plat = two_devices(latency=0.0, bandwidth=1e18)
    kwargs = {"platform": plat, "invoke": 0.25 * MS}
    seg = simulator(graph, [1.0, 4.0, 4.0, 1.0], schedule="segments", **kwargs)
    groups = simulator(graph, [1.0, 4.0, 4.0, 1.0], schedule="groups", **kwargs)
    assert segments_of(seg, [0, 0, 1, 0]) == [0, 1, 2, 3]
    # a 0 -> 1.25; b and c 1.25 -> 5.5; d 5.5 -> 6.75
    assert seg.evaluate([0, 0, 1, 0]).latency == pytest.approx(6.75 * MS)
    # groups: a, b, d one subgraph (one invoke): a 0 -> 1.25, b -> 5.25; c 1.25 -> 5.5; d 5.5 -> 6.5
    assert groups.evaluate([0, 0, 1, 0]).latency == pytest.approx(6.5 * MS)


def test_a_boundary_between_segments_of_one_device_costs_like_one_across() -> None:
    # a (d0) -> b (d0) <- c (d1): b waits for c, a does not, so a and b are two segments of d0 and a's
    # output crosses a boundary although it stays on d0. a: 1 + 0.75; c: 1 + 0.75; b from 1.75: 1 + 1.5
    graph = literal_graph(3, [(0, 2, 1000), (1, 2, 1000)])
    sim = simulator(graph, [1.0, 1.0, 1.0], schedule="segments")
    assert segments_of(sim, [0, 1, 0]) == [0, 1, 2]
    assert sim.evaluate([0, 1, 0]).latency == pytest.approx(4.25 * MS)


def test_a_tensor_read_by_two_groups_of_one_segment_is_one_boundary() -> None:
    # a (d0) feeds b and c, both on d1 and one segment: one boundary (1.5 ms), not two
    graph = literal_graph(3, [(0, 1, 1000), (0, 2, 1000), (1, 2, 1000)])
    sim = simulator(graph, [1.0, 1.0, 1.0], schedule="segments")
    assert segments_of(sim, [0, 1, 1]) == [0, 1, 1]
    assert sim.evaluate([0, 1, 1]).latency == pytest.approx((1.75 + 2.75) * MS)


def test_contention_is_charged_per_segment() -> None:
    # a -> {b, c} -> d, c on d1 (four segments, free boundaries): b 1 -> 5; c starts at 1 while d0 is busy
    # for 4 more: 4 + 0.5 x 4 -> ends 7; d 7 -> 8
    graph = literal_graph(4, [(0, 1, 0), (0, 2, 0), (1, 3, 0), (2, 3, 0)])
    plat = two_devices(latency=0.0, bandwidth=1e18, contention=0.5)
    sim = simulator(graph, [1.0, 4.0, 4.0, 1.0], platform=plat, schedule="segments")
    assert sim.evaluate([0, 0, 1, 0]).latency == pytest.approx(8 * MS)


def test_contention_slows_the_running_segment_too() -> None:
    # a -> {b, c} -> d, free boundaries and invokes; b (d0, 4 ms) and c (d1, 1 ms) both ready at 1.
    # Contention 1 (one shared core): they share it, c ends 1 + 2 = 3, b 1 + 4 + 1 = 6, d 6 -> 7: the
    # sum of the work (7 ms), as on one device; charging c alone would let b end at 5 and give 6 ms.
    graph = literal_graph(4, [(0, 1, 0), (0, 2, 0), (1, 3, 0), (2, 3, 0)])
    plat = two_devices(latency=0.0, bandwidth=1e18, contention=1.0)
    sim = simulator(graph, [1.0, 4.0, 1.0, 1.0], platform=plat, schedule="segments")
    assert sim.evaluate([0, 0, 1, 0]).latency == pytest.approx(7 * MS)
    assert sim.evaluate([0, 0, 0, 0]).latency == pytest.approx(7 * MS)
    # contention 0.5: c ends 1 + 1 + 0.5 = 2.5, b 5 + 0.5 = 5.5, d 5.5 -> 6.5
    half = simulator(graph, [1.0, 4.0, 1.0, 1.0], platform=two_devices(latency=0.0, bandwidth=1e18,
                     contention=0.5), schedule="segments")  # fmt: skip
    assert half.evaluate([0, 0, 1, 0]).latency == pytest.approx(6.5 * MS)


@pytest.mark.parametrize("seed", range(4))
def test_with_contention_1_no_split_beats_one_device(seed: int) -> None:
    """Two devices sharing one core (contention 1, identical costs): every placement of a random DAG
    takes at least as long as all on one device, whatever runs in parallel."""
    rng = np.random.default_rng(seed)
    n = 8
    edges = [(i, j, 0) for j in range(1, n) for i in range(j) if rng.random() < 0.3]
    plat = two_devices(latency=0.0, bandwidth=1e18, contention=1.0)
    sim = simulator(literal_graph(n, edges), list(rng.uniform(0.5, 4.0, n)), platform=plat,
                    invoke=0.01 * MS, schedule="segments", cache_size=0)  # fmt: skip
    placements = np.array([[(k >> g) & 1 for g in range(n)] for k in range(2**n)])
    latencies = np.array([r.latency for r in sim.evaluate_batch(placements)])
    assert latencies.min() >= latencies[0] * (1 - 1e-9) and latencies[0] == latencies[-1]


def test_memory_is_checked_as_in_the_group_schedule() -> None:
    graph = literal_graph(2, [(0, 1, 10)], param_bytes=[600, 600])
    plat = two_devices(memory=1000)
    seg = simulator(graph, [1.0, 1.0], platform=plat, schedule="segments")
    groups = simulator(graph, [1.0, 1.0], platform=plat, schedule="groups")
    for placement in ([0, 0], [0, 1]):
        assert seg.evaluate(placement).feasible == groups.evaluate(placement).feasible
    assert not seg.evaluate([0, 0]).feasible and seg.evaluate([0, 1]).feasible


def test_batch_equals_single_evaluations() -> None:
    graph = literal_graph(5, [(0, 1, 100), (0, 2, 200), (1, 3, 300), (2, 3, 50), (3, 4, 10)])
    sim = simulator(graph, [1.0, 2.0, 0.5, 1.5, 1.0], invoke=0.1 * MS, schedule="segments", cache_size=0)
    batch = np.random.default_rng(0).integers(0, 2, size=(16, 5))
    single = [sim.evaluate(p).latency for p in batch]
    assert [r.latency for r in sim.evaluate_batch(batch)] == pytest.approx(single)


@pytest.mark.parametrize("model", ["tiny_cnn", "tiny_bert"])
def test_segments_are_the_executors_on_single_op_groups(model: str, request: pytest.FixtureRequest) -> None:
    """With one op per group, the segment rule gives exactly the partitioned executor's segments."""
    bench = request.getfixturevalue(model)
    coarse = bench.coarsen("ops")
    sim = SimulatedBackend(bench, coarse, two_devices(), profile="roofline", schedule="segments")
    rng = np.random.default_rng(0)
    for _ in range(20):
        placement = (rng.random(coarse.num_groups) < rng.uniform(0.1, 0.9)).astype(np.int64)
        ours = sim.schedule.segments(placement)[coarse.assignment]
        theirs = np.empty(coarse.ops.num_nodes, dtype=np.int64)
        for k, (_, ops) in enumerate(split_segments(coarse.ops, coarse.expand(placement))):
            theirs[ops] = k
        assert (
            len(set(zip(ours.tolist(), theirs.tolist())))
            == len(set(ours.tolist()))
            == len(set(theirs.tolist()))
        )


def test_the_schedule_is_chosen_by_platform(tiny_cnn) -> None:
    coarse = tiny_cnn.coarsen("fused")
    local = SimulatedBackend(tiny_cnn, coarse, load_platform("local"))
    assert local.schedule_kind == "segments"
    placements = np.random.default_rng(0).integers(0, 2, size=(5, coarse.num_groups))
    again = pickle.loads(pickle.dumps(local))  # Ray workers and SubprocVecEnv pickle backends
    assert [r.latency for r in again.evaluate_batch(placements)] == [
        r.latency for r in local.evaluate_batch(placements)
    ]
    assert SimulatedBackend(tiny_cnn, coarse, load_platform("cpu-dgpu")).schedule_kind == "groups"
    with pytest.raises(UnknownNameError, match="unknown schedule 'segment'"):
        SimulatedBackend(tiny_cnn, coarse, load_platform("cpu-dgpu"), schedule="segment")
