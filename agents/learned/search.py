"""Guided improvement search: rank the moves of the current placement, evaluate the best-ranked in batches.

The search is the non-learned part of :class:`agents.learned.guided.GuidedImprovement`; the ranking comes
from a :class:`MoveRanker`. Starting from the best of HEFT's placement and every single-device placement
(one batch), it repeatedly proposes every move of the current placement (:mod:`agents.learned.moves`),
orders them by the ranker, and evaluates the first ``batch_size`` not seen before in one
``evaluate_batch`` call. The best of a batch that improves on the current latency is taken; otherwise the
next ``batch_size`` of the same ranking are tried, down to the whole list (or the first ``depth`` of it).
A move (set of groups, device) that did not improve is ranked after every untried move of later placements
(a tabu list), so the ranking does not spend the budget on the same attractive but useless moves; with
``local_tabu`` only until a group of the move, or a neighbour of one in the graph, has moved since it
failed (its context changed, so it is untried again). When no move of the current placement is left,
the search *walks* to the best evaluated neighbour that did not improve if that is within ``walk`` of the
best latency found (an iterated-local-search step past a local optimum; the way back is a placement
already seen, so it is never re-evaluated), and otherwise perturbs the best placement by ``kick`` random
moves; then the climb goes on. With ``late`` (late acceptance hill climbing, Burke & Bykov, "The late
acceptance hill-climbing heuristic", EJOR 2017), once ``late_after`` placements have been exhausted, a
batch without an improving move still moves the search to its best neighbour if that is no slower than
the current latency was ``late`` batches before (one batch is one iteration of the paper's rule).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Protocol

import numpy as np

from agents.base import BudgetTracker
from agents.baselines.common import allowed_devices
from agents.baselines.heft import heft_placement
from agents.learned.moves import MOVE_FEATURES, MoveFeaturizer, Moves, branch_sets, propose, twin_classes


class MoveRanker(Protocol):
    """Orders the moves of one placement; told the outcome of every evaluated move."""

    def scores(self, features: np.ndarray, moves: Moves) -> np.ndarray:
        """One score per move, shape ``(M,)``: lower is tried first."""

    def observe(self, features: np.ndarray, change: np.ndarray) -> None:
        """The relative latency change ``new / old - 1`` of evaluated moves with these features."""


#: Called as ``fn(features (B, F), relative change (B,))`` after each evaluated batch of moves.
Recorder = Callable[[np.ndarray, np.ndarray], None]
#: Called as ``fn(placement (G,), latency, moves, features (M, F))`` at every placement whose moves are
#: ranked (offline training labels the whole neighbourhood there); what it returns is ignored.
Visitor = Callable[[np.ndarray, float, Moves, np.ndarray], object]


def move_keys(moves: Moves) -> list[bytes]:
    """One key per move: its packed member bits and its target device."""
    rows = np.column_stack([np.packbits(moves.members, axis=1), moves.target.astype(np.uint8)])
    rows = np.ascontiguousarray(rows, dtype=np.uint8)
    return rows.view(np.dtype((np.void, rows.shape[1]))).ravel().tolist()


def start_placements(tracker: BudgetTracker, allowed: np.ndarray) -> np.ndarray:
    """HEFT's placement and every single-device placement every group allows, shape ``(S, G)``."""
    problem = tracker.problem
    starts = [heft_placement(problem.cost_model(), allowed)[0]]
    for d in range(problem.num_devices):
        if allowed[:, d].all():
            starts.append(np.full(problem.num_groups, d, dtype=np.int64))
    return np.stack(starts)


def local_tabu_mask(
    moves: Moves,
    keys: list[bytes],
    failed: dict[bytes, int],
    moved_at: np.ndarray,
    edge_src: np.ndarray,
    edge_dst: np.ndarray,
) -> np.ndarray:
    """Which moves are still tabu, shape ``(M,)``, bool: those that failed (``failed[key]``, the count of
    placement changes then) no earlier than the last move of any of their groups or of a graph neighbour
    of one (``moved_at``, shape ``(G,)``, -1 for never)."""
    tabu = np.zeros(len(keys), dtype=bool)
    rows = np.array([i for i, k in enumerate(keys) if k in failed], dtype=np.int64)
    if len(rows) == 0:
        return tabu
    near = moved_at.copy()  # the last change at each group or a graph neighbour of it
    np.maximum.at(near, edge_src, moved_at[edge_dst])
    np.maximum.at(near, edge_dst, moved_at[edge_src])
    context = np.where(moves.members[rows], near[None, :], -1).max(axis=1)  # (R,)
    tabu[rows] = np.array([failed[keys[i]] for i in rows]) >= context
    return tabu


