"""How long a learner takes to get within a tolerance of the MILP's latency on a simulated env.

The reference is the MILP's best placement under the same cost model (``agents.baselines.milp``, with a
time limit: when it stops at the limit the reference is its incumbent, reported with its gap). Every
evaluation of the learner is timed; the result is the number of evaluations and seconds until its best
latency is within ``--tolerance`` of the reference, per seed.

Usage:
    taskset -c 0 python -m experiments.studies.time_to_quality --method ppo_gnn --env DevicePlacement-bert-cpu_dgpu_v0-sim-v0 \
        --seeds 0 1 2 --budget 3000
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import gymnasium as gym
import torch

import placement_gym  # noqa: F401  (registers the env IDs)
from agents import make_method


def reference_latency(env_id: str, time_limit: float) -> tuple[float, dict]:
    """The MILP's latency on ``env_id`` and its solver facts (status, gap)."""
    env = gym.make(env_id)
    result = make_method("milp", time_limit=time_limit).place(env, seed=0)
    env.close()
    return result.latency, {k: result.extra.get(k) for k in ("status", "gap", "objective")}


def time_to_quality(method: str, env_id: str, seed: int, budget: int, target: float) -> dict:
    """Evaluations and seconds until ``method`` finds a placement with latency <= ``target``."""
    env = gym.make(env_id)
    _ = env.unwrapped.problem.baseline  # the problem's one-off baseline evaluation is not the learner's time
    hit: dict = {}
    start = time.perf_counter()

    def listener(tracker, placement, latency, feasible) -> None:
        if not hit and tracker.best_latency <= target:
            hit.update(evaluations=tracker.used, seconds=time.perf_counter() - start)

    result = make_method(method).place(env, budget=budget, seed=seed, listeners=[listener])
    env.close()
    return {
        "seed": seed,
        "best_ms": result.latency * 1e3,
        "reached": bool(hit),
        **hit,
        "wall_s": result.wall_time,
        "evaluations_used": result.evaluations,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--method", default="ppo_gnn")
    parser.add_argument("--env", default="DevicePlacement-bert-cpu_dgpu_v0-sim-v0")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--budget", type=int, default=3000)
    parser.add_argument("--tolerance", type=float, default=0.05)
    parser.add_argument("--milp-time-limit", type=float, default=120.0)
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    ref, facts = reference_latency(args.env, args.milp_time_limit)
    target = ref * (1 + args.tolerance)
    print(
        f"reference (MILP, {args.milp_time_limit:.0f} s limit): {ref * 1e3:.3f} ms {facts}; "
        f"target <= {target * 1e3:.3f} ms"
    )
    runs = [time_to_quality(args.method, args.env, s, args.budget, target) for s in args.seeds]
    for r in runs:
        print(json.dumps(r))
    reached = [r for r in runs if r["reached"]]
    if reached:
        print(
            f"{args.method} on {args.env}: within {args.tolerance:.0%} of the MILP in "
            f"{len(reached)}/{len(runs)} seeds; median {statistics.median(r['evaluations'] for r in reached):.0f} "
            f"evaluations, {statistics.median(r['seconds'] for r in reached):.1f} s"
        )
    else:
        print(
            f"{args.method} on {args.env}: not within {args.tolerance:.0%} of the MILP in {args.budget} evaluations"
        )


if __name__ == "__main__":
    main()
