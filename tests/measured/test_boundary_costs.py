"""The segment-boundary micro-benchmark (placement_gym.measured.boundary_costs)."""

from __future__ import annotations

import numpy as np
import pytest

from placement_gym.errors import BackendError
from placement_gym.measured.boundary_costs import (
    CHAINS,
    block_placement,
    boundary_slope,
    chain_model,
    measure_chain,
)
from placement_gym.measured.segments import split_segments
from placement_gym.ov_graph import graph_from_ov
from placement_gym.platforms import load_platform


@pytest.mark.parametrize("kind", sorted(CHAINS))
@pytest.mark.parametrize("blocks", [1, 2, 3, 8])
def test_a_chain_cut_into_k_blocks_runs_as_k_segments(kind, blocks):
    graph = graph_from_ov(chain_model(kind, layers=8))
    assert graph.num_nodes == 8
    op_device = block_placement(graph.num_nodes, blocks)
    assert np.count_nonzero(np.diff(op_device)) == blocks - 1
    assert len(split_segments(graph, op_device)) == blocks


def test_slope_of_a_linear_cost_is_the_cost_per_boundary():
    boundaries = np.array([0, 1, 3, 7])
    assert boundary_slope(boundaries, 0.002 + 5e-5 * boundaries) == pytest.approx(5e-5)
    with pytest.raises(BackendError, match="two boundary counts"):
        boundary_slope(np.array([1, 1]), np.array([0.1, 0.2]))


def test_bad_chain_settings_are_refused():
    with pytest.raises(BackendError, match="unknown chain kind 'dense'"):
        chain_model("dense", 4)
    with pytest.raises(BackendError, match="at least 2 layers"):
        chain_model("tiny", 1)
    with pytest.raises(BackendError, match="blocks must be in"):
        block_placement(4, 5)


@pytest.mark.slow
def test_tiny_chain_boundaries_cost_something():
    """Measured: more segments never make the tiny chain faster by more than noise, and the slope is a
    positive per-boundary cost below a millisecond (starting a segment on this machine)."""
    result = measure_chain("tiny", load_platform("local"), ks=(1, 2, 4, 8), layers=8, runs=25)
    assert len(result["times"]) == 4 and all(t > 0 for t in result["times"])
    assert 0 < result["slope"] < 1e-3
    assert result["times"][-1] > result["times"][0]
