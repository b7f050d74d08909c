"""Regenerate the reference optima (``placement_gym/tasks/optima.json``) with the exact solver.

Usage::

    python -m experiments.records.reference_optima              # every task
    python -m experiments.records.reference_optima --models bert --platforms multi-accel
    python -m experiments.records.reference_optima --models vit_b16 convnext_t   # the held-out families
    python -m experiments.records.reference_optima --rehash        # record each stored task's content hash

The held-out families (:data:`placement_gym.HELD_OUT_MODELS`) are solved on the suite's platforms only.

For every (model, platform) at the ``fused`` level it runs :class:`agents.baselines.exact.ExactPlacement`,
re-evaluates its placement on the simulator, and stores the latency, the proven lower bound, the
placement, the baseline (the best single device; on ``model-parallel``, where no single device holds the
model, the best of Baechi's m-TOPO, m-ETF and m-SCT, with its placement), HEFT's latency, the solver's
settings and its solve time with the machine's load, and the task's content hash
(:func:`placement_gym.tasks.task_sha256`), by which results are matched to it. Tasks not asked for keep
their stored entries. It prints the solver table of ``docs/RESULTS.md``.

``--rehash`` solves nothing: it rebuilds every stored task, checks that it has the stored group count and
that the stored placement re-evaluates to the stored latency (the task's content is the one that was
solved), and records its content hash; a task that fails the check is reported and keeps no hash (so
nothing is scored against it).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import time
from typing import Any

import numpy as np
import openvino as ov

from agents.baselines.baechi import list_scheduler_placements
from agents.baselines.common import allowed_devices
from agents.baselines.exact import ExactPlacement
from agents.baselines.heft import heft_placement
from placement_gym import (
    BENCHMARK_MODELS, HELD_OUT_MODELS, HELD_OUT_PLATFORMS, MASKED_PLATFORMS, MASKED_TASK_PAIRS,
)  # fmt: skip
from placement_gym.envs.device_placement import DevicePlacementEnv
from placement_gym.tasks import OPTIMA_PATH, ReferenceOptimum, load_optima, reference_optima

#: Platforms with reference optima: the reference platform, its first calibration, and the suite's.
PLATFORMS = (
    "cpu-dgpu", "cpu-dgpu-v0", "cpu-igpu", "multi-accel", "model-parallel", "cpu-igpu-lowmem",
    "cpu-igpu-carveout",
)  # fmt: skip
SETTINGS: dict[str, Any] = {
    "max_segment": 40,
    "enumerate_limit": 1 << 20,
    "segment_time_limit": 60.0,
    "time_limit": 600.0,  # used where memory can bind (model-parallel)
}


def memory_aware_baseline(env: DevicePlacementEnv) -> tuple[str, np.ndarray, float]:
    """The best feasible placement of Baechi's memory-aware list schedulers: (name, placement, latency).

    Raises:
        RuntimeError: If none of them is feasible (the task then has no baseline).
    """
    cost, allowed = env.problem.cost_model(), allowed_devices(env.problem)
    placements = list_scheduler_placements(cost, allowed)
    results = {name: env.problem.evaluate(p) for name, p in placements.items()}
    feasible = {name: r.latency for name, r in results.items() if r.feasible}
    if not feasible:
        reasons = "; ".join(f"{name}: {r.result.reason}" for name, r in results.items())
        raise RuntimeError(f"no memory-aware list scheduler finds a feasible placement ({reasons})")
    name = min(feasible, key=feasible.get)
    return name, placements[name], feasible[name]


def tasks(models: list[str], platforms: list[str]) -> list[tuple[str, str]]:
    """The (model, platform) pairs to solve: every pair, but held-out models on ``HELD_OUT_PLATFORMS`` only,
    and a mask-binding platform with its own tasks' models only (:data:`~placement_gym.MASKED_TASK_PAIRS`)."""
    return [
        (model, platform)
        for platform in platforms
        for model in models
        if (model, platform) in MASKED_TASK_PAIRS
        or (
            platform not in MASKED_PLATFORMS
            and (model not in HELD_OUT_MODELS or platform in HELD_OUT_PLATFORMS)
        )
    ]


def solve_task(model: str, platform: str, threads: int | None = None) -> ReferenceOptimum:
    """Run the exact solver on one task and describe the result."""
    env = DevicePlacementEnv(model, platform, "simulated", reward="neg_latency_ms")
    cost = env.problem.cost_model()
    singles = {
        dev.name: env.problem.evaluate(np.full(env.num_groups, d, dtype=np.int64))
        for d, dev in enumerate(env.problem.platform.devices)
    }
    feasible = {name: res.latency for name, res in singles.items() if res.feasible}
    if feasible:
        baseline = min(feasible, key=feasible.get)
        baseline_name, baseline_latency = f"single device {baseline}", feasible[baseline]
        baseline_placement = None
    else:
        method, placement, baseline_latency = memory_aware_baseline(env)
        baseline_name, baseline_placement = method, tuple(int(d) for d in placement)
    heft = env.problem.evaluate(heft_placement(cost, allowed_devices(env.problem))[0])
    load = os.getloadavg()[0]
    start = time.perf_counter()
    result = ExactPlacement(**SETTINGS, threads=threads).place(env)
    seconds = time.perf_counter() - start
    check = env.problem.evaluate(result.placement)
    if not check.feasible or abs(check.latency - result.latency) > 1e-12 * result.latency:
        raise RuntimeError(
            f"{model} on {platform}: the solver's placement does not re-evaluate to its latency"
        )
    return ReferenceOptimum(
        model=model,
        version=int(env.problem.benchmark.version),
        platform=platform,
        level="fused",
        latency=float(result.latency),
        lower_bound=float(min(result.extra["lower_bound"], result.latency)),
        placement=tuple(int(d) for d in result.placement),
        baseline=baseline_name,
        baseline_latency=float(baseline_latency),
        heft_latency=float(heft.latency),
        solver={
            "method": "exact",
            **SETTINGS,
            "threads": threads,
            "openvino": ov.get_version().split("-")[0],
        },
        solve_time={
            "seconds": round(seconds, 1),
            "load_1min_at_start": round(load, 2),
            "load_1min_at_end": round(os.getloadavg()[0], 2),
            "segments": result.extra.get("segments"),
            "milp_segments": result.extra.get("milp_segments"),
            "dropped_edges": result.extra.get("dropped_edges"),
            "lagrangian_iterations": result.extra.get("lagrangian_iterations"),
            "milp_status": result.extra.get("milp_status"),
        },
        baseline_placement=baseline_placement,
        task_sha256=env.problem.task_sha256,
    )


