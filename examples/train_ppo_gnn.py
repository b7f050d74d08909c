"""Train SB3 PPO with the project's GNN policy on a suite task, as a plain SB3 script, and print the score.

The hyperparameters are the recipe's (:func:`agents.sb3.recipe.recipe`; one-shot PPO's learning rate for
``--steps`` from :func:`~agents.sb3.recipe.budget_learning_rate`); on a sequential ID
(``DevicePlacementSequential-*``) the sequential recipe. On an improvement ID (``DevicePlacementImprove-*``)
it trains sb3-contrib's MaskablePPO on the moves instead. Every env step
evaluates one placement; :class:`~agents.sb3.callbacks.BestPlacementCallback` keeps the best one seen.

    python examples/train_ppo_gnn.py --env DevicePlacement-inception_v3-cpu_igpu-sim-v0 --steps 5000
    python examples/train_ppo_gnn.py --env DevicePlacementImprove-resnet50-cpu_igpu-sim-v0 --steps 500
    python examples/train_ppo_gnn.py --env DevicePlacementSequential-resnet50-cpu_igpu-sim-v0 --steps 5000
    python examples/train_ppo_gnn.py --env DevicePlacement-v0 --model tiny_cnn --platform cpu-dgpu --steps 64
"""

from __future__ import annotations

import argparse

import gymnasium as gym
import torch
from sb3_contrib import MaskablePPO
from stable_baselines3 import PPO

import placement_gym  # noqa: F401  (registers the env IDs)
from agents.sb3.callbacks import BestPlacementCallback
from agents.sb3.recipe import budget_learning_rate, recipe
from placement_gym.problem import problem_of


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="DevicePlacement-inception_v3-cpu_igpu-sim-v0")
    parser.add_argument(
        "--model", help="model of the generic IDs (DevicePlacement{,Sequential,Improve}-v0)"
    )
    parser.add_argument("--platform", help="platform of the generic IDs")
    parser.add_argument("--steps", type=int, default=5000, help="env steps (= evaluations)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)  # small networks: threads cost more than they save

    improve = args.env.startswith("DevicePlacementImprove")
    kwargs = {} if improve else {"observation": "device"}  # the improvement env is always device-aware
    if args.model:
        kwargs.update(model=args.model, platform=args.platform or "cpu-dgpu", backend="simulated")
    env = gym.make(args.env, **kwargs)
    mode = "sequential" if args.env.startswith("DevicePlacementSequential") else "oneshot"
    r = recipe("improve", "maskable_ppo") if improve else recipe(mode, "ppo")
    algo = MaskablePPO if improve else PPO
    hyperparams = dict(r.hyperparams)
    if mode == "oneshot" and not improve:  # one-shot PPO: the learning rate falls with the steps it trains for
        hyperparams["learning_rate"] = budget_learning_rate(args.steps, hyperparams["learning_rate"])
    model = algo(r.policy, env, policy_kwargs=r.policy_kwargs, seed=args.seed, **hyperparams)
    best = BestPlacementCallback()
    model.learn(total_timesteps=args.steps, callback=best)

    problem = problem_of(env)
    score = problem.score(best.best_latency)
    print(
        f"{args.env}: best latency {best.best_latency * 1e3:.3f} ms after {best.evaluations} evaluations; "
        f"best single device {problem.baseline.latency * 1e3:.3f} ms; score {score:.3f} "
        "(0 = best single device, 1 = stored optimum; nan: no stored optimum)"
    )
    return {"latency": best.best_latency, "placement": best.best_placement, "score": score}


if __name__ == "__main__":
    main()
