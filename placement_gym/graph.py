"""`CompGraph`: a computation graph as a DAG of executable ops, in topological order.

Nodes are numbered ``0..n-1`` in a stable topological order (every edge goes from a lower to a higher
index). Per-node features and per-edge tensor sizes live in numpy arrays for speed; :meth:`to_networkx`
gives a networkx view for graph algorithms. The graph is immutable by convention and serialises to a
single ``.npz`` file without loss.

The same class describes an op graph (one node per OpenVINO op) and a coarse graph's quotient (one node
per group of ops); see :mod:`placement_gym.coarsening`.
"""

from __future__ import annotations

import heapq
import json
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import networkx as nx
import numpy as np

from placement_gym.errors import CorruptModelError, CyclicGraphError, GraphError

#: Per-node numeric features, each an array of shape ``(n,)``.
NODE_ARRAYS: dict[str, type] = {
    "out_elems": np.int64,  # elements in all outputs of the op
    "out_bytes": np.int64,  # bytes of all outputs of the op
    "param_bytes": np.int64,  # bytes of the constants (weights) folded into the op
    "input_bytes": np.int64,  # bytes read from the model's Parameters (graph inputs)
    "result_bytes": np.int64,  # bytes the op hands to the model's Results (graph outputs)
    "flops": np.float64,  # estimated floating-point operations (see placement_gym.flops)
}

FORMAT_VERSION = 1


