"""Non-learning search over placements at a fixed evaluation budget: the bar every learner must clear.

Both methods start from a constructive placement (HEFT's by default, :mod:`agents.baselines.heft`) and move
one group at a time to another device it may use (memory and finite cost,
:func:`agents.baselines.common.allowed_devices`). Neighbours are proposed in batches and each batch is
evaluated in one call (parallel on pooled backends); a placement seen before is never proposed again.

* :class:`LocalSearch` (``local_search``): first-improvement hill climbing with random restarts of the
  neighbourhood order; when every single-group move of the current placement has been tried without
  improvement (a local optimum), it perturbs the best placement by a few random moves and climbs again.
* :class:`SimulatedAnnealing` (``simulated_annealing``): the Metropolis rule on the relative latency change
  (Kirkpatrick, Gelatt and Vecchi, Science 1983), temperature decaying geometrically from ``t_start`` to
  ``t_end`` over the budget; each batch's proposals are judged in order against the moving current state.
"""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import numpy as np

from agents.base import BudgetTracker, PlacementMethod
from agents.baselines.common import allowed_devices
from agents.baselines.heft import heft_placement
from placement_gym.errors import UnknownNameError
from placement_gym.problem import PlacementProblem

DEFAULT_BUDGET = 500
STARTS = ("heft", "best_single", "random")


def start_placement(
    problem: PlacementProblem, start: str, allowed: np.ndarray, rng: np.random.Generator
) -> np.ndarray:
    """The ``(G,)`` placement a search starts from: HEFT's, the baseline's (the best single device, or the
    task's stored split where no single device holds the model), or random."""
    if start == "heft":
        return heft_placement(problem.cost_model(), allowed)[0]
    if start == "best_single":
        return problem.baseline_placement.copy()
    if start == "random":
        counts = allowed.sum(axis=1)
        choices = np.argsort(~allowed, axis=1, kind="stable")
        pick = (rng.random(problem.num_groups) * counts).astype(np.int64)
        return choices[np.arange(problem.num_groups), pick]
    raise UnknownNameError("start placement", start, STARTS)


class _Neighbourhood:
    """Single-group moves of a placement, in random order, skipping placements already evaluated."""

    def __init__(self, allowed: np.ndarray, rng: np.random.Generator) -> None:
        self.allowed, self.rng = allowed, rng
        self.seen: set[bytes] = set()

    def moves(self, placement: np.ndarray) -> list[tuple[int, int]]:
        """Every allowed ``(group, device)`` move away from ``placement``, shuffled."""
        groups, devices = np.nonzero(self.allowed)
        keep = devices != placement[groups]
        order = self.rng.permutation(int(keep.sum()))
        return list(zip(groups[keep][order].tolist(), devices[keep][order].tolist()))

    def unseen(self, placement: np.ndarray) -> bool:
        key = placement.tobytes()
        if key in self.seen:
            return False
        self.seen.add(key)
        return True


class _Search(PlacementMethod):
    """Shared set-up: budget, start placement, batch size."""

    def __init__(self, budget: int = DEFAULT_BUDGET, start: str = "heft", batch_size: int = 8) -> None:
        if start not in STARTS:
            raise UnknownNameError("start placement", start, STARTS)
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.budget, self.start, self.batch_size = budget, start, int(batch_size)

    def _begin(self, tracker: BudgetTracker, seed: int) -> tuple[np.ndarray, float, _Neighbourhood] | None:
        if tracker.budget is None:
            tracker.budget = self.budget
        rng = np.random.default_rng(seed)
        allowed = allowed_devices(tracker.problem)
        hood = _Neighbourhood(allowed, rng)
        current = start_placement(tracker.problem, self.start, allowed, rng)
        hood.unseen(current)
        if tracker.exhausted:
            return None
        return current, tracker.evaluate_batch(current[None, :])[0].latency, hood


