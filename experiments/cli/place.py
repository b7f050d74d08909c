"""Place a model with a saved policy: zero-shot (no training on it; --budget evaluations of its rollouts) or after fine-tuning.

The policy is a folder written by ``SB3Method.save`` (``placement-gym train`` writes ``OUT/policy``); its
``meta.json`` names the method and the padded spaces, so the model is padded the same way. The platform
must have as many devices as the one the policy was trained for.

Without ``--policy`` (or with a folder of :mod:`agents.sb3.pretrained_ppo`) the shipped pretrained
policy places the model zero-shot on any platform, with ``--budget`` evaluations of its rollouts on
this model (and ``--fine-tune`` of them spent training it first).

Usage:
    placement-gym place --model path/to/model.xml --platform cpu-igpu [--budget 100]
    placement-gym place --policy runs/multitask/ppo_gnn-s0/policy --model path/to/model.xml \\
        --platform cpu-igpu [--backend simulated] [--fine-tune 100] [--out placed.json]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from experiments.cli import arguments
from placement_gym.errors import ConfigError, PlacementGymError

if TYPE_CHECKING:
    from placement_gym.problem import PlacementProblem


def policy_meta(folder: Path) -> dict[str, Any]:
    """The method name and padding of a saved policy folder (its ``meta.json`` checked by
    :func:`agents.sb3.policy_file.read_meta`).

    Raises:
        PlacementGymError: If the folder holds no valid ``meta.json``.
    """
    from agents.sb3.policy_file import TransferMeta, read_meta

    meta = read_meta(folder)
    if isinstance(meta, TransferMeta):
        raise PlacementGymError(f"{folder} holds a pretrained_ppo policy; place with it by place_pretrained")
    return {
        "method": meta.method,
        "max_nodes": meta.padding("node_mask"),
        "max_edges": meta.padding("edge_mask"),
        "devices": meta.padding("placement", 1),
    }


def _problem(
    model: str, platform: str, backend: str, coarsening: str, input_shapes: dict[str, list[int]] | None
) -> PlacementProblem:
    """The problem of placing ``model`` (a zoo name or a model file, ``input_shapes`` for a dynamic-shape
    one) on ``platform``."""
    from placement_gym.benchmarks import load_benchmark
    from placement_gym.problem import PlacementProblem

    source = load_benchmark(model, input_shapes=input_shapes) if input_shapes else model
    return PlacementProblem.make(source, platform, backend, coarsening=coarsening)


def _record(policy: str, problem: PlacementProblem, latency: float, placement: Any) -> dict[str, Any]:
    """What every placement record holds: the policy, the task, the zero-shot latency and placement."""
    return {
        "policy": policy,
        "model": problem.benchmark.name,
        "platform": problem.platform.name,
        "groups": problem.num_groups,
        "zero_shot_latency": latency,
        "baseline_latency": problem.baseline.latency if problem.has_baseline else None,
        "placement": np.asarray(placement).tolist(),
    }


def place_pretrained(
    policy: str,
    model: str,
    platform: str,
    backend: str = "simulated",
    fine_tune: int = 0,
    seed: int = 0,
    coarsening: str = "fused",
    input_shapes: dict[str, list[int]] | None = None,
    budget: int = 100,
) -> dict[str, Any]:
    """Place ``model`` on ``platform`` with a pretrained policy (:mod:`agents.sb3.pretrained_ppo`): its
    rollouts spend ``budget`` evaluations on this model, the first ``fine_tune`` of them training it.

    Returns:
        The record of :func:`place` (``zero_shot_latency``: the best latency of the rollouts) with the
        evaluations spent and the policy's pretraining cost.
    """
    from agents import make_method

    problem = _problem(model, platform, backend, coarsening, input_shapes)
    result = make_method("pretrained_ppo", policy=policy, fine_tune=fine_tune).place(problem, budget, seed)
    record = _record(result.extra["policy"], problem, result.latency, result.placement)
    record.update(evaluations=result.evaluations, pretraining=result.extra["pretraining"])
    if fine_tune > 0:
        record.update(fine_tune_evaluations=fine_tune, fine_tuned_latency=result.latency)
    return record


def _is_pretrained(policy: Path | None) -> bool:
    """Whether ``policy`` (``None``: the shipped one) is a pretrained transfer policy; its ``meta.json``
    checked by :func:`agents.sb3.policy_file.read_meta` either way.

    Raises:
        PlacementGymError: If the folder holds no valid ``meta.json``.
    """
    if policy is None:
        return True
    from agents.sb3.policy_file import TransferMeta, read_meta

    return isinstance(read_meta(policy), TransferMeta)


def place(
    policy: Path,
    model: str,
    platform: str,
    backend: str = "simulated",
    fine_tune: int = 0,
    seed: int = 0,
    coarsening: str = "fused",
    input_shapes: dict[str, list[int]] | None = None,
) -> dict[str, Any]:
    """Place ``model`` on ``platform`` with the saved ``policy``; returns a JSON-ready record: the zero-shot
    latency and, with ``fine_tune`` evaluations of further training, the best latency known after them
    (the zero-shot placement included).

    Raises:
        PlacementGymError: An unreadable policy, a platform with another device count, a graph larger
            than the policy's padding.
    """
    from agents import make_method
    from agents.sb3.methods import SB3Method
    from agents.sb3.multitask import common_envs

    meta = policy_meta(policy)
    method = make_method(meta["method"], fine_tune=fine_tune > 0)
    if not isinstance(method, SB3Method):
        raise ConfigError(f"{policy} holds a {meta['method']!r} policy, not a Stable-Baselines3 learner's")
    method.load(policy)
    problem = _problem(model, platform, backend, coarsening, input_shapes)
    if problem.num_devices != meta["devices"]:
        raise PlacementGymError(
            f"the policy places on {meta['devices']} devices; platform {problem.platform.name!r} has "
            f"{problem.num_devices}"
        )
    (env,) = common_envs(
        [problem], getattr(method, "observation", None), meta["max_nodes"], meta["max_edges"]
    )
    try:
        placement = method.predict_placement(env, seed=seed)
        zero_shot = problem.evaluate(placement)  # a cache hit on deterministic backends
        record = _record(str(policy), problem, zero_shot.latency, placement)
        if fine_tune > 0:
            result = method.place(env, budget=fine_tune, seed=seed)
            if result.latency < zero_shot.latency:  # else the zero-shot placement stays the answer
                record["placement"] = np.asarray(result.placement).tolist()
            record.update(
                fine_tune_evaluations=result.evaluations,
                fine_tuned_latency=min(result.latency, zero_shot.latency),
            )
    finally:
        env.close()
    return record


def run_from_args(args: argparse.Namespace) -> None:
    if args.fine_tune < 0:
        raise ConfigError(f"--fine-tune must be >= 0, got {args.fine_tune}")
    settings = dict(
        model=args.model,
        platform=args.platform,
        backend=args.backend,
        fine_tune=args.fine_tune,
        seed=args.seed,
        coarsening=args.coarsening,
        input_shapes=arguments.input_shapes(args.input_shapes),
    )
    if _is_pretrained(args.policy):
        policy = "auto" if args.policy is None else str(args.policy)
        record = place_pretrained(policy, budget=args.budget, **settings)
    else:
        record = place(args.policy, **settings)
    line = f"{record['model']} on {record['platform']}: zero-shot {record['zero_shot_latency'] * 1e3:.3f} ms"
    if record["baseline_latency"]:
        line += f" (best single device {record['baseline_latency'] * 1e3:.3f} ms)"
    if "evaluations" in record:
        line += f" (the best of {record['evaluations']} evaluations of the pretrained policy's moves)"
    if "fine_tuned_latency" in record:
        line += f"; after {record['fine_tune_evaluations']} fine-tuning evaluations {record['fine_tuned_latency'] * 1e3:.3f} ms"
    print(line)
    if args.out is not None:
        args.out.write_text(json.dumps(record, indent=1))