def guided_search(
    tracker: BudgetTracker,
    ranker: MoveRanker,
    rng: np.random.Generator,
    batch_size: int = 8,
    kick: int = 2,
    recorder: Recorder | None = None,
    visitor: Visitor | None = None,
    local_tabu: bool = False,
    depth: int | None = None,
    walk: float = 0.0,
    late: int = 0,
    late_after: int = 1,
) -> dict[str, int]:
    """Run the search until ``tracker``'s budget is spent (or no unseen placement is reachable).

    Args:
        local_tabu: A move that did not improve is tried last only until its groups or their graph
            neighbours move (default: for the rest of the search).
        depth: Try at most this many of each placement's ranked moves before calling it exhausted
            (default: all of them).
        walk: On an exhausted placement, go to its best evaluated neighbour if that is within this
            fraction of the best latency found, instead of kicking the best placement (0: never).

    Returns:
        Counts: ``steps`` (accepted moves), ``walks`` (steps to a worse neighbour, by the walk or late
        acceptance), ``kicks``
        (perturbations), ``batches``.
    """
    if depth is not None and depth < 1:
        raise ValueError(f"depth must be >= 1 or None, got {depth}")
    if walk < 0:
        raise ValueError(f"walk must be >= 0, got {walk}")
    if late < 0 or late_after < 0:
        raise ValueError(f"late and late_after must be >= 0, got {late}, {late_after}")
    problem = tracker.problem
    allowed = allowed_devices(problem)
    classes = twin_classes(problem.cost_model())
    branches = branch_sets(problem.cost_model())
    featurizer = MoveFeaturizer(problem.cost_model())
    edge_src, edge_dst = problem.cost_model().edge_src, problem.cost_model().edge_dst
    seen: set[bytes] = set()
    starts = start_placements(tracker, allowed)[: max(tracker.remaining or 1, 1)]
    for s in starts:
        seen.add(s.tobytes())
    results = tracker.evaluate_batch(starts)
    if not results:
        return {"steps": 0, "walks": 0, "kicks": 0, "batches": 0}
    best = int(np.argmin([r.latency for r in results]))
    current, latency = starts[best].copy(), float(results[best].latency)
    steps = walks = kicks = batches = stale = exhausted = 0
    # moves (groups, device) that did not improve, with the count of placement changes when they failed
    failed: dict[bytes, int] = {}
    changes = 0
    history = np.full(max(late, 1), latency)  # late acceptance: the current latency of the last batches
    moved_at = np.full(problem.num_groups, -1, dtype=np.int64)  # the change count when each group last moved

    def move_to(placement: np.ndarray) -> None:
        nonlocal current, changes
        changes += 1
        moved_at[placement != current] = changes
        current = placement

    while not tracker.exhausted and stale < 50:
        moves = propose(current, allowed, classes, branches)
        keys = move_keys(moves)
        if local_tabu:
            retry = local_tabu_mask(moves, keys, failed, moved_at, edge_src, edge_dst)
        else:
            retry = np.array([k in failed for k in keys], dtype=bool)
        features = featurizer.features(current, latency, moves) if math.isfinite(latency) else None
        if features is None:
            order = rng.permutation(len(moves))
        else:
            if visitor is not None:
                visitor(current, latency, moves, features)
            scores = ranker.scores(features, moves)
            order = np.lexsort((rng.random(len(moves)), scores, retry))  # untried first, random tie-break
        cursor, improved = 0, False
        limit = len(order) if depth is None else min(depth, len(order))
        worse: list[tuple[float, np.ndarray]] = []  # evaluated neighbours that did not improve
        while cursor < limit and not tracker.exhausted:
            picked, batch = [], []
            while cursor < limit and len(batch) < min(batch_size, tracker.remaining):
                candidate = moves.apply(current, int(order[cursor]))
                key = candidate.tobytes()
                if key not in seen:
                    seen.add(key)
                    picked.append(int(order[cursor]))
                    batch.append(candidate)
                cursor += 1
            if not batch:
                break
            results = tracker.evaluate_batch(np.stack(batch))
            batches += 1
            lat = np.array([r.latency if r.feasible else math.inf for r in results])
            if features is not None and len(results):
                change = np.where(np.isfinite(lat), lat / latency - 1.0, 1.0)
                ranker.observe(features[picked[: len(results)]], change)
                if recorder is not None:
                    recorder(features[picked[: len(results)]], change)
            failed.update((keys[j], changes) for j, lat_j in zip(picked, lat) if not lat_j < latency)
            slot = batches % len(history)
            accept_late = late > 0 and exhausted >= late_after and len(lat) and lat.min() <= history[slot]
            if len(lat) and (lat.min() < latency or accept_late):
                i = int(np.argmin(lat))
                steps, walks = (steps + 1, walks) if lat[i] < latency else (steps, walks + 1)
                move_to(batch[i])
                latency, improved = float(lat[i]), True
                history[slot] = latency
                break
            history[slot] = latency
            worse.extend((float(v), b) for v, b in zip(lat, batch) if math.isfinite(v))
        if improved:
            stale = 0
            continue
        if tracker.exhausted:
            break
        stale += 1  # neighbourhood exhausted: walk on, or perturb the best placement
        exhausted += 1
        if walk and worse:
            best_worse = min(worse, key=lambda w: w[0])
            if best_worse[0] <= tracker.best_latency * (1 + walk):
                walks += 1
                move_to(best_worse[1])
                latency = best_worse[0]
                continue
        kicks += 1
        kicked = tracker.best_placement.copy() if tracker.best_placement is not None else current
        moves = propose(kicked, allowed, classes, branches)
        for i in rng.choice(len(moves), size=min(kick, len(moves)), replace=False):
            kicked = moves.apply(kicked, int(i))
        move_to(kicked)
        latency = math.inf
        key = current.tobytes()
        if key not in seen and not tracker.exhausted:
            seen.add(key)
            result = tracker.evaluate_batch(current[None, :])[0]
            latency = result.latency if result.feasible else math.inf
    return {"steps": steps, "walks": walks, "kicks": kicks, "batches": batches}


