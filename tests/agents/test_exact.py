"""The decomposed exact solver against brute force: optimal on graphs it cuts cleanly, a valid bound when it
drops jumping edges, and the same answer whether segments are enumerated or solved by MILP."""

from __future__ import annotations

import dataclasses
import functools
import itertools

import numpy as np
import pytest

from agents import make_method
from agents.baselines.decomposition import find_cuts, segments
from agents.baselines.exact import ExactPlacement
from agents.baselines.exact_memory import resident_bytes
from agents.baselines.heft import heft_placement
from agents.baselines.segment_solver import solve_decomposed
from placement_gym.errors import PlacementGymError
from placement_gym.simulation.cost_model import CostModel
from placement_gym.simulation.schedule import Schedule
from tests.agents.test_baselines import brute_force, random_problem


def block_cost(
    seed: int, blocks: int, devices: int, invoke: float = 0.0, broadcast: bool = False, into: str = "joins"
) -> CostModel:
    """A random cost model shaped like a CNN or a transformer: a chain of blocks, each a fork into 1-3
    parallel branches of 1-2 groups and a join, so that the joins are cuts.

    Device 0 is the host (graph input into group 0, result out of the last group); the last device pays
    ``invoke``. ``broadcast`` adds an edge from group 1 to every join (BERT's attention mask), which jumps
    over the cuts; ``into="branches"`` sends it to the first group of every later branch instead, so that a
    join's subgraph on the last device can reach the broadcast's through the next block.
    """
    rng = np.random.default_rng(seed)
    edges, g = [], 1  # group 0: the first fork
    join, joins = 0, []
    for _ in range(blocks):
        ends = []
        for _ in range(int(rng.integers(1, 4))):
            prev = join
            for _ in range(int(rng.integers(1, 3))):
                edges.append((prev, g))
                prev, g = g, g + 1
            ends.append(prev)
        edges += [(e, g) for e in ends]
        join, g = g, g + 1
        joins.append(join)
    if broadcast and into == "joins":
        edges += [(1, j) for j in joins if j > 2]
    elif broadcast:
        edges += [(1, t) for s, t in list(edges) if s in joins and t > 2]
    edges = sorted(set(edges))
    latency = rng.uniform(2e-6, 10e-6, (devices, devices))
    np.fill_diagonal(latency, 0.0)
    bandwidth = rng.uniform(0.5e9, 2e9, (devices, devices))
    np.fill_diagonal(bandwidth, np.inf)
    inputs, results = np.zeros(g), np.zeros(g)
    inputs[0], results[g - 1] = 4e3, 4e3
    overhead = np.zeros(devices)
    overhead[-1] = invoke
    return CostModel(
        device_names=tuple(f"d{i}" for i in range(devices)),
        compute=rng.uniform(2e-6, 40e-6, (g, devices)),
        edge_src=np.array([s for s, _ in edges], dtype=np.int64),
        edge_dst=np.array([t for _, t in edges], dtype=np.int64),
        edge_bytes=rng.uniform(1e2, 1.5e4, len(edges)),
        link_latency=latency,
        link_bandwidth=bandwidth,
        param_bytes=rng.uniform(0, 4e3, g),
        out_bytes=rng.uniform(1e2, 4e3, g),
        input_bytes=inputs,
        result_bytes=results,
        capacity=np.full(devices, 1e12),
        invoke_overhead=overhead,
    )


def enumerate_all(cost: CostModel) -> np.ndarray:
    """Simulated latency of every placement, shape ``(D ** G,)``."""
    grid = itertools.product(range(cost.num_devices), repeat=cost.num_groups)
    return Schedule.build(cost).run_batch(np.array(list(grid), dtype=np.int64))[0]


@functools.lru_cache(maxsize=None)
def block_optimum(*args, **kwargs) -> float:
    """The brute-force optimum of ``block_cost(*args, **kwargs)``, enumerated once for the tests that solve
    the same graph with and without MILP segments."""
    return float(enumerate_all(block_cost(*args, **kwargs)).min())


