"""Behaviour cloning from the Minari datasets of solved placements: imitate the reference optima.

A small per-(group, device) scorer learns to pick each group's optimal device from the one-shot datasets of
the 12 train tasks (episode 0 of each: the reference optimum). Its input for group ``g`` on device ``d`` is
the env's ``observation="device"`` keys: the group's features, the mean features of its predecessors and of
its successors, its (group, device) features (compute time, relative speed, fits in memory) and the
device's features; a softmax over the devices that hold the group gives the policy. The same weights
place any graph on any platform, so the script also scores it zero-shot on the held-out families.

Build the datasets first (``placement-gym datasets --modes oneshot --path DIR``), then::

    python examples/behaviour_cloning.py --path DIR [--epochs 1000] [--seed 0] [--out ROWS.jsonl]

It prints the normalised score (0: the best single device, 1: the optimum) of the cloned policy's one
placement per task, next to HEFT's; ``--out`` also writes one JSON row per task (the rows of the
behaviour-cloning table of ``docs/RESULTS.md``).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import numpy as np
import torch
from torch import nn


def pair_features(obs: dict[str, np.ndarray]) -> tuple[torch.Tensor, torch.Tensor]:
    """``(G, D, F)`` features of every (group, device) pair and the ``(G, D)`` mask of allowed devices."""
    mask_nodes = obs["node_mask"] > 0
    g = int(mask_nodes.sum())
    x = torch.as_tensor(obs["node_features"][:g])  # (G, 28)
    edges = obs["edge_index"][:, obs["edge_mask"] > 0]  # (2, E)
    src, dst = torch.as_tensor(edges[0]), torch.as_tensor(edges[1])

    def mean_of(index_from: torch.Tensor, index_to: torch.Tensor) -> torch.Tensor:
        total = torch.zeros_like(x).index_add_(0, index_to, x[index_from])
        count = torch.zeros(g).index_add_(0, index_to, torch.ones(len(index_to))).clamp(min=1)
        return total / count[:, None]

    node = torch.cat([x, mean_of(src, dst), mean_of(dst, src)], dim=1)  # (G, 84)
    node_device = torch.as_tensor(obs["node_device_features"][:g])  # (G, D, 3)
    device = torch.as_tensor(obs["device_features"])  # (D, 5)
    d = device.shape[0]
    feats = torch.cat(
        [node[:, None, :].expand(g, d, -1), node_device, device[None].expand(g, d, -1)], dim=2
    )  # (G, D, 92)
    allowed = node_device[:, :, 2] > 0.5  # fits in memory
    allowed[~allowed.any(dim=1)] = True
    return feats, allowed


class Scorer(nn.Module):
    """Logit of each (group, device) pair."""

    def __init__(self, in_dim: int = 92, hidden: int = 64) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(in_dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 1)
        )

    def forward(self, feats: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
        return self.net(feats).squeeze(-1).masked_fill(~allowed, -1e9)  # (G, D)


def load_demonstrations(
    tasks: list[tuple[str, str]],
) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """``(features, allowed, optimal devices)`` of episode 0 (the reference optimum) of each task."""
    import minari

    from experiments.cli.datasets import dataset_id

    demos = []
    for model, platform in tasks:
        episode = next(
            iter(minari.load_dataset(dataset_id(model, platform, "oneshot")).iterate_episodes([0]))
        )
        obs = {key: value[0] for key, value in episode.observations.items()}
        feats, allowed = pair_features(obs)
        demos.append(
            (feats, allowed, torch.as_tensor(episode.actions[0][: feats.shape[0]], dtype=torch.long))
        )
    return demos


def train(demos, epochs: int, seed: int) -> Scorer:
    """Cross-entropy on the optimal device of every group, all tasks each epoch (Adam)."""
    torch.manual_seed(seed)
    model = Scorer()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for _ in range(epochs):
        opt.zero_grad()
        loss = sum(nn.functional.cross_entropy(model(f, a), y) for f, a, y in demos) / len(demos)
        loss.backward()
        opt.step()
    return model


def score_on(model: Scorer, model_name: str, platform: str) -> dict:
    """The cloned policy's one deterministic placement of a task, scored: its normalised score, HEFT's,
    whether it is feasible (an infeasible one scores ``-1 / (baseline / optimum - 1)``), its latency and
    the task's graph version, group count and optimum."""
    import gymnasium as gym

    from experiments.cli.datasets import task_env_id
    from placement_gym.problem import problem_of

    env = gym.make(task_env_id(model_name, platform), observation="device")
    obs, _ = env.reset(seed=0)
    feats, allowed = pair_features(obs)
    with torch.no_grad():
        placement = model(feats, allowed).argmax(dim=1).numpy()
    _, _, _, _, info = env.step(placement)
    problem = problem_of(env)
    reference = problem.reference
    return {
        "model": model_name,
        "platform": platform,
        "graph_version": problem.benchmark.version,
        "groups": problem.num_groups,
        "bc_score": float(info["score"]),
        "heft_score": float(problem.score(reference.heft_latency)),
        "feasible": bool(info["feasible"]),
        "bc_latency_ms": float(info["latency"]) * 1e3,
        "optimum_ms": reference.latency * 1e3,
    }


def main(argv: list[str] | None = None) -> None:
    import placement_gym
    from experiments.cli.datasets import default_tasks

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--path", type=Path, default=None, help="Minari data path (default: $MINARI_DATASETS_PATH)"
    )
    parser.add_argument("--epochs", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None, help="write one JSON row per task to this file")
    args = parser.parse_args(argv)
    if args.path is not None:
        os.environ["MINARI_DATASETS_PATH"] = str(args.path)
    torch.set_num_threads(1)
    train_tasks = default_tasks()
    model = train(load_demonstrations(train_tasks), args.epochs, args.seed)
    held_out = [(m, p) for m in placement_gym.HELD_OUT_MODELS for p in placement_gym.HELD_OUT_PLATFORMS]
    rows = []
    print("| split | task | BC score | HEFT score | BC placement feasible |\n|---|---|---|---|---|")
    for split, tasks in (("train", train_tasks), ("held-out", held_out)):
        scores = []
        for model_name, platform in tasks:
            row = {"split": split, **score_on(model, model_name, platform), "epochs": args.epochs, "seed": args.seed}
            rows.append(row)
            scores.append((row["bc_score"], row["heft_score"]))
            print(
                f"| {split} | {model_name} / {platform} | {row['bc_score']:.3f} | {row['heft_score']:.3f} | "
                f"{'yes' if row['feasible'] else 'no'} |"
            )
        for name, fn in (("mean", np.mean), ("median", np.median)):
            bc_value, heft_value = fn(scores, axis=0)
            print(f"| {split} | {name} of {len(tasks)} | {bc_value:.3f} | {heft_value:.3f} | |")
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text("".join(json.dumps(row) + "\n" for row in rows))


if __name__ == "__main__":
    main()
