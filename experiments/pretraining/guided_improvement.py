"""Pretrain the move scorer of ``guided_improvement`` on simulated improvement episodes.

Training tasks are zoo models on platforms whose costs are randomly perturbed (per device compute speed,
per group noise, link latency and bandwidth, invoke overhead: ``variants`` draws per task, the first one
unperturbed), so that the scorer learns from cost-model features rather than one platform. Each episode
runs the guided search (:func:`agents.learned.search.guided_search`) with a noisy ranker and records every
evaluated move; round 1 ranks by the hand-written :class:`~agents.learned.search.CostRanker`, later rounds
by the scorer fitted so far (DAgger-style: the data follow the learned policy's own visits). Held-out model
families must not be listed in ``--models``.

``--objective listwise`` (:mod:`agents.learned.listwise`) instead simulates *every* move of each placement
the episodes rank (one numba batch; offline, so these evaluations count against no task's budget) and fits
the scorer to put each placement's best improving moves first.

    python -m experiments.pretraining.guided_improvement     # writes agents/learned/pretrained/
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time

import numpy as np

from agents.base import BudgetTracker
from agents.baselines.common import allowed_devices
from agents.learned.listwise import Neighbourhoods, fit_listwise, sample_neighbourhood, simulated_changes
from agents.learned.moves import MoveFeaturizer, Moves, branch_sets, propose, twin_classes
from agents.learned.scorer import IMPROVES, PRETRAINED, MoveScorer, fit_scorer
from agents.learned.search import CostRanker, NoisyRanker, guided_search
from placement_gym.benchmarks import load_benchmark
from placement_gym.platforms import load_platform, resolve_memory
from placement_gym.problem import PlacementProblem
from placement_gym.protocol import check_trainable
from placement_gym.record_paths import portable_args, portable_path
from placement_gym.simulation.backend import SimulatedBackend
from placement_gym.simulation.cost_model import CostModel

MODELS = ("tiny_cnn", "tiny_bert", "inception_v3", "resnet50", "bert")
PLATFORMS = ("cpu-dgpu", "cpu-igpu", "multi-accel")


def perturbed(cost: CostModel, rng: np.random.Generator, sigma: float) -> CostModel:
    """``cost`` with log-normally perturbed device speeds, group times, links and invoke overheads."""
    g, d = cost.compute.shape
    compute = (
        cost.compute
        * np.exp(sigma * rng.standard_normal(d))[None, :]
        * np.exp(0.3 * sigma * rng.standard_normal((g, d)))
    )
    link = np.exp(sigma * rng.standard_normal((d, d)))
    return dataclasses.replace(
        cost,
        compute=compute,
        link_latency=cost.link_latency * link,
        link_bandwidth=cost.link_bandwidth / np.exp(sigma * rng.standard_normal((d, d))),
        invoke_overhead=cost.invoke_overhead * np.exp(sigma * rng.standard_normal(d)),
    )


def task_problems(models, platforms, variants: int, sigma: float, seed: int):
    """Yield ``(name, problem)`` for every model, platform and perturbation."""
    rng = np.random.default_rng(seed)
    for model in models:
        bench = load_benchmark(model)
        coarse = bench.coarsen("fused")
        for name in platforms:
            plat = resolve_memory(load_platform(name), float(coarse.graph.nodes["param_bytes"].sum()))
            base = CostModel.from_benchmark(bench, coarse, plat)
            for v in range(variants):
                cost = base if v == 0 else perturbed(base, rng, sigma)
                backend = SimulatedBackend(bench, coarse, plat, cost_model=cost)
                yield f"{model}/{name}/{v}", PlacementProblem(bench, coarse, plat, backend, "neg_latency_ms")


def collect(problems, ranker_of, budget: int, seed: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Run one episode per problem; return the evaluated moves' features, changes and the evaluations."""
    feats, changes, evaluations = [], [], 0
    for i, (_, problem) in enumerate(problems):
        rng = np.random.default_rng([seed, i])
        tracker = BudgetTracker(problem, budget)
        guided_search(
            tracker,
            ranker_of(rng),
            rng,
            batch_size=4,
            recorder=lambda f, c: (feats.append(f), changes.append(c)),
        )
        evaluations += tracker.used
        tracker.detach()
    return np.concatenate(feats), np.concatenate(changes), evaluations


