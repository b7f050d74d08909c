"""What list-scheduling heuristics share: allowed devices, predecessors and successors, a rank-ordered
topological order, transfer times, and a static memory ledger."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from placement_gym.errors import PlacementGymError
from placement_gym.graph import topological_order
from placement_gym.simulation.cost_model import CostModel

if TYPE_CHECKING:
    from placement_gym.problem import PlacementProblem


def allowed_devices(problem: PlacementProblem) -> np.ndarray:
    """Devices each group may use: it fits in memory and has a finite cost, shape ``(G, D)``, bool.

    Raises:
        PlacementGymError: If some group has no device with a finite cost.
    """
    cost = problem.cost_model()
    mask = problem.device_mask & np.isfinite(cost.compute)  # (G, D)
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
    return topological_order(cost.num_groups, cost.edge_src, cost.edge_dst, key=-np.asarray(priority))


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


__all__ = [
    "MemoryLedger",
    "allowed_devices",
    "predecessors",
    "priority_topological_order",
    "successors",
    "transfer",
]
