"""Pretrain the device-free pair-scoring policy with MaskablePPO on the improvement MDP, over many tasks.

Each chunk draws ``--n-envs`` tasks: a graph (a training zoo model, or with probability ``--synthetic`` a
random DAG of :mod:`placement_gym.synthetic` drawn from the training models' op costs) on a platform
perturbed around a built-in one (random speeds, links, memories and a random device subset of the same
size for the whole chunk), all simulated. The chunk's envs are stepped together (``DummyVecEnv``: one
batched policy call per step) for ``--chunk`` steps; then the next chunk's tasks are drawn. The policy's
weights and optimiser state carry over from chunk to chunk
(:func:`agents.sb3.transfer_policy.transfer_weights`: no weight depends on the graph size or the
device count). Measured (updates and task building included): with single moves only, 197 env steps
per CPU second with one env and 242 with four (``taskset -c 0``, load 12-13, 1,024 steps on the zoo
models on ``cpu-igpu``); with all four move kinds (about 4.5 sets per group) 31-40 per CPU second with
four envs (load 20-24).

Leave-one-model-out: ``--exclude`` drops zoo models from training, graphs and op-cost statistics alike;
the held-out families (:data:`placement_gym.HELD_OUT_MODELS`) are never used. ``model-parallel`` is not a
training platform (its perturbed variants have no feasible single-device baseline to start from).

The run is resumable: after every chunk the weights, the optimiser state and the cost so far (env steps,
evaluations, wall and CPU seconds, cores, load) go to ``--out`` (checkpoints stay out of git); rerunning
the same command continues. ``--ship DIR`` writes the current policy in the safe format
(``weights.pt`` with tensors only, ``meta.json`` with its architecture, training command and cost).

    nice -n 10 python -m experiments.pretraining.pretrained_ppo --out /work/data/rl-pretrain/all --synthetic 0.5 \
        --steps 6000
    python -m experiments.pretraining.pretrained_ppo --out /work/data/rl-pretrain/all --ship agents/sb3/pretrained/all
    python -m experiments.pretraining.pretrained_ppo --out /work/data/rl-pretrain/no-bert --exclude bert --steps 6000
    python -m experiments.pretraining.pretrained_ppo --out /work/data/rl-pretrain/untrained --steps 0 \
        --ship agents/sb3/pretrained/untrained          # the control: the initial weights
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from sb3_contrib import MaskablePPO
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.vec_env import DummyVecEnv

from agents.sb3.policy_file import write_transfer_policy
from agents.sb3.pretrained_ppo import DEFAULT_ARCH, PPO_KWARGS
from agents.sb3.transfer_policy import PairScoringPolicy, transfer_weights
from placement_gym import BENCHMARK_MODELS, HELD_OUT_MODELS
from placement_gym.benchmarks import load_benchmark
from placement_gym.envs import DevicePlacementImproveEnv
from placement_gym.errors import ConfigError
from placement_gym.moves import move_sets
from placement_gym.platforms import load_platform
from placement_gym.problem import PlacementProblem
from placement_gym.record_paths import portable_path
from placement_gym.synthetic import (
    KINDS,
    op_cost_stats,
    perturb_platform,
    random_benchmark,
    random_devices,
    restrict_platform,
)

PLATFORMS = ("cpu-igpu", "multi-accel", "cpu-dgpu")
STARTS = ("heft", "best_single", "random")


def draw_tasks(
    rng: np.random.Generator,
    models: list[str],
    stats: Any,
    synthetic: float,
    n_envs: int,
    platforms: list[str],
) -> list[PlacementProblem]:
    """``n_envs`` simulated problems with the same device count (one base platform and device subset)."""
    base = load_platform(platforms[int(rng.integers(len(platforms)))])
    base = restrict_platform(base, random_devices(base, rng))
    problems = []
    for _ in range(n_envs):
        if not models or rng.random() < synthetic:
            bench = random_benchmark(stats, rng, kind=KINDS[int(rng.integers(len(KINDS)))])
        else:
            bench = load_benchmark(models[int(rng.integers(len(models)))])
        problems.append(PlacementProblem.make(bench, perturb_platform(base, rng, subset=False), "simulated"))
    return problems


def make_envs(
    problems: list[PlacementProblem], rng: np.random.Generator, max_steps: int, moves: tuple[str, ...]
) -> DummyVecEnv:
    """One improvement env per problem, padded to the chunk's largest graph and move sets, each from a
    random start."""
    n = max(p.num_groups for p in problems)
    e = max(p.coarse.graph.num_edges for p in problems)
    pad: dict[str, int] = {}
    if moves != ("single",):
        sets = [move_sets(p.cost_model(), moves) for p in problems]
        pad["max_moves"] = n + max(len(m) - p.num_groups for (m, _), p in zip(sets, problems, strict=True))
        pad["max_move_size"] = max(int(m.sum(1).max()) for m, _ in sets)
    envs = [
        DevicePlacementImproveEnv(
            problem=p,
            start=STARTS[int(rng.integers(len(STARTS)))],
            moves=moves,
            max_steps=max_steps,
            max_nodes=n,
            max_edges=e,
            **pad,
        )
        for p in problems
    ]
    return DummyVecEnv([lambda env=env: Monitor(env) for env in envs])


def training_command(progress: dict[str, Any], out: Path) -> str:
    """The command that trains the run of ``progress`` to where it is, every setting spelt out."""
    excluded = [m for m in BENCHMARK_MODELS if m not in progress["models"]]
    args = ["--out", portable_path(out), "--steps", str(progress["env_steps"])]
    args += ["--synthetic", str(progress["synthetic"]), "--moves", progress["moves"]]
    args += ["--platforms", *progress["platforms"]]
    args += ["--n-envs", str(progress["n_envs"]), "--chunk", str(progress["chunk"])]
    args += ["--max-steps", str(progress["max_steps"]), "--seed", str(progress["seed"])]
    args += ["--exclude", *excluded] if excluded else []
    return "python -m experiments.pretraining.pretrained_ppo " + shlex.join(args)


def _evaluations(problems: list[PlacementProblem]) -> int:
    return sum(p.evaluations + p.baseline_evaluations for p in problems)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="checkpoint folder (outside git)")
    parser.add_argument("--steps", type=int, default=100_000, help="env steps in total")
    parser.add_argument("--exclude", nargs="*", default=[], help="zoo models left out (leave-one-out)")
    parser.add_argument(
        "--synthetic",
        type=float,
        default=0.0,
        help="share of synthetic graphs (default 0: no measurable zero-shot effect, docs/research-notes.md)",
    )
    parser.add_argument("--platforms", nargs="+", default=list(PLATFORMS))
    parser.add_argument("--n-envs", type=int, default=4)
    parser.add_argument("--chunk", type=int, default=512, help="env steps per set of tasks (one PPO update)")
    parser.add_argument("--max-steps", type=int, default=32, help="moves per episode")
    parser.add_argument(
        "--moves", default="single,class,segment,branch", help="move kinds of the improvement env"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--ship", help="write the policy in the safe format to this folder and stop")
    args = parser.parse_args(argv)
    if not 0 <= args.synthetic <= 1:
        raise ConfigError(f"--synthetic {args.synthetic} must be a share in [0, 1]")
    unknown = set(args.exclude) - set(BENCHMARK_MODELS)
    if unknown:
        raise ConfigError(f"--exclude {sorted(unknown)}: only the zoo's training models {BENCHMARK_MODELS}")
    models = [m for m in BENCHMARK_MODELS if m not in args.exclude and m not in HELD_OUT_MODELS]
    if not models:
        raise ConfigError("every training model is excluded; keep at least one for the op-cost statistics")
    torch.set_num_threads(1)  # small networks: intra-op threads cost more than they save on a shared machine
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    progress_path, ckpt_path = out / "progress.json", out / "checkpoint.pt"
    progress: dict[str, Any] = {
        "chunks": 0,
        "env_steps": 0,
        "evaluations": 0,
        "wall_s": 0.0,
        "cpu_s": 0.0,
        "cores": 1,
        "load_1min": [],
        "models": models,
        "synthetic": args.synthetic,
        "platforms": args.platforms,
        "n_envs": args.n_envs,
        "chunk": args.chunk,
        "max_steps": args.max_steps,
        "moves": args.moves,
        "seed": args.seed,
        "arch": DEFAULT_ARCH,
        "ppo": PPO_KWARGS,
    }
    state = None
    if progress_path.is_file():
        progress = json.loads(progress_path.read_text())
        state = torch.load(ckpt_path, weights_only=True) if ckpt_path.is_file() else None
    stats = op_cost_stats(models)
    while state is None or (not args.ship and progress["env_steps"] < args.steps):
        wall, cpu = time.perf_counter(), time.process_time()
        rng = np.random.default_rng([args.seed, progress["chunks"]])
        problems = draw_tasks(rng, models, stats, args.synthetic, args.n_envs, args.platforms)
        vec_env = make_envs(problems, rng, args.max_steps, tuple(progress["moves"].split(",")))
        model = MaskablePPO(
            PairScoringPolicy,
            vec_env,
            n_steps=max(args.chunk // args.n_envs, 1),
            policy_kwargs={
                "features_extractor_kwargs": DEFAULT_ARCH["extractor"],
                "net_arch": DEFAULT_ARCH["head"],
            },
            seed=args.seed + progress["chunks"],
            device="cpu",
            **PPO_KWARGS,
        )
        if state is not None:
            transfer_weights(state["policy"], model.policy)
            model.policy.optimizer.load_state_dict(state["optimizer"])
        if progress["env_steps"] < args.steps:
            model.learn(total_timesteps=model.n_steps * args.n_envs)
            progress["env_steps"] += int(model.num_timesteps)
            progress["evaluations"] += _evaluations(problems)
            progress["chunks"] += 1
        state = {"policy": model.policy.state_dict(), "optimizer": model.policy.optimizer.state_dict()}
        progress["wall_s"] += time.perf_counter() - wall
        progress["cpu_s"] += time.process_time() - cpu
        progress["load_1min"].append(round(os.getloadavg()[0], 2))
        rewards = [ep["r"] for ep in model.ep_info_buffer or []]
        torch.save(state, ckpt_path.with_suffix(".tmp"))
        ckpt_path.with_suffix(".tmp").replace(ckpt_path)
        progress_path.write_text(json.dumps(progress, indent=1))
        print(
            json.dumps(
                {
                    "chunk": progress["chunks"],
                    "env_steps": progress["env_steps"],
                    "devices": problems[0].num_devices,
                    "groups": [p.num_groups for p in problems],
                    "mean_episode_reward": float(np.mean(rewards)) if rewards else None,
                    "steps_per_cpu_s": round(progress["env_steps"] / max(progress["cpu_s"], 1e-9), 1),
                    "load_1min": progress["load_1min"][-1],
                }
            ),
            flush=True,
        )
    if args.ship:
        training = {k: v for k, v in progress.items() if k != "load_1min"}
        loads = progress["load_1min"]
        training["load_1min_mean"] = round(float(np.mean(loads)), 2) if loads else None
        training["command"] = training_command(progress, out)
        write_transfer_policy(args.ship, state["policy"], DEFAULT_ARCH, PPO_KWARGS, training)
        print(f"wrote {args.ship}")


if __name__ == "__main__":
    main()
