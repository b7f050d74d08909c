"""Placement-improvement moves and the features a learned scorer ranks them by.

A *move* sends a set of groups to one device. Three kinds are proposed from a placement ``p``:

* ``single``: one group ``g`` to a device ``d != p[g]`` (the neighbourhood of the local-search baselines);
* ``class``: every group of ``g``'s *twin class* that sits on ``p[g]`` to ``d``. Twins are groups with the
  same compute time on every device and the same weight and output sizes (the 12 identical layers of BERT
  give classes of 12), so one move changes a repeated block everywhere at once;
* ``segment``: ``g`` and the next ``L - 1`` groups in index order (a topological order) to ``d``, for ``L``
  in :data:`SEGMENT_LENGTHS`: it crosses the cost of splitting a chain (two transfers, and another
  subgraph launch on devices with an invoke overhead) that stops single moves;
* ``window``: the groups on one device ``a`` among ``g`` and the next ``L - 1`` groups, for ``L`` in
  :data:`WINDOW_LENGTHS`, to ``d``: it moves one of the parallel branches of a block (an Inception
  module) to another device without touching the others.

Every move is described by :data:`MOVE_FEATURES`, computed from the cost model and the current placement
only (no evaluation): the change of compute and transfer time it causes (also weighted by how critical
the groups are on the current placement's longest path), launch overheads, device loads, its size and
kind. All are relative to the current latency, so one scorer serves graphs and platforms of any size.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from placement_gym.simulation.cost_model import CostModel

KINDS = ("single", "class", "segment", "window")
SEGMENT_LENGTHS = (2, 4, 8)
WINDOW_LENGTHS = (4, 8, 16)
MOVE_FEATURES = (
    "d_compute",  # sum over moved groups of (time on d - time where it is) / latency
    "d_compute_critical",  # the same, each group weighted by its criticality
    "d_transfer",  # change of the transfer time of every edge touching the moved groups / latency
    "d_transfer_critical",  # the same, each edge weighted by the criticality of its endpoints
    "invoke_new",  # d's invoke overhead / latency if no outside neighbour of the set is on d
    "invoke_old",  # invoke overhead of the devices the set leaves / latency
    "load_target",  # compute already on d / latency
    "load_target_after",  # compute on d after the move / latency
    "load_source",  # compute on the devices the set leaves / latency
    "criticality",  # largest criticality of a moved group
    "size",  # log2(1 + moved groups) / log2(1 + G)
    "kind_single",
    "kind_class",
    "kind_segment",
    "kind_window",
    "neighbours_on_target",  # fraction of the set's outside neighbours already on d
    "speed_ratio",  # log(time of the set on d / time where it is), clipped to [-3, 3]
)


@dataclass(frozen=True)
class Moves:
    """Candidate moves of one placement.

    Attributes:
        members: Which groups each move sends, shape ``(M, G)``, bool.
        target: Device each move sends them to, shape ``(M,)``, int64.
        kind: Index into :data:`KINDS` of each move, shape ``(M,)``, int64.
    """

    members: np.ndarray
    target: np.ndarray
    kind: np.ndarray

    def __len__(self) -> int:
        return len(self.target)

    def apply(self, placement: np.ndarray, index: int) -> np.ndarray:
        """The placement after move ``index``, shape ``(G,)``."""
        out = placement.copy()
        out[self.members[index]] = self.target[index]
        return out


def twin_classes(cost: CostModel) -> np.ndarray:
    """Class id of each group, shape ``(G,)``: groups with equal compute times on every device (to 6
    significant digits) and equal weight and output bytes share one."""
    finite = np.where(np.isfinite(cost.compute), cost.compute, -1.0)
    key = np.column_stack([finite, cost.param_bytes, cost.out_bytes])
    rounded = np.array([[float(f"{v:.6g}") for v in row] for row in key])
    _, ids = np.unique(rounded, axis=0, return_inverse=True)
    return np.asarray(ids, dtype=np.int64).reshape(-1)


def propose(placement: np.ndarray, allowed: np.ndarray, classes: np.ndarray) -> Moves:
    """Every move of the three kinds away from ``placement`` that keeps each group on an allowed device
    and changes the placement; duplicates of one resulting set are kept (the search skips repeats)."""
    g_count, d_count = allowed.shape
    rows: list[np.ndarray] = []
    targets: list[int] = []
    kinds: list[int] = []
    eye = np.eye(g_count, dtype=bool)
    for g, d in zip(*np.nonzero(allowed)):
        if d != placement[g]:
            rows.append(eye[g])
            targets.append(int(d))
            kinds.append(0)
    for c in np.unique(classes):
        in_class = classes == c
        for src in np.unique(placement[in_class]):
            members = in_class & (placement == src)
            if members.sum() < 2:
                continue
            for d in range(d_count):
                if d != src and allowed[members, d].all():
                    rows.append(members)
                    targets.append(d)
                    kinds.append(1)
    index = np.arange(g_count)
    for length in SEGMENT_LENGTHS:
        if length > g_count:
            break
        for g in range(g_count - length + 1):
            members = (index >= g) & (index < g + length)
            for d in range(d_count):
                if allowed[members, d].all() and np.any(placement[members] != d):
                    rows.append(members)
                    targets.append(d)
                    kinds.append(2)
    for length in WINDOW_LENGTHS:
        if length > g_count:
            break
        for g in range(g_count - length + 1):
            window = (index >= g) & (index < g + length)
            for src in np.unique(placement[window]):
                members = window & (placement == src)
                if members.sum() < 2 or members.sum() == length:  # a single or a segment move
                    continue
                for d in range(d_count):
                    if d != src and allowed[members, d].all():
                        rows.append(members)
                        targets.append(d)
                        kinds.append(3)
    if not rows:
        return Moves(np.zeros((0, g_count), dtype=bool), np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
    return Moves(np.stack(rows), np.asarray(targets, dtype=np.int64), np.asarray(kinds, dtype=np.int64))


class MoveFeaturizer:
    """Computes :data:`MOVE_FEATURES` of moves on one cost model (placement-independent parts cached)."""

    def __init__(self, cost: CostModel) -> None:
        self.cost = cost
        self.compute = np.where(np.isfinite(cost.compute), cost.compute, 1e3)  # (G, D), inf -> 1000 s
        inv_bw = cost.inverse_bandwidth().copy()
        np.fill_diagonal(inv_bw, 0.0)
        self.inv_bw = inv_bw  # (D, D)
        self.link_latency = np.asarray(cost.link_latency, dtype=np.float64)  # (D, D), 0 on the diagonal
        self.src, self.dst = cost.edge_src, cost.edge_dst  # (E,)
        self.bytes = np.asarray(cost.edge_bytes, dtype=np.float64)  # (E,)
        g = cost.num_groups
        self.adjacency = np.zeros((g, g), dtype=bool)  # (G, G) undirected
        self.adjacency[self.src, self.dst] = True
        self.adjacency[self.dst, self.src] = True
        self.incident = np.zeros((g, len(self.src)), dtype=bool)  # (G, E)
        self.incident[self.src, np.arange(len(self.src))] = True
        self.incident[self.dst, np.arange(len(self.src))] = True

    def transfer(self, nbytes: np.ndarray, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
        """Time to send ``nbytes`` from devices ``src`` to ``dst`` (elementwise; 0 on one device)."""
        return self.link_latency[src, dst] + nbytes * self.inv_bw[src, dst]

    def criticality(self, placement: np.ndarray) -> np.ndarray:
        """``((top level + bottom level) / longest path) ** 4`` of each group under ``placement``, shape
        ``(G,)``: 1 on the longest path of compute and transfer times, near 0 far off it."""
        cost, g_count = self.cost, self.cost.num_groups
        work = self.compute[np.arange(g_count), placement]
        edge_time = self.transfer(self.bytes, placement[self.src], placement[self.dst])
        top = self.transfer(cost.input_bytes, np.full(g_count, cost.host), placement)
        bottom = work + self.transfer(cost.result_bytes, placement, np.full(g_count, cost.host))
        order = np.argsort(self.dst, kind="stable")
        for e in order:  # edges by destination: tops of sources are final (edge_src < edge_dst)
            s, t = self.src[e], self.dst[e]
            top[t] = max(top[t], top[s] + work[s] + edge_time[e])
        for e in np.argsort(-self.src, kind="stable"):
            s, t = self.src[e], self.dst[e]
            bottom[s] = max(bottom[s], work[s] + edge_time[e] + bottom[t])
        total = top + bottom
        return (total / max(float(total.max()), 1e-30)) ** 4

    def features(self, placement: np.ndarray, latency: float, moves: Moves) -> np.ndarray:
        """:data:`MOVE_FEATURES` of each move, shape ``(M, F)``, float32."""
        cost, g_count = self.cost, self.cost.num_groups
        m_count = len(moves)
        if m_count == 0:
            return np.zeros((0, len(MOVE_FEATURES)), dtype=np.float32)
        scale = 1.0 / max(latency, 1e-30)
        crit = self.criticality(placement)
        members, target = moves.members, moves.target
        here = self.compute[np.arange(g_count), placement]  # (G,)
        there = self.compute[:, target].T  # (M, G)
        delta = np.where(members, there - here[None, :], 0.0)  # (M, G)
        d_compute = delta.sum(axis=1) * scale
        d_compute_crit = (delta * crit[None, :]).sum(axis=1) * scale
        # transfers of the edges touching each set, and of its graph inputs and results
        new_dev = np.where(members, target[:, None], placement[None, :])  # (M, G)
        src_new, dst_new = new_dev[:, self.src], new_dev[:, self.dst]  # (M, E)
        old_edge = self.transfer(self.bytes, placement[self.src], placement[self.dst])  # (E,)
        d_edge = self.transfer(self.bytes[None, :], src_new, dst_new) - old_edge[None, :]  # (M, E)
        host = np.full(g_count, cost.host)
        io_old = self.transfer(cost.input_bytes, host, placement) + self.transfer(cost.result_bytes, placement, host)
        io_new = self.transfer(cost.input_bytes[None, :], host[None, :], new_dev) + self.transfer(
            cost.result_bytes[None, :], new_dev, host[None, :]
        )
        d_io = io_new - io_old[None, :]  # (M, G)
        edge_crit = np.maximum(crit[self.src], crit[self.dst])  # (E,)
        d_transfer = (d_edge.sum(axis=1) + d_io.sum(axis=1)) * scale
        d_transfer_crit = ((d_edge * edge_crit[None, :]).sum(axis=1) + (d_io * crit[None, :]).sum(axis=1)) * scale
        # neighbours outside the set, and which of them sit on the target device
        outside = (members.astype(np.float32) @ self.adjacency.astype(np.float32) > 0) & ~members  # (M, G)
        on_target = outside & (placement[None, :] == target[:, None])
        n_outside = outside.sum(axis=1)
        invoke = np.asarray(cost.invoke_overhead, dtype=np.float64)
        invoke_new = np.where(on_target.any(axis=1), 0.0, invoke[target]) * scale
        left = np.zeros((m_count, cost.num_devices), dtype=bool)  # devices each set leaves
        for d in range(cost.num_devices):
            left[:, d] = np.any(members & (placement[None, :] == d), axis=1)
        left &= target[:, None] != np.arange(cost.num_devices)[None, :]
        invoke_old = (left * invoke[None, :]).sum(axis=1) * scale
        load = np.bincount(placement, weights=here, minlength=cost.num_devices)  # (D,)
        load_target = load[target] * scale
        load_after = load_target + np.where(members, there, 0.0).sum(axis=1) * scale
        load_source = (left * load[None, :]).sum(axis=1) * scale
        size = members.sum(axis=1)
        here_sum = np.where(members, here[None, :], 0.0).sum(axis=1)
        there_sum = np.where(members, there, 0.0).sum(axis=1)
        speed = np.clip(np.log(np.maximum(there_sum, 1e-12) / np.maximum(here_sum, 1e-12)), -3.0, 3.0)
        kind = np.eye(len(KINDS))[moves.kind]  # (M, K)
        out = np.column_stack(
            [
                d_compute,
                d_compute_crit,
                d_transfer,
                d_transfer_crit,
                invoke_new,
                invoke_old,
                load_target,
                load_after,
                load_source,
                np.where(members, crit[None, :], 0.0).max(axis=1),
                np.log2(1 + size) / np.log2(1 + g_count),
                kind,
                on_target.sum(axis=1) / np.maximum(n_outside, 1),
                speed,
            ]
        )
        return np.clip(out, -10.0, 10.0).astype(np.float32)
