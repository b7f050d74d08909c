"""Train (or run) any placement method on any registered env ID, with progress, logs and the best placement.

Writes into ``--out``:
    best_placement.json   the best placement so far (rewritten atomically on every improvement, so an
                          interrupted run keeps it), with latency, model, graph version and platform
    history.csv           evaluations and latency of every evaluated placement
    tb/                   TensorBoard scalars (latency and best latency per evaluation)
    checkpoints/          model checkpoints of Stable-Baselines3 learners

Usage:
    python -m experiments.train --agent ppo_gnn --env DevicePlacementSim-bert-v0 --budget 2000 --seed 0
    placement-gym train --agent hsdag --env DevicePlacement-resnet50-v0 --budget 500
    placement-gym train --agent ppo_gnn --env DevicePlacement-bert-v0 --n-envs 4 --ray-address auto
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

import placement_gym  # noqa: F401  (registers the env IDs)
from agents import make_method, method_class
from agents.base import BudgetTracker, PlacementResult
from experiments.runs import library_versions
from placement_gym.problem import problem_of


def _write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=1)
    os.replace(tmp, path)


class RunLogger:
    """A :class:`BudgetTracker` listener: progress bar, TensorBoard, history CSV and best-placement JSON."""

    def __init__(
        self, out: Path, env: gym.Env, budget: int | None, meta: dict[str, Any], progress: bool = True
    ):
        from torch.utils.tensorboard import SummaryWriter
        from tqdm.auto import tqdm

        self.out, self.problem, self.meta = out, problem_of(env), meta
        out.mkdir(parents=True, exist_ok=True)
        self.writer = SummaryWriter(str(out / "tb"))
        self.history = open(out / "history.csv", "a")
        if self.history.tell() == 0:
            self.history.write("evaluation,latency_s,feasible,best_latency_s,wall_s\n")
        self.bar = tqdm(total=budget, disable=not progress, unit="eval", dynamic_ncols=True)
        self.start = time.perf_counter()
        self.best = float("inf")

    def __call__(self, tracker: BudgetTracker, placement: np.ndarray, latency: float, feasible: bool) -> None:
        step = tracker.used
        if feasible:
            self.writer.add_scalar("eval/latency_ms", latency * 1e3, step)
        self.writer.add_scalar("eval/best_latency_ms", tracker.best_latency * 1e3, step)
        self.history.write(
            f"{step},{latency},{int(feasible)},{tracker.best_latency},{time.perf_counter() - self.start:.3f}\n"
        )
        self.bar.update(1)
        if tracker.best_latency < self.best:
            self.best = tracker.best_latency
            self.bar.set_postfix(best_ms=f"{self.best * 1e3:.3f}")
            self.save_best(tracker.best_placement, self.best, step)

    def save_best(self, placement: np.ndarray, latency: float, evaluations: int, **extra: Any) -> None:
        problem = self.problem
        _write_json_atomic(
            self.out / "best_placement.json",
            {
                **self.meta,
                "model": problem.benchmark.name,
                "graph_version": problem.benchmark.version,
                "platform": problem.platform.name,
                "devices": [d.name for d in problem.platform.devices],
                "coarsening": problem.coarse.level,
                "groups": problem.num_groups,
                "latency": latency,
                "evaluations": evaluations,
                "placement": np.asarray(placement).tolist(),
                "versions": library_versions(),
                **extra,
            },
        )

    def close(self) -> None:
        self.bar.close()
        self.writer.close()
        self.history.close()


def make_env(env_id: str, env_kwargs: dict[str, Any], ray_address: str | None, ray_workers: int) -> gym.Env:
    """``gym.make`` with the Ray pool wrapped around the env's backend when a Ray address is given
    (``"local"`` starts a local Ray instance)."""
    if ray_address is not None:
        spec_kwargs = {**gym.spec(env_id).kwargs, **env_kwargs}
        inner = spec_kwargs.get("backend", "measured")
        env_kwargs = {
            **env_kwargs,
            "backend": "ray",
            "backend_kwargs": {
                "inner": inner,
                "address": None if ray_address == "local" else ray_address,
                "num_workers": ray_workers,
                "inner_kwargs": spec_kwargs.get("backend_kwargs") or {},
            },
        }
    return gym.make(env_id, **env_kwargs)


def train(
    agent: str,
    env_id: str,
    out: Path,
    budget: int | None,
    seed: int,
    env_kwargs: dict[str, Any],
    agent_kwargs: dict[str, Any],
    n_envs: int = 1,
    ray_address: str | None = None,
    ray_workers: int = 2,
    progress: bool = True,
) -> PlacementResult:
    """Run ``agent`` on ``env_id`` and write the outputs listed in the module docstring."""
    env = make_env(env_id, env_kwargs, ray_address, ray_workers)
    accepted = inspect.signature(method_class(agent).__init__).parameters
    optional = {
        "n_envs": n_envs,
        "tensorboard_log": str(out / "tb"),
        "checkpoint_dir": str(out / "checkpoints"),
        "env_id": env_id,
        "env_kwargs": env_kwargs,
    }
    kwargs = {**{k: v for k, v in optional.items() if k in accepted}, **agent_kwargs}
    if n_envs > 1 and "n_envs" not in accepted:
        print(f"note: {agent} evaluates one placement at a time; --n-envs is ignored")
    method = make_method(agent, **kwargs)
    logger = RunLogger(
        out, env, budget, {"agent": agent, "env_id": env_id, "seed": seed, "agent_kwargs": agent_kwargs}
    )
    try:
        result = method.place(env, budget=budget, seed=seed, listeners=[logger])
        if np.isfinite(result.latency):
            extra = {k: v for k, v in result.extra.items() if isinstance(v, (int, float, str, bool))}
            logger.save_best(
                result.placement, result.latency, result.evaluations, wall_time=result.wall_time, **extra
            )
        model = result.extra.get("model")
        if model is not None and hasattr(model, "save"):
            model.save(out / "final_model")
    finally:
        logger.close()
        env.close()
    return result


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--agent", required=True, help="a method name from agents.METHODS")
    parser.add_argument("--env", required=True, help="a registered env ID, e.g. DevicePlacementSim-bert-v0")
    parser.add_argument("--budget", type=int, default=500, help="evaluated placements")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--env-kwargs", type=json.loads, default={}, help='JSON, e.g. \'{"coarsening": "k", "k": 64}\''
    )
    parser.add_argument(
        "--agent-kwargs", type=json.loads, default={}, help="JSON keyword arguments of the method"
    )
    parser.add_argument(
        "--n-envs", type=int, default=1, help="parallel envs (SubprocVecEnv) for SB3 learners"
    )
    parser.add_argument(
        "--ray-address",
        default=None,
        help="evaluate on a Ray cluster ('auto', 'ray://host:10001'; 'local' starts a local instance)",
    )
    parser.add_argument("--ray-workers", type=int, default=2, help="Ray actors evaluating placements")
    parser.add_argument(
        "--out", type=Path, default=None, help="output folder (default runs/<env>/<agent>-s<seed>)"
    )
    parser.add_argument("--no-progress", action="store_true")


def run_from_args(args: argparse.Namespace) -> None:
    out = args.out or Path("runs") / args.env / f"{args.agent}-s{args.seed}"
    result = train(
        args.agent,
        args.env,
        out,
        args.budget,
        args.seed,
        args.env_kwargs,
        args.agent_kwargs,
        args.n_envs,
        args.ray_address,
        args.ray_workers,
        not args.no_progress,
    )
    print(
        f"{args.agent} on {args.env}: best latency {result.latency * 1e3:.3f} ms after {result.evaluations} "
        f"evaluations in {result.wall_time:.1f} s; written to {out}"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(parser)
    run_from_args(parser.parse_args(argv))


if __name__ == "__main__":
    main()
