"""Synthetic DAGs and perturbed platforms: invariants (hypothesis) and use through a problem."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from placement_gym.errors import ConfigError, UnknownNameError
from placement_gym.platforms import load_platform
from placement_gym.problem import PlacementProblem
from placement_gym.synthetic import (
    COST_SCALE,
    KINDS,
    SPEED_SCALE,
    OpCostStats,
    op_cost_stats,
    perturb_platform,
    random_benchmark,
    random_dag,
    random_devices,
    restrict_platform,
)

STATS = OpCostStats(
    models=("conv", "mm"),
    op_types=(("Convolution", "Add", "MaxPool"), ("MatMul", "MVN")),
    ranks=(np.array([4, 4, 4]), np.array([3, 3])),
    costs=(
        np.array([[1e8, 1e5, 1e4], [1e5, 1e5, 0.0], [1e5, 2e4, 0.0]]),
        np.array([[5e8, 4e5, 2e6], [1e6, 4e5, 8.0]]),
    ),
)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(KINDS), st.integers(2, 120), st.integers(0, 2**32 - 1))
def test_random_dag_is_a_connected_single_entry_dag_with_zoo_costs(kind, n, seed):
    g = random_dag(STATS, np.random.default_rng(seed), kind=kind, num_nodes=n)
    assert g.num_nodes == n
    nxg = nx.DiGraph(list(zip(g.edge_src.tolist(), g.edge_dst.tolist(), strict=True)))
    nxg.add_nodes_from(range(n))
    assert nx.is_directed_acyclic_graph(nxg)
    assert nx.is_weakly_connected(nxg)
    assert sum(d == 0 for _, d in nxg.in_degree()) == 1 and sum(d == 0 for _, d in nxg.out_degree()) == 1
    m = g.meta["stats_model"]
    rows = STATS.costs[STATS.models.index(m)]
    scale = g.meta["cost_scale"]
    assert COST_SCALE[0] <= scale <= COST_SCALE[1]
    # every node is one of the model's groups, scaled by the graph's one factor
    for flops, t in zip(g.nodes["flops"], g.op_types, strict=True):
        assert np.isclose(rows[:, 0] * scale, flops).any()
        assert t in STATS.op_types[STATS.models.index(m)]
    assert (g.nodes["out_bytes"] > 0).all() and (g.edge_bytes > 0).all()
    assert g.nodes["input_bytes"].astype(bool).sum() == 1 and g.nodes["result_bytes"].astype(bool).sum() == 1


def test_random_dag_is_seeded_and_rejects_bad_arguments():
    a = random_dag(STATS, np.random.default_rng(3), kind="series_parallel")
    b = random_dag(STATS, np.random.default_rng(3), kind="series_parallel")
    assert a.names == b.names and np.array_equal(a.edge_src, b.edge_src)
    assert np.array_equal(a.nodes["flops"], b.nodes["flops"])
    with pytest.raises(UnknownNameError, match="layered"):
        random_dag(STATS, np.random.default_rng(0), kind="tree")
    with pytest.raises(ConfigError, match="num_nodes"):
        random_dag(STATS, np.random.default_rng(0), num_nodes=1)
    with pytest.raises(ConfigError, match="at least one model"):
        op_cost_stats([])


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(["cpu-igpu", "multi-accel", "cpu-dgpu"]), st.booleans(), st.integers(0, 2**32 - 1))
def test_perturbed_platform_stays_in_bounds(name, subset, seed):
    base = load_platform(name)
    p = perturb_platform(base, np.random.default_rng(seed), subset=subset)
    assert 2 <= p.num_devices <= base.num_devices
    assert p.devices[p.host].name == base.devices[base.host].name
    if not subset:
        assert p.num_devices == base.num_devices
    lo, hi = SPEED_SCALE
    originals = {d.name: d for d in base.devices}
    for d in p.devices:
        o = originals[d.name]
        assert lo <= d.mem_bandwidth / o.mem_bandwidth <= hi
        for k, v in d.peak_flops.items():
            assert lo <= v / o.peak_flops[k] <= hi
        assert all(0 < e <= 1 + 1e-12 for e in d.op_efficiency.values())
    index = [next(k for k, o in enumerate(base.devices) if o.name == d.name) for d in p.devices]
    for (i, j), link in p.links.items():
        o, back, o_back = base.links[(index[i], index[j])], p.links[(j, i)], base.links[(index[j], index[i])]
        assert lo <= link.bandwidth / o.bandwidth <= hi
        # one factor per device pair, both directions
        assert link.latency / o.latency == pytest.approx(back.latency / o_back.latency)

def test_synthetic_benchmark_on_a_perturbed_platform_is_a_simulated_problem(tiny_cnn):
    rng = np.random.default_rng(1)
    stats = op_cost_stats(["tiny_cnn"])
    problem = PlacementProblem.make(
        random_benchmark(stats, rng, kind="layered", num_nodes=25),
        perturb_platform(load_platform("multi-accel"), rng),
    )
    assert problem.num_groups == 25
    placements = rng.integers(problem.num_devices, size=(4, 25))
    lat = [e.latency for e in problem.evaluate_batch(placements)]
    assert all(np.isfinite(lat)) and problem.evaluations == 4
    assert np.isfinite(problem.baseline.latency)


def test_restrict_platform_keeps_the_host_and_the_links_between_kept_devices():
    base = load_platform("multi-accel")
    p = restrict_platform(base, [0, 3])
    assert [d.name for d in p.devices] == [base.devices[0].name, base.devices[3].name]
    assert p.links[(0, 1)] == base.links[(0, 3)] and p.host == 0
    with pytest.raises(ConfigError, match="host"):
        restrict_platform(base, [1, 2])
    with pytest.raises(ConfigError, match="distinct"):
        restrict_platform(base, [0, 0])
    counts = {len(random_devices(base, np.random.default_rng(s))) for s in range(40)}
    assert counts == {2, 3, 4}
