"""Speed of the environments themselves: env steps per CPU second of simulated envs, random actions.

Run pinned to one core for the reference figure (rates are per CPU second of this process,
``time.process_time``, so other load on the machine inflates them less than wall time; the load average is
printed with them):

    taskset -c 0 python -m experiments.speed.env [--models bert] [--steps 20000]
    taskset -c 0 python -m experiments.speed.env --breakdown DevicePlacement-bert-cpu_dgpu-sim-v0  # each layer's time
    taskset -c 0 python -m experiments.speed.env --sustained DevicePlacement-bert-cpu_dgpu-sim-v0 --steps 100000

For each model, on the one-shot IDs (``DevicePlacement-<model>-cpu_dgpu-sim-v0`` and the suite's
``DevicePlacement-<model>-<platform>-sim-v0``): the simulator alone (``Schedule.run`` on the same
placements), and ``reset`` + ``step`` with a fresh uniformly random placement each episode (every step a
new placement, so the simulator really runs; observation, info and validation included). On the
improvement IDs (``DevicePlacementImprove-<model>-<platform>-sim-v0``): ``step`` with a uniformly random
allowed action (``action_masks``, included in the time) and ``reset`` at truncation. Medians of 3 runs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import gymnasium as gym
import numpy as np

import placement_gym


def _rate(fn, n: int, repeats: int) -> float:
    """Median over ``repeats`` of ``n / CPU seconds`` of ``fn()``."""
    rates = []
    for _ in range(repeats):
        t = time.process_time()
        fn()
        rates.append(n / (time.process_time() - t))
    return statistics.median(rates)


def bench_oneshot(env_id: str, steps: int, repeats: int = 3) -> dict[str, float]:
    env = gym.make(env_id).unwrapped  # unwrapped: measure the env, not Gymnasium's checker wrappers
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    actions = rng.integers(0, env.num_devices, size=(repeats + 1, steps, env.action_space.shape[0]))
    env.step(actions[0, 0])  # the first step finds the baseline
    schedule = env.problem.backend.schedule
    sim = _rate(lambda: [schedule.run(a) for a in actions[0]], steps, repeats)
    runs = iter(actions[1:])

    def episodes() -> None:
        for a in next(runs):  # every repeat new placements: the backend's cache never answers
            env.reset()
            env.step(a)

    out = {"groups": env.num_groups, "simulator": sim, "env": _rate(episodes, steps, repeats)}
    env.close()
    return out


def bench_improve(env_id: str, steps: int, repeats: int = 3) -> dict[str, float]:
    env = gym.make(env_id).unwrapped
    env.reset(seed=0)
    rng = np.random.default_rng(0)

    def run() -> None:
        for _ in range(steps):
            action = rng.choice(np.flatnonzero(env.action_masks()))
            if env.step(action)[3]:
                env.reset()

    out = {"groups": env.num_groups, "actions": int(env.action_space.n), "env": _rate(run, steps, repeats)}
    env.close()
    return out


def breakdown(env_id: str, steps: int) -> dict[str, float]:
    """Microseconds per call (CPU time) of each layer of a one-shot step: the simulator, the backend and the
    problem around it (fresh placements: cache misses), validation, observation, info, reset, and the whole
    reset + step."""
    env = gym.make(env_id).unwrapped
    env.reset(seed=0)
    rng = np.random.default_rng(1)
    placements = rng.integers(0, env.num_devices, size=(steps, env.num_groups))
    env.step(placements[0])
    problem, backend = env.problem, env.problem.backend
    evaluation = problem.evaluate(placements[0])

    def forget() -> None:
        """Every repeat evaluates for real: clear the backend's cache and start a new run (an empty memo)."""
        backend.clear_cache()
        problem.end_run()
        problem.start_run()

    def fresh(fn):
        def run() -> None:
            forget()
            for p in placements:
                fn(p)

        return run

    def episodes() -> None:
        forget()
        for p in placements:
            env.reset()
            env.step(p)

    layers = {
        "simulator": fresh(backend.schedule.run),
        "backend.evaluate": fresh(backend.evaluate),
        "problem.evaluate": fresh(problem.evaluate),
        "problem.validate": fresh(problem.validate),
        "observation": fresh(lambda p: env._observation()),
        "info": fresh(lambda p: env._info(evaluation)),
        "reset": fresh(lambda p: env.reset()),
        "reset+step": episodes,
    }
    out = {name: 1e6 / _rate(fn, steps, 3) for name, fn in layers.items()}
    env.close()
    return out


