"""Benchmark grid: models x methods x seeds on one platform and backend, resumable, with a report.

Every cell runs one method with one seed and an evaluation budget on a fresh env, and appends one
replayable row to ``<out>/results.jsonl``; a rerun with the same ``--out`` skips finished cells, so an
interrupted grid resumes where it stopped. At the end the report (markdown table, CSV, plots) is
written from all rows in the store.

Usage:
    python -m experiments.bench --models bert --methods heft milp random_search ppo_gnn --seeds 0 1 2
    placement-gym bench --preset small            # the README's main job
    placement-gym bench --preset paper-sim        # the full simulated table (see docs/RESULTS.md)
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import numpy as np

from agents import make_method
from experiments.report import write_report
from experiments.runs import ResultRow, ResultStore, library_versions, method_label, parse_method
from placement_gym.envs import DevicePlacementEnv

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


def cpu_device(env: DevicePlacementEnv) -> int:
    """Index of the reference "CPU-only" device: the host if it is a CPU, else the first CPU."""
    devices = env.platform.devices
    if devices[env.platform.host].kind in ("cpu", "virtual"):
        return env.platform.host
    return next((i for i, d in enumerate(devices) if d.kind == "cpu"), env.platform.host)


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
) -> ResultRow:
    """Run one method on a fresh env and return its row."""
    env = DevicePlacementEnv(
        model, platform, backend, coarsening=coarsening, k=k, backend_kwargs=backend_kwargs
    )
    try:
        name, kwargs = parse_method(spec)
        method = make_method(name, **kwargs)
        result = method.place(env, budget=budget, seed=seed, listeners=listeners)
        cpu = env.backend.evaluate(np.full(env.num_groups, cpu_device(env), dtype=np.int64)).latency
        extra = {k: v for k, v in result.extra.items() if isinstance(v, (int, float, str, bool, list, dict))}
        return ResultRow(
            model=model,
            graph_version=env.benchmark.version,
            platform=env.platform.name,
            backend=backend,
            coarsening=env.coarse.level,
            groups=env.num_groups,
            method=spec,
            seed=seed,
            budget=budget,
            latency=result.latency,
            cpu_only_latency=cpu,
            speedup_vs_cpu=cpu / result.latency if np.isfinite(result.latency) else 0.0,
            evaluations=result.evaluations,
            wall_time=result.wall_time,
            placement=result.placement.tolist(),
            history=_thin(result.history),
            extra=extra,
            versions=library_versions(),
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
) -> list[ResultRow]:
    """Run every missing cell of the grid, appending rows to ``out/results.jsonl``; returns all rows."""
    store = ResultStore(out / "results.jsonl")
    done = store.keys()
    label = coarse_label(coarsening, k)
    cells = [
        (model, spec, seed)
        for model in models
        for spec in methods
        for seed in (seeds if parse_method(spec)[0] not in _SEEDLESS else seeds[:1])
        if (model, platform, backend, label, spec, seed, budget) not in done
    ]
    bar = _progress(len(cells), progress)
    try:
        for model, spec, seed in cells:
            bar.set_description(f"{model} {method_label(spec)} seed {seed}")
            start = time.perf_counter()
            row = run_cell(model, spec, seed, budget, platform, backend, coarsening, k, backend_kwargs)
            store.append(row)
            bar.update(1)
            bar.write(
                f"{model:>12} {method_label(spec):>28} seed {seed}: {row.latency * 1e3:9.3f} ms "
                f"(x{row.speedup_vs_cpu:.2f} vs CPU, {row.evaluations} evals, {time.perf_counter() - start:.1f} s)"
            )
    finally:
        bar.close()
    return store.rows()


def _progress(total: int, enabled: bool):
    from tqdm.auto import tqdm

    return tqdm(total=total, disable=not enabled, unit="cell", dynamic_ncols=True)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--preset", choices=sorted(PRESETS), default=None, help="a ready-made grid")
    parser.add_argument("--models", nargs="+")
    parser.add_argument(
        "--methods", nargs="+", help="method specs, e.g. heft milp:time_limit=60 single_device:device=cpu"
    )
    parser.add_argument("--seeds", nargs="+", type=int)
    parser.add_argument("--budget", type=int, help="evaluated placements per search method and seed")
    parser.add_argument("--platform")
    parser.add_argument("--backend", choices=["simulated", "measured"])
    parser.add_argument("--coarsening", default="fused")
    parser.add_argument("--k", type=int, default=None)
    parser.add_argument(
        "--out", type=Path, default=None, help="result folder (default results/<preset or custom>)"
    )
    parser.add_argument("--no-progress", action="store_true")


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
    )
    table = write_report(rows, out)
    print(table)
    print(f"\nresults: {out / 'results.jsonl'}; report: {out / 'report.md'}; plots: {out}/*.png")


if __name__ == "__main__":
    main()
