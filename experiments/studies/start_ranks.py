"""Where move rankers put the improving moves of a task's starting placement.

At the guided search's start (the best of HEFT and the single devices), every proposed move is
simulated; for each ranker the line gives the rank of the best improving move, the best rank of any
improving move and how many improving moves are among the first 96 (the search's depth). Rankers: the
shipped MLP scorer (``mlp``), the queue-free estimate (``estimate``) and ``guided_ppo`` policies (shipped
names or folders).

    python -m experiments.studies.start_ranks --tasks bert@multi-accel vit_b16@multi-accel \\
        --policies all no-bert untrained
"""

from __future__ import annotations

import argparse

import numpy as np

from agents.base import BudgetTracker
from agents.baselines.common import allowed_devices
from agents.learned.listwise import simulated_changes
from agents.learned.moves import KINDS, MoveFeaturizer, branch_sets, propose, twin_classes
from agents.learned.scorer import IMPROVES, MoveScorer
from agents.learned.search import EstimateRanker, start_placements
from agents.sb3.guided_policy import PolicyRanker
from agents.sb3.guided_ppo import METHOD, resolve_policy
from agents.sb3.policy_file import read_transfer_policy
from placement_gym.problem import PlacementProblem

DEPTH = 96


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="+", required=True, help="model@platform")
    parser.add_argument("--policies", nargs="*", default=["all"], help="guided_ppo policies")
    args = parser.parse_args(argv)
    for task in args.tasks:
        model, platform = task.split("@")
        problem = PlacementProblem.make(model, platform, "simulated")
        cost, allowed = problem.cost_model(), allowed_devices(problem)
        tracker = BudgetTracker(problem, None)
        starts = start_placements(tracker, allowed)
        results = tracker.evaluate_batch(starts)
        best = int(np.argmin([r.latency for r in results]))
        placement, latency = starts[best], float(results[best].latency)
        moves = propose(placement, allowed, twin_classes(cost), branch_sets(cost))
        features = MoveFeaturizer(cost).features(placement, latency, moves)
        change = simulated_changes(problem.backend.schedule, placement, latency, moves)
        improving = np.flatnonzero(change < -IMPROVES)
        kinds = {
            KINDS[k]: int(n) for k, n in enumerate(np.bincount(moves.kind[improving], minlength=len(KINDS)))
        }
        print(f"{task}: {len(moves)} moves, {len(improving)} improve {kinds}, best change {change.min():.4f}")
        rankers = {"mlp": MoveScorer.load(), "estimate": EstimateRanker()}
        for name in args.policies:
            path = resolve_policy(name, model)
            saved = read_transfer_policy(path, method=METHOD)
            arch = saved.meta.arch
            ranker = PolicyRanker.from_state(
                problem, saved.policy_state, arch.extractor.hidden, arch.extractor.layers, list(arch.head)
            )
            ranker.visit(placement, latency, moves, features)
            rankers[f"guided_ppo:{path.name}"] = ranker
        for name, ranker in rankers.items():
            order = np.argsort(ranker.scores(features, moves), kind="stable")
            rank = np.empty(len(order), dtype=np.int64)
            rank[order] = np.arange(len(order))
            first = int(rank[improving].min()) if len(improving) else None
            top = int((rank[improving] < DEPTH).sum())
            print(f"  {name:32s} best improving move ranked {int(rank[np.argmin(change)])}, "
                  f"first improving {first}, improving in the first {DEPTH}: {top}")  # fmt: skip
        problem.close()


if __name__ == "__main__":
    main()
