"""Baechi's memory-constrained placers m-TOPO, m-ETF and m-SCT (Jeon, Lee, Park, Kim and Yoon, "Baechi:
Fast Device Placement of Machine Learning Graphs", ACM SoCC 2020).

* **m-TOPO**: walk the groups in topological order and fill the devices one after another, each up to a
  balanced share of the total memory (``total / D``, water-filled so that no share exceeds a device's
  capacity).
* **m-ETF**: earliest task first (Hwang et al. 1989) list scheduling: repeatedly schedule the
  (ready group, device) pair with the earliest start time, only on devices with enough free memory.
* **m-SCT**: small communication time (Hanen and Munier 1995): an LP relaxation picks each group's
  *favourite child* (at most one per parent and one per child, the edges the LP keeps local); m-ETF then
  places a favourite child on its parent's device whenever memory allows.

Deviations from Baechi:

* Costs come from the env's heterogeneous :class:`~placement_gym.simulation.cost_model.CostModel` (Baechi
  profiles homogeneous GPUs). m-ETF/m-SCT use each device's own compute time, rank ready pairs by start
  time then finish time, and the SCT LP uses device-averaged compute and cross-device transfer costs.
* Memory uses a static permanent-residency ledger (weights, outputs, graph inputs and received copies
  stay for the whole inference: :class:`agents.baselines.common.MemoryLedger`), which over-approximates
  the simulator's liveness peak; Baechi tracks training memory (weights, gradients, activations).
* Graph inputs arrive on the host; the schedulers charge their copy to the group that reads them. Link
  contention is ignored while scheduling; a device's invoke overhead is charged to a group none of whose
  inputs comes from that device. The env evaluates the resulting placement.
* m-TOPO balances memory, as Baechi does, so on a CPU + GPU platform it splits the weights evenly, whatever
  the speed of the devices; ``balance="compute"`` balances device-averaged compute time instead.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from scipy.optimize import linprog
from scipy.sparse import coo_matrix

from agents.base import BudgetTracker, PlacementMethod
from agents.baselines.common import (
    MemoryLedger,
    allowed_devices,
    evaluate_within_budget,
    predecessors,
    successors,
    transfer,
)
from placement_gym.errors import UnknownNameError
from placement_gym.simulation.cost_model import CostModel


# ---------------------------------------------------------------------- m-TOPO
def balanced_shares(total: float, capacity: np.ndarray) -> np.ndarray:
    """Split ``total`` evenly over devices, none above its capacity (water-filling), shape ``(D,)``."""
    shares = np.zeros(len(capacity))
    open_ = np.ones(len(capacity), dtype=bool)
    left = total
    while open_.any() and left > 0:
        each = left / open_.sum()
        capped = open_ & (capacity - shares <= each)
        if not capped.any():
            shares[open_] += each
            break
        left -= float((capacity - shares)[capped].sum())
        shares[capped] = capacity[capped]
        open_ &= ~capped
    return shares


def m_topo_placement(cost: CostModel, allowed: np.ndarray, balance: str = "memory") -> np.ndarray:
    """m-TOPO: contiguous chunks of the topological order (group index order), one per device in turn.

    Args:
        cost: The cost model.
        allowed: Devices each group may use, shape ``(G, D)``, bool.
        balance: ``"memory"`` (Baechi) or ``"compute"`` (device-averaged compute time).

    Returns:
        Placement, shape ``(G,)``, int64.
    """
    g_count, d_count = cost.num_groups, cost.num_devices
    preds = predecessors(cost)
    ledger = MemoryLedger(cost, preds)
    if balance == "memory":
        weight = ledger.base + np.array([sum(b for _, b in p) for p in preds])  # (G,) worst-case bytes
        shares = balanced_shares(float(weight.sum()), cost.capacity)
    elif balance == "compute":
        weight = np.where(np.isfinite(cost.compute), cost.compute, 0.0).mean(axis=1)  # (G,)
        shares = np.full(d_count, weight.sum() / d_count)
    else:
        raise UnknownNameError("m-TOPO balance", balance, ["compute", "memory"])
    placement = np.full(g_count, -1, dtype=np.int64)
    load = np.zeros(d_count)
    current = 0
    for g in range(g_count):
        d = current
        # move on when this device's share is used up (the last device takes the remainder)
        while d < d_count - 1 and (
            load[d] + weight[g] > shares[d] * (1 + 1e-9)
            or not allowed[g, d]
            or not ledger.fits(g, d, placement)
        ):
            d += 1
        if not (allowed[g, d] and ledger.fits(g, d, placement)):  # the last device cannot take it
            fitting = [e for e in range(d_count) if allowed[g, e] and ledger.fits(g, e, placement)]
            d = fitting[0] if fitting else ledger.fallback(allowed[g])
        else:
            current = d
        ledger.add(g, d, placement)
        load[d] += weight[g]
        placement[g] = d
    return placement


# ---------------------------------------------------------------------- m-ETF / m-SCT
def etf_placement(
    cost: CostModel, allowed: np.ndarray, favourite: np.ndarray | None = None
) -> tuple[np.ndarray, float]:
    """Memory-constrained earliest-task-first list scheduling.

    Args:
        cost: The cost model.
        allowed: Devices each group may use, shape ``(G, D)``, bool.
        favourite: Favourite child of each group or -1, shape ``(G,)`` (m-SCT); ``None`` for m-ETF.

    Returns:
        ``(placement, makespan)``: placement of shape ``(G,)``, int64, and the scheduler's own estimate
        of the makespan in seconds (no link contention).
    """
    g_count, d_count = cost.num_groups, cost.num_devices
    preds, succs = predecessors(cost), successors(cost)
    ledger = MemoryLedger(cost, preds)
    parent_of = np.full(g_count, -1, dtype=np.int64)  # (G,) the parent whose favourite child g is
    if favourite is not None:
        for p, c in enumerate(favourite.tolist()):
            if c >= 0:
                parent_of[c] = p
    indeg = np.bincount(cost.edge_dst, minlength=g_count)
    ready = {g for g in range(g_count) if indeg[g] == 0}
    placement = np.full(g_count, -1, dtype=np.int64)
    finish = np.zeros(g_count)
    dev_free = np.zeros(d_count)
    makespan = 0.0
    while ready:
        best = None
        for g in ready:
            fits = [d for d in range(d_count) if allowed[g, d] and ledger.fits(g, d, placement)]
            p = parent_of[g]
            if p >= 0 and placement[p] in fits:
                fits = [int(placement[p])]
            if not fits:
                fits = [ledger.fallback(allowed[g])]
            for d in fits:
                arrive = transfer(cost, cost.input_bytes[g], cost.host, d)
                for s, b in preds[g]:
                    arrive = max(arrive, finish[s] + transfer(cost, b, int(placement[s]), d))
                start = max(arrive, dev_free[d])
                invoke = 0.0 if any(placement[s] == d for s, _ in preds[g]) else cost.invoke_overhead[d]
                key = (start, start + float(cost.compute[g, d] + invoke), g, d)
                if best is None or key < best:
                    best = key
        start, end, g, d = best
        ledger.add(g, d, placement)
        placement[g], finish[g], dev_free[d] = d, end, end
        makespan = max(makespan, end + transfer(cost, cost.result_bytes[g], d, cost.host))
        ready.remove(g)
        for c, _ in succs[g]:
            indeg[c] -= 1
            if indeg[c] == 0:
                ready.add(c)
    return placement, makespan


def favourite_children(cost: CostModel) -> np.ndarray:
    """Favourite child of each group from the SCT LP relaxation, shape ``(G,)``, -1 for none.

    LP (Hanen and Munier): minimise the makespan ``w`` over start times ``s`` and edge variables
    ``x_e`` in ``[0, 1]`` (1: the edge is cut and pays its mean transfer time ``c_e``) subject to
    ``s_dst >= s_src + p_src + c_e x_e``, ``w >= s_g + p_g``, and for every group at most one outgoing and
    at most one incoming edge with ``x_e < 1`` in the integral case (sum of ``x`` over a group's ``k``
    outgoing / incoming edges ``>= k - 1``). Edges with ``x_e < 1/2`` give the favourite children.
    """
    g_count, e_count, d_count = cost.num_groups, cost.num_edges, cost.num_devices
    if e_count == 0:
        return np.full(g_count, -1, dtype=np.int64)
    p = np.where(np.isfinite(cost.compute), cost.compute, 0.0).mean(axis=1)  # (G,)
    off = ~np.eye(d_count, dtype=bool)
    if d_count > 1:
        inv_bw = cost.inverse_bandwidth()
        c = cost.link_latency[off].mean() + cost.edge_bytes * inv_bw[off].mean()  # (E,)
    else:
        c = np.zeros(e_count)
    scale = 1e6  # microseconds keep the LP well scaled
    p, c = p * scale, c * scale
    # columns: s (G), x (E), w (1)
    n = g_count + e_count + 1
    rows, cols, vals, ub = [], [], [], []
    r = 0
    for e, (a, b) in enumerate(zip(cost.edge_src.tolist(), cost.edge_dst.tolist())):
        # s_a - s_b + c_e x_e <= -p_a
        rows += [r, r, r]
        cols += [a, b, g_count + e]
        vals += [1.0, -1.0, c[e]]
        ub.append(-p[a])
        r += 1
    for g in range(g_count):  # s_g - w <= -p_g
        rows += [r, r]
        cols += [g, n - 1]
        vals += [1.0, -1.0]
        ub.append(-p[g])
        r += 1
    for key in (cost.edge_src, cost.edge_dst):  # -sum x <= -(k - 1) per group with k >= 2 edges
        for g in range(g_count):
            edges = np.flatnonzero(key == g)
            if len(edges) >= 2:
                rows += [r] * len(edges)
                cols += (g_count + edges).tolist()
                vals += [-1.0] * len(edges)
                ub.append(-(len(edges) - 1.0))
                r += 1
    a_ub = coo_matrix((vals, (rows, cols)), shape=(r, n)).tocsr()
    objective = np.zeros(n)
    objective[-1] = 1.0
    bounds = [(0, None)] * g_count + [(0, 1)] * e_count + [(0, None)]
    res = linprog(objective, A_ub=a_ub, b_ub=np.array(ub), bounds=bounds, method="highs")
    fav = np.full(g_count, -1, dtype=np.int64)
    if res.status != 0:
        return fav
    x = res.x[g_count : g_count + e_count]
    taken = set()
    for e in np.argsort(x, kind="stable").tolist():
        a, b = int(cost.edge_src[e]), int(cost.edge_dst[e])
        if x[e] < 0.5 and fav[a] < 0 and b not in taken:
            fav[a] = b
            taken.add(b)
    return fav


def list_scheduler_placements(cost: CostModel, allowed: np.ndarray) -> dict[str, np.ndarray]:
    """The placements of m-TOPO, m-ETF and m-SCT, by method name (shape ``(G,)`` each)."""
    return {
        "m_topo": m_topo_placement(cost, allowed),
        "m_etf": etf_placement(cost, allowed)[0],
        "m_sct": etf_placement(cost, allowed, favourite_children(cost))[0],
    }


# ---------------------------------------------------------------------- methods
class MTopo(PlacementMethod):
    """Baechi's m-TOPO (see the module docstring); one evaluation.

    Args:
        balance: ``"memory"`` (Baechi) or ``"compute"``.
    """

    name = "m_topo"
    track = "white-box"  # reads the cost model

    def __init__(self, balance: str = "memory") -> None:
        self.balance = balance

    def _place(self, env: gym.Env, tracker: BudgetTracker, seed: int) -> dict[str, Any]:
        placement = m_topo_placement(tracker.problem.cost_model(), allowed_devices(tracker.problem), self.balance)
        evaluate_within_budget(tracker, placement)
        return {"balance": self.balance}


class METF(PlacementMethod):
    """Baechi's m-ETF (see the module docstring); one evaluation."""

    name = "m_etf"
    track = "white-box"  # reads the cost model

    def _place(self, env: gym.Env, tracker: BudgetTracker, seed: int) -> dict[str, Any]:
        placement, makespan = etf_placement(tracker.problem.cost_model(), allowed_devices(tracker.problem))
        evaluate_within_budget(tracker, placement)
        return {"etf_makespan": makespan}


class MSCT(PlacementMethod):
    """Baechi's m-SCT (see the module docstring); one evaluation."""

    name = "m_sct"
    track = "white-box"  # reads the cost model

    def _place(self, env: gym.Env, tracker: BudgetTracker, seed: int) -> dict[str, Any]:
        cost = tracker.problem.cost_model()
        favourite = favourite_children(cost)
        placement, makespan = etf_placement(cost, allowed_devices(tracker.problem), favourite)
        evaluate_within_budget(tracker, placement)
        return {"sct_makespan": makespan, "favourite_children": int((favourite >= 0).sum())}
