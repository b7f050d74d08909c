from __future__ import annotations

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from placement_gym.errors import CorruptModelError, CyclicGraphError, GraphError
from placement_gym.graph import CompGraph, topological_order
from tests.strategies import make_graph, random_dags


def test_from_unordered_sorts_topologically_and_merges_parallel_edges():
    g = make_graph(3, [(2, 0, 5), (1, 2, 7), (1, 2, 3)])
    assert g.names == ["n1", "n2", "n0"]
    assert g.edge_src.tolist() == [0, 1] and g.edge_dst.tolist() == [1, 2]
    assert g.edge_bytes.tolist() == [10, 5]


def test_cycle_is_reported_with_its_nodes():
    with pytest.raises(CyclicGraphError, match="n0 -> n1 -> n2 -> n0"):
        make_graph(3, [(0, 1, 1), (1, 2, 1), (2, 0, 1)])


def test_self_loop_is_a_cycle():
    with pytest.raises(CyclicGraphError):
        make_graph(2, [(1, 1, 4)])


def test_backward_edge_in_direct_constructor_is_rejected():
    g = make_graph(2, [(0, 1, 1)])
    with pytest.raises(GraphError, match="topological"):
        CompGraph(
            g.names, g.op_types, g.out_shapes, dict(g.nodes), np.array([1]), np.array([0]), np.array([1])
        )


@settings(max_examples=30, deadline=None)
@given(random_dags())
def test_save_load_round_trip(tmp_path_factory, graph):
    path = tmp_path_factory.mktemp("g") / "graph.npz"
    graph.save(path)
    assert CompGraph.load(path).equals(graph)


def test_round_trip_of_a_real_graph(tmp_path, tiny_bert):
    path = tiny_bert.ops.save(tmp_path / "tiny_bert.npz")
    loaded = CompGraph.load(path)
    assert loaded.equals(tiny_bert.ops)
    assert loaded.to_networkx().number_of_edges() == tiny_bert.ops.num_edges


def test_corrupt_file_raises_and_missing_file_raises(tmp_path):
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"not a zip file")
    with pytest.raises(CorruptModelError, match="bad.npz"):
        CompGraph.load(bad)
    with pytest.raises(FileNotFoundError):
        CompGraph.load(tmp_path / "missing.npz")


def test_real_graph_features(tiny_cnn):
    g = tiny_cnn.ops
    assert g.num_nodes > 5 and np.all(g.edge_src < g.edge_dst)
    conv = [i for i, t in enumerate(g.op_types) if t == "Convolution"]
    assert conv and all(g.nodes["flops"][i] > 0 and g.nodes["param_bytes"][i] > 0 for i in conv)
    assert g.nodes["input_bytes"].sum() == 3 * 16 * 16 * 4  # the one f32 input, read by the stem conv
    assert g.nodes["result_bytes"].sum() == 10 * 4  # the f32 logits
    # every edge carries exactly the f32 tensor of output port 0 of its source ...
    first_output_bytes = np.array([4 * int(np.prod(s)) for s in g.out_shapes])
    assert np.array_equal(g.edge_bytes, first_output_bytes[g.edge_src])
    # ... which for MaxPool (values + int64 indices) is less than all its outputs
    pool = g.op_types.index("MaxPool")
    assert g.nodes["out_bytes"][pool] == first_output_bytes[pool] * 3


@settings(max_examples=60, deadline=None)
@given(random_dags(), st.data())
def test_topological_order_takes_the_smallest_ready_key(graph, data):
    n = graph.num_nodes
    shuffled = data.draw(st.permutations(range(n)))  # relabel so that index order is not topological
    src = np.array(shuffled)[graph.edge_src] if n else graph.edge_src
    dst = np.array(shuffled)[graph.edge_dst] if n else graph.edge_dst
    key = data.draw(st.lists(st.integers(-3, 3), min_size=n, max_size=n))
    g = nx.DiGraph()
    g.add_nodes_from(range(n))
    g.add_edges_from(zip(src.tolist(), dst.tolist()))
    expected = list(nx.lexicographical_topological_sort(g, key=lambda i: (key[i], i)))
    assert topological_order(n, src, dst, key=key).tolist() == expected
    assert topological_order(n, src, dst).tolist() == list(nx.lexicographical_topological_sort(g))


def test_topological_order_rejects_cycles():
    with pytest.raises(CyclicGraphError, match="2 nodes"):
        topological_order(3, [0, 1, 2], [1, 2, 1])
    with pytest.raises(CyclicGraphError):
        topological_order(1, [0], [0])
    assert topological_order(3, [0, 0], [2, 2]).tolist() == [0, 1, 2]  # parallel edges are fine