CLEAN = [
    pytest.param(0, 4, 2, 0.0, id="2dev"),
    pytest.param(2, 4, 2, 0.0, id="2dev-b"),
    pytest.param(19, 3, 3, 0.0, id="3dev"),
    pytest.param(2, 3, 3, 15e-6, id="3dev-invoke"),
    pytest.param(3, 2, 4, 30e-6, id="4dev-invoke"),
]


@pytest.mark.parametrize(("seed", "blocks", "devices", "invoke"), CLEAN)
def test_exact_equals_brute_force_on_cut_graphs(seed: int, blocks: int, devices: int, invoke: float) -> None:
    cost = block_cost(seed, blocks, devices, invoke)
    assert devices**cost.num_groups <= 300_000  # few enough to enumerate
    optimum = float(enumerate_all(cost).min())
    allowed = np.ones((cost.num_groups, devices), dtype=bool)
    result = solve_decomposed(cost, allowed, enumerate_limit=64)
    assert result.segments > 2  # it really decomposed
    assert result.dropped == 0
    assert result.latency == pytest.approx(optimum, rel=1e-9)
    assert result.lower_bound == pytest.approx(optimum, rel=1e-6)
    assert Schedule.build(cost).run(result.placement)[0] == pytest.approx(result.latency, rel=1e-12)


def test_enumeration_and_milp_segments_agree() -> None:
    cost = block_cost(2, 3, 3, 15e-6)
    allowed = np.ones((cost.num_groups, 3), dtype=bool)
    enumerated = solve_decomposed(cost, allowed)
    by_milp = solve_decomposed(cost, allowed, enumerate_limit=1)
    assert enumerated.milp_segments == 0 and by_milp.milp_segments > 0
    assert by_milp.latency == pytest.approx(enumerated.latency, rel=1e-9)
    assert by_milp.lower_bound == pytest.approx(enumerated.lower_bound, rel=1e-6)


@pytest.mark.parametrize(
    ("seed", "devices", "invoke"), [(0, 2, 0.0), (2, 3, 20e-6), (3, 4, 40e-6), (0, 4, 40e-6)]
)
def test_dropped_edges_give_a_valid_bound(seed: int, devices: int, invoke: float) -> None:
    """With a broadcast edge over every cut, the bound stays below the optimum and the placement above it;
    when they meet, the placement is the optimum."""
    blocks = {2: 4, 3: 3, 4: 2}[devices]
    cost = block_cost(seed, blocks, devices, invoke, broadcast=True)
    assert devices**cost.num_groups <= 300_000
    optimum = float(enumerate_all(cost).min())
    allowed = np.ones((cost.num_groups, devices), dtype=bool)
    result = solve_decomposed(cost, allowed, max_segment=1, enumerate_limit=4096)
    assert result.dropped > 0
    assert result.lower_bound <= optimum * (1 + 1e-9)
    assert result.latency >= optimum * (1 - 1e-12)
    if result.gap <= 1e-9:
        assert result.latency == pytest.approx(optimum, rel=1e-9)


def test_cuts_of_a_chain_of_blocks() -> None:
    cost = block_cost(0, 4, 2)
    sched = Schedule.build(cost)
    cuts = find_cuts(cost, sched, max_dropped=0)
    joins = {t for t in cost.edge_dst.tolist() if (cost.edge_dst == t).sum() > 1}
    assert joins <= {int(sched.order[k]) for k, _ in cuts}
    parts = segments(cost, sched, 0)
    assert sorted(g for s in parts for g in s.groups) == list(range(cost.num_groups))


def test_exact_beats_heft_and_every_single_device() -> None:
    """A case where mixing devices pays and HEFT misses it: the solver still finds the brute-force optimum."""
    cost = block_cost(19, 3, 3)
    allowed = np.ones((cost.num_groups, 3), dtype=bool)
    optimum = float(enumerate_all(cost).min())
    sched = Schedule.build(cost)
    singles = [sched.run(np.full(cost.num_groups, d, dtype=np.int64))[0] for d in range(3)]
    heft = sched.run(heft_placement(cost, allowed)[0])[0]
    assert optimum < 0.95 * min(singles) and optimum < 0.95 * heft
    result = solve_decomposed(cost, allowed)
    assert result.segments > 2
    assert result.latency == pytest.approx(optimum, rel=1e-9) and result.gap <= 1e-9


