"""The one op -> fused-layer rule, and that the ``fused`` coarsening level groups ops by it."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from placement_gym.coarsening import CoarseGraph, check_contract, coarsen_fused
from placement_gym.errors import CyclicGraphError
from placement_gym.fusion import op_layer_index, resolve_owners
from tests.strategies import make_graph, random_dags


def same_partition(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two labellings group the same items together (whatever the label values)."""
    pairs = len(set(zip(a.tolist(), b.tolist())))
    return pairs == len(set(a.tolist())) == len(set(b.tolist()))


def test_unnamed_ops_join_their_consumers_layer_else_their_producers():
    # Layers A = [n0], B = [n2], C = [n6]; "?" marks an op no layer names:
    #   n0 (A) -> n1 (?) -> n2 (B)            n1 feeds only B: joins B
    #   n0 (A) -> n3 (?) -> n4 (?) -> n2 (B)  a chain of unnamed ops follows the layer it feeds
    #   n0 (A) -> n5 (?) -> n2 (B), n6 (C)    consumers disagree: joins its producer's layer A
    #   n7 (?)                                no neighbour: a layer of its own
    g = make_graph(
        8, [(0, 1, 1), (1, 2, 1), (0, 3, 1), (3, 4, 1), (4, 2, 1), (0, 5, 1), (5, 2, 1), (5, 6, 1)]
    )
    layers = [["n0"], ["n2"], ["n6"]]
    layer = dict(zip(g.names, op_layer_index(g, layers).tolist()))
    assert (layer["n1"], layer["n3"], layer["n4"]) == (1, 1, 1)
    assert layer["n5"] == 0
    assert layer["n7"] == 3  # index >= len(layers): a layer of its own
    coarse = coarsen_fused(g, layers)
    assert same_partition(coarse.assignment, op_layer_index(g, layers))


def test_first_layer_naming_an_op_owns_it():
    g = make_graph(2, [(0, 1, 1)])
    assert op_layer_index(g, [["n0", "n1"], ["n1"]]).tolist() == [0, 0]


def _random_layers(graph, data) -> list[list[str]]:
    """Random layers over a random subset of the ops (the rest are unnamed)."""
    n = graph.num_nodes
    labels = data.draw(st.lists(st.integers(-1, 5), min_size=n, max_size=n))  # -1: named by no layer
    return [[graph.names[i] for i in range(n) if labels[i] == c] for c in range(6)]


def _acyclic(graph, labels: np.ndarray) -> bool:
    try:
        CoarseGraph.from_assignment(graph, labels, "check")
    except CyclicGraphError:
        return False
    return True


@settings(max_examples=100, deadline=None)
@given(random_dags(max_nodes=30), st.data())
def test_rule_is_the_documented_one_and_never_closes_a_cycle(graph, data):
    layers = _random_layers(graph, data)
    named = np.full(graph.num_nodes, -1, dtype=np.int64)
    for k, names in enumerate(layers):
        named[[graph.names.index(x) for x in names]] = k
    layer = op_layer_index(graph, layers)
    succs, preds = graph.successors(), graph.predecessors()
    for i in np.flatnonzero(named < 0).tolist():
        consumers, producers = set(layer[succs[i]].tolist()), set(layer[preds[i]].tolist())
        if layer[i] >= len(layers):  # left alone: neither side agrees on a layer
            assert len(consumers) != 1 or not consumers <= set(range(len(layers)))
        else:
            assert consumers == {layer[i]} or producers == {layer[i]}
    # the layers with each unnamed op alone form a DAG -> the rule keeps it a DAG
    alone = np.where(named >= 0, named, len(layers) + np.arange(graph.num_nodes))
    if _acyclic(graph, alone):
        assert _acyclic(graph, layer)


@settings(max_examples=100, deadline=None)
@given(random_dags(max_nodes=30), st.data())
def test_fused_groups_are_the_layers_of_the_rule(graph, data):
    layers = _random_layers(graph, data)
    layer = op_layer_index(graph, layers)
    coarse = coarsen_fused(graph, layers)
    check_contract(coarse)
    for g in range(coarse.num_groups):  # a group never mixes layers
        assert len(set(layer[coarse.members(g)].tolist())) == 1
    if _acyclic(graph, layer):  # and when the layers form a DAG, a group is a whole layer
        assert same_partition(coarse.assignment, layer)


def test_resolve_owners_leaves_disagreeing_nodes_alone():
    # 0 -> 2, 1 -> 2, 2 -> 3, 2 -> 4 with owners 0, 1 on the inputs and 3, 4 on the outputs
    succs = [[2], [2], [3, 4], [], []]
    preds = [[], [], [0, 1], [2], [2]]
    assert resolve_owners(np.array([0, 1, -1, 3, 4]), succs, preds).tolist() == [0, 1, -1, 3, 4]
    assert resolve_owners(np.array([0, 1, -1, 3, 3]), succs, preds).tolist() == [0, 1, 3, 3, 3]
    assert resolve_owners(np.array([0, 0, -1, 3, 4]), succs, preds).tolist() == [0, 0, 0, 3, 4]


def test_real_model_groups_are_its_runtime_layers(tiny_bert, tiny_cnn):
    for bench in (tiny_bert, tiny_cnn):
        layer = op_layer_index(bench.ops, bench.fused_layers)
        assert same_partition(bench.coarsen("fused").assignment, layer)
    # tiny_bert's attention runs as one runtime layer (its Q.K^T MatMul renamed away): one group
    layer = op_layer_index(tiny_bert.ops, tiny_bert.fused_layers)
    softmax = [i for i, t in enumerate(tiny_bert.ops.op_types) if t == "Softmax"]
    for i in softmax:
        members = np.flatnonzero(layer == layer[i])
        assert [tiny_bert.ops.op_types[j] for j in members].count("MatMul") == 2
