"""Multi-task training and transfer for the SB3 GNN learners: one policy, several (model, platform) tasks.

The GNN policies have no parameter that depends on the graph size (:mod:`agents.sb3.extractors`), so one
policy can place any graph padded to the same spaces on a platform with the same number of devices.

* :func:`common_envs`: one env per task, all padded to the same ``max_nodes``/``max_edges``.
* :func:`train_multitask`: train one policy on all tasks at once (one env per task in one vector env),
  with one evaluation budget counted across tasks; returns each task's best placement.
* Transfer: :meth:`~agents.sb3.methods.SB3Method.predict_placement` places an unseen graph zero-shot
  (one evaluation); with ``method.fine_tune = True``, ``method.place(env, budget)`` continues training the
  same policy on it instead of starting a fresh one.

Example::

    method = PPOGNN(observation="device")
    results = train_multitask(method, [PlacementProblem.make(m, "cpu-igpu", "simulated")
                                       for m in ("inception_v3", "resnet50")], budget=1000, max_nodes=320)
    method.save("policy/")                                    # the safe format
    placement = method.predict_placement(common_envs([vit], method.observation, 320, 512)[0])
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.vec_env import DummyVecEnv

from agents.base import BudgetTracker, PlacementResult
from agents.sb3.methods import BudgetCallback, SB3Method
from placement_gym.envs.device_placement import DevicePlacementEnv
from placement_gym.errors import PlacementGymError
from placement_gym.problem import PlacementProblem, problem_of


def common_envs(
    tasks: Sequence[gym.Env | PlacementProblem],
    observation: str | None = None,
    max_nodes: int | None = None,
    max_edges: int | None = None,
) -> list[DevicePlacementEnv]:
    """One-shot envs over the tasks' problems, padded to common spaces.

    Args:
        tasks: Envs or problems; all platforms must have the same number of devices.
        observation: ``"graph"`` or ``"device"`` (default: ``"graph"``).
        max_nodes, max_edges: Padding (default: the largest graph's; give more to leave room for unseen
            graphs placed later with the same policy).

    Raises:
        PlacementGymError: No task, different device counts, or padding smaller than a graph.
    """
    problems = [problem_of(task) for task in tasks]
    if not problems:
        raise PlacementGymError("no task given")
    devices = sorted({p.num_devices for p in problems})
    if len(devices) > 1:
        raise PlacementGymError(
            "one policy places on a fixed number of devices; the tasks' platforms have "
            + ", ".join(f"{p.platform.name}: {p.num_devices}" for p in problems)
        )
    n = max(p.num_groups for p in problems)
    e = max(p.coarse.graph.num_edges for p in problems)
    if (max_nodes is not None and max_nodes < n) or (max_edges is not None and max_edges < e):
        raise PlacementGymError(
            f"max_nodes={max_nodes} / max_edges={max_edges} are smaller than the largest task ({n} groups, {e} edges)"
        )
    return [
        DevicePlacementEnv(
            problem=p, observation=observation or "graph", max_nodes=max_nodes or n, max_edges=max_edges or e
        )
        for p in problems
    ]


def train_multitask(
    method: SB3Method,
    tasks: Sequence[gym.Env | PlacementProblem],
    budget: int,
    seed: int = 0,
    max_nodes: int | None = None,
    max_edges: int | None = None,
) -> list[PlacementResult]:
    """Train ``method``'s policy on all ``tasks`` at once with ``budget`` evaluations in total.

    Each step evaluates one placement of every task; training stops before the budget would be exceeded,
    keeping one evaluation per task for the trained policy's deterministic placement. The trained model
    stays on ``method`` (``method.model``; save it with ``method.save``).

    Returns:
        One result per task (its best placement, its evaluations; ``extra["model"]`` the shared model).

    Raises:
        PlacementGymError: A budget below two evaluations per task, or tasks that cannot share a policy.
    """
    envs = common_envs(tasks, getattr(method, "observation", None), max_nodes, max_edges)
    if budget < 2 * len(envs):
        raise PlacementGymError(
            f"budget={budget} is too small for {len(envs)} tasks (at least 2 evaluations each)"
        )
    trackers = [BudgetTracker(env.problem, None) for env in envs]
    start = time.perf_counter()
    try:
        model = method.make_model(DummyVecEnv([lambda e=e: Monitor(e) for e in envs]), seed)
        # one step evaluates one placement per task; one more each is kept for the final placements
        limit = budget - len(trackers)
        model.learn(total_timesteps=budget, callback=BudgetCallback(trackers, limit, len(trackers)))
        method.model = model
        finals = [method._deterministic_episode(env, model, seed) for env in envs]
    finally:
        for tracker in trackers:
            tracker.detach()
    wall = time.perf_counter() - start
    results = []
    for env, tracker, final in zip(envs, trackers, finals):
        extra: dict[str, Any] = {
            "model": model,
            "task": f"{env.problem.benchmark.name}@{env.problem.platform.name}",
            "deterministic_latency": float(final["latency"]),
            "deterministic_placement": np.asarray(final["placement"], dtype=np.int64),
            "total_evaluations": sum(t.used for t in trackers),
        }
        results.append(tracker.result(method.name, wall, **extra))
    return results
