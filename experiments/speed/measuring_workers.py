"""Training on measured latency with 1 and with several measuring workers: measured steps per second, and
whether a worker's latencies change when another one measures beside it.

``train`` rows: each configuration is one run of the train command in a fresh process,

    placement-gym train --agent ppo_gnn --env ENV --n-envs W --cores-per-worker C --budget B --seed S

whose W env copies are measuring workers pinned to disjoint sets of C cores (the first W x C cores of
this process), each measuring on the ``local`` platform built for its cores. With C = 1 that platform is
not the usual one: its two virtual CPUs share one core (a machine with 2 cores can only run 2 workers
that way; 2 workers of the usual 2-core platform need 4 cores). From the run's ``history.csv`` (every
evaluated placement with its wall time) a row gives ``steps_per_second``: training evaluations per second
after the first vector step (before it: starting the workers, loading the model, calibrating each
worker's platform, its single-device baselines, the first compiles), and ``first_step_s``, ``wall_s`` (the
whole command), the median latency of the training evaluations and the load average before and after.
After the configurations, one ``ratio`` row per worker count: its steps per second over 1 worker's (means
over repeats).

``agreement`` rows (``--agreement K``): K random placements and the single-device ones, measured by one
pinned worker alone, then by W pinned workers at once (each measuring the same list at the same time),
each after an untimed pass that compiles its segments; per worker, the median over the placements of
(latency measured together / latency measured alone). A ratio near 1 says that workers on their own
cores do not disturb each other's timings (they still share caches and memory bandwidth).

Rows are appended to ``--out`` (JSON lines) and printed as they come.

Usage:
    python -m experiments.speed.measuring_workers --workers 1,2 --cores-per-worker 1 --budget 64 --out runs/measuring_workers.jsonl
    python -m experiments.speed.measuring_workers --workers 1,2,1,2 --cores-per-worker 2 --agreement 8 --out runs/measuring_workers.jsonl   # 4+ cores
"""

from __future__ import annotations

import argparse
import csv
import json
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from statistics import mean, median
from typing import Any

DEFAULT_ENV = "DevicePlacement-resnet50-v1"


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def train_row(
    env: str, workers: int, cores_per_worker: int, budget: int, seed: int, folder: Path
) -> dict[str, Any]:
    """One ``placement-gym train`` run of ``ppo_gnn`` with ``workers`` measuring workers; its row."""
    from placement_gym.measured.workers import assign_cores

    out = folder / f"w{workers}-c{cores_per_worker}-{time.time_ns()}"
    command = [
        sys.executable, "-m", "experiments.cli", "train", "--agent", "ppo_gnn", "--env", env,
        "--n-envs", str(workers), "--cores-per-worker", str(cores_per_worker), "--budget", str(budget),
        "--seed", str(seed), "--out", str(out), "--no-progress",
    ]  # fmt: skip
    before = _load()
    start = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    after = _load()
    with open(out / "history.csv") as f:
        rows = list(csv.DictReader(f))
    best = json.loads((out / "best_placement.json").read_text())
    training = rows[:-1]  # the last evaluation is the trained policy's final placement
    times = [float(r["wall_s"]) for r in training]
    later = [t for t in times if t > times[0]]
    latencies = [float(r["latency_s"]) for r in training if r["feasible"] == "1"]
    return {
        "figure": "train",
        "env": env,
        "workers": workers,
        "cores_per_worker": cores_per_worker,
        "worker_cores": [list(c) for c in assign_cores(workers, cores_per_worker)],
        "budget": budget,
        "seed": seed,
        "evaluations": len(rows),
        "steps_per_second": len(later) / (later[-1] - times[0]) if later else None,
        "first_step_s": times[0] if times else None,
        "sb3_steps_per_second": best.get("steps_per_second"),
        "median_latency_ms": median(latencies) * 1e3 if latencies else None,
        "best_latency_ms": best["latency"] * 1e3,
        "wall_s": wall,
        "load_before": before,
        "load_after": after,
        "command": " ".join(command[2:]),
    }


