"""Merging the nodes of a DAG into groups without ever creating a cycle.

:class:`DagMerge` is a union-find whose groups carry the quotient graph's edges (with summed bytes), so
that a caller can ask whether merging two groups keeps the quotient acyclic before doing it. Coarsening
(:mod:`placement_gym.coarsening`: fused layers, ``k`` merges) and the measured backend's segments
(:mod:`placement_gym.measured.segments`) decide *which* groups to merge; this module only keeps the
quotient and answers reachability questions.

Merging ``a`` and ``b`` creates a cycle exactly when a path of two or more edges leads from one to the
other (a direct edge becomes internal to the merged group).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


class DagMerge:
    """Groups of a DAG's nodes under successive merges, with the quotient's edges.

    Every node starts as its own group; a group is named by its root node (:meth:`find`). The caller
    checks :meth:`can_merge` before :meth:`merge`: merging groups joined by a longer path would make the
    quotient cyclic.

    Args:
        num_nodes: Number of nodes ``n``.
        edge_src: Source of each edge, shape ``(m,)``.
        edge_dst: Destination of each edge, shape ``(m,)``.
        edge_bytes: Bytes of each edge, shape ``(m,)``; default 1 per edge.

    Attributes:
        succ: Successor groups of each root (empty for merged-away nodes).
        pred: Predecessor groups of each root.
        edge_bytes: Summed bytes of each quotient edge ``(root, root)``.
        alive: The current roots.
    """

    def __init__(
        self,
        num_nodes: int,
        edge_src: Sequence[int] | np.ndarray,
        edge_dst: Sequence[int] | np.ndarray,
        edge_bytes: Sequence[int] | np.ndarray | None = None,
    ) -> None:
        self.parent = list(range(num_nodes))
        self.succ: list[set[int]] = [set() for _ in range(num_nodes)]
        self.pred: list[set[int]] = [set() for _ in range(num_nodes)]
        self.edge_bytes: dict[tuple[int, int], int] = {}
        src, dst = np.asarray(edge_src).tolist(), np.asarray(edge_dst).tolist()
        weights = [1] * len(src) if edge_bytes is None else np.asarray(edge_bytes).tolist()
        for s, d, b in zip(src, dst, weights):
            if s != d:
                self.succ[s].add(d)
                self.pred[d].add(s)
                self.edge_bytes[(s, d)] = self.edge_bytes.get((s, d), 0) + b
        self.alive = set(range(num_nodes))

    def find(self, x: int) -> int:
        """The root of ``x``'s group."""
        while self.parent[x] != x:
            self.parent[x] = self.parent[self.parent[x]]
            x = self.parent[x]
        return x

    def reaches(self, a: int, b: int, *, indirect: bool = False) -> bool:
        """Whether a path leads from group ``a`` to group ``b`` (roots); of two or more edges if ``indirect``."""
        if not indirect and b in self.succ[a]:
            return True
        stack = [s for s in self.succ[a] if s != b]
        seen = set(stack)
        while stack:
            g = stack.pop()
            if g == b:
                return True
            for s in self.succ[g]:
                if s not in seen:
                    seen.add(s)
                    stack.append(s)
        return False

    def can_merge(self, a: int, b: int) -> bool:
        """Whether merging groups ``a`` and ``b`` (roots) keeps the quotient acyclic."""
        return a != b and not self.reaches(a, b, indirect=True) and not self.reaches(b, a, indirect=True)

    def closure(self, a: int, *, forward: bool) -> set[int]:
        """Group ``a`` and all groups downstream of it (``forward``) or upstream of it."""
        step = self.succ if forward else self.pred
        seen, stack = {a}, [a]
        while stack:
            for s in step[stack.pop()]:
                if s not in seen:
                    seen.add(s)
                    stack.append(s)
        return seen

    def merge(self, a: int, b: int) -> int:
        """Merge group ``b`` into group ``a`` (roots; the caller checked :meth:`can_merge`); returns ``a``."""
        for s in list(self.succ[b]):
            self.pred[s].discard(b)
            if s != a:
                self.pred[s].add(a)
                self.succ[a].add(s)
                self.edge_bytes[(a, s)] = self.edge_bytes.get((a, s), 0) + self.edge_bytes.pop((b, s))
            else:
                self.edge_bytes.pop((b, s))
        for p in list(self.pred[b]):
            self.succ[p].discard(b)
            if p != a:
                self.succ[p].add(a)
                self.pred[a].add(p)
                self.edge_bytes[(p, a)] = self.edge_bytes.get((p, a), 0) + self.edge_bytes.pop((p, b))
            else:
                self.edge_bytes.pop((p, b))
        self.succ[a].discard(a)
        self.pred[a].discard(a)
        self.succ[b], self.pred[b] = set(), set()
        self.parent[b] = a
        self.alive.discard(b)
        return a

    def labels(self) -> np.ndarray:
        """The root of every node's group, shape ``(n,)``, int64."""
        return np.array([self.find(x) for x in range(len(self.parent))], dtype=np.int64)