class RandomRanker:
    """Uniformly random move order (the ablation without learning)."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng

    def scores(self, features: np.ndarray, moves: Moves) -> np.ndarray:
        return self.rng.random(len(moves))

    def observe(self, features: np.ndarray, change: np.ndarray) -> None:
        return None


class CostRanker:
    """A hand-written order from the cost model: criticality-weighted compute and transfer change plus the
    launch overhead gained minus the one saved (the ablation with the features but nothing learned)."""

    def scores(self, features: np.ndarray, moves: Moves) -> np.ndarray:
        return features[:, 1] + features[:, 3] + features[:, 4] - features[:, 5]

    def observe(self, features: np.ndarray, change: np.ndarray) -> None:
        return None


class NoisyRanker:
    """Another ranker's scores plus Gaussian noise (exploration while collecting training moves)."""

    def __init__(self, base: MoveRanker, noise: float, rng: np.random.Generator) -> None:
        self.base, self.noise, self.rng = base, float(noise), rng

    def scores(self, features: np.ndarray, moves: Moves) -> np.ndarray:
        s = np.asarray(self.base.scores(features, moves), dtype=np.float64)
        return s + self.noise * (s.std() + 1e-9) * self.rng.standard_normal(len(s))

    def observe(self, features: np.ndarray, change: np.ndarray) -> None:
        self.base.observe(features, change)


class EstimateRanker:
    """The change of the queue-free latency estimate (feature ``d_estimate``): a cost-model order with
    nothing learned."""

    def scores(self, features: np.ndarray, moves: Moves) -> np.ndarray:
        return features[:, MOVE_FEATURES.index("d_estimate")]

    def observe(self, features: np.ndarray, change: np.ndarray) -> None:
        return None
