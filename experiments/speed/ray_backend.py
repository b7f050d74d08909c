"""Throughput of the Ray backend: measured evaluations per second with 1 and with 2 actors.

Each actor reserves one CPU and is pinned to a core of its own (``pin_cpus=True``); it measures on the
``local`` platform, whose two virtual 1-thread CPU devices then share that one core, so ``n`` actors
use ``n`` cores. Wall time counts everything after the actors are up: compiles, warm-up and timed runs
of the measured backend, Ray's dispatch and, with ``--driver hsdag``, the policy's own work.

Drivers (``K`` = ``--samples-per-update``):

* ``batch``: ``--updates`` times, ``K`` random placements handed to ``backend.evaluate_batch`` at once,
  as a REINFORCE learner that evaluates its ``K`` samples in one call does.
* ``hsdag``: ``make_method("hsdag", samples_per_update=K)`` on an env built around the Ray backend, for
  ``--budget`` evaluations (reward ``neg_latency_ms``, so no baseline evaluations outside the budget).
  It gains from several actors only once HSDAG evaluates each update's samples with one
  ``evaluate_batch`` call; while it evaluates them one by one, 2 actors cannot beat 1.

Prints per actor count the evaluations/s, how much of the wall time each actor spent evaluating (the
rest it waited for the driver), the CPU seconds the actors used per evaluation, and the load average
before and after the run; then the ratio of evaluations/s, most / fewest actors. On a loaded machine
the evaluations/s are the machine's more than the pool's: the CPU seconds per evaluation say whether
the work itself changed.

Usage:
    python -m experiments.speed.ray_backend --driver batch --model resnet50 --samples-per-update 8 --updates 4
    python -m experiments.speed.ray_backend --driver hsdag --model resnet50 --samples-per-update 8 --budget 32
    python -m experiments.speed.ray_backend --workers 1,2,1,2 --updates 8 --json ray.json   # on a noisy machine
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

import numpy as np

from placement_gym.backends.ray_pool import RayBackend
from placement_gym.benchmarks import load_benchmark
from placement_gym.platforms import load_platform


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def _batch_driver(pool: RayBackend, k: int, updates: int, seed: int) -> tuple[int, int, float]:
    """(evaluations, distinct placements, seconds) of ``updates`` random batches of ``k``."""
    rng = np.random.default_rng(seed)
    g, d = pool.graph.num_groups, pool.num_devices
    batches = [rng.integers(0, d, size=(k, g)) for _ in range(updates)]
    start = time.perf_counter()
    for batch in batches:
        pool.evaluate_batch(batch)
    seconds = time.perf_counter() - start
    distinct = len({row.tobytes() for batch in batches for row in batch})
    return updates * k, distinct, seconds


def _hsdag_driver(pool: RayBackend, k: int, budget: int, seed: int) -> tuple[int, int, float]:
    """(evaluations, distinct placements, seconds) of HSDAG with ``k`` samples per update."""
    from agents import make_method
    from placement_gym.envs import DevicePlacementEnv

    env = DevicePlacementEnv(backend=pool, reward="neg_latency_ms")
    seen: set[bytes] = set()
    result = make_method("hsdag", samples_per_update=k).place(
        env,
        budget=budget,
        seed=seed,
        listeners=[lambda _t, placement, _l, _f: seen.add(np.asarray(placement, np.int64).tobytes())],
    )
    return result.evaluations, len(seen), result.wall_time


def run(
    driver: str,
    model: str,
    level: str,
    k: int,
    updates: int,
    budget: int,
    workers: list[int],
    inner_kwargs: dict[str, Any],
    seed: int,
) -> list[dict[str, Any]]:
    """One row per actor count: evaluations, distinct placements, seconds, evaluations/s, load."""
    bench = load_benchmark(model)
    graph = bench.coarsen_as(level)
    platform = load_platform("local")
    rows = []
    for n in workers:
        pool = RayBackend(
            bench,
            graph,
            platform,
            inner="measured",
            num_workers=n,
            cpus_per_worker=1.0,
            pin_cpus=True,
            inner_kwargs=inner_kwargs,
        )
        try:
            load_before = _load()
            if driver == "batch":
                evaluations, distinct, seconds = _batch_driver(pool, k, updates, seed)
            else:
                evaluations, distinct, seconds = _hsdag_driver(pool, k, budget, seed)
            actors = pool.describe_workers()
        finally:
            pool.close()
        rows.append(
            dict(
                workers=n,
                cores=[a["cores"] for a in actors],
                busy=[a["busy_seconds"] / seconds for a in actors],
                cpu_per_evaluation=sum(a["cpu_seconds"] for a in actors) / evaluations,
                evaluations=evaluations,
                distinct=distinct,
                seconds=seconds,
                per_second=evaluations / seconds,
                replaced=pool.replaced,
                load_before=load_before,
                load_after=_load(),
            )
        )
        row = rows[-1]
        print(
            f"{n} actor(s) on cores {row['cores']}: {evaluations} evaluations ({distinct} distinct) in "
            f"{seconds:.1f} s = {evaluations / seconds:.3f} /s; actors busy "
            f"{', '.join(f'{b:.0%}' for b in row['busy'])} of the time, "
            f"{row['cpu_per_evaluation']:.2f} CPU s per evaluation  (load {load_before} -> {row['load_after']})",
            flush=True,
        )
    return rows


def rate_ratio(rows: list[dict[str, Any]], work: str, low: int, high: int) -> float:
    """How much more ``work`` per second ``high`` workers did than ``low`` workers, each rate over all the
    runs of that count (``rows``: one per run, with ``workers``, ``seconds`` and ``work``)."""

    def rate(n: int) -> float:
        runs = [r for r in rows if r["workers"] == n]
        return sum(r[work] for r in runs) / sum(r["seconds"] for r in runs)

    return rate(high) / rate(low)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--driver", choices=("batch", "hsdag"), default="batch")
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--coarsening", default="fused", help="coarse graph level, e.g. fused or fused+k64")
    parser.add_argument("--samples-per-update", type=int, default=8, help="K placements per update")
    parser.add_argument("--updates", type=int, default=4, help="batch driver: batches of K")
    parser.add_argument("--budget", type=int, default=32, help="hsdag driver: evaluations")
    parser.add_argument(
        "--workers",
        default="1,2",
        help="actor counts to run, comma-separated; repeat them (1,2,1,2) to average over a drifting load",
    )
    parser.add_argument("--warmup", type=int, default=2, help="measured backend warm-up runs")
    parser.add_argument("--repeats", type=int, default=5, help="measured backend timed runs")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args(argv)
    workers = [int(w) for w in args.workers.split(",")]
    cores = len(os.sched_getaffinity(0))
    if min(workers) < 1 or max(workers) > cores:
        parser.error(f"--workers {args.workers}: each count must be 1..{cores} (one core per pinned actor)")
    print(f"driver={args.driver} model={args.model} level={args.coarsening} K={args.samples_per_update}")
    rows = run(
        args.driver,
        args.model,
        args.coarsening,
        args.samples_per_update,
        args.updates,
        args.budget,
        workers,
        {"warmup": args.warmup, "repeats": args.repeats},
        args.seed,
    )
    low, high = min(workers), max(workers)
    if high > low:
        ratio = rate_ratio(rows, "evaluations", low, high)
        print(f"ratio {high} / {low} actors: {ratio:.2f}x (evaluations/s over all their runs)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
