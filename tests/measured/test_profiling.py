"""Splitting profiled layer times over ops: the same op -> layer rule as the ``fused`` coarsening level."""

from __future__ import annotations

import numpy as np
import pytest

from placement_gym.fusion import op_layer_index
from placement_gym.measured.profiling import layer_owners, measure_layer_times, split_layer_times
from placement_gym.platforms import load_platform
from tests.strategies import make_graph
from tests.test_fusion import same_partition


def test_added_nodes_and_unnamed_ops_follow_the_rule():
    # ops: n0 -> n1 -> n2, n1 -> n3; n1 is named by no runtime node (renamed by the runtime)
    ops = make_graph(4, [(0, 1, 1), (1, 2, 1), (1, 3, 1)])
    layers = [
        ("L0", ["n0"], []),
        ("reorder_a", [], ["L0"]),  # feeds L2 only: its time goes to L2
        ("L2", ["n2"], ["reorder_a"]),
        ("L3", ["n3"], ["L0"]),
        ("reorder_b", [], ["L2"]),  # feeds only outputs, which own no op: its producer L2
        ("out2", [], ["reorder_b"]),
        ("out3", [], ["reorder_b", "L3"]),
    ]
    op_node, owner = layer_owners(ops, layers)
    assert op_node.tolist() == [0, 0, 2, 3]  # n1's consumers disagree (L2, L3): its producer's node
    assert owner.tolist()[:5] == [0, 2, 2, 3, 2]
    times = {"L0": 1.0, "reorder_a": 0.5, "L2": 2.0, "L3": 4.0, "reorder_b": 0.25, "ghost": 9.0}
    op_times = split_layer_times(ops, times, layers)
    assert op_times[0] + op_times[1] == pytest.approx(1.0)
    assert op_times[2] == pytest.approx(2.0 + 0.5 + 0.25) and op_times[3] == pytest.approx(4.0)


def test_profiled_times_split_over_exactly_the_fused_groups(tiny_bert):
    """On the CPU, every runtime layer's time goes to the ops of one ``fused`` group, and every op of the
    group takes its time from that layer only."""
    device = load_platform("local").devices[0]
    layers = measure_layer_times(tiny_bert.model, device, warmup=0, runs=1).layers
    names = set(tiny_bert.ops.names)
    assert [[n for n in o if n in names] for _, o, _ in layers] == [
        [n for n in layer if n in names] for layer in tiny_bert.fused_layers
    ]  # the profile's layers are the fusions the coarsening reads
    op_node, owner = layer_owners(tiny_bert.ops, layers)
    coarse = tiny_bert.coarsen("fused")
    assert same_partition(op_node, coarse.assignment)
    assert same_partition(op_node, op_layer_index(tiny_bert.ops, tiny_bert.fused_layers))
    for k, (name, _, _) in enumerate(layers):
        if owner[k] < 0:
            continue
        op_times = split_layer_times(tiny_bert.ops, {name: 1.0}, layers)
        groups = set(coarse.assignment[op_times > 0].tolist())
        assert len(groups) == 1 and op_times.sum() == pytest.approx(1.0)
        assert np.all(op_times[coarse.assignment != groups.pop()] == 0)
