"""The three benchmark graphs at every coarsening level (slow: converts and compiles the real models)."""

from __future__ import annotations

import openvino as ov
import pytest

from placement_gym.benchmarks import load_benchmark
from placement_gym.coarsening import check_contract

# (op nodes, op edges, fused groups) as built by graph version 1 with OpenVINO 2026.4.
EXPECTED_2026_4 = {"inception_v3": (216, 250, 121), "resnet50": (123, 138, 57), "bert": (336, 400, 206)}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(EXPECTED_2026_4))
def test_benchmark_graph_levels(name):
    bench = load_benchmark(name)
    levels = [bench.coarsen("ops"), bench.coarsen("fused"), bench.coarsen("fused", k=64)]
    for coarse in levels:
        check_contract(coarse)
    assert levels[2].num_groups == min(64, levels[1].num_groups)
    if ov.__version__.startswith("2026.4"):
        ops, edges, fused = EXPECTED_2026_4[name]
        assert (bench.ops.num_nodes, bench.ops.num_edges, levels[1].num_groups) == (ops, edges, fused)
    assert bench.ops.meta["name"] == name and bench.ops.meta["version"] == 1
