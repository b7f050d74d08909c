"""The local optima a task's improvement searches end in, and how far the learned search's end point moves.

A diagnosis of one task on the simulated backend (offline: every candidate is simulated, no budget), for
``guided_improvement``'s targets (issue #11). Three measurements:

* **Descents.** Best-improvement descents that simulate every move of the current placement and take
  the best, until none improves (a local optimum), from HEFT's placement, HEFT's without insertion
  (``heft:insertion=false``) and ``--perturbed`` copies of HEFT's perturbed by ``--kicks`` random moves;
  once with the method's moves (:func:`agents.learned.moves.propose`) and once with those plus
  *parallel swaps*: two groups that may run at once (neither reaches the other) and are at most two edges
  apart exchange their devices, which no move of one target device does in one step.
* **Block re-placement.** From ``guided_improvement``'s placement at the first ``--budget``, a descent
  whose candidates re-place one fork-join block at once: every assignment of devices to its branches
  (each chain from a successor of the fork to its join, as one unit) and its join, all simulated. It
  tells whether the method's end point is only a local optimum of its small moves.
* **Perturbed scores.** ``guided_improvement`` with its defaults at each ``--budget``, once as shipped
  and then with Gaussian noise on its scorer's scores (``--noise``, as a fraction of the scores' spread)
  over ``--runs`` seeds: the spread of its end points when its early choices change a little.

    python -m experiments.studies.landscape --model inception_v3 --platform model-parallel --budget 500 1500 \\
        --out results/landscape-inception_v3-model-parallel
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from agents.base import BudgetTracker
from agents.baselines.common import allowed_devices
from agents.baselines.heft import heft_placement
from agents.learned.guided import GuidedImprovement
from agents.learned.moves import branch_sets, fork_branches, propose, twin_classes
from agents.learned.search import NoisyRanker
from placement_gym.errors import PlacementGymError
from placement_gym.problem import PlacementProblem
from placement_gym.simulation.cost_model import CostModel


def parallel_pairs(cost: CostModel, hops: int = 2) -> np.ndarray:
    """Pairs ``(a, b)``, ``a < b``, of groups neither of which reaches the other, at most ``hops`` edges
    apart (direction ignored), shape ``(P, 2)``."""
    g_count = cost.num_groups
    adjacency = np.zeros((g_count, g_count), dtype=bool)
    adjacency[cost.edge_src, cost.edge_dst] = True
    reach = np.zeros_like(adjacency)  # reach[a, b]: a path a -> b (index order is topological)
    for g in range(g_count - 1, -1, -1):
        succ = np.flatnonzero(adjacency[g])
        if len(succ):
            reach[g] = adjacency[g] | reach[succ].any(axis=0)
    undirected = (adjacency | adjacency.T).astype(np.int32)
    near, frontier = undirected > 0, undirected > 0
    for _ in range(hops - 1):
        frontier = (frontier.astype(np.int32) @ undirected) > 0
        near |= frontier
    a, b = np.nonzero(np.triu(near & ~reach & ~reach.T, k=1))
    return np.column_stack([a, b]).astype(np.int64)


def swaps(placement: np.ndarray, pairs: np.ndarray, allowed: np.ndarray) -> np.ndarray:
    """The placements after exchanging the devices of each pair on two different devices, ``(S, G)``."""
    a, b = pairs[:, 0], pairs[:, 1]
    keep = (placement[a] != placement[b]) & allowed[a, placement[b]] & allowed[b, placement[a]]
    a, b = a[keep], b[keep]
    out = np.repeat(placement[None, :], len(a), axis=0)
    rows = np.arange(len(a))
    out[rows, a], out[rows, b] = placement[b], placement[a]
    return out


def best_improvement(
    problem: PlacementProblem, start: np.ndarray, neighbours: Callable[[np.ndarray], np.ndarray]
) -> dict:
    """Descent from ``start`` that simulates every placement ``neighbours(current)`` gives (``(N, G)``) and
    takes the best, until none improves: its latency, steps and placements simulated."""
    current = start
    latency = problem.evaluate(current).latency
    steps = simulated = 0
    while True:
        candidates = neighbours(current)
        if not len(candidates):
            break
        lat = np.array([e.latency if e.feasible else math.inf for e in problem.evaluate_batch(candidates)])
        simulated += len(candidates)
        best = int(np.argmin(lat))
        if not lat[best] < latency:
            break
        current, latency, steps = candidates[best], float(lat[best]), steps + 1
    return {"latency": latency, "steps": steps, "simulated": simulated}


def descend(problem: PlacementProblem, start: np.ndarray, pairs: np.ndarray | None) -> dict:
    """Best-improvement descent from ``start`` over the method's moves (plus swaps of ``pairs``)."""
    cost = problem.cost_model()
    allowed, classes, branches = allowed_devices(problem), twin_classes(cost), branch_sets(cost)

    def neighbours(current: np.ndarray) -> np.ndarray:
        candidates = propose(current, allowed, classes, branches).apply_all(current)
        if pairs is None:
            return candidates
        return np.concatenate([candidates, swaps(current, pairs, allowed)])

    return best_improvement(problem, start, neighbours)


