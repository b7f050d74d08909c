"""Training on measured latency with 1 and with several measuring workers: measured steps per second, and
whether a worker's latencies change when another one measures beside it.

``train`` rows: each configuration is one run of the train command in a fresh process,

    placement-gym train --agent ppo_gnn --env ENV --n-envs W --cores-per-worker C --budget B --seed S

whose W env copies are measuring workers pinned to disjoint sets of C cores (the first W x C cores of
this process), each measuring on the ``local`` platform built for its cores. With C = 1 that platform is
not the usual one: its two virtual CPUs share one core (a machine with 2 cores can only run 2 workers
that way; 2 workers of the usual 2-core platform need 4 cores). From the run's ``history.csv`` (every
evaluated placement with its wall time and vector step) a row gives ``steps_per_second``: training
evaluations per second after the first vector step (before it: starting the workers, loading the model,
calibrating each worker's platform, its single-device baselines, the first compiles), and
``first_step_s``, ``wall_s`` (the whole command), the median latency of the training evaluations and the
load average before and after.
After the configurations, one ``ratio`` row per worker count: its steps per second over 1 worker's (means
over repeats).

The ``breakdown`` of a train row comes from the same training evaluations, after the first vector step,
grouped by vector step (``history.csv``'s ``vector_step``; with 1 worker the env steps in the train process
and each evaluation is its own step) and timed by ``evaluation_s`` (the seconds the worker's backend spent
on it: compiles, warm-up, timed runs):

* ``worker_evaluation_s``: per worker, its mean evaluation seconds;
* ``evaluation_s`` (E): the mean evaluation seconds over all the workers' evaluations;
* ``step_max_evaluation_s``: per vector step, the max over its workers; ``max_evaluation_s`` (M): their mean;
* ``lockstep`` (M / E, 1 with one worker): how much longer a step waits for its slowest worker than a
  mean evaluation takes;
* ``vector_step_s`` (T): the mean interval between vector steps (each step's time is its first evaluation's
  ``wall_s``); ``rest_s`` = T - M: what a step costs besides its slowest evaluation (the policy's forward
  pass, the PPO updates, the env's and the vector env's overhead, writing the history);
* ``overhead`` (T / M) and ``evaluations_per_step`` (n, W unless a worker repeated a placement);
  ``steps_per_second`` = n / T, the same rate as the row's, timed from the first step to the last step.

Since T = E x (M / E) x (T / M), the ratio of W workers' rate to 1 worker's is, exactly,

    n_W / n_1 / (contention x lockstep x overhead)

with ``parallelism`` = n_W / n_1 (the ideal ratio, W), ``contention`` = E_W / E_1 (mean evaluation seconds
together / alone: the workers slowing each other, and also what each worker's placements and compile cache
hold), ``lockstep`` = (M_W / E_W) / (M_1 / E_1) and ``overhead`` = (T_W / M_W) / (T_1 / M_1). The ``ratio``
row gives these factors (each quantity a mean over repeats), their ``product_ratio`` and the ``residual``:
the measured ``ratio`` / ``product_ratio``, which differs from 1 only by how the two rates are timed (up to
the last evaluation, and up to the last step's first one) and by averaging rates rather than quantities
over repeats.

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


def steps_per_second(training: list[dict[str, str]]) -> float | None:
    """Training evaluations per second after the first vector step, from ``history.csv``'s training rows:
    those of later steps over the time from the first evaluation to the last. The first step's evaluations
    are told apart by ``vector_step`` (written one after another, the later ones a few ms after the first);
    with one env, each evaluation is a step of its own."""
    if not training:
        return None
    start, first = float(training[0]["wall_s"]), training[0].get("vector_step")
    if first:
        later = [float(r["wall_s"]) for r in training if r["vector_step"] != first]
    else:
        later = [float(r["wall_s"]) for r in training[1:]]
    return len(later) / (later[-1] - start) if later and later[-1] > start else None


def breakdown(training: list[dict[str, str]]) -> dict[str, Any] | None:
    """The per-run breakdown of the module docstring, from ``history.csv``'s training rows (the final
    placement's row left out); None without two vector steps, or without ``evaluation_s`` on every row."""
    steps: dict[Any, list[dict[str, str]]] = {}
    for r in training:  # in order: a step's evaluations are written together
        key = ("step", r["vector_step"]) if r.get("vector_step") else ("row", r["evaluation"])
        steps.setdefault(key, []).append(r)
    groups = list(steps.values())[1:]  # after the first vector step, as the row's steps_per_second
    if not groups or not all(r.get("evaluation_s") for g in groups for r in g):
        return None
    start = float(next(iter(steps.values()))[0]["wall_s"])
    end = float(groups[-1][0]["wall_s"])
    seconds = [[float(r["evaluation_s"]) for r in g] for g in groups]
    per_worker: dict[int, list[float]] = {}
    for g in groups:
        for r in g:
            per_worker.setdefault(int(r["worker"] or 0), []).append(float(r["evaluation_s"]))
    e = mean(x for g in seconds for x in g)
    maxima = [max(g) for g in seconds]
    m = mean(maxima)
    t = (end - start) / len(groups)
    n = sum(map(len, groups)) / len(groups)
    return {
        "vector_steps": len(groups),
        "worker_evaluation_s": [mean(per_worker[w]) for w in sorted(per_worker)],
        "evaluation_s": e,
        "step_max_evaluation_s": [round(x, 4) for x in maxima],
        "max_evaluation_s": m,
        "lockstep": m / e if e > 0 else None,
        "vector_step_s": t,
        "rest_s": t - m,
        "overhead": t / m if m > 0 else None,
        "evaluations_per_step": n,
        "steps_per_second": n / t if t > 0 else None,
    }