class LocalSearch(_Search):
    """First-improvement hill climbing over single-group moves, with perturbation restarts.

    Args:
        budget: Evaluations when :meth:`place` gets ``budget=None``.
        start: ``"heft"``, ``"best_single"`` or ``"random"``.
        batch_size: Neighbours evaluated per call.
        kick: Random moves applied to the best placement when a local optimum is reached.
    """

    name = "local_search"
    track = "white-box"  # reads the cost model

    def __init__(
        self, budget: int = DEFAULT_BUDGET, start: str = "heft", batch_size: int = 8, kick: int = 3
    ) -> None:
        super().__init__(budget, start, batch_size)
        self.kick = int(kick)

    def _place(self, env: gym.Env, tracker: BudgetTracker, seed: int) -> dict[str, Any]:
        begun = self._begin(tracker, seed)
        if begun is None:
            return {"restarts": 0}
        current, latency, hood = begun
        moves, restarts, stale = hood.moves(current), 0, 0
        while not tracker.exhausted and stale < 50:  # 50 kicks in a row found nothing new: space exhausted
            batch = []
            while moves and len(batch) < min(self.batch_size, tracker.remaining):
                g, d = moves.pop()
                candidate = current.copy()
                candidate[g] = d
                if hood.unseen(candidate):
                    batch.append(candidate)
            if not batch:  # local optimum: perturb the best placement and climb from there
                restarts, stale = restarts + 1, stale + 1
                current = tracker.best_placement.copy() if tracker.best_placement is not None else current
                for g, d in hood.moves(current)[: self.kick]:
                    current[g] = d
                latency = math.inf  # the first evaluated neighbour of the kicked state is accepted
                moves = hood.moves(current)
                continue
            stale = 0
            results = tracker.evaluate_batch(np.stack(batch))
            best = int(np.argmin([r.latency for r in results]))
            if results[best].latency < latency:
                current, latency = batch[best], results[best].latency
                moves = hood.moves(current)
        return {"restarts": restarts}


class SimulatedAnnealing(_Search):
    """Simulated annealing over single-group moves.

    A move from latency ``L`` to ``L'`` is accepted with probability ``min(1, exp(-(L'/L - 1) / T))``;
    ``T`` decays geometrically from ``t_start`` to ``t_end`` as the budget is spent.

    Args:
        budget: Evaluations when :meth:`place` gets ``budget=None``.
        start: ``"heft"``, ``"best_single"`` or ``"random"``.
        batch_size: Proposals evaluated per call.
        t_start, t_end: Initial and final temperatures (relative latency change).
    """

    name = "simulated_annealing"
    track = "white-box"  # reads the cost model

    def __init__(
        self,
        budget: int = DEFAULT_BUDGET,
        start: str = "heft",
        batch_size: int = 8,
        t_start: float = 1e-3,
        t_end: float = 1e-5,
    ) -> None:
        super().__init__(budget, start, batch_size)
        if not 0 < t_end <= t_start:
            raise ValueError(f"temperatures must satisfy 0 < t_end <= t_start, got {t_start}, {t_end}")
        self.t_start, self.t_end = float(t_start), float(t_end)

    def _place(self, env: gym.Env, tracker: BudgetTracker, seed: int) -> dict[str, Any]:
        begun = self._begin(tracker, seed)
        if begun is None:
            return {"accepted": 0}
        current, latency, hood = begun
        rng = np.random.default_rng([seed, 1])
        budget, accepted, stale = tracker.budget, 0, 0
        while not tracker.exhausted and stale < 50:
            batch = []
            for g, d in hood.moves(current):
                if len(batch) >= min(self.batch_size, tracker.remaining):
                    break
                candidate = current.copy()
                candidate[g] = d
                if hood.unseen(candidate):
                    batch.append(candidate)
            if not batch:  # every neighbour of the current state was evaluated: restart from the best
                stale += 1  # 50 in a row: the reachable space is exhausted
                if tracker.best_placement is not None:
                    current, latency = tracker.best_placement.copy(), tracker.best_latency
                for g, d in hood.moves(current)[:3]:
                    current[g] = d
                continue
            stale = 0
            for candidate, result in zip(batch, tracker.evaluate_batch(np.stack(batch))):
                t = self.t_start * (self.t_end / self.t_start) ** min(tracker.used / budget, 1.0)
                change = result.latency / latency - 1.0 if math.isfinite(latency) else -1.0
                if result.feasible and (change <= 0 or rng.random() < math.exp(-change / t)):
                    current, latency, accepted = candidate, result.latency, accepted + 1
        return {"accepted": accepted}
