from __future__ import annotations

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from placement_gym.coarsening import (
    CoarseGraph,
    check_contract,
    coarsen,
    coarsen_fused,
    coarsen_k,
    coarsen_ops,
)
from placement_gym.errors import CoarseningError, CyclicGraphError, UnknownNameError
from tests.strategies import make_graph, random_dags


def _quotient_is_dag(coarse) -> bool:
    g = nx.DiGraph()
    g.add_nodes_from(range(coarse.num_groups))
    a = coarse.assignment
    g.add_edges_from((a[s], a[d]) for s, d in zip(coarse.ops.edge_src, coarse.ops.edge_dst) if a[s] != a[d])
    return nx.is_directed_acyclic_graph(g)


@settings(max_examples=60, deadline=None)
@given(random_dags(), st.integers(1, 45))
def test_k_groups_contract(graph, k):
    coarse = coarsen_k(graph, k)
    check_contract(coarse)
    assert _quotient_is_dag(coarse)
    assert coarse.num_groups == min(k, graph.num_nodes)  # merging stops exactly at k
    assert np.isclose(coarse.graph.nodes["flops"].sum(), graph.nodes["flops"].sum())


@settings(max_examples=60, deadline=None)
@given(random_dags(), st.data())
def test_fused_contract_holds_for_any_layer_list(graph, data):
    # Arbitrary "runtime layers", including groupings that would close a cycle: they must be repaired.
    labels = data.draw(st.lists(st.integers(0, 5), min_size=graph.num_nodes, max_size=graph.num_nodes))
    layers = [[graph.names[i] for i in range(graph.num_nodes) if labels[i] == c] for c in range(6)]
    coarse = coarsen_fused(graph, layers)
    check_contract(coarse)
    assert _quotient_is_dag(coarse)
    k = data.draw(st.integers(1, 10))
    further = coarsen_k(coarse, k)
    check_contract(further)
    # further merging never splits a fused group
    for g in range(coarse.num_groups):
        assert len(set(further.assignment[coarse.assignment == g].tolist())) == 1


def test_chain_merge_and_cycle_refusal():
    # a -> b -> c and a -> c: merging a with c alone would make a cycle through b.
    g = make_graph(3, [(0, 1, 1), (1, 2, 1), (0, 2, 1)])
    coarse = coarsen_fused(g, [["n0", "n2"], ["n1"]])
    check_contract(coarse)
    assert coarse.num_groups == 3
    with pytest.raises(CyclicGraphError):
        CoarseGraph.from_assignment(g, np.array([0, 1, 0]), "bad")


def test_bytes_conserved_by_hand():
    g = make_graph(4, [(0, 1, 10), (0, 2, 20), (1, 3, 30), (2, 3, 40)])
    coarse = CoarseGraph.from_assignment(g, np.array([0, 0, 1, 1]), "hand")
    assert coarse.graph.edge_bytes.tolist() == [20 + 30]


def test_bad_arguments():
    g = make_graph(3, [(0, 1, 1), (1, 2, 1)])
    for bad in (0, -3, 1.5, True):
        with pytest.raises(CoarseningError):
            coarsen_k(g, bad)
    with pytest.raises(UnknownNameError, match="known: fused, k, ops"):
        coarsen(g, "fuzed")
    with pytest.raises(CoarseningError):
        coarsen(g, "k")


def test_levels_on_a_real_model(tiny_bert):
    ops = tiny_bert.coarsen("ops")
    fused = tiny_bert.coarsen("fused")
    k8 = tiny_bert.coarsen("k", k=8)
    for c in (ops, fused, k8):
        check_contract(c)
    assert ops.num_groups == tiny_bert.ops.num_nodes > fused.num_groups > k8.num_groups == 8
    assert coarsen_ops(tiny_bert.ops).assignment.tolist() == list(range(tiny_bert.ops.num_nodes))


def test_fused_level_matches_runtime_fusion(tiny_cnn):
    """Each runtime layer's IR ops share one group, and groups are unions of runtime layers."""
    from placement_gym.fusion import runtime_fused_layers

    index = {n: i for i, n in enumerate(tiny_cnn.ops.names)}
    layers = runtime_fused_layers(tiny_cnn.model)
    ops_only = [
        [n for n in layer if n in index] for layer in layers
    ]  # runtime-made constants get fresh names
    assert ops_only == [[n for n in layer if n in index] for layer in tiny_cnn.fused_layers]
    coarse = tiny_cnn.coarsen("fused")
    group_of_layer = []
    for layer in layers:
        members = [index[n] for n in layer if n in index]
        if members:
            groups = set(coarse.assignment[members].tolist())
            assert len(groups) == 1, f"runtime layer {layer} split over groups {groups}"
            group_of_layer.append(groups.pop())
    # the conv + batch-norm + relu of the left branch were fused by the runtime and must be one group
    conv_layers = [layer for layer in layers if any("left" in n for n in layer) and len(layer) > 1]
    assert conv_layers, "expected the CPU runtime to fuse conv+bn+relu in the left branch"
    # tiny_cnn: 17 IR ops; every group corresponds to exactly one executed runtime layer
    assert coarse.num_groups == len(set(group_of_layer))
    assert coarse.num_groups < tiny_cnn.ops.num_nodes


def test_coarsen_as_rebuilds_a_recorded_level(tiny_bert):
    for coarse in (
        tiny_bert.coarsen("ops"),
        tiny_bert.coarsen("fused"),
        tiny_bert.coarsen("k", k=8),
        tiny_bert.coarsen("ops", k=20),
    ):
        again = tiny_bert.coarsen_as(coarse.level)
        assert again.level == coarse.level and np.array_equal(again.assignment, coarse.assignment)
