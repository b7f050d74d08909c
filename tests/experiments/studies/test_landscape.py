"""The landscape diagnosis: parallel pairs and swaps, fork-join blocks, and descents that end at local optima."""

from __future__ import annotations

import networkx as nx
import numpy as np

from agents.baselines.common import allowed_devices
from agents.learned.moves import branch_sets, propose, twin_classes
from experiments.studies.landscape import descend, fork_join_blocks, parallel_pairs, replace_blocks, swaps
from placement_gym.problem import PlacementProblem


def _problem() -> PlacementProblem:
    return PlacementProblem.make("tiny_cnn", "multi-accel", "simulated")


def _digraph(problem: PlacementProblem) -> nx.DiGraph:
    cost = problem.cost_model()
    graph = nx.DiGraph()
    graph.add_nodes_from(range(cost.num_groups))
    graph.add_edges_from(zip(cost.edge_src.tolist(), cost.edge_dst.tolist()))
    return graph


def test_parallel_pairs_are_the_unordered_groups_within_two_hops():
    problem = _problem()
    graph = _digraph(problem)
    hops = dict(nx.all_pairs_shortest_path_length(graph.to_undirected(), cutoff=2))
    expected = {
        (a, b)
        for a in graph
        for b in hops[a]
        if a < b and not nx.has_path(graph, a, b) and not nx.has_path(graph, b, a)
    }
    pairs = parallel_pairs(problem.cost_model())
    assert {tuple(p) for p in pairs.tolist()} == expected
    assert len(expected) > 0  # tiny_cnn has a fork, so the test checks something


def test_swaps_exchange_the_devices_of_a_pair():
    problem = _problem()
    pairs = parallel_pairs(problem.cost_model())
    placement = np.arange(problem.num_groups) % problem.num_devices
    swapped = swaps(placement, pairs, allowed_devices(problem))
    assert len(swapped) == sum(placement[a] != placement[b] for a, b in pairs)
    for row in swapped:
        changed = np.flatnonzero(row != placement)
        assert len(changed) == 2
        a, b = changed
        assert row[a] == placement[b] and row[b] == placement[a]


def test_fork_join_blocks_are_disjoint_branches_of_one_fork():
    problem = _problem()
    graph = _digraph(problem)
    blocks = fork_join_blocks(problem.cost_model())
    assert blocks
    for units in blocks:
        members = [g for unit in units for g in unit]
        assert len(members) == len(set(members))
        heads = [unit[0] for unit in units]
        forks = [set(graph.predecessors(h)) for h in heads[: len(heads) - 1]]
        assert all(len(f) == 1 for f in forks) and len(set.union(*forks)) == 1


def test_descents_end_at_local_optima():
    problem = _problem()
    cost, allowed = problem.cost_model(), allowed_devices(problem)
    singles = [np.full(problem.num_groups, d, dtype=np.int64) for d in range(problem.num_devices)]
    start = max(singles, key=lambda p: problem.evaluate(p).latency)  # the slowest device: room to improve
    result = descend(problem, start, parallel_pairs(cost))
    assert result["latency"] < problem.evaluate(start).latency and result["steps"] >= 1
    blocks = replace_blocks(problem, start)
    assert blocks["latency"] <= problem.evaluate(start).latency and blocks["simulated"] > 0
    # no single move improves on the descent's local optimum (rebuild it: the descent is deterministic)
    current, latency = start, problem.evaluate(start).latency
    for _ in range(result["steps"]):
        after = np.concatenate(
            [propose(current, allowed, twin_classes(cost), branch_sets(cost)).apply_all(current),
             swaps(current, parallel_pairs(cost), allowed)]
        )  # fmt: skip
        lat = np.array([e.latency if e.feasible else np.inf for e in problem.evaluate_batch(after)])
        current, latency = after[int(np.argmin(lat))], float(lat.min())
    assert latency == result["latency"]
    moves = propose(current, allowed, twin_classes(cost), branch_sets(cost))
    assert min(e.latency for e in problem.evaluate_batch(moves.apply_all(current))) >= latency
