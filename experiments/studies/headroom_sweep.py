"""Headroom of the memory-constrained tasks over a grid of memory fractions, and of ResNet-50 on
``cpu-igpu`` at other coarsening levels: evidence for where the 1.10 headroom target can be met.

Usage::

    python -m experiments.studies.headroom_sweep --levels ops fused k64 k32 k16   # into results/headroom-sweep
    python -m experiments.studies.headroom_sweep --cpu 0.6 0.8 --gpu 0.4 0.55 --models bert

For each (CPU fraction, GPU fraction) of the ``model-parallel`` platform (each GPU gets the GPU fraction;
fractions are shares of the model's weight bytes, :func:`placement_gym.platforms.resolve_memory`) and each
model it reports: whether every single-device placement is out of memory, the best feasible latency of
Baechi's list schedulers m-TOPO / m-ETF / m-SCT (the score's baseline there), the optimum with memory
relaxed (the exact decomposition, :func:`agents.baselines.segment_solver.solve_decomposed`, on the cost model with
infinite capacities; it does not depend on the fractions) and whether its placement fits the capacities:
if it does, it is the optimum of the constrained task and the headroom is ``baseline / optimum``; if not,
the constrained optimum is higher and ``baseline / relaxed optimum`` only bounds the headroom from above.

For ResNet-50 on ``cpu-igpu`` it reports the best single device, the exact solver's optimum (with its gap)
and the headroom at the coarsening levels given by ``--levels`` (``ops``, ``fused``, ``k<K>``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from agents.baselines.baechi import list_scheduler_placements
from agents.baselines.common import allowed_devices
from agents.baselines.segment_solver import solve_decomposed
from placement_gym.platforms import load_platform
from placement_gym.problem import PlacementProblem
from placement_gym.simulation.schedule import Schedule

OUT = Path("results/headroom-sweep")
CPU_FRACTIONS = (0.5, 0.6, 0.7, 0.8, 0.9)
GPU_FRACTIONS = (0.35, 0.45, 0.55, 0.65, 0.75)
TARGET = 1.10


def relaxed_optimum(problem: PlacementProblem, segment_time_limit: float) -> dict[str, Any]:
    """The exact decomposition on ``problem``'s cost model with memory ignored: placement, latency, gap."""
    cost = problem.cost_model()
    free = dataclasses.replace(cost, capacity=np.full(cost.num_devices, np.inf))
    start = time.perf_counter()
    result = solve_decomposed(
        free, allowed_devices(problem), segment_time_limit=segment_time_limit, threads=1
    )
    return {
        "placement": result.placement,
        "latency": result.latency,
        "lower_bound": result.lower_bound,
        "gap": result.gap,
        "seconds": time.perf_counter() - start,
    }


def peak_bytes(problem: PlacementProblem, placement: np.ndarray) -> np.ndarray:
    """The simulator's peak memory of ``placement`` on each device, shape ``(D,)``."""
    cost = problem.cost_model()
    peaks = np.zeros(cost.num_devices)
    for d in range(cost.num_devices):
        probe = np.full(cost.num_devices, np.inf)
        probe[d] = 0.0  # every placement overfills d: run() reports d's peak
        _, over, peak = Schedule.build(dataclasses.replace(cost, capacity=probe)).run(placement)
        peaks[d] = peak if over == d else 0.0
    return peaks


def sweep_setting(model: str, cpu: float, gpu: float, relaxed: dict[str, Any]) -> dict[str, Any]:
    """One (model, CPU fraction, GPU fraction) row of the memory sweep."""
    base = load_platform("model-parallel")
    devices = tuple(
        dataclasses.replace(d, memory_fraction=cpu if d.kind == "cpu" else gpu) for d in base.devices
    )
    platform = dataclasses.replace(base, devices=devices)
    problem = PlacementProblem.make(model, platform, "simulated", reward="neg_latency_ms")
    g_count = problem.coarse.num_groups
    singles = [
        problem.evaluate(np.full(g_count, d, dtype=np.int64)).feasible for d in range(base.num_devices)
    ]
    cost = problem.cost_model()
    schedulers = {
        name: problem.evaluate(p)
        for name, p in list_scheduler_placements(cost, allowed_devices(problem)).items()
    }
    feasible = {name: r.latency for name, r in schedulers.items() if r.feasible}
    baseline = min(feasible.values()) if feasible else float("nan")
    fits = bool(np.all(peak_bytes(problem, relaxed["placement"]) <= np.asarray(cost.capacity)))
    # the constrained optimum lies in [relaxed bound, relaxed latency] if the relaxed placement fits, and
    # above the relaxed bound if not
    high = baseline / relaxed["lower_bound"] if feasible else float("nan")
    low = baseline / relaxed["latency"] if feasible and fits else float("nan")
    return {
        "model": model,
        "cpu_fraction": cpu,
        "gpu_fraction": gpu,
        "every_single_device_infeasible": not any(singles),
        "list_schedulers_ms": {
            name: (lat * 1e3 if np.isfinite(lat) else None)
            for name, lat in {n: r.latency if r.feasible else np.inf for n, r in schedulers.items()}.items()
        },
        "baseline_ms": baseline * 1e3,
        "relaxed_optimum_ms": relaxed["latency"] * 1e3,
        "relaxed_gap": relaxed["gap"],
        "relaxed_optimum_fits": fits,
        "headroom_low": low,
        "headroom_high": high,
    }


