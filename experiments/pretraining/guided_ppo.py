"""Train the ``guided_ppo`` policy: imitation of the simulator's move ranking, then MaskablePPO.

Training tasks are zoo models (``--models``, by default the tiny models, the benchmark models and the
pretraining-only families; leave one out for the suite's leave-one-model-out policies) on the built-in
platforms with randomly perturbed costs (:func:`experiments.pretraining.guided_improvement.task_problems`: ``--variants``
per task, the first unperturbed), all simulated.

1. **Imitation** (DOPPLER's warm start, Mo et al., "DOPPLER: Dual-Policy Learning for Device Assignment
   in Asynchronous Dataflow Graphs", 2024; the listwise loss of :mod:`agents.learned.listwise`): per
   round, one guided-search episode per task (``--budget`` evaluations, ranked by the hand-written
   queue-free estimate in round 1 and by the policy itself afterwards, with noise); at every placement
   it ranks, every proposed move (windows included) is simulated, and the improving ones, the
   ``--hard`` the current ranker puts first and ``--negatives`` others are kept. The policy's logits
   (:class:`~agents.sb3.guided_policy.PolicyRanker`: GNN embeddings at that placement, move features,
   device descriptors) are fitted listwise to put the best improving moves first; with
   ``--graph-free-imitation`` the logit's GNN and device inputs stay at zero weight here, so it is
   fitted on the move features alone (the shipped recipe: it transfers better to unseen models).
2. **PPO**: ``--ppo-steps`` MaskablePPO steps on the improvement MDP of drawn tasks with the move
   features in the observation (:class:`~agents.sb3.move_observation.MoveFeatureObservation`), from the
   imitation weights (``--chunk`` steps per task; episodes of ``--max-steps`` moves from HEFT or a random
   placement). PPO trains every weight, the GNN and device inputs included.

The run is resumable (``--out`` holds the checkpoints and ``progress.json``, outside git). ``--ship DIR``
writes the policy in the safe format (:mod:`agents.sb3.policy_file`) with its cost and command;
``--stage untrained`` / ``imitation`` ship the initial weights (the control; the feature normalisation
of the imitation data included) or the imitation weights instead of the final ones.

    nice -n 10 python -m experiments.pretraining.guided_ppo --out DIR/all --graph-free-imitation
    python -m experiments.pretraining.guided_ppo --out DIR/all --graph-free-imitation --ship agents/sb3/pretrained-guided/all
    nice -n 10 python -m experiments.pretraining.guided_ppo --out DIR/no-bert --graph-free-imitation \\
        --models tiny_cnn tiny_bert inception_v3 resnet50 mobilenet_v2 efficientnet_b0 gpt2

(the shipped policies' exact settings are in ``docs/guided-ppo.md`` and each policy's ``meta.json``)
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

from agents.base import BudgetTracker
from agents.learned.guided import memory_binds
from agents.learned.listwise import listwise_targets, sample_neighbourhood, simulated_changes
from agents.learned.moves import Moves
from agents.learned.search import EstimateRanker, NoisyRanker, guided_search
from agents.sb3.guided_policy import PolicyRanker
from agents.sb3.guided_ppo import DEFAULT_ARCH, METHOD, PPO_KWARGS, improve_env, ppo_model
from agents.sb3.policy_file import write_transfer_policy
from agents.sb3.transfer_policy import transfer_weights
from experiments.pretraining.guided_improvement import task_problems
from placement_gym.errors import PlacementError
from placement_gym.problem import PlacementProblem
from placement_gym.protocol import check_trainable
from placement_gym.record_paths import portable_path
from placement_gym.synthetic import op_cost_stats, random_benchmark
from placement_gym.synthetic import KINDS as SYNTHETIC_KINDS
from placement_gym.zoo import BENCHMARK_MODELS, PRETRAIN_MODELS

MODELS = ("tiny_cnn", "tiny_bert", *BENCHMARK_MODELS, *PRETRAIN_MODELS)
PLATFORMS = ("cpu-dgpu", "cpu-igpu", "multi-accel", "model-parallel")
STAGES = ("untrained", "imitation", "ppo")


class Visit:
    """One ranked placement of the imitation data: its task, placement and kept moves."""

    def __init__(self, task: int, placement: np.ndarray, moves: Moves, features: np.ndarray,
                 change: np.ndarray, weight: np.ndarray) -> None:  # fmt: skip
        self.task, self.placement, self.moves = task, placement, moves
        self.features, self.change, self.weight = features, change, weight


def synthetic_problems(models: list[str], platforms: list[str], count: int, seed: int) -> list:
    """``count`` random DAGs (:func:`placement_gym.synthetic.random_benchmark`, half layered, half
    series-parallel, groups drawn from ``models``' op costs), each on every platform, unperturbed."""
    stats = op_cost_stats(models)
    rng = np.random.default_rng([seed, 11])
    problems = []
    for i in range(count):
        bench = random_benchmark(stats, rng, kind=SYNTHETIC_KINDS[i % len(SYNTHETIC_KINDS)])
        for name in platforms:
            problems.append(PlacementProblem.make(bench, name, "simulated", reward="neg_latency_ms"))
    return problems


def collect(problems: list, ranker_of, args: argparse.Namespace, round_: int) -> tuple[list[Visit], int, int]:
    """One guided-search episode per problem, every ranked placement's moves simulated and sampled.

    Returns:
        ``(visits, search evaluations, simulated moves)``.
    """
    visits: list[Visit] = []
    evaluations = simulated = 0
    for t, problem in enumerate(problems):
        rng = np.random.default_rng([args.seed, round_, t])
        ranker, plain = ranker_of(t, rng)
        schedule = problem.backend.schedule

        def visit(placement, latency, moves, features, t=t, plain=plain, rng=rng, schedule=schedule) -> None:
            nonlocal simulated
            if hasattr(plain, "visit"):
                plain.visit(placement, latency, moves, features)
            change = simulated_changes(schedule, placement, latency, moves)
            simulated += len(moves)
            hard = plain.scores(features, moves)
            index = np.arange(len(moves))[:, None]  # sample rows by index
            rows, c, w = sample_neighbourhood(index, change, args.negatives, rng, hard, args.hard)
            rows = rows[:, 0]
            kept = Moves(moves.members[rows], moves.target[rows], moves.kind[rows])
            visits.append(Visit(t, placement.copy(), kept, features[rows], c, w))

        tracker = BudgetTracker(problem, args.budget)
        guided_search(tracker, ranker, rng, batch_size=4, visitor=visit, depth=96, walk=0.02)
        evaluations += tracker.used
        tracker.detach()
    return visits, evaluations, simulated


def fit(policy, rankers: list[PolicyRanker], visits: list[Visit], args: argparse.Namespace) -> float:
    """Listwise fit of the policy's logits on ``visits`` (Adam, ``--placements-per-batch`` per step).

    Returns:
        The mean loss per placement of the last epoch.
    """
    useful = [v for v in visits if (v.change < -1e-4).any()]
    params = [
        p
        for m in (policy.features_extractor, policy.mlp_extractor)
        for p in m.parameters()
        if p.requires_grad
    ]
    opt = torch.optim.Adam(params, lr=args.lr)
    rng = np.random.default_rng(args.seed)
    losses: list[float] = []
    for _ in range(args.epochs):
        losses = []
        order = rng.permutation(len(useful))
        for batch in np.array_split(order, max(len(useful) // args.placements_per_batch, 1)):
            total = torch.zeros(())
            for i in batch:
                v = useful[i]
                ranker = rankers[v.task]
                nodes, devices = ranker.embeddings(v.placement)
                logits = ranker.logits(v.features, v.moves, nodes, devices)
                target = torch.as_tensor(listwise_targets(v.change, np.zeros(len(v.change), dtype=np.int64),
                                                          args.temperature), dtype=torch.float32)  # fmt: skip
                shifted = logits + torch.as_tensor(np.log(v.weight), dtype=torch.float32)
                total = total + torch.logsumexp(shifted, 0) - (target * logits).sum()
            loss = total / len(batch)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
    return float(np.mean(losses)) if losses else float("nan")


def training_command(args: argparse.Namespace) -> str:
    """The command that trains this run, every setting spelt out."""
    keys = ("out", "models", "platforms", "variants", "sigma", "budget", "rounds", "negatives", "hard",
            "epochs", "lr", "temperature", "noise", "ppo_steps", "chunk", "max_steps", "seed")  # fmt: skip
    parts: list[str] = []
    for key in keys:
        value = portable_path(args.out) if key == "out" else getattr(args, key)
        parts += [
            f"--{key.replace('_', '-')}",
            *(map(str, value) if isinstance(value, list) else [str(value)]),
        ]
    parts += ["--synthetic", str(args.synthetic)] if args.synthetic else []
    parts += ["--graph-free-imitation"] if args.graph_free_imitation else []
    return "python -m experiments.pretraining.guided_ppo " + shlex.join(parts)


def save(path: Path, state: dict[str, Any]) -> None:
    torch.save(state, path.with_suffix(".tmp"))
    path.with_suffix(".tmp").replace(path)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="checkpoint folder (outside git)")
    parser.add_argument("--models", nargs="+", default=list(MODELS), help="training zoo models")
    parser.add_argument("--platforms", nargs="+", default=list(PLATFORMS))
    parser.add_argument("--variants", type=int, default=2, help="cost perturbations per task (first: none)")
    parser.add_argument("--sigma", type=float, default=0.5, help="log-normal spread of the perturbations")
    parser.add_argument("--budget", type=int, default=200, help="evaluations per imitation episode")
    parser.add_argument(
        "--synthetic",
        type=int,
        default=0,
        help="random DAGs from the models' op costs, each on every platform",
    )
    parser.add_argument("--rounds", type=int, default=2, help="imitation rounds (2nd on: the policy ranks)")
    parser.add_argument("--negatives", type=int, default=256, help="non-improving moves kept per placement")
    parser.add_argument("--hard", type=int, default=64, help="top-ranked non-improving moves kept")
    parser.add_argument("--epochs", type=int, default=8, help="imitation passes over the data per round")
    parser.add_argument("--lr", type=float, default=1e-3, help="imitation learning rate")
    parser.add_argument("--temperature", type=float, default=0.5, help="listwise target temperature")
    parser.add_argument("--noise", type=float, default=1.0, help="exploration noise of the episodes' ranking")
    parser.add_argument("--placements-per-batch", type=int, default=16)
    parser.add_argument("--ppo-steps", type=int, default=2048, help="MaskablePPO env steps after imitation")
    parser.add_argument("--chunk", type=int, default=256, help="PPO env steps per drawn task (one update)")
    parser.add_argument("--max-steps", type=int, default=32, help="moves per PPO episode")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--graph-free-imitation",
        action="store_true",
        help="imitation with the logit's GNN and device inputs held at 0 (PPO then trains them from 0)",
    )
    parser.add_argument("--ship", help="write the policy in the safe format to this folder and stop")
    parser.add_argument("--stage", choices=STAGES, default="ppo", help="which weights --ship writes")
    args = parser.parse_args(argv)
    check_trainable(args.models)  # the protocol's held-out families are never trained on
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    progress_path = out / "progress.json"
    progress: dict[str, Any] = (
        json.loads(progress_path.read_text())
        if progress_path.is_file()
        else {
            "env_steps": 0,
            "evaluations": 0,
            "simulated_moves": 0,
            "placements": 0,
            "chunks": 0,
            "wall_s": 0.0,
            "cpu_s": 0.0,
            "load_1min": [],
        }  # fmt: skip
    )
    problems = [
        p for _, p in task_problems(args.models, args.platforms, args.variants, args.sigma, args.seed)
    ]
    if args.synthetic:
        problems += synthetic_problems(list(args.models), list(args.platforms), args.synthetic, args.seed)
    wall, cpu = time.perf_counter(), time.process_time()

    def account() -> None:
        nonlocal wall, cpu
        progress["wall_s"] += time.perf_counter() - wall
        progress["cpu_s"] += time.process_time() - cpu
        wall, cpu = time.perf_counter(), time.process_time()
        progress["load_1min"].append(round(os.getloadavg()[0], 2))
        progress_path.write_text(json.dumps(progress, indent=1))

    model = ppo_model(improve_env(problems[0], args.max_steps), None, args.chunk, args.seed)
    policy = model.policy
    if args.graph_free_imitation:  # imitation fits the logit on the move features alone
        for layer in (policy.mlp_extractor.set_in, policy.mlp_extractor.device_in):
            torch.nn.init.zeros_(layer.weight)
            layer.weight.requires_grad_(False)
    if not (out / "imitation.pt").is_file():
        rankers = [PolicyRanker(p, policy.features_extractor, policy.mlp_extractor) for p in problems]
        visits: list[Visit] = []
        for r in range(args.rounds):
            if r == 0:
                ranker_of = lambda t, rng: (NoisyRanker(EstimateRanker(), args.noise, rng), EstimateRanker())  # noqa: E731
            else:
                ranker_of = lambda t, rng: (NoisyRanker(rankers[t], args.noise, rng), rankers[t])  # noqa: E731
            policy.set_training_mode(False)
            data, n, sim = collect(problems, ranker_of, args, r)
            visits += data
            progress["evaluations"] += n + sim
            progress["simulated_moves"] += sim
            progress["placements"] += len(data)
            if r == 0:
                policy.mlp_extractor.set_normalisation(np.concatenate([v.features for v in visits]))
                save(out / "untrained.pt", {"policy": policy.state_dict()})
            policy.set_training_mode(True)
            loss = fit(policy, rankers, visits, args)
            account()
            print(json.dumps({"round": r, "placements": len(visits), "search_evaluations": n,
                              "simulated_moves": sim, "loss": round(loss, 4),
                              "cpu_s": round(progress["cpu_s"], 1)}), flush=True)  # fmt: skip
        progress["imitation"] = {k: progress[k] for k in ("evaluations", "simulated_moves", "placements",
                                                           "wall_s", "cpu_s")}  # fmt: skip
        save(out / "imitation.pt", {"policy": policy.state_dict()})
        account()
    state = torch.load(out / "imitation.pt", weights_only=True)
    if (out / "checkpoint.pt").is_file():
        state = torch.load(out / "checkpoint.pt", weights_only=True)
    while not args.ship and progress["env_steps"] < args.ppo_steps:
        chunk_rng = np.random.default_rng([args.seed, 7, progress["chunks"]])
        problem = problems[int(chunk_rng.integers(len(problems)))]
        # random starts only where memory does not bind (they are rarely feasible where it does)
        start = (
            "heft" if memory_binds(problem.cost_model()) else ("heft", "random")[int(chunk_rng.integers(2))]
        )
        env = improve_env(problem, args.max_steps, start)
        try:
            env.reset(seed=args.seed)
        except PlacementError:  # no feasible start (a tiny graph on a platform with almost no memory)
            progress["chunks"] += 1
            continue
        model = ppo_model(env, None, args.chunk, args.seed + progress["chunks"])
        transfer_weights(state["policy"], model.policy)
        if "optimizer" in state:
            model.policy.optimizer.load_state_dict(state["optimizer"])
        before = problem.evaluations
        model.learn(args.chunk)
        progress["env_steps"] += int(model.num_timesteps)
        progress["evaluations"] += problem.evaluations - before
        progress["chunks"] += 1
        state = {"policy": model.policy.state_dict(), "optimizer": model.policy.optimizer.state_dict()}
        save(out / "checkpoint.pt", state)
        account()
        rewards = [ep["r"] for ep in model.ep_info_buffer or []]
        print(json.dumps({"chunk": progress["chunks"], "env_steps": progress["env_steps"],
                          "task": problem.benchmark.name, "devices": problem.num_devices, "start": start,
                          "mean_episode_reward": float(np.mean(rewards)) if rewards else None,
                          "cpu_s": round(progress["cpu_s"], 1)}), flush=True)  # fmt: skip
    if args.ship:
        name = {"untrained": "untrained.pt", "imitation": "imitation.pt", "ppo": None}[args.stage]
        if name is not None:
            state = torch.load(out / name, weights_only=True)
        loads = progress["load_1min"]
        cost = progress["imitation"] if args.stage == "imitation" else progress
        training = {
            "env_steps": progress["env_steps"] if args.stage == "ppo" else 0,
            "evaluations": cost["evaluations"] if args.stage != "untrained" else 0,
            "simulated_moves": cost["simulated_moves"] if args.stage != "untrained" else 0,
            "placements": cost["placements"] if args.stage != "untrained" else 0,
            "epochs": args.epochs * args.rounds if args.stage != "untrained" else 0,
            "wall_s": round(cost["wall_s"], 1) if args.stage != "untrained" else 0.0,
            "cpu_s": round(cost["cpu_s"], 1) if args.stage != "untrained" else 0.0,
            "cores": 1,
            "load_1min_mean": round(float(np.mean(loads)), 2) if loads else None,
            "models": list(args.models),
            "platforms": list(args.platforms),
            "max_steps": args.max_steps,
            "moves": "single,class,segment,branch",
            "seed": args.seed,
            "command": training_command(args) + f" --ship DIR --stage {args.stage}",
        }
        write_transfer_policy(args.ship, state["policy"], DEFAULT_ARCH, PPO_KWARGS, training, method=METHOD)
        print(f"wrote {args.ship}")


if __name__ == "__main__":
    main()
