"""Masked learners against their unmasked ablations on the mask-binding task (the table of docs/tasks.md).

Per method and seed, one run at the ``standard`` budget on ``resnet50/cpu-igpu-lowmem`` (the ``masked``
split), counting the evaluated placements that put a group on a device its memory mask blocks:

    python -m experiments.masked_task --methods ppo_gnn maskable_ppo_gnn --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from agents import make_method
from placement_gym.benchmark import run_agent
from placement_gym.problem import PlacementProblem
from placement_gym.protocol import SPLITS, tier_budget


def run(method: str, model: str, platform: str, seed: int, budget: int) -> dict[str, float]:
    """One run: its score, latency, evaluations and how its evaluated placements used blocked pairs."""
    problem = PlacementProblem.make(model, platform)
    blocked = ~problem.device_mask  # (G, D)
    rows = np.arange(problem.num_groups)
    on_blocked: list[int] = []  # per evaluated placement: groups on a device that cannot hold them
    feasible_count = [0]

    def count(tracker, placement, latency, feasible) -> None:
        on_blocked.append(int(blocked[rows, placement].sum()))
        feasible_count[0] += bool(feasible)

    start = time.perf_counter()
    outcome = run_agent(make_method(method), problem, budget, seed, listeners=[count])
    return {
        "score": problem.score(outcome.latency),
        "latency_ms": outcome.latency * 1e3,
        "evaluations": outcome.evaluations,
        "feasible": feasible_count[0],
        "placements_on_blocked": sum(n > 0 for n in on_blocked),
        "groups_on_blocked": float(np.mean(on_blocked)) if on_blocked else 0.0,
        "final_on_blocked": int(blocked[rows, outcome.placement].sum()),
        "wall_s": time.perf_counter() - start,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--methods", nargs="+", default=["ppo_gnn", "maskable_ppo_gnn"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--tier", default="standard")
    args = parser.parse_args(argv)
    budget = tier_budget(args.tier)
    print("| task | method | seed | score | latency ms | evaluations | feasible | using a blocked pair | "
          "groups on a blocked device (mean) | returned placement's groups on a blocked device | wall s |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for task in SPLITS["masked"]:
        for method in args.methods:
            for seed in args.seeds:
                r = run(method, task.model, task.platform, seed, budget)
                print(
                    f"| {task.name} | `{method}` | {seed} | {r['score']:.3f} | {r['latency_ms']:.3f} | "
                    f"{r['evaluations']} | {r['feasible']} | {r['placements_on_blocked']} | {r['groups_on_blocked']:.2f} | "
                    f"{r['final_on_blocked']} | {r['wall_s']:.0f} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
