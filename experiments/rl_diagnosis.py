"""Why ``ppo_gnn`` lost to its MLP ablation: the candidate fixes, one at a time, on one task.

Each variant is a method spec run by :mod:`experiments.rl_curves` (same rows, same table): the policy
before the fix (graph observation, no positional features, no pair bias), then the device-aware
observation, the positional features, the per-(group, device) bias and its scale, and the rollout size.

    nice -n 10 python -m experiments.rl_diagnosis --out /work/data/rl-policy/diag
    python -m experiments.rl_curves --out /work/data/rl-policy/diag --table
"""

from __future__ import annotations

import argparse
from pathlib import Path

from experiments import rl_curves

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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--task", default="inception_v3:cpu-igpu")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    parser.add_argument("--checkpoints", nargs="+", type=int, default=[100, 500, 2000])
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS))
    args = parser.parse_args(argv)
    rl_curves.main(
        ["--out", str(args.out), "--tasks", args.task, "--methods", *args.variants, "--seeds"]
        + [str(s) for s in args.seeds]
        + ["--checkpoints", *map(str, args.checkpoints)]
    )


if __name__ == "__main__":
    main()
