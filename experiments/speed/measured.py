"""Overhead of the measured backend: what one evaluation costs beyond the inferences it times.

For a model on the ``local`` platform (partitioned executor unless ``--executor hetero``), for a few
placements (all on the first device, a random one, one per device alternating by group):

* ``overhead``: wall time of one evaluation whose compiled segments are cached but whose result is not
  (the result cache is cleared first), divided by ``repeats x median latency``. Target <= 1.5.
* ``hit_us``: wall time of evaluating the same placement again (a result-cache hit). Target < 100 us.
* ``first_s``: wall time of the very first evaluation (building, compiling, warm-up, timing).

Usage:
    PLACEMENT_GYM_CACHE=/tmp/pgcache python -m experiments.speed.measured [--model resnet50] [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np

from placement_gym.benchmarks import load_benchmark
from placement_gym.measured.backend import MeasuredBackend
from placement_gym.platforms import load_platform


def _placements(num_groups: int, num_devices: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "one-device": np.zeros(num_groups, np.int64),
        "random": rng.integers(0, num_devices, num_groups),
        "halves": (np.arange(num_groups) * num_devices // num_groups).astype(np.int64),
    }


def bench(
    model: str, level: str, k: int | None, executor: str, repeats: int, rounds: int, seed: int
) -> dict[str, dict[str, float]]:
    """Overhead ratio, cache-hit time and first-evaluation time per placement kind."""
    benchmark = load_benchmark(model)
    graph = benchmark.coarsen(level, k)
    platform = load_platform("local")
    backend = MeasuredBackend(benchmark, graph, platform, executor=executor, repeats=repeats)
    out: dict[str, dict[str, float]] = {}
    for kind, placement in _placements(graph.num_groups, platform.num_devices, seed).items():
        start = time.perf_counter()
        first = backend.evaluate(placement)
        first_s = time.perf_counter() - start
        if not first.feasible:
            out[kind] = {"infeasible": first.reason}
            continue
        ratios, hits, medians = [], [], []
        for _ in range(rounds):
            backend.results.clear()
            start = time.perf_counter()
            result = backend.evaluate(placement)
            wall = time.perf_counter() - start
            ratios.append(wall / (result.samples * result.latency))
            medians.append(result.latency)
            start = time.perf_counter()
            hit = backend.evaluate(placement)
            hits.append(time.perf_counter() - start)
            assert hit.cached
        segments = len(backend.executor.segments(graph.expand(placement))) if executor == "partitioned" else 1
        out[kind] = {
            "segments": segments,
            "median_ms": 1e3 * statistics.median(medians),
            "overhead": statistics.median(ratios),
            "overhead_max": max(ratios),
            "hit_us": 1e6 * statistics.median(hits),
            "first_s": first_s,
        }
    backend.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--level", default="fused", choices=["ops", "fused", "k"])
    parser.add_argument("--k", type=int, default=None, help="group count for --level k")
    parser.add_argument("--executor", default="partitioned", choices=["partitioned", "hetero"])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=5, help="cached-compile evaluations per placement")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args()
    figures = bench(args.model, args.level, args.k, args.executor, args.repeats, args.rounds, args.seed)
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    print(
        f"{args.model} ({args.level}{args.k or ''}), local platform, {args.executor}, repeats {args.repeats}"
    )
    print(
        f"{'placement':12s} {'segs':>5s} {'median ms':>10s} {'overhead':>9s} {'max':>6s} {'hit us':>7s} {'first s':>8s}"
    )
    for kind, f in figures.items():
        if "infeasible" in f:
            print(f"{kind:12s} infeasible: {f['infeasible']}")
            continue
        print(
            f"{kind:12s} {f['segments']:5d} {f['median_ms']:10.2f} {f['overhead']:9.3f} "
            f"{f['overhead_max']:6.3f} {f['hit_us']:7.1f} {f['first_s']:8.2f}"
        )


if __name__ == "__main__":
    main()
