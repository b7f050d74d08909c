"""Helpers the classical baselines share: the env's cost model, allowed devices, a static memory ledger,
a rank-ordered topological order, and budget-aware evaluation.
"""

from __future__ import annotations

import heapq

import gymnasium as gym
import numpy as np

from agents.base import BudgetTracker
from placement_gym.errors import PlacementGymError
from placement_gym.simulation.cost_model import CostModel


def env_cost_model(env: gym.Env) -> CostModel:
    """The cost model of ``env``'s graph and platform (``DevicePlacementEnv.cost_model()``)."""
    return env.unwrapped.cost_model()


def allowed_devices(env: gym.Env) -> np.ndarray:
    """Devices each group may use: the env's action mask and a finite cost, shape ``(G, D)``, bool.

    Raises:
        PlacementGymError: If some group has no device with a finite cost.
    """
    base = env.unwrapped
    cost = env_cost_model(env)
    g, d = cost.num_groups, cost.num_devices
    mask = np.asarray(base.action_masks(), dtype=bool).reshape(-1, d)[:g]  # (G, D)
    mask = mask & np.isfinite(cost.compute)
    empty = np.flatnonzero(~mask.any(axis=1))
    if len(empty):
        raise PlacementGymError(
            f"group {int(empty[0])} has no device with a finite cost and enough memory; "
            "check the cost model or the platform's memory sizes"
        )
    return mask


def predecessors(cost: CostModel) -> list[list[tuple[int, float]]]:
    """``(source group, bytes)`` of the incoming edges of each group, in edge order."""
    preds: list[list[tuple[int, float]]] = [[] for _ in range(cost.num_groups)]
    for s, t, b in zip(cost.edge_src.tolist(), cost.edge_dst.tolist(), cost.edge_bytes.tolist()):
        preds[t].append((s, b))
    return preds


def successors(cost: CostModel) -> list[list[tuple[int, float]]]:
    """``(destination group, bytes)`` of the outgoing edges of each group, in edge order."""
    succs: list[list[tuple[int, float]]] = [[] for _ in range(cost.num_groups)]
    for s, t, b in zip(cost.edge_src.tolist(), cost.edge_dst.tolist(), cost.edge_bytes.tolist()):
        succs[s].append((t, b))
    return succs


def priority_topological_order(cost: CostModel, priority: np.ndarray) -> np.ndarray:
    """A topological order that always takes the ready group of highest ``priority`` (ties: lower index).

    Args:
        cost: The cost model (its edges define the DAG).
        priority: One value per group, shape ``(G,)``.

    Returns:
        Group indices, shape ``(G,)``, int64.
    """
    g = cost.num_groups
    indeg = np.bincount(cost.edge_dst, minlength=g)
    succs = successors(cost)
    heap = [(-float(priority[i]), i) for i in range(g) if indeg[i] == 0]
    heapq.heapify(heap)
    order = []
    while heap:
        _, i = heapq.heappop(heap)
        order.append(i)
        for j, _ in succs[i]:
            indeg[j] -= 1
            if indeg[j] == 0:
                heapq.heappush(heap, (-float(priority[j]), j))
    return np.array(order, dtype=np.int64)


def transfer(cost: CostModel, nbytes: float, src: int, dst: int) -> float:
    """Seconds to move ``nbytes`` from ``src`` to ``dst`` (0 on one device or for 0 bytes)."""
    return 0.0 if nbytes <= 0 else float(cost.transfer_time(nbytes, src, dst))


class MemoryLedger:
    """Static memory accounting for list schedulers (Baechi's conservative, permanent-residency model).

    A group placed on device ``d`` holds there, for the whole inference, its weights and outputs, the graph
    inputs it reads and a copy of every input it receives from another device. This over-counts the
    simulator's liveness-based peak, so a placement the ledger accepts always fits in the simulator.

    Args:
        cost: The cost model (capacities, bytes).
        preds: :func:`predecessors` of ``cost``.
    """

    def __init__(self, cost: CostModel, preds: list[list[tuple[int, float]]]) -> None:
        self.cost = cost
        self.preds = preds
        self.used = np.zeros(cost.num_devices)  # (D,) bytes
        self.base = cost.param_bytes + cost.out_bytes + cost.input_bytes  # (G,)

    def need(self, g: int, d: int, placement: np.ndarray) -> float:
        """Bytes ``g`` adds on ``d`` given the devices already chosen in ``placement`` (-1: unplaced)."""
        extra = sum(b for s, b in self.preds[g] if placement[s] >= 0 and placement[s] != d)
        return float(self.base[g] + extra)

    def fits(self, g: int, d: int, placement: np.ndarray) -> bool:
        return self.used[d] + self.need(g, d, placement) <= self.cost.capacity[d]

    def add(self, g: int, d: int, placement: np.ndarray) -> None:
        self.used[d] += self.need(g, d, placement)

    def fallback(self, allowed: np.ndarray) -> int:
        """The allowed device with the most free memory, for a group that fits nowhere (the env then
        reports the placement infeasible)."""
        free = np.where(allowed, self.cost.capacity - self.used, -np.inf)
        return int(np.argmax(free))


def evaluate_within_budget(tracker: BudgetTracker, placement: np.ndarray) -> float | None:
    """Latency of ``placement`` via ``tracker``, or ``None`` (not evaluated) if the budget is spent."""
    if tracker.exhausted:
        return None
    latency, _ = tracker.evaluate(np.asarray(placement, dtype=np.int64))
    return latency
