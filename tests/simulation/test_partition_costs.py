"""Segment-boundary figures applied to a cost model (placement_gym.simulation.partition_costs)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from placement_gym.errors import ConfigError
from placement_gym.platforms import Link, load_platform
from placement_gym.simulation.cost_model import CostModel, effective_edge_bytes
from placement_gym.simulation.partition_costs import (
    PartitionCosts,
    apply_partition_costs,
    split_edge_bytes,
)
from placement_gym.simulation.schedule import Schedule


@pytest.fixture
def tiny_cost(tiny_cnn):
    coarse = tiny_cnn.coarsen("ops")
    base = load_platform("cpu-dgpu")
    link = Link(latency=1e-6, bandwidth=8e9, blocked_bandwidth=2e9)
    platform = replace(base, links={key: link for key in base.links})
    rng = np.random.default_rng(0)
    op_times = rng.uniform(1e-4, 1e-3, size=(coarse.ops.num_nodes, platform.num_devices))
    return coarse, platform, CostModel.from_op_times(coarse, platform, op_times)


def test_split_bytes_add_up_to_the_weighted_edge_bytes(tiny_cost):
    coarse, platform, cost = tiny_cost
    plain, blocked = split_edge_bytes(coarse)
    assert np.allclose(plain + blocked, coarse.graph.edge_bytes)
    assert np.allclose(plain + 4.0 * blocked, effective_edge_bytes(coarse, platform))
    assert blocked.sum() > 0 and plain.sum() > 0


def test_platform_figures_reproduce_the_cost_model(tiny_cost):
    coarse, platform, cost = tiny_cost
    same = PartitionCosts(
        invoke_overhead=float(cost.invoke_overhead[0]),
        transfer_latency=1e-6,
        bandwidth=8e9,
        blocked_bandwidth=2e9,
        contention=0.0,
    )
    assert np.all(cost.invoke_overhead == cost.invoke_overhead[0])
    applied = apply_partition_costs(cost, coarse, same)
    placements = np.random.default_rng(1).integers(0, cost.num_devices, size=(20, cost.num_groups))
    before = Schedule.build(cost).run_batch(placements)[0]
    after = Schedule.build(applied).run_batch(placements)[0]
    assert np.allclose(before, after)
    assert applied.meta["partition_costs"] == same.as_dict()


def test_a_transfer_latency_is_paid_per_cut_edge_of_a_chain(tiny_cost):
    """On one device nothing changes; moving only the last group of a chain adds one transfer latency per
    edge into it (and its result back to the host)."""
    coarse, _, cost = tiny_cost
    free = PartitionCosts(0.0, 0.0, 1e15, 1e15, 0.0)
    slow = replace(free, transfer_latency=1e-3)
    base, late = (Schedule.build(apply_partition_costs(cost, coarse, c)) for c in (free, slow))
    host = np.zeros(cost.num_groups, dtype=np.int64)
    assert base.run(host)[0] == pytest.approx(late.run(host)[0])
    last = cost.num_groups - 1
    moved = host.copy()
    moved[last] = 1
    into_last = int(np.count_nonzero(cost.edge_dst == last))
    extra = into_last + (1 if cost.result_bytes[last] > 0 else 0)
    assert extra >= 1
    assert late.run(moved)[0] - base.run(moved)[0] == pytest.approx(extra * 1e-3, rel=1e-6)


@pytest.mark.parametrize(
    "values",
    [
        dict(invoke_overhead=-1.0),
        dict(bandwidth=0.0),
        dict(contention=1.5),
        dict(transfer_latency=float("nan")),
    ],
)
def test_bad_figures_are_refused(values):
    good = dict(
        invoke_overhead=0.0, transfer_latency=0.0, bandwidth=1e9, blocked_bandwidth=1e9, contention=0.5
    )
    with pytest.raises(ConfigError):
        PartitionCosts(**{**good, **values})


def test_from_dict_names_missing_keys():
    with pytest.raises(ConfigError, match="exactly the keys"):
        PartitionCosts.from_dict({"invoke_overhead": 0.0})


def test_refuses_a_foreign_coarse_graph(tiny_cost, tiny_bert):
    _, _, cost = tiny_cost
    with pytest.raises(ConfigError, match="not the cost model"):
        apply_partition_costs(cost, tiny_bert.coarsen("ops"), PartitionCosts(0.0, 0.0, 1e9, 1e9, 0.0))
