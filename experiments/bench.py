"""Benchmark grid: models x methods x seeds on one platform and backend, resumable, with a report.

Every cell runs one method with one seed and an evaluation budget on a fresh env, and appends one
replayable row to ``<out>/results.jsonl``; a rerun with the same ``--out`` skips finished cells, so an
interrupted grid resumes where it stopped. At the end the report (markdown table, CSV, plots) is
written from all rows in the store.

Usage:
    python -m experiments.bench --models bert --methods heft milp random_search ppo_gnn --seeds 0 1 2
    placement-gym bench --preset small            # the README's main job
    placement-gym bench --preset paper-sim        # the grid of the first calibration (docs/research-notes.md)
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import numpy as np

from agents import make_method, method_class
from experiments.report import write_report
from experiments.runs import (
    ResultRow,
    ResultStore,
    library_versions,
    method_label,
    parse_method,
    speedup_text,
)
from placement_gym.benchmarks import load_benchmark
from placement_gym.envs import DevicePlacementEnv
from placement_gym.platforms import Platform, load_platform

#: Ready-made grids. ``single_device:device=<name>`` rows are the single-device baselines.
PRESETS: dict[str, dict[str, Any]] = {
    "small": dict(
        models=["inception_v3"], platform="cpu-dgpu", backend="simulated", seeds=[0], budget=200,
        methods=["single_device:device=cpu", "single_device:device=gpu", "heft", "m_sct", "random_search",
                 "milp:time_limit=30", "ppo_gnn", "hsdag"],
    ),
    "paper-sim": dict(
        models=["inception_v3", "resnet50", "bert"],
        platform="cpu-dgpu",
        backend="simulated",
        seeds=[0, 1, 2],
        budget=500,
        methods=[
            "single_device:device=cpu",
            "single_device:device=gpu",
            "heft",
            "m_sct",
            "m_etf",
            "metis",
            "milp:time_limit=120",
            "random_search",
            "ppo_gnn",
            "hsdag",
            "rl_placement",
            "grouper_placer",
            "placeto",
        ],
    ),
    # Measured evaluations cost ~1 s each (compiling new subgraphs included), so this grid is smaller:
    # two models, the fast methods, 50 evaluations. BERT ran with the seedless methods only (see docs).
    "paper-local": dict(
        models=["resnet50", "inception_v3"],
        platform="local",
        backend="measured",
        seeds=[0, 1, 2],
        budget=50,
        methods=[
            "single_device:device=cpu0",
            "single_device:device=cpu1",
            "heft",
            "milp:time_limit=60",
            "random_search",
            "hsdag",
        ],
    ),
}
#: Methods whose result does not depend on the seed (run once, reported for every seed count).
_SEEDLESS = {"single_device", "heft", "m_topo", "m_etf", "m_sct", "milp", "moirai", "exact"}


def coarse_label(coarsening: str, k: int | None) -> str:
    """The ``CoarseGraph.level`` an env built with these arguments has (the key of its rows)."""
    if k is None:
        return coarsening
    return f"{'ops' if coarsening == 'ops' else 'fused'}+k{k}"


def cpu_device(platform: Platform) -> int:
    """Index of the reference "CPU-only" device: the host if it is a CPU, else the first CPU."""
    devices = platform.devices
    if devices[platform.host].kind in ("cpu", "virtual"):
        return platform.host
    return next((i for i, d in enumerate(devices) if d.kind == "cpu"), platform.host)


def speedup_reference(problem: Any) -> tuple[float, str, float]:
    """What a row's speedup is measured against: ``(CPU-only latency, reference, reference latency)``.

    The reference is the CPU-only placement (``"cpu_only"``); where it does not fit in memory, the fastest
    single device that does (``"<device>_only"``); where none fits (``model-parallel``), ``"none"`` with an
    infinite latency, and the speedup is undefined. Evaluated after the method: not charged to its budget.
    """
    devices = problem.platform.devices

    def alone(d: int) -> float:
        return problem.evaluate(np.full(problem.num_groups, d, dtype=np.int64)).latency

    host = cpu_device(problem.platform)
    cpu = alone(host)
    if np.isfinite(cpu):
        return cpu, "cpu_only", cpu
    fits = {devices[d].name: lat for d in range(len(devices)) if d != host and np.isfinite(lat := alone(d))}
    if not fits:
        return cpu, "none", float("inf")
    best = min(fits, key=fits.get)
    return cpu, f"{best}_only", fits[best]


def speedup(reference_latency: float, latency: float) -> float:
    """``reference / latency``: 0 for an infeasible result, NaN where no single device fits."""
    if not np.isfinite(reference_latency):
        return float("nan")
    return reference_latency / latency if np.isfinite(latency) else 0.0


def run_cell(
    model: str,
    spec: str,
    seed: int,
    budget: int | None,
    platform: str,
    backend: str,
    coarsening: str,
    k: int | None = None,
    backend_kwargs: dict[str, Any] | None = None,
    listeners: tuple = (),
    input_shapes: dict[str, list[int]] | None = None,
) -> ResultRow:
    """Run one method on a fresh env and return its row (``input_shapes``: for a dynamic-shape model file)."""
    source = load_benchmark(model, input_shapes=input_shapes) if input_shapes else model
    env = DevicePlacementEnv(
        source, platform, backend, coarsening=coarsening, k=k, backend_kwargs=backend_kwargs
    )
    problem = env.problem
    try:
        name, kwargs = parse_method(spec)
        method = make_method(name, **kwargs)
        result = method.place(env, budget=budget, seed=seed, listeners=listeners)
        cpu, reference, reference_latency = speedup_reference(problem)
        extra = {k: v for k, v in result.extra.items() if isinstance(v, (int, float, str, bool, list, dict))}
        identity = problem.benchmark.identity()
        return ResultRow(
            model=model,
            graph_version=problem.benchmark.version,
            platform=problem.platform.name,
            backend=backend,
            coarsening=problem.coarse.level,
            groups=problem.num_groups,
            method=spec,
            seed=seed,
            budget=budget,
            latency=result.latency,
            cpu_only_latency=cpu,
            speedup_vs_cpu=speedup(reference_latency, result.latency),
            speedup_reference=reference,
            evaluations=result.evaluations,
            wall_time=result.wall_time,
            placement=result.placement.tolist(),
            history=_thin(result.history),
            extra=extra,
            versions=library_versions(),
            model_path=identity.get("model_path"),
            model_sha256=identity.get("model_sha256"),
            input_shapes=identity.get("input_shapes"),
            task_sha256=problem.task_sha256,
        )
    finally:
        env.close()


def _thin(history: list[tuple[int, float]], points: int = 200) -> list[tuple[int, float]]:
    """At most ``points`` history entries (evenly spaced, last one kept) for compact rows."""
    if len(history) <= points:
        return list(history)
    idx = np.unique(np.linspace(0, len(history) - 1, points).astype(int))
    return [history[i] for i in idx]


def run_grid(
    out: Path,
    models: list[str],
    methods: list[str],
    seeds: list[int],
    budget: int | None,
    platform: str,
    backend: str,
    coarsening: str = "fused",
    k: int | None = None,
    backend_kwargs: dict | None = None,
    progress: bool = True,
    input_shapes: dict[str, list[int]] | None = None,
) -> list[ResultRow]:
    """Run every missing cell of the grid, appending rows to ``out/results.jsonl``; returns all rows."""
    for spec in methods:  # an unknown method fails now, not after the cells before it have run
        method_class(parse_method(spec)[0])
    store = ResultStore(out / "results.jsonl")
    for reason in store.set_aside():
        print(f"note: set aside {reason} (moved to {store.rejected_path}; its cell runs again)")
    done = store.keys()
    platform_name = load_platform(platform).name  # rows record the name, also for a platform file
    label = coarse_label(coarsening, k)
    cells = [
        (model, spec, seed)
        for model in models
        for spec in methods
        for seed in (seeds if parse_method(spec)[0] not in _SEEDLESS else seeds[:1])
        if (model, platform_name, backend, label, spec, seed, budget) not in done
    ]
    bar = _progress(len(cells), progress)
    try:
        for model, spec, seed in cells:
            bar.set_description(f"{model} {method_label(spec)} seed {seed}")
            start = time.perf_counter()
            row = run_cell(
                model, spec, seed, budget, platform, backend, coarsening, k, backend_kwargs,
                input_shapes=input_shapes,
            )  # fmt: skip
            store.append(row)
            bar.update(1)
            bar.write(
                f"{model:>12} {method_label(spec):>28} seed {seed}: {row.latency * 1e3:9.3f} ms "
                f"({speedup_text(row)}, {row.evaluations} evals, {time.perf_counter() - start:.1f} s)"
            )
    finally:
        bar.close()
    return store.rows()


def _progress(total: int, enabled: bool):
    from tqdm.auto import tqdm

    return tqdm(total=total, disable=not enabled, unit="cell", dynamic_ncols=True)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from experiments.train import add_input_shape_argument

    parser.add_argument(
        "--preset", choices=sorted(PRESETS), default=None, help="a ready-made grid (default: small)"
    )
    parser.add_argument("--models", nargs="+", help="zoo names or IR/ONNX paths (default: the preset's)")
    parser.add_argument(
        "--methods", nargs="+", help="method specs, e.g. heft milp:time_limit=60 single_device:device=cpu"
    )
    parser.add_argument("--seeds", nargs="+", type=int, help="seeds of the seeded methods (default: the preset's)")
    parser.add_argument(
        "--budget", type=int, help="evaluated placements per search method and seed (default: the preset's)"
    )
    parser.add_argument(
        "--platform", help="a platform name, or a .yaml platform file (default: the preset's)"
    )
    parser.add_argument(
        "--backend", choices=["simulated", "measured"], help="how latency is obtained (default: the preset's)"
    )
    parser.add_argument("--coarsening", default="fused", help="coarsening level: ops, fused or k")
    parser.add_argument("--k", type=int, default=None, help="at most K groups (with --coarsening k or fused)")
    add_input_shape_argument(parser)
    parser.add_argument(
        "--out", type=Path, default=None, help="result folder (default results/<preset or custom>)"
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(parser)
    run_from_args(parser.parse_args(argv))


def run_from_args(args: argparse.Namespace) -> None:
    cfg = dict(PRESETS[args.preset]) if args.preset else dict(PRESETS["small"])
    for key in ("models", "methods", "seeds", "budget", "platform", "backend"):
        if getattr(args, key) is not None:
            cfg[key] = getattr(args, key)
    out = args.out or Path("results") / (args.preset or "custom")
    rows = run_grid(
        out,
        cfg["models"],
        cfg["methods"],
        cfg["seeds"],
        cfg["budget"],
        cfg["platform"],
        cfg["backend"],
        args.coarsening,
        args.k,
        progress=not args.no_progress,
        input_shapes=dict(args.input_shapes) if args.input_shapes else None,
    )
    table = write_report(rows, out)
    print(table)
    print(f"\nresults: {out / 'results.jsonl'}; report: {out / 'report.md'}; plots: {out}/*.png")


if __name__ == "__main__":
    main()
