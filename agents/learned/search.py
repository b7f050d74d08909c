"""Guided improvement search: rank the moves of the current placement, evaluate the best-ranked in batches.

The search is the non-learned part of :class:`agents.learned.guided.GuidedImprovement`; the ranking comes
from a :class:`MoveRanker`. Starting from the best of HEFT's placement and every single-device placement
(one batch), it repeatedly proposes every move of the current placement (:mod:`agents.learned.moves`),
orders them by the ranker, and evaluates the first ``batch_size`` not seen before in one
``evaluate_batch`` call. The best of a batch that improves on the current latency is taken; otherwise the
next ``batch_size`` of the same ranking are tried, down to the whole list. When no move of the current
placement is left, the best placement is perturbed by ``kick`` random moves and the climb goes on. A
move (set of groups, device) that did not improve is ranked after every untried move of later placements
(a tabu list), so the ranking does not spend the budget on the same attractive but useless moves.
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


def guided_search(
    tracker: BudgetTracker,
    ranker: MoveRanker,
    rng: np.random.Generator,
    batch_size: int = 8,
    kick: int = 2,
    recorder: Recorder | None = None,
    visitor: Visitor | None = None,
) -> dict[str, int]:
    """Run the search until ``tracker``'s budget is spent (or no unseen placement is reachable).

    Returns:
        Counts: ``steps`` (accepted moves), ``kicks`` (perturbations), ``batches``.
    """
    problem = tracker.problem
    allowed = allowed_devices(problem)
    classes = twin_classes(problem.cost_model())
    branches = branch_sets(problem.cost_model())
    featurizer = MoveFeaturizer(problem.cost_model())
    seen: set[bytes] = set()
    starts = start_placements(tracker, allowed)[: max(tracker.remaining or 1, 1)]
    for s in starts:
        seen.add(s.tobytes())
    results = tracker.evaluate_batch(starts)
    if not results:
        return {"steps": 0, "kicks": 0, "batches": 0}
    best = int(np.argmin([r.latency for r in results]))
    current, latency = starts[best].copy(), float(results[best].latency)
    steps = kicks = batches = stale = 0
    failed: set[bytes] = set()  # moves (groups, device) that did not improve: tried again only last
    while not tracker.exhausted and stale < 50:
        moves = propose(current, allowed, classes, branches)
        keys = move_keys(moves)
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
        while cursor < len(order) and not tracker.exhausted:
            picked, batch = [], []
            while cursor < len(order) and len(batch) < min(batch_size, tracker.remaining):
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
            failed.update(keys[j] for j, lat_j in zip(picked, lat) if not lat_j < latency)
            if len(lat) and lat.min() < latency:
                i = int(np.argmin(lat))
                current, latency, improved = batch[i], float(lat[i]), True
                steps += 1
                break
        if improved:
            stale = 0
            continue
        if tracker.exhausted:
            break
        stale += 1  # neighbourhood exhausted: perturb the best placement
        kicks += 1
        current = tracker.best_placement.copy() if tracker.best_placement is not None else current
        moves = propose(current, allowed, classes, branches)
        for i in rng.choice(len(moves), size=min(kick, len(moves)), replace=False):
            current = moves.apply(current, int(i))
        latency = math.inf
        key = current.tobytes()
        if key not in seen and not tracker.exhausted:
            seen.add(key)
            result = tracker.evaluate_batch(current[None, :])[0]
            latency = result.latency if result.feasible else math.inf
    return {"steps": steps, "kicks": kicks, "batches": batches}


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
