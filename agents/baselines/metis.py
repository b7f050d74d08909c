"""METIS partitioning baseline: a balanced min-cut k-way partition of the group graph (Karypis and Kumar,
"A fast and high quality multilevel scheme for partitioning irregular graphs", SIAM J. Sci. Comput. 1998,
via ``pymetis``), then the best evaluated assignment of parts to devices.

The quotient DAG is made undirected; an edge weighs the bytes it carries (KiB, at least 1) and a vertex its
device-averaged compute time (ns, at least 1), so METIS balances work and minimises the bytes crossing
devices. Parts are then mapped to devices: every map (``D ** k``) is evaluated when there are at most
``max_assignments`` of them and the budget allows, otherwise a greedy coordinate descent (start from all
parts on the best single device, move one part at a time to the device that lowers the latency most).
Deviations: METIS ignores device heterogeneity, memory and the DAG's direction (a part may run, wait for
another device, and run again); the evaluation of the assignments makes up for the first.
"""

from __future__ import annotations

import itertools
from typing import Any

import gymnasium as gym
import numpy as np
import pymetis

from agents.base import BudgetTracker, PlacementMethod
from agents.baselines.common import allowed_devices, evaluate_within_budget
from placement_gym.errors import PlacementGymError
from placement_gym.simulation.cost_model import CostModel


def metis_parts(cost: CostModel, nparts: int, seed: int = 0) -> np.ndarray:
    """METIS k-way partition of the undirected group graph, shape ``(G,)``, int64 part labels.

    Args:
        cost: The cost model (edges, bytes, compute).
        nparts: Number of parts (``G`` or more gives one group per part).
        seed: METIS's random seed.
    """
    g = cost.num_groups
    if nparts >= g or nparts <= 1:
        return np.arange(g, dtype=np.int64) if nparts >= g else np.zeros(g, dtype=np.int64)
    pairs: dict[tuple[int, int], float] = {}
    for a, b, nbytes in zip(cost.edge_src.tolist(), cost.edge_dst.tolist(), cost.edge_bytes.tolist()):
        key = (min(a, b), max(a, b))
        pairs[key] = pairs.get(key, 0.0) + nbytes
    adj: list[list[tuple[int, int]]] = [[] for _ in range(g)]
    for (a, b), nbytes in pairs.items():
        w = max(1, int(round(nbytes / 1024)))
        adj[a].append((b, w))
        adj[b].append((a, w))
    xadj, adjncy, eweights = [0], [], []
    for row in adj:
        adjncy += [v for v, _ in row]
        eweights += [w for _, w in row]
        xadj.append(len(adjncy))
    mean = np.where(np.isfinite(cost.compute), cost.compute, 0.0).mean(axis=1)  # (G,) seconds
    vweights = np.maximum(1, np.round(mean * 1e9)).astype(np.int64).tolist()
    _, labels = pymetis.part_graph(
        nparts,
        xadj=xadj,
        adjncy=adjncy,
        vweights=vweights,
        eweights=eweights if adjncy else None,
        options=pymetis.Options(seed=seed),
    )
    return np.asarray(labels, dtype=np.int64)


class MetisPlacement(PlacementMethod):
    """METIS partition into ``parts_per_device * D`` parts, then the best evaluated part-to-device map.

    Args:
        parts_per_device: Parts per device (1: ``k = D``).
        max_assignments: Enumerate all ``D ** k`` maps up to this many; greedy beyond.
    """

    name = "metis"
    track = "white-box"  # reads the cost model

    def __init__(self, parts_per_device: int = 1, max_assignments: int = 4096) -> None:
        if parts_per_device < 1:
            raise PlacementGymError(f"parts_per_device must be >= 1, got {parts_per_device}")
        self.parts_per_device = parts_per_device
        self.max_assignments = max_assignments

    def _place(self, env: gym.Env, tracker: BudgetTracker, seed: int) -> dict[str, Any]:
        cost = tracker.problem.cost_model()
        allowed = allowed_devices(tracker.problem)  # (G, D)
        d_count = cost.num_devices
        labels = metis_parts(cost, self.parts_per_device * d_count, seed)
        k = int(labels.max()) + 1
        # a part may go to a device only if all its groups may
        part_ok = np.array([allowed[labels == p].all(axis=0) for p in range(k)])  # (k, D)
        part_ok[~part_ok.any(axis=1)] = True  # the env will report such a placement infeasible
        options = [np.flatnonzero(row).tolist() for row in part_ok]
        total = int(np.prod([len(o) for o in options], dtype=np.float64))
        room = tracker.budget - tracker.used if tracker.budget is not None else total
        if total <= min(self.max_assignments, room):
            for devices in itertools.product(*options):
                evaluate_within_budget(tracker, np.asarray(devices, dtype=np.int64)[labels])
            return {"parts": k, "search": "exhaustive", "assignments": total}
        self._greedy(tracker, labels, options)
        return {"parts": k, "search": "greedy"}

    @staticmethod
    def _greedy(tracker: BudgetTracker, labels: np.ndarray, options: list[list[int]]) -> None:
        """Coordinate descent over the parts' devices, from the best all-on-one-device map."""
        k = len(options)
        best, best_lat = None, np.inf
        for d in sorted(set().union(*options)):
            assign = np.array([d if d in o else o[0] for o in options], dtype=np.int64)
            lat = evaluate_within_budget(tracker, assign[labels])
            if lat is not None and lat < best_lat:
                best, best_lat = assign, lat
        if best is None:
            return
        improved = True
        while improved and not tracker.exhausted:
            improved = False
            for p in range(k):
                for d in options[p]:
                    if d == best[p]:
                        continue
                    trial = best.copy()
                    trial[p] = d
                    lat = evaluate_within_budget(tracker, trial[labels])
                    if lat is None:
                        return
                    if lat < best_lat:
                        best, best_lat, improved = trial, lat, True