@pytest.mark.parametrize(
    ("seed", "k", "platform", "invoke"), [(0, 6, "cpu-dgpu", 0.0), (4, 7, "multi-accel", 30e-6)]
)
def test_exact_method_equals_brute_force(seed: int, k: int, platform: str, invoke: float) -> None:
    env = random_problem(seed, k, platform, invoke)
    result = make_method("exact").place(env)
    assert result.latency == pytest.approx(brute_force(env), rel=1e-7)
    assert result.extra["lower_bound"] <= result.latency * (1 + 1e-9)
    assert result.extra["status"] == "Optimal" and result.extra["gap"] <= 1e-6


# capacities below every single device's peak (70-90% of it), where the unconstrained optimum overfills
@pytest.mark.parametrize(
    ("seed", "k", "platform", "capacity"),
    [
        (104, 8, "cpu-dgpu", 17652.0),
        (5, 7, "cpu-dgpu", 21696.0),
        (7, 6, "multi-accel", 13107.0),
        (11, 8, "cpu-igpu", 16617.0),
    ],
)
def test_memory_bound_problems_equal_brute_force(seed: int, k: int, platform: str, capacity: float) -> None:
    free = random_problem(seed, k, platform)
    env = random_problem(seed, k, platform, capacity=[capacity] * free.num_devices)
    optimum = brute_force(env)
    assert np.isfinite(optimum) and optimum > brute_force(free) * (1 + 1e-6)  # memory binds
    assert not env.problem.has_baseline  # no single device holds the model
    result = make_method("exact", time_limit=60).place(env)
    assert result.extra["solver"].startswith("lagrangian")
    assert result.latency == pytest.approx(optimum, rel=1e-7)
    assert result.extra["lower_bound"] <= optimum * (1 + 1e-7)
    assert result.extra["status"] == "Optimal"


def test_bad_settings_are_named() -> None:
    with pytest.raises(PlacementGymError, match="segment_time_limit"):
        ExactPlacement(segment_time_limit=0)
    with pytest.raises(PlacementGymError, match="max_segment"):
        ExactPlacement(max_segment=0)


@pytest.mark.parametrize("seed", [0, 3])
def test_resident_bytes_bound_the_simulated_peak(seed: int) -> None:
    """The Lagrangian's memory rows: exact on one device (no copies), below the peak of any split."""
    cost = block_cost(seed, 3, 2)
    sched = Schedule.build(cost)
    resident = resident_bytes(cost, sched)  # (G, K)
    probe = dataclasses.replace(cost, capacity=np.zeros(2))  # every placement overflows: run() gives the peak
    single = Schedule.build(probe).run(np.zeros(cost.num_groups, dtype=np.int64))[2]
    assert resident.sum(axis=0).max() == pytest.approx(single, rel=1e-12)
    rng = np.random.default_rng(seed)
    for _ in range(20):
        placement = rng.integers(0, 2, cost.num_groups)
        lower = resident[placement == 0].sum(axis=0).max(initial=0.0)
        probe = dataclasses.replace(cost, capacity=np.array([0.0, np.inf]))
        assert lower <= Schedule.build(probe).run(placement)[2] * (1 + 1e-12) or lower == 0.0


@pytest.mark.parametrize("invoke", [20e-6, 60e-6])
@pytest.mark.parametrize("enumerate_limit", [4096, 1])
def test_one_dropped_source_keeps_the_invoke_overheads(invoke: float, enumerate_limit: int) -> None:
    """A broadcast source on the invoke device: the segment models count the subgraphs its edges join as
    started (instead of freeing every overhead), which proves this optimum (by enumeration and by MILP
    segments alike); freeing every overhead left a gap here."""
    cost = block_cost(2, 3, 3, invoke, broadcast=True)
    optimum = block_optimum(2, 3, 3, invoke, broadcast=True)
    allowed = np.ones((cost.num_groups, 3), dtype=bool)
    result = solve_decomposed(cost, allowed, max_segment=1, enumerate_limit=enumerate_limit)
    assert result.dropped > 0
    assert result.latency == pytest.approx(optimum, rel=1e-9)
    assert result.gap <= 1e-6 and result.lower_bound <= optimum * (1 + 1e-9)


