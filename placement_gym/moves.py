"""Placement-improvement moves: sets of groups sent to one device.

A *move* sends a set of groups to one device. Five kinds are proposed from a placement ``p``:

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
* ``branch``: a fork-join structure of the graph (:func:`branch_sets`): one branch of a fork (the chain
  of groups from a successor of a group with several successors up to the join), alone or with its
  fork and / or its join, to ``d``. Chaining forks, branches and joins of consecutive blocks on one
  device keeps them one connected subgraph, which pays a device's invoke overhead once (the NPU of
  ``multi-accel``); a window move cannot add the fork and the join, which sit outside the window.

Proposing moves needs only the cost model and the placement (no evaluation): the improvement env
(:class:`~placement_gym.envs.improve.DevicePlacementImproveEnv`) offers them as actions, and the learned
improvement search (:mod:`agents.learned.moves`) ranks them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from placement_gym.simulation.cost_model import CostModel

KINDS = ("single", "class", "segment", "window", "branch")
SEGMENT_LENGTHS = (2, 4, 8)
WINDOW_LENGTHS = (4, 8, 16)


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

    def apply_all(self, placement: np.ndarray, dtype: type = np.int64) -> np.ndarray:
        """The placement after each move, shape ``(M, G)``, in ``dtype``."""
        return np.where(self.members, self.target.astype(dtype)[:, None], placement.astype(dtype)[None, :])


def twin_classes(cost: CostModel) -> np.ndarray:
    """Class id of each group, shape ``(G,)``: groups with equal compute times on every device (to 6
    significant digits) and equal weight and output bytes share one."""
    finite = np.where(np.isfinite(cost.compute), cost.compute, -1.0)
    key = np.column_stack([finite, cost.param_bytes, cost.out_bytes])
    rounded = np.array([[float(f"{v:.6g}") for v in row] for row in key])
    _, ids = np.unique(rounded, axis=0, return_inverse=True)
    return np.asarray(ids, dtype=np.int64).reshape(-1)


def fork_branches(cost: CostModel) -> list[tuple[int, list[int], int | None]]:
    """The branches of every fork, as ``(fork, chain, join)``, placement-independent.

    A *fork* ``f`` is a group with two or more successors; for each successor ``s`` its *branch* is the
    chain from ``s`` through groups with one predecessor and one successor, and its *join* the group after
    the chain if that has several predecessors (``None`` if the chain ends otherwise).
    """
    g_count = cost.num_groups
    succ: list[list[int]] = [[] for _ in range(g_count)]
    n_pred = np.zeros(g_count, dtype=np.int64)
    for s, t in zip(cost.edge_src, cost.edge_dst):
        succ[int(s)].append(int(t))
        n_pred[int(t)] += 1
    out = []
    for f in range(g_count):
        if len(succ[f]) < 2:
            continue
        for s in succ[f]:
            chain = [s]
            while len(succ[chain[-1]]) == 1 and n_pred[succ[chain[-1]][0]] == 1:
                chain.append(succ[chain[-1]][0])
            nxt = succ[chain[-1]]
            out.append((f, chain, nxt[0] if len(nxt) == 1 and n_pred[nxt[0]] > 1 else None))
    return out


def branch_sets(cost: CostModel) -> np.ndarray:
    """The fork-join sets of the graph, shape ``(B, G)``, bool, placement-independent: for every branch of
    :func:`fork_branches`, the branch, branch + join, fork + branch and fork + branch + join; duplicates
    and single groups are dropped.
    """
    g_count = cost.num_groups
    sets: list[np.ndarray] = []
    for f, chain, join_group in fork_branches(cost):
        join = [] if join_group is None else [join_group]
        for extra in ([], join, [f], [f, *join]):
            members = np.zeros(g_count, dtype=bool)
            members[chain + extra] = True
            if members.sum() >= 2:
                sets.append(members)
    if not sets:
        return np.zeros((0, g_count), dtype=bool)
    return np.unique(np.stack(sets), axis=0)


def propose(
    placement: np.ndarray, allowed: np.ndarray, classes: np.ndarray, branches: np.ndarray | None = None
) -> Moves:
    """Every move of the five kinds away from ``placement`` that keeps each group on an allowed device
    and changes the placement; duplicates of one resulting set are kept (the search skips repeats).
    ``branches`` are the sets of :func:`branch_sets` (none if ``None``)."""
    g_count, d_count = allowed.shape
    rows: list[np.ndarray] = []  # blocks of member rows, (k, G) each, in the order the moves are listed
    targets: list[np.ndarray] = []
    kinds: list[np.ndarray] = []

    def add(block: np.ndarray, target: int | np.ndarray, kind: int) -> None:
        if len(block):
            rows.append(block)
            targets.append(np.broadcast_to(np.asarray(target, dtype=np.int64), (len(block),)))
            kinds.append(np.full(len(block), kind, dtype=np.int64))

    gs, ds = np.nonzero(allowed)  # row-major: by group, then device
    keep = ds != placement[gs]
    add(np.eye(g_count, dtype=bool)[gs[keep]], ds[keep], 0)
    keys = classes.astype(np.int64) * d_count + placement  # (class, device it sits on) of each group
    unique_keys, counts = np.unique(keys, return_counts=True)
    for key in unique_keys[counts >= 2]:  # by class, then source device
        src = int(key) % d_count
        members = keys == key
        for d in range(d_count):
            if d != src and allowed[members, d].all():
                add(members[None, :], d, 1)
    index = np.arange(g_count)
    for kind, lengths in ((2, SEGMENT_LENGTHS), (3, WINDOW_LENGTHS)):
        for length in lengths:
            if length > g_count:
                break
            first = np.arange(g_count - length + 1)
            windows = (index[None, :] >= first[:, None]) & (
                index[None, :] < first[:, None] + length
            )  # (S, G)
            sources = [None] if kind == 2 else range(d_count)
            for src in sources:
                if src is None:
                    sets = windows
                else:  # the groups of each window on device src: a whole window is a segment move
                    sets = windows & (placement == src)[None, :]
                    count = sets.sum(axis=1)
                    sets = sets[(count >= 2) & (count < length)]
                for d in range(d_count):
                    if src is not None and d == src:
                        continue
                    ok = ~np.any(sets & ~allowed[:, d][None, :], axis=1)
                    ok &= np.any(sets & (placement != d)[None, :], axis=1)
                    add(sets[ok], d, kind)
    if branches is not None and len(branches):
        for d in range(d_count):
            ok = ~np.any(branches & ~allowed[:, d][None, :], axis=1)
            ok &= np.any(branches & (placement != d)[None, :], axis=1)
            add(branches[ok], d, 4)
    if not rows:
        return Moves(
            np.zeros((0, g_count), dtype=bool), np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        )
    return Moves(np.concatenate(rows), np.concatenate(targets), np.concatenate(kinds))


#: Kinds of :func:`move_sets` (the placement-independent kinds; ``window`` depends on the placement).
SET_KINDS = ("single", "class", "segment", "branch")


def move_sets(cost: CostModel, kinds: tuple[str, ...] = ("single",)) -> tuple[np.ndarray, np.ndarray]:
    """The placement-independent group sets of the move kinds ``kinds``, each listed once.

    ``single``: each group alone, in group order (always first when asked for, so set ``g`` is group ``g``);
    ``class``: each twin class of two or more groups (:func:`twin_classes`), whole; ``segment``: each run of
    ``L`` consecutive groups, ``L`` in :data:`SEGMENT_LENGTHS`; ``branch``: the fork-join sets of
    :func:`branch_sets`. A set already listed by an earlier kind is not repeated.

    Returns:
        ``(members, kind)``: ``(S, G)`` bool and ``(S,)`` int64 indices into :data:`SET_KINDS`.

    Raises:
        ValueError: For an unknown kind.
    """
    unknown = sorted(set(kinds) - set(SET_KINDS))
    if unknown:
        raise ValueError(f"unknown move kind(s) {unknown}; known: {', '.join(SET_KINDS)}")
    g_count = cost.num_groups
    blocks: list[np.ndarray] = []
    labels: list[np.ndarray] = []
    for kind in (k for k in SET_KINDS if k in kinds):  # one fixed order, whatever the caller's
        if kind == "single":
            block = np.eye(g_count, dtype=bool)
        elif kind == "class":
            classes = twin_classes(cost)
            ids, counts = np.unique(classes, return_counts=True)
            block = classes[None, :] == ids[counts >= 2][:, None]
        elif kind == "segment":
            index = np.arange(g_count)
            rows = []
            for length in SEGMENT_LENGTHS:
                if length <= g_count:
                    first = np.arange(g_count - length + 1)[:, None]
                    rows.append((index[None, :] >= first) & (index[None, :] < first + length))
            block = np.concatenate(rows) if rows else np.zeros((0, g_count), dtype=bool)
        else:
            block = branch_sets(cost)
        blocks.append(block.reshape(-1, g_count))
        labels.append(np.full(len(blocks[-1]), SET_KINDS.index(kind), dtype=np.int64))
    members = np.concatenate(blocks) if blocks else np.zeros((0, g_count), dtype=bool)
    kind_of = np.concatenate(labels) if labels else np.zeros(0, dtype=np.int64)
    seen: set[bytes] = set()
    keep = np.zeros(len(members), dtype=bool)
    for i, row in enumerate(np.packbits(members, axis=1)):
        key = row.tobytes()
        keep[i] = key not in seen
        seen.add(key)
    return members[keep], kind_of[keep]


__all__ = [
    "KINDS",
    "SEGMENT_LENGTHS",
    "SET_KINDS",
    "WINDOW_LENGTHS",
    "Moves",
    "branch_sets",
    "fork_branches",
    "move_sets",
    "propose",
    "twin_classes",
]