def coarsening_rows(levels: list[str], segment_time_limit: float) -> list[dict[str, Any]]:
    """ResNet-50 on ``cpu-igpu``: best single device, exact optimum and headroom per coarsening level
    (``"ops"``, ``"fused"``, or ``"k<K>"``: the fused groups merged down to at most ``K``)."""
    rows = []
    for level in levels:
        kwargs: dict[str, Any] = {"coarsening": level}
        if level.startswith("k"):
            kwargs = {"coarsening": "k", "k": int(level[1:])}
        problem = PlacementProblem.make(
            "resnet50", "cpu-igpu", "simulated", reward="neg_latency_ms", **kwargs
        )
        g_count = problem.coarse.num_groups
        singles = [problem.evaluate(np.full(g_count, d, dtype=np.int64)).latency for d in range(2)]
        start = time.perf_counter()
        result = solve_decomposed(
            problem.cost_model(), allowed_devices(problem), segment_time_limit=segment_time_limit, threads=1
        )
        rows.append(
            {
                "model": "resnet50",
                "platform": "cpu-igpu",
                "level": level,
                "groups": g_count,
                "best_single_device_ms": min(singles) * 1e3,
                "optimum_ms": result.latency * 1e3,
                "gap": result.gap,
                "headroom": min(singles) / result.latency,
                "seconds": round(time.perf_counter() - start, 1),
            }
        )
        print(rows[-1], flush=True)
    return rows


def markdown(memory: list[dict[str, Any]], levels: list[dict[str, Any]]) -> str:
    """The sweep as markdown tables."""
    lines = [
        "| model | CPU | GPU | single devices all OOM | m-TOPO / m-ETF / m-SCT ms | baseline ms | "
        "relaxed optimum ms | fits | headroom |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in memory:
        sched = " / ".join("OOM" if v is None else f"{v:.3f}" for v in r["list_schedulers_ms"].values())
        low, high = r["headroom_low"], r["headroom_high"]
        if not np.isfinite(high):
            head = "-"
        elif not np.isfinite(low):
            head = f"<= {high:.3f}"
        else:
            head = f"{low:.3f}" if high - low < 5e-4 else f"{low:.3f}-{high:.3f}"
        lines.append(
            f"| {r['model']} | {r['cpu_fraction']} | {r['gpu_fraction']} | "
            f"{'yes' if r['every_single_device_infeasible'] else 'no'} | {sched} | {r['baseline_ms']:.3f} | "
            f"{r['relaxed_optimum_ms']:.3f} | {'yes' if r['relaxed_optimum_fits'] else 'no'} | {head} |"
        )
    if levels:
        lines += [
            "",
            "| model | platform | level | groups | best single device ms | optimum ms | gap | headroom |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for r in levels:
            lines.append(
                f"| {r['model']} | {r['platform']} | {r['level']} | {r['groups']} | "
                f"{r['best_single_device_ms']:.3f} | {r['optimum_ms']:.3f} | {r['gap']:.2%} | {r['headroom']:.3f} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Headroom over memory fractions and coarsening levels.")
    parser.add_argument("--models", nargs="*", default=["bert", "inception_v3", "resnet50"])
    parser.add_argument("--cpu", nargs="+", type=float, default=list(CPU_FRACTIONS))
    parser.add_argument("--gpu", nargs="+", type=float, default=list(GPU_FRACTIONS))
    parser.add_argument(
        "--levels", nargs="*", default=[], help="ResNet-50 / cpu-igpu levels: ops, fused, k<K> (e.g. k32)"
    )
    parser.add_argument("--segment-time-limit", type=float, default=60.0)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    load = os.getloadavg()[0]
    memory = []
    for model in args.models:
        problem = PlacementProblem.make(model, "model-parallel", "simulated", reward="neg_latency_ms")
        relaxed = relaxed_optimum(problem, args.segment_time_limit)
        print(
            f"{model}: relaxed optimum {relaxed['latency'] * 1e3:.3f} ms, gap {relaxed['gap']:.2%}, "
            f"{relaxed['seconds']:.0f} s",
            flush=True,
        )
        for cpu in args.cpu:
            for gpu in args.gpu:
                memory.append(sweep_setting(model, cpu, gpu, relaxed))
                print(markdown(memory[-1:], []).splitlines()[-1], flush=True)
    levels = coarsening_rows(args.levels, args.segment_time_limit) if args.levels else []
    args.out.mkdir(parents=True, exist_ok=True)
    meta = {"load_1min_at_start": round(load, 2), "load_1min_at_end": round(os.getloadavg()[0], 2)}
    (args.out / "sweep.json").write_text(
        json.dumps({"meta": meta, "memory": memory, "levels": levels}, indent=1, default=float) + "\n"
    )
    (args.out / "sweep.md").write_text(markdown(memory, levels) + "\n")

    # bert settings whose headroom reaches the target for sure, where every other model's list schedulers
    # also find a feasible split and no single device holds it
    def others_ok(cpu: float, gpu: float) -> bool:
        return all(
            np.isfinite(r["baseline_ms"]) and r["every_single_device_infeasible"]
            for r in memory
            if r["model"] != "bert" and (r["cpu_fraction"], r["gpu_fraction"]) == (cpu, gpu)
        )

    good = [
        (r["cpu_fraction"], r["gpu_fraction"])
        for r in memory
        if r["model"] == "bert"
        and r["every_single_device_infeasible"]
        and r["headroom_low"] >= TARGET
        and others_ok(r["cpu_fraction"], r["gpu_fraction"])
    ]
    print(markdown(memory, levels))
    print(f"bert settings with headroom >= {TARGET} (CNNs' list schedulers feasible there too): {good}")


if __name__ == "__main__":
    main()
