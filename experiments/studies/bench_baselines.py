"""Latency of every classical baseline on the simulated benchmark envs, against CPU-only.

CPU-only is the same reference device as in ``bench`` (:func:`experiments.grid.cpu_device`).

Usage: ``python -m experiments.studies.bench_baselines [--milp-time 120] [--models bert resnet50 inception_v3]``.
Prints one JSON line per (model, method).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from typing import Any

import gymnasium as gym
import numpy as np

import placement_gym  # noqa: F401  (registers the envs)
from agents import make_method
from experiments.grid import cpu_device
from placement_gym.problem import problem_of

METHODS = ("single_device", "random_search", "heft", "m_topo", "m_etf", "m_sct", "metis", "milp", "moirai")


def baseline_rows(env, model: str, methods: list[str], milp_time: float) -> Iterator[dict[str, Any]]:
    """One result row per method on ``env``, with the speedup over CPU-only."""
    problem = problem_of(env)
    cpu = problem.evaluate(np.full(problem.num_groups, cpu_device(problem.platform), dtype=np.int64)).latency
    for name in methods:
        kwargs = {"time_limit": milp_time} if name in ("milp", "moirai") else {}
        result = make_method(name, **kwargs).place(env, seed=0)
        extra = {k: v for k, v in result.extra.items() if isinstance(v, (int, float, str, type(None)))}
        yield {
            "model": model,
            "groups": problem.num_groups,
            "method": name,
            "latency_ms": result.latency * 1e3,
            "cpu_only_ms": cpu * 1e3,
            "speedup_vs_cpu": cpu / result.latency,
            "evaluations": result.evaluations,
            "wall_time_s": round(result.wall_time, 2),
            "extra": extra,
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--models", nargs="+", default=["bert", "resnet50", "inception_v3"], help="zoo models"
    )
    parser.add_argument("--methods", nargs="+", default=list(METHODS), help="method names")
    parser.add_argument("--milp-time", type=float, default=120.0, help="time limit of milp and moirai, s")
    args = parser.parse_args()
    for model in args.models:
        env = gym.make(f"DevicePlacement-{model}-cpu_dgpu_v0-sim-v0").unwrapped
        for row in baseline_rows(env, model, args.methods, args.milp_time):
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