def test_prepaid_groups_pay_no_invoke_overhead() -> None:
    cost = block_cost(0, 1, 2, invoke=50e-6)
    on_last = np.ones(cost.num_groups, dtype=np.int64)  # everything on the device with the overhead
    plain = Schedule.build(cost).run(on_last)[0]
    prepaid = Schedule.build(cost, prepaid=np.full(cost.num_groups, 1)).run(on_last)[0]
    other = Schedule.build(cost, prepaid=np.full(cost.num_groups, 0)).run(on_last)[0]
    assert plain - prepaid == pytest.approx(50e-6, rel=1e-9) and other == plain
    with pytest.raises(PlacementGymError, match="prepaid must have shape"):
        Schedule.build(cost, prepaid=np.zeros(2))


MASKED = [(seed, invoke) for seed in (0, 19, 25) for invoke in (2e-6, 80e-6)]


@pytest.mark.parametrize(("seed", "invoke"), MASKED)
@pytest.mark.parametrize("into", ["joins", "branches"])
@pytest.mark.parametrize("enumerate_limit", [4096, 1])
def test_mask_statuses_bound_the_optimum(seed: int, invoke: float, into: str, enumerate_limit: int) -> None:
    """A mask-like group feeding every layer, an invoke overhead on one device: the bound never exceeds the
    brute-force optimum (enumerated segments carry the cuts' statuses exactly, MILP segments relax them),
    and a zero gap means the placement is the optimum."""
    cost = block_cost(seed, 3, 3, invoke, broadcast=True, into=into)
    optimum = block_optimum(seed, 3, 3, invoke, broadcast=True, into=into)
    allowed = np.ones((cost.num_groups, 3), dtype=bool)
    result = solve_decomposed(cost, allowed, max_segment=1, enumerate_limit=enumerate_limit)
    assert result.dropped > 0
    assert result.lower_bound <= optimum * (1 + 1e-9)
    assert result.latency >= optimum * (1 - 1e-12)
    if result.gap <= 1e-9:
        assert result.latency == pytest.approx(optimum, rel=1e-9)


@pytest.mark.parametrize("seed", [0, 2, 27])
@pytest.mark.parametrize("joins_reach_mask", [True, False])
def test_mask_statuses_are_exact_where_joins_are_forced(seed: int, joins_reach_mask: bool) -> None:
    """The mask and every join on the invoke device, the branches off it, and the first group after each
    join on it (the join's subgraph reaches the mask's through the next block: status P) or off it (it never
    does: status F). The bound equals the brute-force optimum in both; counting every cut group as started
    undercuts the second, counting none overshoots the first."""
    cost = block_cost(seed, 3, 3, 20e-6, broadcast=True, into="branches")
    joins = {
        t for t in range(cost.num_groups) if len(set(cost.edge_src[cost.edge_dst == t].tolist()) - {1}) > 1
    }
    heads = {int(t) for s, t in zip(cost.edge_src, cost.edge_dst) if s in joins}
    allowed = np.zeros((cost.num_groups, 3), dtype=bool)
    allowed[:, :2] = True
    for g in {1} | joins | (heads if joins_reach_mask else set()):
        allowed[g] = [False, False, True]
    choices = [np.flatnonzero(row) for row in allowed]
    grid = np.array(list(itertools.product(*choices)), dtype=np.int64)
    optimum = float(Schedule.build(cost).run_batch(grid)[0].min())
    result = solve_decomposed(cost, allowed, max_segment=1, enumerate_limit=4096)
    assert result.lower_bound == pytest.approx(optimum, rel=1e-9)
    assert result.latency == pytest.approx(optimum, rel=1e-9)