def fork_join_blocks(cost: CostModel, max_units: int = 6) -> list[list[list[int]]]:
    """Each fork's branches (:func:`agents.learned.moves.fork_branches`) plus, if they all end in one
    join, that join; blocks of at most ``max_units`` units."""
    by_fork: dict[int, list[tuple[list[int], int | None]]] = {}
    for fork, chain, join in fork_branches(cost):
        by_fork.setdefault(fork, []).append((chain, join))
    blocks = []
    for branches in by_fork.values():
        joins = {join for _, join in branches}
        units = [chain for chain, _ in branches]
        if len(joins) == 1 and None not in joins:
            units.append([joins.pop()])
        if len(units) <= max_units:
            blocks.append(units)
    return blocks


def replace_blocks(problem: PlacementProblem, start: np.ndarray) -> dict:
    """Best-improvement descent over re-placements of one fork-join block (every assignment simulated)."""
    blocks = fork_join_blocks(problem.cost_model())
    allowed = allowed_devices(problem)

    def neighbours(current: np.ndarray) -> np.ndarray:
        candidates = []
        for units in blocks:
            for devices in itertools.product(range(problem.num_devices), repeat=len(units)):
                placement = current.copy()
                for unit, d in zip(units, devices):
                    placement[unit] = d
                if allowed[np.arange(len(placement)), placement].all() and (placement != current).any():
                    candidates.append(placement)
        return np.stack(candidates) if candidates else np.zeros((0, len(current)), dtype=np.int64)

    return {"blocks": len(blocks), **best_improvement(problem, start, neighbours)}


