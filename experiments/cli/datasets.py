"""Build Minari datasets of solved placements, one per task and MDP, for imitation and offline RL.

Every dataset holds episodes of one registered simulated task in one of its MDPs, played by fixed
placements. An *improvement path* starts at a placement and at each step moves the one group (among those
not yet on their optimal device) whose move gives the lowest feasible simulated latency, until the
reference optimum is reached (a greedy best-improvement walk, :func:`improvement_path`).

``oneshot`` (one step places every group) and ``sequential`` (one step per group, in topological order)
datasets hold, in this order (an episode's reset ``seed`` is its index):

0. the task's reference optimum (``placement_gym/tasks/optima.json``, proven by the exact solver);
1. HEFT's placement;
2. the baseline (the best single device, or the task's stored baseline split);
3. ``oneshot`` only: ``--path-points`` evenly spaced placements of the improvement path from HEFT, then as
   many of the path from the baseline.

Their reward is the env's ``speedup`` (``baseline / latency - 1``, earned on the last step), so an
episode's return is ``baseline / latency - 1``; they store ``ref_min_score = 0`` (the baseline) and
``ref_max_score = baseline / optimum - 1`` (the optimum), so ``minari.get_normalized_score(dataset,
returns)`` is exactly the task's normalised score (:func:`placement_gym.tasks.normalised_score`).

``improve`` datasets (the improvement MDP, ``DevicePlacementImprove-<model>-<platform>-sim-v0``) hold two
episodes, each every move of an improvement path: 0 from HEFT (the env's start), 1 from the baseline.
Their reward is ``log(previous / new latency)`` per move, so a return is ``log(start / final latency)``:
not linear in the normalised score, so no reference scores make Minari's normalisation equal ours. They
store ``ref_min_score = 0`` (staying at HEFT's placement) and ``ref_max_score = log(HEFT / optimum)``
(reaching the optimum from HEFT): Minari's normalised score of an episode from the env's start is the
share of the log-latency gap between HEFT and the optimum it closes.

Datasets are written under Minari's data path (``--path``, else ``$MINARI_DATASETS_PATH``, else
``~/.minari/datasets``); they are never part of the repository. A rerun skips datasets already built.
Writing needs ``pip install 'placement-gym[datasets]'`` (Minari with its ``create`` and ``hdf5`` extras).

Usage:
    placement-gym datasets --path /work/data/leaderboard/minari
    placement-gym datasets --tasks inception_v3/cpu-igpu --modes oneshot --path /tmp/minari
"""

from __future__ import annotations

import argparse
import math
import os
import time
from collections.abc import Sequence

import numpy as np

from experiments.cli.arguments import module_main
from experiments.cli.parsers.datasets import MODES, add_arguments, parse_task  # noqa: F401 (parse_task: re-exported)
from placement_gym.errors import ConfigError, PlacementGymError, UnknownNameError
from placement_gym.problem import PlacementProblem, problem_of

#: Dataset namespace: IDs are ``placement_gym/<model>-<platform with _>/<mode>-v<VERSION>``.
NAMESPACE = "placement_gym"
#: Version of the dataset layout (episode list, reward, observation keys).
VERSION = 0
#: Observation keys: the env's ``observation="device"`` (graph and device-aware features).
OBSERVATION = "device"


def dataset_id(model: str, platform: str, mode: str) -> str:
    """The Minari dataset ID of a task in one MDP."""
    if mode not in MODES:
        raise UnknownNameError("dataset mode", mode, MODES)
    return f"{NAMESPACE}/{model}-{platform.replace('-', '_')}/{mode}-v{VERSION}"


def task_env_id(model: str, platform: str, mode: str = "oneshot") -> str:
    """The registered env ID of a simulated task in the MDP ``mode``
    (``DevicePlacement<MDP>-<model>-<platform>-sim-v0``, :func:`placement_gym.env_id`)."""
    import placement_gym

    if (model, platform) not in known_tasks():
        known = [f"{m}/{p}" for m, p in known_tasks()]
        raise UnknownNameError("dataset task (model/platform)", f"{model}/{platform}", known)
    return placement_gym.env_id(model, platform, mdp=mode)


def known_tasks() -> dict[tuple[str, str], str]:
    """The simulated tasks a dataset can be built of, ``(model, platform)`` -> registered one-shot env ID:
    the zoo models on ``cpu-dgpu`` and the suite's platforms, the held-out families' tasks."""
    import placement_gym

    tasks = [(m, p) for m, p in placement_gym.simulated_tasks() if p not in placement_gym.MASKED_PLATFORMS]
    return dict(sorted((task, placement_gym.env_id(*task)) for task in tasks))


