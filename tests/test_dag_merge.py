from __future__ import annotations

import networkx as nx
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from placement_gym.dag_merge import DagMerge
from tests.strategies import random_dags


def _quotient(graph, labels: np.ndarray) -> nx.DiGraph:
    q = nx.DiGraph()
    q.add_nodes_from(set(labels.tolist()))
    q.add_edges_from(
        (int(labels[s]), int(labels[d]))
        for s, d in zip(graph.edge_src, graph.edge_dst)
        if labels[s] != labels[d]
    )
    return q


def _merged_is_dag(graph, labels: np.ndarray, a: int, b: int) -> bool:
    return nx.is_directed_acyclic_graph(_quotient(graph, np.where(labels == b, a, labels)))


@settings(max_examples=80, deadline=None)
@given(random_dags(max_nodes=25), st.data())
def test_merges_never_create_a_cycle_and_can_merge_is_exact(graph, data):
    state = DagMerge(graph.num_nodes, graph.edge_src, graph.edge_dst, graph.edge_bytes)
    n = graph.num_nodes
    for _ in range(data.draw(st.integers(0, 3 * n))):
        a = state.find(data.draw(st.integers(0, n - 1)))
        b = state.find(data.draw(st.integers(0, n - 1)))
        labels = state.labels()
        allowed = state.can_merge(a, b)
        assert allowed == (a != b and _merged_is_dag(graph, labels, a, b))
        if allowed:
            assert state.merge(a, b) == a
        labels = state.labels()
        q = _quotient(graph, labels)
        assert nx.is_directed_acyclic_graph(q)
        # the structure's edges and bytes are those of the quotient of its labels
        assert set(state.edge_bytes) == set(q.edges)
        cross = labels[graph.edge_src] != labels[graph.edge_dst]
        assert sum(state.edge_bytes.values()) == int(graph.edge_bytes[cross].sum())
        assert state.alive == set(labels.tolist())
        for g in state.alive:
            assert state.succ[g] == set(q.successors(g)) and state.pred[g] == set(q.predecessors(g))
            assert state.reaches(g, g) is False
            assert state.closure(g, forward=True) == {g} | nx.descendants(q, g)
            assert state.closure(g, forward=False) == {g} | nx.ancestors(q, g)


def test_indirect_path_blocks_a_merge():
    # a -> b -> c and a -> c: a and c cannot merge (c would be before and after b); a and b can.
    state = DagMerge(3, [0, 1, 0], [1, 2, 2], [5, 6, 7])
    assert (
        state.reaches(0, 2) and state.reaches(0, 2, indirect=True) and not state.reaches(0, 1, indirect=True)
    )
    assert not state.can_merge(0, 2) and state.can_merge(0, 1)
    state.merge(0, 1)
    assert state.edge_bytes == {(0, 2): 6 + 7}
    assert state.can_merge(0, 2)
    state.merge(0, 2)
    assert state.labels().tolist() == [0, 0, 0] and state.edge_bytes == {} and state.alive == {0}