def factors(one: list[dict[str, Any]], many: list[dict[str, Any]], ratio: float) -> dict[str, Any] | None:
    """The ``ratio`` row's factors (module docstring) from the breakdowns of the 1-worker runs (``one``)
    and the W-worker runs (``many``), each quantity a mean over the runs; ``ratio``: the measured one."""
    if not one or not many:
        return None
    keys = ("evaluations_per_step", "evaluation_s", "max_evaluation_s", "vector_step_s")
    (n1, e1, m1, t1), (nw, ew, mw, tw) = ([mean(b[k] for b in runs) for k in keys] for runs in (one, many))
    if min(e1, m1, t1, ew, mw, tw) <= 0:
        return None
    parallelism, contention = nw / n1, ew / e1
    lockstep, overhead = (mw / ew) / (m1 / e1), (tw / mw) / (t1 / m1)
    product = parallelism / (contention * lockstep * overhead)
    return {
        "parallelism": parallelism,
        "contention": contention,
        "lockstep": lockstep,
        "overhead": overhead,
        "rest_s": tw - mw,
        "one_worker_rest_s": t1 - m1,
        "product_ratio": product,
        "residual": ratio / product,
    }


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
        "steps_per_second": steps_per_second(training),
        "first_step_s": times[0] if times else None,
        "sb3_steps_per_second": best.get("steps_per_second"),
        "median_latency_ms": median(latencies) * 1e3 if latencies else None,
        "best_latency_ms": best["latency"] * 1e3,
        "wall_s": wall,
        "load_before": before,
        "load_after": after,
        "command": " ".join(command[2:]),
        "breakdown": breakdown(training),
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
    breakdowns: dict[int, list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory(prefix="measuring-workers-") as folder:
        for workers in counts:
            row = train_row(args.env, workers, args.cores_per_worker, args.budget, args.seed, Path(folder))
            emit(row)
            if row["steps_per_second"]:
                rates.setdefault(workers, []).append(row["steps_per_second"])
            if row["breakdown"]:
                breakdowns.setdefault(workers, []).append(row["breakdown"])
    for workers in sorted(rates):
        if workers != 1 and 1 in rates:
            ratio = mean(rates[workers]) / mean(rates[1])
            emit(
                {
                    "figure": "ratio",
                    "workers": workers,
                    "cores_per_worker": args.cores_per_worker,
                    "steps_per_second": mean(rates[workers]),
                    "one_worker_steps_per_second": mean(rates[1]),
                    "ratio": ratio,
                    "factors": factors(breakdowns.get(1, []), breakdowns.get(workers, []), ratio),
                }
            )
    if args.agreement:
        for row in agreement_rows(args.env, max(counts), args.cores_per_worker, args.agreement, args.seed):
            emit(row)


if __name__ == "__main__":
    main()