def collect_neighbourhoods(
    problems,
    ranker_of,
    budget: int,
    seed: int,
    negatives: int,
    descend: int = 0,
    descents: int = 1,
    hard_of=None,
    hard: int = 0,
    depth: int | None = None,
    walk: float = 0.0,
) -> tuple[Neighbourhoods, int, int]:
    """Run one episode per problem and simulate every move of each placement it ranks; then ``descents``
    best-improvement descents of up to ``descend`` steps on those simulations, from the episode's best
    placement and from kicked copies of it (every step's placement labelled too: the near-local-optimum
    placements where few moves improve and the ranking's precision matters most). ``depth`` and ``walk``
    are the episodes' search settings (:func:`~agents.learned.search.guided_search`): with the method's
    own (96, 0.02) the episodes visit the placements near local optima that the method visits.

    Returns:
        ``(neighbourhoods, search evaluations, simulated moves)``; of each placement every improving move,
        the ``hard`` others ranked first by ``hard_of`` (a :class:`~agents.learned.search.MoveRanker`, no
        noise) and ``negatives`` of the rest are kept (:func:`~agents.learned.listwise.sample_neighbourhood`).
    """
    parts: list[Neighbourhoods] = []
    evaluations = simulated = 0
    for i, (_, problem) in enumerate(problems):
        rng = np.random.default_rng([seed, i])
        sample_rng = np.random.default_rng([seed, i, 1])
        schedule = problem.backend.schedule

        def visit(
            placement: np.ndarray,
            latency: float,
            moves: Moves,
            features: np.ndarray,
            schedule=schedule,
            sample_rng=sample_rng,
        ) -> np.ndarray:
            nonlocal simulated
            change = simulated_changes(schedule, placement, latency, moves)
            simulated += len(moves)
            scores = hard_of.scores(features, moves) if hard and hard_of is not None else None
            f, c, w = sample_neighbourhood(features, change, negatives, sample_rng, scores, hard)
            parts.append(Neighbourhoods(f, c, w, np.zeros(len(c), dtype=np.int64)))
            return change

        tracker = BudgetTracker(problem, budget)
        guided_search(tracker, ranker_of(rng), rng, batch_size=4, visitor=visit, depth=depth, walk=walk)
        evaluations += tracker.used
        tracker.detach()
        best = tracker.best_placement
        cost = problem.cost_model()
        allowed, featurizer = allowed_devices(problem), MoveFeaturizer(cost)
        classes, branches = twin_classes(cost), branch_sets(cost)
        for k in range(descents if descend and best is not None else 0):
            current = best.copy()
            if k:  # a kicked start: two random moves away from the best placement
                for _ in range(2):
                    moves = propose(current, allowed, classes, branches)
                    current = moves.apply(current, int(sample_rng.integers(len(moves))))
            lat, over, _ = schedule.run_batch(current[None, :])
            if over[0] >= 0 or not np.isfinite(lat[0]):
                continue
            latency = float(lat[0])
            for _ in range(descend):
                moves = propose(current, allowed, classes, branches)
                change = visit(current, latency, moves, featurizer.features(current, latency, moves))
                step = int(np.argmin(change))
                if change[step] >= -IMPROVES:
                    break
                current, latency = moves.apply(current, step), latency * (1.0 + change[step])
    return Neighbourhoods.concatenate(parts), evaluations, simulated


def train_pointwise(args: argparse.Namespace, problems: list) -> tuple[MoveScorer, float, int, int, dict]:
    """DAgger rounds of :func:`collect` and :func:`~agents.learned.scorer.fit_scorer` on every move so far.

    Returns:
        ``(scorer, loss, evaluations, moves, {})``.
    """
    feats, changes, evaluations = [], [], 0
    scorer: MoveScorer | None = None
    loss = float("nan")
    for path in args.data:
        data = np.load(path)
        feats.append(data["features"])
        changes.append(data["change"])
        evaluations += int(data["evaluations"])
    epochs = {"epochs": args.epochs} if args.epochs else {}
    if feats:
        scorer, loss = fit_scorer(
            np.concatenate(feats), np.concatenate(changes), objective=args.objective, seed=args.seed, **epochs
        )
    for r in range(args.rounds):
        base = scorer if scorer is not None else CostRanker()
        f, c, n = collect(
            problems, lambda rng, b=base: NoisyRanker(b, args.noise, rng), args.budget, args.seed + r
        )
        feats.append(f)
        changes.append(c)
        evaluations += n
        scorer, loss = fit_scorer(
            np.concatenate(feats), np.concatenate(changes), objective=args.objective, seed=args.seed, **epochs
        )
        print(f"round {r}: {n} evaluations, {sum(len(x) for x in feats)} moves, loss {loss:.4f}", flush=True)
    if scorer is None:
        raise SystemExit("nothing to fit: give --rounds > 0 or --data")
    if args.save_data:
        np.savez(
            args.save_data,
            features=np.concatenate(feats),
            change=np.concatenate(changes),
            evaluations=evaluations,
        )
    return scorer, loss, evaluations, int(sum(len(x) for x in feats)), {}


