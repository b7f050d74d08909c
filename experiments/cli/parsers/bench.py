"""Benchmark grid: models x methods x seeds on one platform and backend, resumable, with a report.

The arguments of ``placement-gym bench`` and its ready-made grids (:data:`PRESETS`).
"""

from __future__ import annotations

import argparse
from typing import Any

from experiments.cli import arguments, ray_arguments
from experiments.cli.arguments import UniqueList, add_input_shape_argument
from placement_gym import protocol

SUMMARY = __doc__.splitlines()[0]

#: Ready-made grids. ``single_device:device=<name>`` rows are the single-device baselines.
PRESETS: dict[str, dict[str, Any]] = {
    "small": dict(
        models=["inception_v3"], platform="cpu-dgpu", backend="simulated", seeds=[0], budget=200,
        methods=["single_device:device=cpu", "single_device:device=gpu", "heft", "m_sct", "random_search",
                 "milp:time_limit=30", "ppo_gnn", "maskable_ppo_improve", "hsdag"],
    ),
    "paper-sim": dict(
        models=["inception_v3", "resnet50", "bert"],
        platform="cpu-dgpu",
        backend="simulated",
        seeds=[0, 1, 2],
        budget=500,
        methods=[
            "single_device:device=cpu",
            "single_device:device=gpu",
            "heft",
            "m_sct",
            "m_etf",
            "metis",
            "milp:time_limit=120",
            "random_search",
            "ppo_gnn",
            "hsdag",
            "rl_placement",
            "grouper_placer",
            "placeto",
        ],
    ),
    # Measured evaluations cost ~1 s each (compiling new subgraphs included), so this grid is smaller:
    # two models, the fast methods, 50 evaluations. BERT ran with the seedless methods only (see docs).
    "paper-local": dict(
        models=["resnet50", "inception_v3"],
        platform="local",
        backend="measured",
        seeds=[0, 1, 2],
        budget=50,
        methods=[
            "single_device:device=cpu0",
            "single_device:device=cpu1",
            "heft",
            "milp:time_limit=60",
            "random_search",
            "hsdag",
        ],
    ),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``bench``'s arguments to ``parser``."""
    parser.add_argument(
        "--preset", choices=sorted(PRESETS), default=None, help="a ready-made grid (default: small)"
    )
    parser.add_argument(
        "--models", nargs="+", action=UniqueList, help="zoo names or IR/ONNX paths (default: the preset's)"
    )
    parser.add_argument(
        "--methods",
        nargs="+",
        type=arguments.method,
        action=UniqueList,
        help="method specs, e.g. heft milp:time_limit=60 single_device:device=cpu, or your own agent as "
        "my_pkg.my_module:MyAgent or my_module:my_function (place(problem, ...) or train(env, ...)), or a "
        "Stable-Baselines3 algorithm as stable_baselines3:PPO (with :key=value,... arguments)",
    )
    parser.add_argument(
        "--tier",
        choices=sorted(protocol.TIERS, key=protocol.TIERS.get),
        help=f"run protocol {protocol.VERSION} at this tier ("
        + ", ".join(f"{t}={b}" for t, b in protocol.TIERS.items())
        + " distinct placements per run, seeds 0-4) on --tasks; ends with IQM and optimality gap",
    )
    parser.add_argument(
        "--tasks",
        nargs="+",
        action=UniqueList,
        help="with --tier: train (the 12-task suite, default), held-out, or model/platform names",
    )
    parser.add_argument(
        "--seeds",
        nargs="+",
        type=arguments.seed,
        action=UniqueList,
        help="seeds of the seeded methods (default: the preset's; with --tier: 0-4)",
    )
    parser.add_argument(
        "--budget",
        type=arguments.budget,
        help="distinct placements per search method and seed (default: the preset's)",
    )
    parser.add_argument(
        "--platform", help="a platform name, or a .yaml platform file (default: the preset's)"
    )
    parser.add_argument(
        "--backend", choices=["simulated", "measured"], help="how latency is obtained (default: the preset's)"
    )
    parser.add_argument("--coarsening", default="fused", help="coarsening level: ops, fused or k")
    parser.add_argument(
        "--k", type=arguments.positive_int, default=None, help="at most K groups (with --coarsening k or fused)"
    )
    add_input_shape_argument(parser)
    parser.add_argument(
        "--out", type=arguments.out_folder, default=None, help="result folder (default results/<preset or custom>)"
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    ray_arguments.add_arguments(parser)  # --ray-address, --ray-cpus: the cells as Ray tasks
