"""Cells per hour of ``leaderboard --run`` on a local Ray instance of 1 and of 2 CPUs, and whether their
rows are byte-identical to a local run's (timings aside: :func:`experiments.ray_cells.comparable`).

Each configuration runs the same cells (``--tier`` x ``--methods`` x ``--tasks`` x the protocol's seeds)
into a store of its own: ``local`` without Ray (the reference rows), then a fresh ``ray.init(num_cpus=N)``
for each ``N`` of ``--workers``, where every cell is a task of one CPU, so ``N`` cells run at a time.
Before the clock starts, each of the ``N`` workers imports the code (timed apart as the warm-up); the
clock then counts every cell, a worker's first load of each model included. Per configuration it prints
the cells, seconds, cells per hour, the CPU seconds per cell the workers spent (their sum over the cells,
divided by the cells), the load average before and after, and whether every row equals the reference's;
then the ratio of cells per hour, most / fewest CPUs. On a loaded machine cells per hour are the
machine's more than Ray's: the CPU seconds per cell say whether the work itself changed.

Usage:
    python -m experiments.speed.ray_cells                              # hsdag, tiny tier, 4 tasks x 5 seeds
    python -m experiments.speed.ray_cells --workers 1,2,1,2 --json ray_cells.json   # on a drifting load
"""

from __future__ import annotations

import argparse
import json
import os
import re
import tempfile
import time
from pathlib import Path
from typing import Any

from experiments.ray_cells import comparable, runtime_env
from experiments.records.leaderboard import run_tier
from experiments.speed.ray_backend import rate_ratio
from placement_gym.results import ResultStore

#: The default cells: HSDAG (seeded, a few CPU seconds a cell) on two models and two platforms.
TASKS = ("inception_v3/cpu-dgpu", "inception_v3/multi-accel", "resnet50/cpu-dgpu", "resnet50/multi-accel")
_CPU = re.compile(r"([0-9.]+) s CPU$")


def _load() -> str:
    return Path("/proc/loadavg").read_text().strip() if os.path.exists("/proc/loadavg") else "?"


def _warm() -> int:
    """A worker's first task: import what a cell needs (and hold the CPU a moment, so each worker gets one)."""
    import experiments.grid  # noqa: F401
    import placement_gym.protocol  # noqa: F401

    time.sleep(1.0)
    return os.getpid()


def run_config(workers: int | None, tier: str, methods: list[str], tasks: list[str], folder: Path) -> dict:
    """One configuration (``workers=None``: local, no Ray): its cells, timings, load and rows."""
    import ray

    warm, pids = 0.0, []
    if workers:
        ray.init(address="local", num_cpus=workers, include_dashboard=False, log_to_driver=False)
        start = time.perf_counter()
        task = ray.remote(_warm).options(num_cpus=1, runtime_env=runtime_env())
        pids = ray.get([task.remote() for _ in range(workers)])
        warm = time.perf_counter() - start
    cpu: list[float] = []

    def log(line: str) -> None:
        match = _CPU.search(line)
        if match:
            cpu.append(float(match.group(1)))

    try:
        load_before = _load()
        start = time.perf_counter()
        cells = run_tier(tier, methods, folder, tasks, log=log, ray_address="local" if workers else None)
        seconds = time.perf_counter() - start
        load_after = _load()
    finally:
        if workers:
            ray.shutdown()
    rows = [r for path in sorted(folder.glob(f"{tier}/*.jsonl")) for r in ResultStore(path).rows()]
    return dict(
        workers=workers or "local",
        distinct_workers=len(set(pids)) if workers else 1,
        warm_up_seconds=round(warm, 1),
        cells=cells,
        seconds=round(seconds, 1),
        cells_per_hour=round(3600 * cells / seconds, 1),
        cpu_seconds_per_cell=round(sum(cpu) / max(len(cpu), 1), 2),
        load_before=load_before,
        load_after=load_after,
        rows={str(r.key): comparable(r) for r in rows},
    )


def differences(reference: dict[str, str], rows: dict[str, str]) -> list[str]:
    """``"<cell>: <fields>"`` of every cell whose row differs from the reference's (or is missing from one)."""
    out = []
    for key in sorted(set(reference) | set(rows)):
        if key not in reference or key not in rows:
            out.append(f"{key}: stored in one run only")
        elif reference[key] != rows[key]:
            a, b = json.loads(reference[key]), json.loads(rows[key])
            fields = [f for f in a if a[f] != b.get(f)]
            fields += [f"extra.{k}" for k in a.get("extra", {}) if a["extra"][k] != b.get("extra", {}).get(k)]
            out.append(f"{key}: {', '.join(fields)}")
    return out


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tier", default="tiny")
    parser.add_argument("--methods", nargs="+", default=["hsdag"])
    parser.add_argument("--tasks", nargs="+", default=list(TASKS))
    parser.add_argument("--workers", default="1,2", help="Ray CPU counts, comma-separated (e.g. 1,2,1,2)")
    parser.add_argument("--no-local", action="store_true", help="skip the local reference run")
    parser.add_argument("--json", help="also write the results (rows left out) to this file")
    args = parser.parse_args(argv)
    counts = [int(w) for w in args.workers.split(",")]
    if min(counts) < 1:
        parser.error(f"--workers {args.workers}: each count must be >= 1")
    configs: list[int | None] = ([] if args.no_local else [None]) + counts
    print(f"cells: tier {args.tier}, {' '.join(args.methods)} on {' '.join(args.tasks)}; {os.cpu_count()} cores")
    results = []
    with tempfile.TemporaryDirectory(prefix="bench_ray_cells.") as tmp:
        for i, workers in enumerate(configs):
            r = run_config(workers, args.tier, args.methods, args.tasks, Path(tmp) / f"run{i}")
            r["differ"] = differences(results[0]["rows"], r["rows"]) if results else []
            r["identical"] = not r["differ"]
            results.append(r)
            print(
                f"{r['workers']!s:>5} worker(s): {r['cells']} cells in {r['seconds']:.1f} s = "
                f"{r['cells_per_hour']:.0f} cells/h, {r['cpu_seconds_per_cell']:.2f} CPU s/cell, warm-up "
                f"{r['warm_up_seconds']:.1f} s, rows identical to the first run's: {r['identical']}  "
                f"(load {r['load_before']} -> {r['load_after']})",
                flush=True,
            )
            for line in r["differ"][:10]:
                print(f"      differs: {line}")
    low, high = min(counts), max(counts)
    if high > low:
        print(f"ratio {high} / {low} workers: {rate_ratio(results, 'cells', low, high):.2f}x cells per hour")
    if args.json:
        Path(args.json).write_text(json.dumps([{k: v for k, v in r.items() if k != "rows"} for r in results], indent=1))
    return results


if __name__ == "__main__":
    main()