def perturbed_runs(
    problem_factory: Callable[[], PlacementProblem],
    budget: int,
    noise: float,
    runs: int,
    method: GuidedImprovement | None = None,
) -> list[float]:
    """End latencies of ``method`` (default: ``guided_improvement`` with its defaults) with noisy scores,
    one per seed: its ranker's scores get Gaussian noise of ``noise`` times their spread."""
    method = GuidedImprovement() if method is None else method
    out = []
    for seed in range(runs):
        problem = problem_factory()
        rng = np.random.default_rng(seed)
        tracker = BudgetTracker(problem, budget)
        method.search(tracker, NoisyRanker(method.ranker_for(rng, problem.cost_model()), noise, rng), rng)
        out.append(float(tracker.best_latency))
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--platform", required=True)
    parser.add_argument("--perturbed", type=int, default=4, help="perturbed copies of HEFT's placement")
    parser.add_argument("--kicks", type=int, default=6, help="random moves per perturbed copy")
    parser.add_argument("--budget", type=int, nargs="+", default=[500])
    parser.add_argument("--noise", type=float, nargs="*", default=[0.05, 0.2])
    parser.add_argument("--runs", type=int, default=12)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)

    def make() -> PlacementProblem:
        return PlacementProblem.make(args.model, args.platform, "simulated")

    problem = make()
    if problem.reference is None:
        raise PlacementGymError(f"{args.model} / {args.platform} has no stored reference optimum")
    optimum = problem.reference.latency
    cost, allowed = problem.cost_model(), allowed_devices(problem)
    rng = np.random.default_rng(0)
    heft = heft_placement(cost, allowed)[0]
    starts = {"heft": heft, "heft:insertion=false": heft_placement(cost, allowed, insertion=False)[0]}
    classes, branches = twin_classes(cost), branch_sets(cost)
    for i in range(args.perturbed):
        placement = heft.copy()
        for _ in range(args.kicks):
            moves = propose(placement, allowed, classes, branches)
            placement = moves.apply(placement, int(rng.integers(len(moves))))
        starts[f"heft + {args.kicks} random moves ({i})"] = placement
    pairs = parallel_pairs(cost)
    began = time.perf_counter()
    descents = []
    for name, start in starts.items():
        row = {"start": name, "start_ratio": problem.evaluate(start).latency / optimum}
        for label, with_pairs in (("moves", None), ("moves + swaps", pairs)):
            result = descend(problem, start, with_pairs)
            row[label] = {**result, "ratio": result["latency"] / optimum}
        descents.append(row)
        print(json.dumps(row), flush=True)
    shipped = {}
    for budget in args.budget:
        result = GuidedImprovement().place(make(), budget=budget, seed=0)
        shipped[str(budget)] = result.latency / optimum
        if budget == args.budget[0]:
            blocks = replace_blocks(problem, np.asarray(result.placement, dtype=np.int64))
            blocks["ratio"] = blocks["latency"] / optimum
            blocks["start_ratio"] = shipped[str(budget)]
    perturbed = {
        f"{budget} {noise}": [lat / optimum for lat in perturbed_runs(make, budget, noise, args.runs)]
        for budget in args.budget
        for noise in args.noise
    }
    report = {
        "model": args.model, "platform": args.platform, "optimum_ms": optimum * 1e3,
        "parallel_pairs": len(pairs), "descents": descents, "budget": args.budget,
        "guided_improvement": shipped, "block_replacement": blocks, "perturbed": perturbed, "runs": args.runs,
        "wall_s": round(time.perf_counter() - began, 1),
    }  # fmt: skip
    lines = [
        f"# Local optima on {args.model} / {args.platform} (ratio to the reference optimum)",
        "",
        f"Best-improvement descents, every move simulated ({len(pairs)} parallel pairs for the swaps):",
        "",
        "| start | start ratio | moves: local optimum (steps) | moves + swaps: local optimum (steps) |",
        "|---|---|---|---|",
    ]
    for row in descents:
        m, s = row["moves"], row["moves + swaps"]
        lines.append(
            f"| {row['start']} | {row['start_ratio']:.4f} | {m['ratio']:.4f} ({m['steps']}) "
            f"| {s['ratio']:.4f} ({s['steps']}) |"
        )
    lines += [
        "",
        f"Re-placing one of {blocks['blocks']} fork-join blocks at once (every assignment simulated) from "
        f"`guided_improvement`'s placement at {args.budget[0]} evaluations ({blocks['start_ratio']:.4f}): "
        f"{blocks['ratio']:.4f} after {blocks['steps']} steps ({blocks['simulated']} placements simulated).",
        "",
        f"`guided_improvement` as shipped and with noisy scores ({args.runs} seeds):",
        "",
        "| evaluations | score noise | as shipped | median | best | worst |",
        "|---|---|---|---|---|---|",
    ]
    for key, ratios in perturbed.items():
        budget, noise = key.split()
        lines.append(
            f"| {budget} | {noise} | {shipped[budget]:.4f} | {np.median(ratios):.4f} | {min(ratios):.4f} "
            f"| {max(ratios):.4f} |"
        )
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "landscape.json").write_text(json.dumps(report, indent=1))
    (out / "table.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
