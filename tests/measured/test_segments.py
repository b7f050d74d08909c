from __future__ import annotations

import networkx as nx
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from placement_gym.measured.segments import split_segments
from tests.strategies import random_dags


@settings(max_examples=80, deadline=None)
@given(random_dags(max_nodes=30), st.data())
def test_segments_partition_any_dag_into_connected_same_device_parts_in_dataflow_order(graph, data):
    n = graph.num_nodes
    devices = data.draw(st.integers(1, 3))
    op_device = np.array(data.draw(st.lists(st.integers(0, devices - 1), min_size=n, max_size=n)))
    segments = split_segments(graph, op_device)
    label = np.full(n, -1)
    for s, (device, members) in enumerate(segments):
        assert (label[members] == -1).all() and (op_device[members] == device).all()
        assert np.all(np.diff(members) > 0)
        label[members] = s
        inner = nx.Graph()
        inner.add_nodes_from(members.tolist())
        inner.add_edges_from(
            (u, v)
            for u, v in zip(graph.edge_src.tolist(), graph.edge_dst.tolist())
            if label[u] == label[v] == s
        )
        assert nx.is_connected(inner)
    assert (label >= 0).all()
    cross = label[graph.edge_src] != label[graph.edge_dst]
    # segment indices are a topological order, so the quotient is a DAG
    assert np.all(label[graph.edge_src][cross] < label[graph.edge_dst][cross])


def test_segment_counts_are_those_of_the_code_before_the_shared_merge_structure(tiny_bert):
    """Fixed random placements of tiny_bert's ops; counts recorded with the former private union-find."""
    ops = tiny_bert.ops
    two = [len(split_segments(ops, np.random.default_rng(s).integers(0, 2, ops.num_nodes))) for s in range(6)]
    three = [
        len(split_segments(ops, np.random.default_rng(s).integers(0, 3, ops.num_nodes))) for s in range(6)
    ]
    assert two == [54, 63, 62, 58, 59, 62]
    assert three == [73, 76, 73, 70, 74, 70]
