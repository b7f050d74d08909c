"""Why ``ppo_gnn`` lost to its MLP ablation: the candidate fixes, one at a time, on one task.

Each variant is a method spec run by :mod:`experiments.records.rl_curves` (same rows, same table): the policy
before the fix (graph observation, no positional features, no pair bias), then the device-aware
observation, the positional features, the per-(group, device) bias and its scale, and the rollout size.

    nice -n 10 python -m experiments.studies.rl_diagnosis --out /work/data/rl-policy/diag
    python -m experiments.records.rl_curves --out /work/data/rl-policy/diag --table
    taskset -c 0 python -m experiments.studies.rl_diagnosis --timing     # where the main job's RL cell time goes
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from experiments.records import rl_curves

#: The variants, from the policy before the fix to the shipped one (``ppo_gnn`` with its defaults).
VARIANTS = (
    "ppo_gnn:observation=null,positional=0,pair_bias_scale=0",
    "ppo_gnn:positional=0,pair_bias_scale=0",
    "ppo_gnn:positional=16,pair_bias_scale=0",
    "ppo_gnn:positional=0,pair_bias_scale=32",
    "ppo_gnn:positional=16,pair_bias_scale=32",
    "ppo_gnn:positional=16,pair_bias_scale=128",
    "ppo_gnn:positional=0,pair_bias_scale=128",
    "ppo_gnn:positional=16,pair_bias_scale=512",
    "ppo_gnn:positional=16,pair_bias_scale=128,n_steps=32,batch_size=32",
    "ppo_gnn:positional=16,pair_bias_scale=128,ent_coef=0.001",
    "ppo_mlp",
)


def timing(budget: int = 200) -> None:
    """CPU and wall seconds of the README main job's ``ppo_gnn`` and ``hsdag`` cells (Inception-V3 /
    ``cpu-dgpu``, ``budget`` evaluations, seed 0), with the load."""
    from agents import make_method
    from placement_gym.problem import PlacementProblem

    problem = PlacementProblem.make("inception_v3", "cpu-dgpu", "simulated")
    problem.baseline  # noqa: B018 - found once, outside the timings
    for name in ("ppo_gnn", "hsdag"):
        wall, cpu = time.perf_counter(), time.process_time()
        result = make_method(name).place(problem, budget=budget, seed=0)
        print(
            f"{name}: {time.process_time() - cpu:.2f} CPU s, {time.perf_counter() - wall:.2f} wall s, "
            f"{result.latency * 1e3:.3f} ms, load {os.getloadavg()[0]:.1f}",
            flush=True,
        )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--timing", action="store_true", help="only time the README main job's RL cells")
    parser.add_argument("--task", default="inception_v3:cpu-igpu")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    parser.add_argument("--checkpoints", nargs="+", type=int, default=[100, 500, 2000])
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS))
    args = parser.parse_args(argv)
    if args.timing:
        timing()
        return
    if args.out is None:
        parser.error("--out is required")
    rl_curves.main(
        ["--out", str(args.out), "--tasks", args.task, "--methods", *args.variants, "--seeds"]
        + [str(s) for s in args.seeds]
        + ["--checkpoints", *map(str, args.checkpoints)]
    )


if __name__ == "__main__":
    main()