def train_listwise(args: argparse.Namespace, problems: list) -> tuple[MoveScorer, float, int, int, dict]:
    """DAgger rounds of :func:`collect_neighbourhoods` and :func:`~agents.learned.listwise.fit_listwise`.

    Returns:
        ``(scorer, loss, search evaluations, kept moves, {"simulated_moves", "placements"})``.
    """
    parts: list[Neighbourhoods] = []
    evaluations = simulated = 0
    scorer: MoveScorer | None = None
    loss = float("nan")
    epochs = args.epochs or 30
    for path in args.data:
        data = np.load(path)
        parts.append(Neighbourhoods(data["features"], data["change"], data["weight"], data["state"]))
        evaluations += int(data["evaluations"])
        simulated += int(data["simulated"])
    fit = lambda: fit_listwise(  # noqa: E731
        Neighbourhoods.concatenate(parts), epochs=epochs, seed=args.seed, temperature=args.temperature
    )
    if parts:
        scorer, loss = fit()
    for r in range(args.rounds):
        base = scorer if scorer is not None else CostRanker()
        data, n, sim = collect_neighbourhoods(
            problems, lambda rng, b=base: NoisyRanker(b, args.noise, rng), args.budget, args.seed + r,
            args.negatives, args.descend, args.descents, base, args.hard, args.depth or None, args.walk,
        )  # fmt: skip
        parts.append(data)
        evaluations += n
        simulated += sim
        scorer, loss = fit()
        print(
            f"round {r}: {n} evaluations, {sim} moves simulated at {int(data.state.max()) + 1} placements, "
            f"loss {loss:.4f}",
            flush=True,
        )
    if scorer is None:
        raise SystemExit("nothing to fit: give --rounds > 0 or --data")
    data = Neighbourhoods.concatenate(parts)
    if args.save_data:
        np.savez(
            args.save_data, features=data.features, change=data.change, weight=data.weight, state=data.state,
            evaluations=evaluations, simulated=simulated,
        )  # fmt: skip
    placements = int(data.state.max()) + 1
    return (
        scorer,
        loss,
        evaluations,
        len(data.change),
        {"simulated_moves": simulated, "placements": placements},
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS))
    parser.add_argument("--platforms", nargs="+", default=list(PLATFORMS))
    parser.add_argument("--variants", type=int, default=2, help="cost perturbations per task (first: none)")
    parser.add_argument("--sigma", type=float, default=0.5, help="log-normal spread of the perturbations")
    parser.add_argument("--budget", type=int, default=300, help="evaluations per training episode")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--noise", type=float, default=1.0, help="exploration noise, in score std units")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--objective", choices=("improve", "mse", "listwise"), default="improve")
    parser.add_argument(
        "--negatives", type=int, default=512, help="listwise: non-improving moves kept per placement"
    )
    parser.add_argument("--descend", type=int, default=0, help="listwise: descent steps after each episode")
    parser.add_argument("--hard", type=int, default=0, help="listwise: top-ranked non-improving moves kept")
    parser.add_argument("--descents", type=int, default=1, help="listwise: descents per episode (kicked)")
    parser.add_argument(
        "--depth", type=int, default=0, help="listwise: episodes' ranked moves per placement (0: all)"
    )
    parser.add_argument(
        "--walk", type=float, default=0.0, help="listwise: episodes' walk past local optima (0: kicks only)"
    )
    parser.add_argument("--temperature", type=float, default=0.5, help="listwise: target temperature")
    parser.add_argument(
        "--epochs", type=int, default=None, help="passes over the data (default 60, listwise 30)"
    )
    parser.add_argument(
        "--data",
        nargs="*",
        default=[],
        help=".npz files of moves to add to (and, with --rounds 0, fit on only)",
    )
    parser.add_argument("--save-data", help="write every collected move to this .npz")
    parser.add_argument("--out", default=str(PRETRAINED))
    args = parser.parse_args(argv)
    check_trainable(args.models)  # the protocol's held-out families are never trained on
    start = time.perf_counter()
    problems = list(task_problems(args.models, args.platforms, args.variants, args.sigma, args.seed))
    train = train_listwise if args.objective == "listwise" else train_pointwise
    scorer, loss, evaluations, moves, extra = train(args, problems)
    wall = time.perf_counter() - start
    scorer.save(
        args.out,
        {
            "command": "python -m experiments.pretraining.guided_improvement "
            + " ".join(portable_args(sys.argv[1:] if argv is None else argv)),
            "tasks": [name for name, _ in problems] if args.rounds else [],  # --data: see their runs
            "evaluations": evaluations,
            "moves": moves,
            **extra,
            "loss": loss,
            "wall_seconds": round(wall, 1),
            "load_1min": round(os.getloadavg()[0], 2),
            "args": {
                **vars(args),
                "out": portable_path(args.out),
                "data": [portable_path(d) for d in args.data],
                "save_data": args.save_data and portable_path(args.save_data),
            },
        },
    )
    print(f"saved {args.out}: {evaluations} evaluations, {wall:.0f} s, load {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