def reference_scores(problem: PlacementProblem) -> tuple[float, float]:
    """``(ref_min_score, ref_max_score)``: the returns of the baseline (0) and of the reference optimum
    (``baseline / optimum - 1``), so that Minari's normalised score is the task's.

    Raises:
        PlacementGymError: If the task has no stored reference optimum or no headroom.
    """
    ref = problem.reference
    if ref is None or not ref.latency < ref.baseline_latency:
        raise PlacementGymError(
            f"{problem.benchmark.name}/{problem.platform.name} has no reference optimum with headroom; "
            "datasets exist only for tasks in placement_gym/tasks/optima.json"
        )
    return 0.0, ref.baseline_latency / ref.latency - 1.0


def improvement_path(problem: PlacementProblem, start: np.ndarray, goal: np.ndarray) -> list[np.ndarray]:
    """Placements from ``start`` towards ``goal`` (``start`` included), one group moved to its ``goal``
    device per step: at each step the feasible move with the lowest latency (evaluated as one batch on
    ``problem``). The path ends at ``goal``, or earlier if every remaining move is infeasible."""
    current = np.asarray(start, dtype=np.int64).copy()
    goal = np.asarray(goal, dtype=np.int64)
    path = [current.copy()]
    todo = list(np.flatnonzero(current != goal))
    while todo:
        candidates = np.repeat(current[None, :], len(todo), axis=0)  # (len(todo), G)
        candidates[np.arange(len(todo)), todo] = goal[todo]
        latencies = [e.latency if e.feasible else np.inf for e in problem.evaluate_batch(candidates)]
        pick = int(np.argmin(latencies))
        if not np.isfinite(latencies[pick]):
            break
        current = candidates[pick]
        todo.pop(pick)
        path.append(current.copy())
    return path


def thin(path: Sequence[np.ndarray], points: int) -> list[np.ndarray]:
    """At most ``points`` placements of ``path`` strictly between its ends, evenly spaced."""
    inner = list(path[1:-1])
    if points <= 0 or not inner:
        return []
    if len(inner) <= points:
        return inner
    idx = np.unique(np.linspace(0, len(inner) - 1, points).round().astype(int))
    return [inner[i] for i in idx]


def episode_placements(
    problem: PlacementProblem, mode: str, path_points: int = 8
) -> list[tuple[str, np.ndarray]]:
    """The ``(source, placement)`` episodes of a dataset, in the documented order."""
    from agents import make_method

    optimum = np.asarray(problem.reference.placement, dtype=np.int64)
    heft = make_method("heft").place(problem, budget=None, seed=0).placement
    baseline = problem.baseline_placement
    episodes = [("optimum", optimum), ("heft", heft), ("baseline", baseline)]
    if mode == "oneshot":
        for name, start in (("heft", heft), ("baseline", baseline)):
            for i, p in enumerate(thin(improvement_path(problem, start, optimum), path_points)):
                episodes.append((f"path-{name}-{i}", p))
    return episodes


def _play_placements(collector, problem: PlacementProblem, mode: str, path_points: int) -> tuple[str, str]:
    """Play the ``oneshot`` / ``sequential`` episodes; returns the algorithm name and the description."""
    episodes = episode_placements(problem, mode, path_points)
    for index, (_, placement) in enumerate(episodes):
        collector.reset(seed=index)
        if mode == "oneshot":
            collector.step(placement)
        else:
            for device in placement:
                collector.step(int(device))
    sources = ", ".join(f"{i}: {source}" for i, (source, _) in enumerate(episodes))
    algorithm = "reference optimum, HEFT, baseline" + (
        ", greedy improvement paths" if mode == "oneshot" else ""
    )
    return algorithm, (
        f"({mode} MDP, observation={OBSERVATION!r}, reward 'speedup'): episodes by reset seed = index: "
        f"{sources}. ref_min_score is the baseline's return, ref_max_score the reference optimum's, so the "
        "normalised score is placement_gym's."
    )


def _play_improvement(collector, problem: PlacementProblem) -> tuple[str, str, float]:
    """Play the ``improve`` episodes; returns the algorithm name, the description and ``log(HEFT / optimum)``."""
    optimum = np.asarray(problem.reference.placement, dtype=np.int64)
    devices = problem.num_devices
    heft_latency = math.nan
    for index, options in enumerate(({}, {"start": "best_single"})):
        _, info = collector.reset(seed=index, options=options)
        start = np.asarray(info["placement"], dtype=np.int64)
        if index == 0:  # the env's own start: HEFT
            heft_latency = float(info["start_latency"])
        path = improvement_path(problem, start, optimum)
        for before, after in zip(path, path[1:]):
            (group,) = np.flatnonzero(before != after)
            collector.step(int(group) * devices + int(after[group]))  # move set ``group`` alone
    description = (
        "(improvement MDP, reward log(previous / new latency)): episode 0 the greedy improvement path from "
        "HEFT (the env's start) to the reference optimum, episode 1 the one from the baseline. ref_min_score "
        "0 is staying at HEFT's placement, ref_max_score log(HEFT / optimum) reaching the optimum from it."
    )
    return (
        "greedy improvement paths to the reference optimum",
        description,
        math.log(heft_latency / problem.reference.latency),
    )