def rehash(ref: ReferenceOptimum) -> ReferenceOptimum:
    """``ref`` with the content hash of the task it is stored for, if that task re-evaluates the same.

    Raises:
        RuntimeError: If the task now has another group count or the stored placement another latency.
    """
    env = DevicePlacementEnv(ref.model, ref.platform, "simulated", reward="neg_latency_ms")
    try:
        problem = env.problem
        if problem.benchmark.version != ref.version or problem.coarse.level != ref.level:
            raise RuntimeError(f"built v{problem.benchmark.version}/{problem.coarse.level}")
        if problem.num_groups != len(ref.placement):
            raise RuntimeError(f"{problem.num_groups} groups, the stored placement has {len(ref.placement)}")
        latency = problem.evaluate(np.asarray(ref.placement, dtype=np.int64)).latency
        if abs(latency - ref.latency) > 1e-9 * ref.latency:
            raise RuntimeError(f"the stored placement re-evaluates to {latency!r} s, not {ref.latency!r} s")
        return dataclasses.replace(ref, task_sha256=problem.task_sha256)
    finally:
        env.close()


def solver_table(refs: list[ReferenceOptimum]) -> str:
    """Markdown: per task, the optimum, its bound and gap, the solve time and the load it ran under."""
    lines = [
        "| model | platform | best single device ms | HEFT ms | optimum ms | lower bound ms | gap | headroom | "
        "solve s (load) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in refs:
        t = r.solve_time
        lines.append(
            f"| {r.model} | {r.platform} | {r.baseline_latency * 1e3:.3f} ({r.baseline.split()[-1]}) | "
            f"{r.heft_latency * 1e3:.3f} | {r.latency * 1e3:.3f} | {r.lower_bound * 1e3:.3f} | "
            f"{r.gap:.2%} | {r.headroom:.3f} | {t['seconds']:.0f} ({t['load_1min_at_start']:.1f}-"
            f"{t['load_1min_at_end']:.1f}) |"
        )
    return "\n".join(lines)


def _row(ref: ReferenceOptimum) -> dict[str, Any]:
    """``ref`` as a JSON row (no ``baseline_placement`` key for a single-device baseline)."""
    row = dict(vars(ref)) | {"placement": list(ref.placement)}
    if row.get("task_sha256") is None:
        row.pop("task_sha256", None)
    if ref.baseline_placement is None:
        del row["baseline_placement"]
    else:
        row["baseline_placement"] = list(ref.baseline_placement)
    return row


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Regenerate placement_gym/tasks/optima.json.")
    models = (*BENCHMARK_MODELS, *HELD_OUT_MODELS)
    parser.add_argument("--models", nargs="+", default=list(models), choices=models)
    parser.add_argument("--platforms", nargs="+", default=list(PLATFORMS), choices=PLATFORMS)
    parser.add_argument("--threads", type=int, default=1, help="HiGHS threads per MILP")
    parser.add_argument("--rehash", action="store_true", help="record stored tasks' content hashes only")
    args = parser.parse_args(argv)
    stored = dict(reference_optima())
    if args.rehash:
        for key, ref in sorted(stored.items()):
            try:
                stored[key] = rehash(ref)
                print(f"{key}: {stored[key].task_sha256}", flush=True)
            except RuntimeError as exc:
                stored[key] = dataclasses.replace(ref, task_sha256=None)
                print(f"{key}: NOT the stored task ({exc}); no hash recorded", flush=True)
        OPTIMA_PATH.write_text(
            json.dumps({"tasks": [_row(r) for _, r in sorted(stored.items())]}, indent=1) + "\n"
        )
        return
    for model, platform in tasks(args.models, args.platforms):
        ref = solve_task(model, platform, args.threads)
        stored[f"{ref.model}/v{ref.version}/{ref.platform}/{ref.level}"] = ref
        print(solver_table([ref]).splitlines()[-1], flush=True)
        rows = [_row(r) for _, r in sorted(stored.items())]
        OPTIMA_PATH.write_text(json.dumps({"tasks": rows}, indent=1) + "\n")
    order = {p: i for i, p in enumerate(PLATFORMS)}
    refs = sorted(load_optima().values(), key=lambda r: (order.get(r.platform, 99), r.model))
    print(solver_table(refs))


if __name__ == "__main__":
    main()