def _measure_list(
    env: str, cores: tuple[int, ...], count: int, seed: int, barrier: Any, results: Any, key: int
) -> None:
    """A pinned worker: build ``env``'s problem on ``cores``, measure the single-device placements and
    ``count`` random ones (the same for every worker: seeded) untimed once (compiles), wait for the other
    workers, then measure them again and put the latencies in ``results[key]``."""
    import gymnasium as gym
    import numpy as np

    import placement_gym  # noqa: F401  (registers the IDs)
    from placement_gym.measured.workers import pin_process
    from placement_gym.problem import PlacementProblem

    pin_process(cores)
    spec = dict(gym.spec(env).kwargs)
    backend_kwargs = {**(spec.pop("backend_kwargs", None) or {}), "cache_size": 0}  # measure every time
    problem = PlacementProblem.make(**spec, backend_kwargs=backend_kwargs)
    groups, devices = problem.num_groups, problem.num_devices
    rng = np.random.default_rng(seed)
    placements = [np.full(groups, d) for d in range(devices)]
    placements += [rng.integers(0, devices, size=groups) for _ in range(count)]
    backend = problem.backend
    for p in placements:
        backend.evaluate(p)
    barrier.wait()
    results[key] = [backend.evaluate(p).latency for p in placements]
    problem.close()


def agreement_rows(
    env: str, workers: int, cores_per_worker: int, count: int, seed: int
) -> list[dict[str, Any]]:
    """Latencies of the same placements measured by one worker alone and by ``workers`` at once."""
    from placement_gym.measured.workers import assign_cores

    layout = assign_cores(workers, cores_per_worker)
    context = multiprocessing.get_context("spawn")
    rows = []
    alone: list[float] = []
    for together in dict.fromkeys((1, workers)):
        manager = context.Manager()
        barrier, results = context.Barrier(together), manager.dict()
        before = _load()
        procs = [
            context.Process(target=_measure_list, args=(env, layout[i], count, seed, barrier, results, i))
            for i in range(together)
        ]
        for p in procs:
            p.start()
        for p in procs:
            p.join()
            if p.exitcode != 0:
                raise RuntimeError(f"a measuring worker failed (exit code {p.exitcode})")
        measured = [list(results[i]) for i in range(together)]
        manager.shutdown()
        if together == 1:
            alone = measured[0]
        for i, latencies in enumerate(measured):
            rows.append(
                {
                    "figure": "agreement",
                    "env": env,
                    "workers_at_once": together,
                    "worker": i,
                    "cores": list(layout[i]),
                    "placements": len(latencies),
                    "latencies_ms": [round(x * 1e3, 3) for x in latencies],
                    "median_ratio_to_alone": median(b / a for a, b in zip(alone, latencies)),
                    "load_before": before,
                    "load_after": _load(),
                }
            )
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "))
    parser.add_argument("--env", default=DEFAULT_ENV, help=f"a measured env ID (default {DEFAULT_ENV})")
    parser.add_argument(
        "--workers",
        default="1,2",
        help="worker counts to run, in order, comma-separated (default 1,2; 1,2,1,2 repeats)",
    )
    parser.add_argument(
        "--cores-per-worker",
        type=int,
        default=1,
        help="cores of each worker (default 1: the one-core platform)",
    )
    parser.add_argument(
        "--budget", type=int, default=64, help="evaluations of each training run (default 64)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--agreement",
        type=int,
        default=0,
        metavar="K",
        help="also compare K random placements alone / together",
    )
    parser.add_argument("--out", type=Path, default=None, help="JSON-lines file the rows are appended to")
    args = parser.parse_args(argv)
    counts = [int(w) for w in args.workers.split(",")]
    sink = open(args.out, "a") if args.out else None

    def emit(row: dict[str, Any]) -> None:
        line = json.dumps(row)
        print(line, flush=True)
        if sink:
            sink.write(line + "\n")
            sink.flush()

    rates: dict[int, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="measuring-workers-") as folder:
        for workers in counts:
            row = train_row(args.env, workers, args.cores_per_worker, args.budget, args.seed, Path(folder))
            emit(row)
            if row["steps_per_second"]:
                rates.setdefault(workers, []).append(row["steps_per_second"])
    for workers in sorted(rates):
        if workers != 1 and 1 in rates:
            emit(
                {
                    "figure": "ratio",
                    "workers": workers,
                    "cores_per_worker": args.cores_per_worker,
                    "steps_per_second": mean(rates[workers]),
                    "one_worker_steps_per_second": mean(rates[1]),
                    "ratio": mean(rates[workers]) / mean(rates[1]),
                }
            )
    if args.agreement:
        for row in agreement_rows(args.env, max(counts), args.cores_per_worker, args.agreement, args.seed):
            emit(row)


if __name__ == "__main__":
    main()