def build_dataset(model: str, platform: str, mode: str, path_points: int = 8, overwrite: bool = False):
    """Build (or load, if already built) the dataset of one task and MDP; returns the ``MinariDataset``."""
    import gymnasium as gym
    import minari

    name = dataset_id(model, platform, mode)
    if name in minari.list_local_datasets():
        if not overwrite:
            return minari.load_dataset(name)
        minari.delete_dataset(name)
    if mode == "improve":
        env = gym.make(task_env_id(model, platform, mode))
    else:
        env = gym.make(task_env_id(model, platform, mode), observation=OBSERVATION)
    problem = problem_of(env)
    ref_min, ref_max = reference_scores(problem)
    collector = minari.DataCollector(env)
    if mode == "improve":
        algorithm, description, ref_max = _play_improvement(collector, problem)
    else:
        algorithm, description = _play_placements(collector, problem, mode, path_points)
    dataset = collector.create_dataset(
        dataset_id=name,
        eval_env=env.spec,
        algorithm_name=algorithm,
        author="placement-gym",
        author_email="none (see the project's issue tracker)",
        code_permalink="experiments/cli/datasets.py",
        ref_min_score=ref_min,
        ref_max_score=ref_max,
        description=f"{model} on {platform} {description}",
    )
    collector.close()
    return dataset


def build_all(
    tasks: Sequence[tuple[str, str]], modes: Sequence[str], path_points: int = 8, overwrite: bool = False
) -> list[tuple[str, int, float]]:
    """Build the datasets of ``tasks`` x ``modes``; returns ``(dataset ID, episodes, seconds)`` per dataset."""
    out = []
    for model, platform in tasks:
        for mode in modes:
            start = time.perf_counter()
            dataset = build_dataset(model, platform, mode, path_points, overwrite)
            out.append(
                (dataset_id(model, platform, mode), dataset.total_episodes, time.perf_counter() - start)
            )
            print(f"{out[-1][0]}: {out[-1][1]} episodes, {out[-1][2]:.1f} s", flush=True)
    return out


def default_tasks() -> list[tuple[str, str]]:
    """The 12 train tasks as ``(model, platform)`` pairs: the benchmark models on the reference platform
    and the suite platforms (the held-out families are never for training)."""
    import placement_gym

    platforms = (placement_gym.SIM_PLATFORM, *placement_gym.SUITE_PLATFORMS)
    return [(m, p) for m in placement_gym.BENCHMARK_MODELS for p in platforms]


def reference_table(tasks: Sequence[tuple[str, str]]) -> str:
    """Markdown table of every dataset's reference scores (``ref_min_score`` is 0 in all of them), from the
    stored optima; nothing is built."""
    from placement_gym.benchmarks import load_benchmark
    from placement_gym.tasks import reference_optimum

    lines = [
        "| task | dataset IDs (`<mode>`: oneshot, sequential, improve) | baseline (ms) | HEFT (ms) | "
        "optimum (ms) | ref_max_score (oneshot, sequential) | ref_max_score (improve) |",
        "|---|---|---|---|---|---|---|",
    ]
    for model, platform in tasks:
        ref = reference_optimum(model, load_benchmark(model).version, platform)
        lines.append(
            f"| {model} / {platform} | `{dataset_id(model, platform, 'oneshot').replace('oneshot', '<mode>')}` | "
            f"{ref.baseline_latency * 1e3:.4f} | {ref.heft_latency * 1e3:.4f} | {ref.latency * 1e3:.4f} | "
            f"{ref.baseline_latency / ref.latency - 1.0:.6f} | {math.log(ref.heft_latency / ref.latency):.6f} |"
        )
    return "\n".join(lines)


def run_from_args(args: argparse.Namespace) -> None:
    if args.scores:
        print(reference_table(args.tasks or default_tasks()))
        return
    for model, platform in args.tasks or ():
        task_env_id(model, platform)  # an unknown task fails now, named as a task, before anything is built
    if args.path is not None:
        os.environ["MINARI_DATASETS_PATH"] = str(args.path)
    try:
        import minari  # noqa: F401
    except ImportError as exc:
        raise ConfigError(
            "building datasets needs Minari with its writers: pip install 'placement-gym[datasets]'"
        ) from exc
    build_all(args.tasks or default_tasks(), args.modes, args.path_points, args.overwrite)


def main(argv: list[str] | None = None) -> int:
    return module_main(__doc__, add_arguments, run_from_args, argv)


if __name__ == "__main__":
    raise SystemExit(main())