def sustained(env_id: str, steps: int) -> dict[str, float]:
    """Mean one-shot ``reset`` + ``step`` per CPU second over ONE run of ``steps`` fresh random placements,
    with the problem's memo (its default size) and without it (``memo_size = 0``): the medians of
    :func:`bench_oneshot` hide the garbage collector's walks of a filling memo; this does not."""
    out = {}
    for label, memo in (("with memo", None), ("no memo", 0)):
        env = gym.make(env_id).unwrapped
        env.reset(seed=0)
        if memo is not None:
            env.problem.memo_size = memo
        actions = np.random.default_rng(0).integers(0, env.num_devices, size=(steps, env.num_groups))
        env.step(actions[0])

        def episodes(env: gym.Env = env, actions: np.ndarray = actions) -> None:
            for a in actions:
                env.reset()
                env.step(a)

        out[label] = _rate(episodes, steps, 1)
        env.close()
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["bert"])
    parser.add_argument("--steps", type=int, default=20000)
    parser.add_argument("--out", type=Path, default=None, help="also write the rows as JSON")
    parser.add_argument(
        "--breakdown", default=None, metavar="ENV_ID", help="time each layer of a one-shot step"
    )
    parser.add_argument(
        "--sustained", default=None, metavar="ENV_ID", help="mean rate over one long run, memo on and off"
    )
    args = parser.parse_args(argv)
    if args.sustained is not None:
        load = os.getloadavg()[0]
        for label, rate in sustained(args.sustained, args.steps).items():
            print(f"{args.sustained} {label}: {rate:,.0f} reset+step/s over one run of {args.steps:,} episodes")
        print(f"per CPU second; load average {load:.2f} before, {os.getloadavg()[0]:.2f} after")
        return
    if args.breakdown is not None:
        load = os.getloadavg()[0]
        for name, us in breakdown(args.breakdown, args.steps).items():
            print(f"{name:18s} {us:6.2f} us")
        print(f"per CPU second, medians of 3; load average {load:.2f} before, {os.getloadavg()[0]:.2f} after")
        return
    rows = []
    load = os.getloadavg()[0]
    for model in args.models:
        platforms = (
            placement_gym.IMPROVE_PLATFORMS
            if model in placement_gym.BENCHMARK_MODELS
            else placement_gym.HELD_OUT_PLATFORMS
        )
        oneshot = [placement_gym.env_id(model, p) for p in platforms]
        for env_id in oneshot:
            r = bench_oneshot(env_id, args.steps)
            rows.append({"env_id": env_id, "mode": "oneshot", **r})
            print(
                f"{env_id} ({r['groups']} groups): {r['env']:,.0f} reset+step/s (simulator alone "
                f"{r['simulator']:,.0f}/s)",
                flush=True,
            )
        for platform in platforms:
            env_id = placement_gym.env_id(model, platform, mdp="improve")
            r = bench_improve(env_id, args.steps)
            rows.append({"env_id": env_id, "mode": "improve", **r})
            print(
                f"{env_id} ({r['actions']} actions): {r['env']:,.0f} steps/s (masked random actions)",
                flush=True,
            )
    load = (load, os.getloadavg()[0])
    print(f"per CPU second, medians of 3; load average {load[0]:.2f} before, {load[1]:.2f} after")
    if args.out is not None:
        args.out.write_text(json.dumps({"load": load, "steps": args.steps, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
