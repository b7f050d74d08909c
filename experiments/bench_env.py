"""Speed of the environment itself: steps per second and reset time of a simulated env.

Run on one core for the reference figure:
    taskset -c 0 python -m experiments.bench_env [--env-id DevicePlacementSim-bert-v0] [--steps 20000]

Steps use fresh random placements (``distinct``: every step a new placement, so the simulator really
runs) or one repeated placement (``repeated``: the backend's cache answers). Observation building is
included in both.
"""

from __future__ import annotations

import argparse
import statistics
import time

import gymnasium as gym
import numpy as np

import placement_gym  # noqa: F401  (registers the IDs)


def bench(env_id: str, steps: int, repeats: int = 3) -> dict[str, float]:
    env = gym.make(env_id).unwrapped  # unwrapped: measure the env, not Gymnasium's checker wrappers
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    actions = rng.integers(0, env.num_devices, size=(steps, env.action_space.shape[0]))
    env.step(actions[0])  # first step computes the baseline
    out: dict[str, list[float]] = {"distinct": [], "repeated": [], "reset_us": []}
    for _ in range(repeats):  # one-shot episodes: every step follows a reset
        t = time.perf_counter()
        for a in actions:
            env.reset()
            env.step(a)
        out["distinct"].append(steps / (time.perf_counter() - t))
        t = time.perf_counter()
        for _ in range(steps):
            env.reset()
            env.step(actions[0])
        out["repeated"].append(steps / (time.perf_counter() - t))
        t = time.perf_counter()
        for _ in range(1000):
            env.reset()
        out["reset_us"].append((time.perf_counter() - t) / 1000 * 1e6)
    env.close()
    return {k: statistics.median(v) for k, v in out.items()} | {"groups": env.num_groups}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env-id", default="DevicePlacementSim-bert-v0")
    parser.add_argument("--steps", type=int, default=20000)
    args = parser.parse_args(argv)
    r = bench(args.env_id, args.steps)
    print(
        f"{args.env_id} ({r['groups']} groups): {r['distinct']:,.0f} reset+step/s with distinct placements, "
        f"{r['repeated']:,.0f} steps/s repeated (cache hits); reset {r['reset_us']:.1f} us "
        "(medians of 3)"
    )


if __name__ == "__main__":
    main()
