"""Memory of a long simulated run: resident set size over N steps of ``DevicePlacement-bert-cpu_dgpu_v0-sim-v0`` with
distinct random placements, for several result-cache bounds (the simulated backend's ``cache_size``).

Every step evaluates a new placement, so the LRU result cache fills up to its bound and the resident
memory grows with it; past the bound it stays flat. The run's memo (``placement_gym.problem.MEMO_SIZE``
placements) grows the same way at every cache size, so a cached result's size is the growth beyond the
``cache_size 0`` run's, divided by the entries. Each cache size runs in a fresh interpreter.

Usage:
    python -m experiments.speed.memory [--steps 100000] [--cache-sizes 65536 8192 0]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

_CHILD = r"""
import json, sys, time
import gymnasium as gym
import numpy as np
import placement_gym  # noqa: F401

def rss_mb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
steps, cache_size = int(sys.argv[1]), int(sys.argv[2])
env = gym.make("DevicePlacement-bert-cpu_dgpu_v0-sim-v0", backend_kwargs={"cache_size": cache_size})
env.reset(seed=0)
backend = env.unwrapped.problem.backend
rng = np.random.default_rng(0)
n, d = len(env.action_space.nvec), int(env.action_space.nvec[0])
env.step(rng.integers(0, d, n))  # compiles the schedule: not part of the growth
env.reset()
start_rss, start = rss_mb(), time.perf_counter()
trace = []
for i in range(1, steps + 1):
    env.step(rng.integers(0, d, n))
    env.reset()  # one-shot episodes
    if i % max(1, steps // 20) == 0:
        trace.append((i, round(rss_mb(), 1)))
end_rss = rss_mb()
print(json.dumps({"cache_size": cache_size, "steps": steps, "start_mb": start_rss, "end_mb": end_rss,
                  "entries": backend.num_cached, "seconds": time.perf_counter() - start, "trace": trace}))
"""


def run(steps: int, cache_size: int) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, str(steps), str(cache_size)],
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100_000, help="env steps per cache size")
    parser.add_argument(
        "--cache-sizes", type=int, nargs="+", default=[65536, 8192, 0], help="result-cache bounds to compare"
    )
    args = parser.parse_args(argv)
    print(f"load before: {os.getloadavg()[0]:.2f}")
    rows = {size: run(args.steps, size) for size in sorted(args.cache_sizes)}  # 0 (the memo alone) first
    memo = rows[0]["end_mb"] - rows[0]["start_mb"] if 0 in rows else 0.0
    for size in args.cache_sizes:
        r = rows[size]
        growth = r["end_mb"] - r["start_mb"]
        per_entry = (
            f"{(growth - memo) * 2**20 / r['entries'] / 1e3:.2f} KB/entry beyond the memo's +{memo:.0f} MB"
            if r["entries"] and 0 in rows
            else "-"
        )
        print(
            f"cache_size {size:>6}: {r['steps']} steps in {r['seconds']:.1f} s; RSS {r['start_mb']:.0f} -> "
            f"{r['end_mb']:.0f} MB (+{growth:.0f} MB), {r['entries']} cached results, {per_entry}; "
            f"trace (step, MB): {r['trace'][::4] + r['trace'][-1:]}"
        )
    print(f"load after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
