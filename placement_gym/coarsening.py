"""Coarsening: partition an op graph into groups that are placed as one unit.

Every level is a function with the same contract, checked by the tests:

* every op is in exactly one group;
* the quotient graph (one node per group) is a DAG, groups numbered in a topological order;
* the bytes on quotient edges equal the bytes on op edges between different groups.

Levels:

* ``ops``: no coarsening, one group per op.
* ``fused``: ops fused into one executed layer by the OpenVINO CPU runtime form one group (Moirai: a
  placement must not break the backend's fusions). See :mod:`placement_gym.fusion`.
* ``k``: further DAG-preserving merges down to at most ``K`` groups, HSDAG-style: single-successor /
  single-predecessor chains and small groups first, heavy edges before light ones, never a cycle.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from placement_gym.dag_merge import DagMerge
from placement_gym.errors import CoarseningError, CyclicGraphError, PlacementError, UnknownNameError
from placement_gym.fusion import op_layer_index
from placement_gym.graph import CompGraph, topological_order

LEVELS = ("ops", "fused", "k")


@dataclass(eq=False)
class CoarseGraph:
    """An op graph, its partition into groups, and the quotient graph of the groups.

    Attributes:
        ops: The op graph, ``n`` nodes.
        assignment: Group of each op, shape ``(n,)``, int64 in ``0..G-1``, topologically numbered.
        graph: The quotient graph, ``G`` nodes (see :meth:`CompGraph.quotient`).
        level: How the partition was made (``"ops"``, ``"fused"``, ``"fused+k64"``...).
    """

    ops: CompGraph
    assignment: np.ndarray
    graph: CompGraph
    level: str

    @classmethod
    def from_assignment(cls, ops: CompGraph, labels: Sequence[int] | np.ndarray, level: str) -> CoarseGraph:
        """Build from any group labels (renumbered topologically).

        Raises:
            CyclicGraphError: If the groups' quotient has a cycle.
        """
        assignment = canonical_assignment(ops, labels)
        assignment.flags.writeable = False
        return cls(ops, assignment, ops.quotient(assignment), level)

    @property
    def num_groups(self) -> int:
        return self.graph.num_nodes

    def members(self, group: int) -> np.ndarray:
        """Op indices in ``group``, ascending."""
        return np.flatnonzero(self.assignment == group)

    def expand(self, placement: np.ndarray) -> np.ndarray:
        """Per-op placement from a per-group placement of shape ``(G,)``."""
        placement = np.asarray(placement)
        if placement.shape != (self.num_groups,):
            raise PlacementError(f"placement has shape {placement.shape}, expected ({self.num_groups},)")
        return placement[self.assignment]

    def __repr__(self) -> str:
        return (
            f"CoarseGraph({self.ops.meta.get('name', '?')!r}, level={self.level!r}, groups={self.num_groups})"
        )


def canonical_assignment(graph: CompGraph, labels: Sequence[int] | np.ndarray) -> np.ndarray:
    """Renumber arbitrary group labels ``0..G-1`` in a topological order of the quotient.

    Groups are ordered by a stable topological sort (ties: the group whose first op comes first).

    Raises:
        CoarseningError: If ``labels`` does not have one entry per op.
        CyclicGraphError: If the quotient of the groups has a cycle.
    """
    labels = np.asarray(labels)
    if labels.shape != (graph.num_nodes,):
        raise CoarseningError(f"need one group label per op ({graph.num_nodes}), got shape {labels.shape}")
    _, dense = np.unique(labels, return_inverse=True)
    n_groups = int(dense.max()) + 1 if len(dense) else 0
    first = np.full(n_groups, graph.num_nodes, dtype=np.int64)
    np.minimum.at(first, dense, np.arange(graph.num_nodes))
    gs, gd = dense[graph.edge_src], dense[graph.edge_dst]
    cross = gs != gd
    try:
        order = topological_order(n_groups, gs[cross], gd[cross], key=first)
    except CyclicGraphError as exc:
        raise CyclicGraphError(f"the groups' quotient graph is not a DAG: {exc}") from None
    rank = np.empty(n_groups, dtype=np.int64)
    rank[order] = np.arange(n_groups)
    return rank[dense].astype(np.int64)


def coarsen_ops(graph: CompGraph) -> CoarseGraph:
    """No coarsening: group ``i`` is op ``i``."""
    return CoarseGraph.from_assignment(graph, np.arange(graph.num_nodes), "ops")


def coarsen_fused(graph: CompGraph, fused_layers: Iterable[Iterable[str]]) -> CoarseGraph:
    """Group the ops that the runtime executes as one fused layer.

    Args:
        graph: The op graph (node names are OpenVINO friendly names).
        fused_layers: For each executed runtime layer, the names of the IR ops fused into it (rt_info
            ``originalLayersNames``); names not in ``graph`` (constants, inputs) are ignored.

    Each op's layer is :func:`~placement_gym.fusion.op_layer_index` (ops no layer names join their
    consumers' layer, else their producers'). The ops of a layer are merged along the edges inside it,
    then across, in passes until none succeeds; a merge that would make the quotient cyclic is skipped.
    So when the layers form a DAG (every zoo model) the groups are exactly the layers; otherwise (a path
    leaves a layer and comes back into it) the layer is split where a merge would close a cycle. Either
    way the result satisfies the contract.
    """
    layer = op_layer_index(graph, [list(names) for names in fused_layers])
    state = DagMerge(graph.num_nodes, graph.edge_src, graph.edge_dst, graph.edge_bytes)
    inside = layer[graph.edge_src] == layer[graph.edge_dst]
    pending = list(zip(graph.edge_src[inside].tolist(), graph.edge_dst[inside].tolist()))
    first: dict[int, int] = {}
    for i, k in enumerate(layer.tolist()):
        if first.setdefault(k, i) != i:
            pending.append((first[k], i))  # pieces of a layer that no edge inside it joins
    changed = True
    while changed and pending:
        changed, rejected = False, []
        for u, v in pending:
            a, b = state.find(u), state.find(v)
            if a == b:
                continue
            if state.can_merge(a, b):
                state.merge(a, b)
                changed = True
            else:
                rejected.append((u, v))
        pending = rejected
    return CoarseGraph.from_assignment(graph, state.labels(), "fused")


def coarsen_k(coarse: CoarseGraph | CompGraph, k: int) -> CoarseGraph:
    """Merge groups, never creating a cycle, until at most ``k`` remain.

    Candidate merges are the quotient's edges, cheapest first: the priority of edge ``(u, v)`` is the
    combined size of ``u`` and ``v`` (share of FLOPs plus share of bytes), halved for chain edges (``u``
    has one successor or ``v`` one predecessor, which can never close a cycle); ties go to the heavier edge.
    Unconnected groups are merged smallest first when no edge is left.

    Args:
        coarse: A coarse graph to merge further, or an op graph (starts from one group per op).
        k: Maximum number of groups, ``k >= 1``.

    Raises:
        CoarseningError: If ``k < 1``.
    """
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise CoarseningError(f"k must be an integer >= 1, got {k!r}")
    if isinstance(coarse, CompGraph):
        coarse = coarsen_ops(coarse)
    level = f"{coarse.level}+k{k}"
    if coarse.num_groups <= k:
        return CoarseGraph(coarse.ops, coarse.assignment, coarse.graph, level)
    q = coarse.graph
    flops, size = q.nodes["flops"], q.nodes["out_bytes"] + q.nodes["param_bytes"]
    weight = list(flops / max(flops.sum(), 1.0) + size / max(float(size.sum()), 1.0))
    total_bytes = max(float(q.edge_bytes.sum()), 1.0)
    state = DagMerge(q.num_nodes, q.edge_src, q.edge_dst, q.edge_bytes)
    stamp = [0] * q.num_nodes

    def push(heap: list, u: int, v: int) -> None:
        chain = len(state.succ[u]) == 1 or len(state.pred[v]) == 1
        prio = (weight[u] + weight[v]) * (0.5 if chain else 1.0)
        heapq.heappush(heap, (prio, -state.edge_bytes[(u, v)] / total_bytes, u, v, stamp[u], stamp[v]))

    def fill() -> list:
        heap: list = []
        for u, v in state.edge_bytes:
            push(heap, u, v)
        return heap

    heap = fill()
    while len(state.alive) > k:
        merged = False
        while heap:
            _, _, u, v, su, sv = heapq.heappop(heap)
            if su != stamp[u] or sv != stamp[v] or u not in state.alive or v not in state.alive:
                continue
            if state.can_merge(u, v):
                a = state.merge(u, v)
                weight[a] += weight[v]
                stamp[a] += 1
                for s in state.succ[a]:
                    push(heap, a, s)
                for p in state.pred[a]:
                    push(heap, p, a)
                merged = True
                break
        if merged:
            continue
        if state.edge_bytes:
            heap = fill()  # an edge refused earlier may be legal now that its bypass path merged
            if not heap:
                break
            continue
        # No edges: merge the two smallest groups, which no path connects.
        a, b = sorted(state.alive, key=lambda g: weight[g])[:2]
        weight[a] += weight[b]
        state.merge(a, b)
    labels = state.labels()[coarse.assignment]
    return CoarseGraph.from_assignment(coarse.ops, labels, level)


def check_contract(coarse: CoarseGraph) -> None:
    """Raise ``AssertionError`` if ``coarse`` breaks the coarsening contract (used by tests and debug)."""
    a, ops, q = coarse.assignment, coarse.ops, coarse.graph
    if a.shape != (ops.num_nodes,) or (len(a) and (a.min() != 0 or a.max() != q.num_nodes - 1)):
        raise AssertionError("assignment does not cover groups 0..G-1")
    if np.any(np.bincount(a, minlength=q.num_nodes) == 0):
        raise AssertionError("empty group")
    if np.any(q.edge_src >= q.edge_dst):
        raise AssertionError("quotient not in topological order")
    cross = a[ops.edge_src] != a[ops.edge_dst]
    if int(ops.edge_bytes[cross].sum()) != int(q.edge_bytes.sum()):
        raise AssertionError("edge bytes not conserved")


def coarsen(
    graph: CompGraph,
    level: str,
    *,
    k: int | None = None,
    fused_layers: Iterable[Iterable[str]] | None = None,
) -> CoarseGraph:
    """Coarsen ``graph`` at ``level`` (one of :data:`LEVELS`).

    Args:
        graph: The op graph.
        level: ``"ops"``, ``"fused"`` or ``"k"``.
        k: For ``"k"`` (required) and optionally ``"fused"``: merge further down to at most ``k`` groups.
        fused_layers: For ``"fused"`` and ``"k"``: the runtime's fused layers; ``"k"`` without them starts
            from single ops.

    Raises:
        UnknownNameError: For an unknown level.
        CoarseningError: If ``k`` is missing for ``"k"``, ``k < 1``, or ``"fused"`` lacks ``fused_layers``.
    """
    if level not in LEVELS:
        raise UnknownNameError("coarsening level", level, LEVELS)
    if level == "ops":
        base = coarsen_ops(graph)
    else:
        if level == "fused" and fused_layers is None:
            raise CoarseningError("the 'fused' level needs the runtime's fused layers (fused_layers=...)")
        base = coarsen_fused(graph, fused_layers) if fused_layers is not None else coarsen_ops(graph)
        if level == "k" and k is None:
            raise CoarseningError("the 'k' level needs k (the maximum number of groups)")
    return coarsen_k(base, k) if k is not None else base