def topological_order(
    num_nodes: int,
    edge_src: Sequence[int] | np.ndarray,
    edge_dst: Sequence[int] | np.ndarray,
    key: Sequence[float] | np.ndarray | None = None,
) -> np.ndarray:
    """Nodes in a topological order that always takes the ready node of smallest ``key``.

    Kahn's algorithm with a heap: ties go to the smaller index, and without ``key`` the order is the
    lexicographically smallest one. Parallel edges are allowed.

    Args:
        num_nodes: Number of nodes ``n``.
        edge_src: Source of each edge, shape ``(m,)``, ints in ``[0, n)``.
        edge_dst: Destination of each edge, shape ``(m,)``.
        key: Priority of each node, shape ``(n,)`` (smallest first); ``None``: the node index.

    Returns:
        Node indices, shape ``(n,)``, int64.

    Raises:
        CyclicGraphError: If the edges contain a cycle (a self-loop included).
    """
    src, dst = np.asarray(edge_src, dtype=np.int64), np.asarray(edge_dst, dtype=np.int64)
    indeg = np.bincount(dst, minlength=num_nodes).tolist()
    by_src = np.argsort(src, kind="stable")
    starts = np.searchsorted(src[by_src], np.arange(num_nodes + 1)).tolist()
    succ = dst[by_src].tolist()
    prio = list(range(num_nodes)) if key is None else np.asarray(key, dtype=np.float64).tolist()
    ready = [(prio[i], i) for i in range(num_nodes) if indeg[i] == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        _, i = heapq.heappop(ready)
        order.append(i)
        for j in succ[starts[i] : starts[i + 1]]:
            indeg[j] -= 1
            if indeg[j] == 0:
                heapq.heappush(ready, (prio[j], j))
    if len(order) != num_nodes:
        raise CyclicGraphError(f"the graph has a cycle ({num_nodes - len(order)} nodes on or after it)")
    return np.array(order, dtype=np.int64)


@dataclass(eq=False)
class CompGraph:
    """A DAG of ops with features, nodes in topological order.

    Attributes:
        names: Unique node names, length ``n``.
        op_types: OpenVINO op type of each node (``"Group"`` never appears; a group takes the type of its
            heaviest op), length ``n``.
        out_shapes: Shape of each node's first output, length ``n``.
        nodes: Numeric node features, each of shape ``(n,)``; keys are :data:`NODE_ARRAYS`.
        edge_src: Source node of each edge, shape ``(m,)``, int64, ``edge_src < edge_dst``.
        edge_dst: Destination node of each edge, shape ``(m,)``, int64.
        edge_bytes: Bytes of the tensors carried by each edge, shape ``(m,)``, int64.
        meta: Free-form JSON-serialisable metadata (model name, graph version, library versions...).
    """

    names: list[str]
    op_types: list[str]
    out_shapes: list[tuple[int, ...]]
    nodes: dict[str, np.ndarray]
    edge_src: np.ndarray
    edge_dst: np.ndarray
    edge_bytes: np.ndarray
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        n = len(self.names)
        if len(set(self.names)) != n:
            raise GraphError("node names must be unique")
        if len(self.op_types) != n or len(self.out_shapes) != n:
            raise GraphError(f"names, op_types and out_shapes must all have length {n}")
        missing = set(NODE_ARRAYS) - set(self.nodes)
        if missing:
            raise GraphError(f"missing node features: {sorted(missing)}")
        for key, dtype in NODE_ARRAYS.items():
            arr = np.ascontiguousarray(self.nodes[key], dtype=dtype)
            if arr.shape != (n,):
                raise GraphError(f"node feature {key!r} has shape {arr.shape}, expected ({n},)")
            arr.flags.writeable = False
            self.nodes[key] = arr
        self.edge_src = np.ascontiguousarray(self.edge_src, dtype=np.int64)
        self.edge_dst = np.ascontiguousarray(self.edge_dst, dtype=np.int64)
        self.edge_bytes = np.ascontiguousarray(self.edge_bytes, dtype=np.int64)
        m = len(self.edge_src)
        if self.edge_dst.shape != (m,) or self.edge_bytes.shape != (m,):
            raise GraphError("edge_src, edge_dst and edge_bytes must have the same length")
        if m and (self.edge_src.min() < 0 or self.edge_dst.max() >= n):
            raise GraphError(f"edge endpoints must lie in [0, {n})")
        if np.any(self.edge_src == self.edge_dst):
            raise CyclicGraphError("graph has a self-loop")
        if np.any(self.edge_src > self.edge_dst):
            raise GraphError(
                "nodes are not in topological order; build the graph with CompGraph.from_unordered"
            )
        pairs = self.edge_src * max(n, 1) + self.edge_dst
        if len(np.unique(pairs)) != m:
            raise GraphError("duplicate edges; merge parallel edges by summing their bytes")
        order = np.lexsort((self.edge_dst, self.edge_src))
        self.edge_src, self.edge_dst, self.edge_bytes = (
            self.edge_src[order],
            self.edge_dst[order],
            self.edge_bytes[order],
        )
        for arr in (self.edge_src, self.edge_dst, self.edge_bytes):
            arr.flags.writeable = False

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_unordered(
        cls,
        names: list[str],
        op_types: list[str],
        out_shapes: list[tuple[int, ...]],
        nodes: dict[str, np.ndarray],
        edges: list[tuple[int, int, int]],
        meta: dict[str, Any] | None = None,
    ) -> CompGraph:
        """Build a graph from nodes in any order and edges ``(src, dst, bytes)``.

        Parallel edges are merged (bytes summed). Nodes are renumbered in a stable topological order
        (ties broken by the given order).

        Raises:
            CyclicGraphError: If the edges contain a cycle (the message lists one).
        """
        n = len(names)
        merged: dict[tuple[int, int], int] = {}
        for s, d, b in edges:
            if s == d:
                raise CyclicGraphError(f"self-loop on node {names[s]!r}")
            merged[(s, d)] = merged.get((s, d), 0) + int(b)
        try:
            order = topological_order(n, [s for s, _ in merged], [d for _, d in merged]).tolist()
        except CyclicGraphError:
            g = nx.DiGraph(list(merged))
            cycle = nx.find_cycle(g)
            path = " -> ".join(names[u] for u, _ in cycle) + f" -> {names[cycle[0][0]]}"
            raise CyclicGraphError(f"graph is not a DAG; cycle: {path}") from None
        pos = np.empty(n, dtype=np.int64)
        pos[order] = np.arange(n)
        src = np.array([pos[s] for s, _ in merged], dtype=np.int64)
        dst = np.array([pos[d] for _, d in merged], dtype=np.int64)
        return cls(
            names=[names[i] for i in order],
            op_types=[op_types[i] for i in order],
            out_shapes=[tuple(out_shapes[i]) for i in order],
            nodes={k: np.asarray(nodes[k])[order] for k in NODE_ARRAYS},
            edge_src=src,
            edge_dst=dst,
            edge_bytes=np.array(list(merged.values()), dtype=np.int64),
            meta=dict(meta or {}),
        )

    # ------------------------------------------------------------------ views
    @property
    def num_nodes(self) -> int:
        return len(self.names)

    @property
    def num_edges(self) -> int:
        return len(self.edge_src)

    def __len__(self) -> int:
        return self.num_nodes

    def __repr__(self) -> str:
        name = self.meta.get("name", "?")
        return f"CompGraph({name!r}, nodes={self.num_nodes}, edges={self.num_edges})"

    def to_networkx(self) -> nx.DiGraph:
        """A networkx DiGraph with node attributes ``name``, ``op_type`` and the numeric features, and
        edge attribute ``bytes``."""
        g = nx.DiGraph()
        for i, name in enumerate(self.names):
            attrs = {k: v[i].item() for k, v in self.nodes.items()}
            g.add_node(i, name=name, op_type=self.op_types[i], **attrs)
        for s, d, b in zip(self.edge_src.tolist(), self.edge_dst.tolist(), self.edge_bytes.tolist()):
            g.add_edge(s, d, bytes=b)
        return g

    def predecessors(self) -> list[np.ndarray]:
        """Predecessor indices of each node (a list of ``n`` int64 arrays)."""
        order = np.argsort(self.edge_dst, kind="stable")
        splits = np.searchsorted(self.edge_dst[order], np.arange(1, self.num_nodes))
        return np.split(self.edge_src[order], splits)

    def successors(self) -> list[np.ndarray]:
        """Successor indices of each node (a list of ``n`` int64 arrays); edges are sorted by source."""
        splits = np.searchsorted(self.edge_src, np.arange(1, self.num_nodes))
        return np.split(self.edge_dst, splits)

    # ------------------------------------------------------------------ quotient
    def quotient(self, assignment: np.ndarray) -> CompGraph:
        """The graph of groups: node ``g`` stands for all ops with ``assignment == g``.

        Numeric features are summed over the members; a group's op type and output shape are those of
        its member with most FLOPs (ties: the last in topological order); edges between groups carry the
        summed bytes of the op edges they replace (edges inside a group vanish).

        Args:
            assignment: Group of each node, shape ``(n,)``, integers ``0..G-1``, every group non-empty and
                numbered in a topological order of the quotient (see
                :func:`placement_gym.coarsening.canonical_assignment`).

        Raises:
            GraphError: If the assignment has the wrong shape or leaves a group empty.
            CyclicGraphError: If the quotient is not a DAG in the given group order.
        """
        a = np.asarray(assignment)
        if a.shape != (self.num_nodes,) or not np.issubdtype(a.dtype, np.integer):
            raise GraphError(f"assignment must be an integer array of shape ({self.num_nodes},)")
        n_groups = int(a.max()) + 1 if len(a) else 0
        counts = np.bincount(a, minlength=n_groups)
        if a.min(initial=0) < 0 or np.any(counts == 0):
            raise GraphError("assignment must number groups 0..G-1 with no empty group")
        nodes = {
            k: np.bincount(a, weights=v, minlength=n_groups).astype(NODE_ARRAYS[k])
            for k, v in self.nodes.items()
        }
        # Integer features are exact only below 2**53 bytes; far above any real model.
        heaviest = np.zeros(n_groups, dtype=np.int64)
        best = np.full(n_groups, -1.0)
        for i, (g, f) in enumerate(zip(a.tolist(), self.nodes["flops"].tolist())):
            if f >= best[g]:
                best[g], heaviest[g] = f, i
        gs, gd = a[self.edge_src], a[self.edge_dst]
        cross = gs != gd
        if np.any(gs[cross] > gd[cross]):
            raise CyclicGraphError(
                "group numbering is not a topological order of the quotient (or it has a cycle)"
            )
        key = gs[cross] * n_groups + gd[cross]
        uniq, inv = np.unique(key, return_inverse=True)
        qbytes = np.bincount(inv, weights=self.edge_bytes[cross], minlength=len(uniq)).astype(np.int64)
        return CompGraph(
            names=[f"group_{g}" for g in range(n_groups)],
            op_types=[self.op_types[i] for i in heaviest],
            out_shapes=[self.out_shapes[i] for i in heaviest],
            nodes=nodes,
            edge_src=uniq // n_groups,
            edge_dst=uniq % n_groups,
            edge_bytes=qbytes,
            meta=dict(self.meta),
        )

    # ------------------------------------------------------------------ persistence
    def save(self, path: str | os.PathLike) -> Path:
        """Write the graph to ``path`` (a ``.npz`` file), atomically."""
        path = Path(path)
        header = {
            "format_version": FORMAT_VERSION,
            "names": self.names,
            "op_types": self.op_types,
            "out_shapes": [list(s) for s in self.out_shapes],
            "meta": self.meta,
        }
        arrays = {f"node_{k}": v for k, v in self.nodes.items()}
        arrays.update(edge_src=self.edge_src, edge_dst=self.edge_dst, edge_bytes=self.edge_bytes)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                np.savez(f, header=np.array(json.dumps(header)), **arrays)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return path

    @classmethod
    def load(cls, path: str | os.PathLike) -> CompGraph:
        """Read a graph written by :meth:`save`.

        Raises:
            FileNotFoundError: If ``path`` does not exist.
            CorruptModelError: If the file is not a valid saved graph.
        """
        path = Path(path)
        if not path.exists():
            raise FileNotFoundError(f"no saved graph at {path}")
        import zipfile

        if not zipfile.is_zipfile(path):  # NumPy would try it as a pickle and advise loading it unsafely
            raise CorruptModelError(f"{path} is not a valid saved CompGraph: not an .npz archive (damaged, or another format)")
        try:
            with np.load(path, allow_pickle=False) as data:
                header = json.loads(str(data["header"]))
                if header.get("format_version") != FORMAT_VERSION:
                    raise CorruptModelError(
                        f"{path}: unsupported graph format {header.get('format_version')}"
                    )
                return cls(
                    names=list(header["names"]),
                    op_types=list(header["op_types"]),
                    out_shapes=[tuple(s) for s in header["out_shapes"]],
                    nodes={k: data[f"node_{k}"] for k in NODE_ARRAYS},
                    edge_src=data["edge_src"],
                    edge_dst=data["edge_dst"],
                    edge_bytes=data["edge_bytes"],
                    meta=header["meta"],
                )
        except CorruptModelError:
            raise
        except Exception as exc:  # zipfile, json and key errors all mean a damaged file
            from placement_gym.files import load_refusal

            raise CorruptModelError(f"{path} is not a valid saved CompGraph: {load_refusal(exc)}") from exc

    def equals(self, other: CompGraph) -> bool:
        """True if both graphs have identical structure, features and metadata."""
        return (
            self.names == other.names
            and self.op_types == other.op_types
            and self.out_shapes == other.out_shapes
            and all(np.array_equal(self.nodes[k], other.nodes[k]) for k in NODE_ARRAYS)
            and np.array_equal(self.edge_src, other.edge_src)
            and np.array_equal(self.edge_dst, other.edge_dst)
            and np.array_equal(self.edge_bytes, other.edge_bytes)
            and self.meta == other.meta
        )
