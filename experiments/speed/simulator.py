"""Throughput of the simulated backend: evaluations per second, single and batched, and cache timings.

Run on one core for the figure the project quotes (target: >= 20,000 evaluations/s for ``bert`` at the
``fused`` level on ``cpu-dgpu``)::

    PLACEMENT_GYM_CACHE=/tmp/pgcache taskset -c 0 python -m experiments.speed.simulator

Prints: construction time (cost model + schedule arrays), evaluations/s of ``evaluate`` on fresh random
placements (cache misses), of ``evaluate_batch`` (misses, one compiled loop), the time of a cache hit, and
the time of ``clear_cache``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from placement_gym.benchmarks import load_benchmark
from placement_gym.platforms import load_platform
from placement_gym.simulation.backend import SCHEDULES, SimulatedBackend


def bench(
    model: str, level: str, platform: str, count: int, batch: int, seed: int, schedule: str = "auto"
) -> dict[str, float]:
    """Time the simulator (``schedule``: see :class:`SimulatedBackend`); returns the figures printed by
    :func:`main`."""
    bench_ = load_benchmark(model)
    coarse = bench_.coarsen(level)
    plat = load_platform(platform)
    t0 = time.perf_counter()
    sim = SimulatedBackend(bench_, coarse, plat, cache_size=2 * count, schedule=schedule)
    build = time.perf_counter() - t0
    rng = np.random.default_rng(seed)
    placements = rng.integers(0, plat.num_devices, size=(count, coarse.num_groups))
    sim.evaluate(placements[0])  # compile (numba cache) and warm
    sim.evaluate_batch(placements[:2])
    sim.clear_cache()

    t0 = time.perf_counter()
    for p in placements:
        sim.evaluate(p)
    single = count / (time.perf_counter() - t0)

    t0 = time.perf_counter()
    for p in placements[: min(count, 10_000)]:
        sim.evaluate(p)  # every one cached by the loop above
    hit = (time.perf_counter() - t0) / min(count, 10_000)

    t0 = time.perf_counter()
    sim.clear_cache()
    clear = time.perf_counter() - t0

    t0 = time.perf_counter()
    for start in range(0, count, batch):
        sim.evaluate_batch(placements[start : start + batch])
    batched = count / (time.perf_counter() - t0)
    return {
        "groups": coarse.num_groups,
        "edges": coarse.graph.num_edges,
        "build_s": build,
        "single_per_s": single,
        "batch_per_s": batched,
        "hit_us": hit * 1e6,
        "clear_ms": clear * 1e3,
    }


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="bert")
    parser.add_argument("--level", default="fused")
    parser.add_argument("--platform", default="cpu-dgpu")
    parser.add_argument("--count", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=1024)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--schedule", choices=SCHEDULES, default="auto")
    args = parser.parse_args(argv)
    r = bench(args.model, args.level, args.platform, args.count, args.batch, args.seed, args.schedule)
    print(
        f"{args.model} level={args.level} on {args.platform} ({args.schedule} schedule): {r['groups']} groups, "
        f"{r['edges']} edges"
    )
    print(f"  construction (cost model + schedule): {r['build_s'] * 1e3:.1f} ms")
    print(f"  evaluate (cache misses):     {r['single_per_s']:>10,.0f} evaluations/s")
    print(f"  evaluate_batch ({args.batch}/call):  {r['batch_per_s']:>10,.0f} evaluations/s")
    print(f"  cache hit:                   {r['hit_us']:>10.2f} us")
    print(f"  clear_cache ({args.count} entries): {r['clear_ms']:>8.2f} ms")
    return r


if __name__ == "__main__":
    main()
