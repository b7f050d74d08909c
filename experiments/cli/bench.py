"""Benchmark grid: models x methods x seeds on one platform and backend, resumable, with a report.

Every cell runs one method with one seed and an evaluation budget on a fresh env, and appends one
replayable row to ``<out>/results.jsonl``; a rerun with the same ``--out`` skips finished cells, so an
interrupted grid resumes where it stopped; two ``bench`` runs on one ``--out`` share the cells (each is
claimed before it runs, see :class:`~placement_gym.results.ResultStore`). At the end the report (markdown
table, CSV, plots) is written from all rows in the store. ``--tier`` runs protocol v1 instead
(:mod:`placement_gym.protocol`) and ends with the aggregates (:mod:`experiments.aggregate`).

Usage:
    python -m experiments.cli.bench --models bert --methods heft milp random_search ppo_gnn --seeds 0 1 2
    placement-gym bench --preset small            # the README's main job
    placement-gym bench --preset paper-sim        # the grid of the first calibration (docs/research-notes.md)
    placement-gym bench --tier standard --methods heft my_pkg.my_module:MyAgent   # the protocol (docs/protocol.md)
"""

from __future__ import annotations

import argparse
from pathlib import Path

from experiments import grid, ray_cells
from experiments.aggregate import write_aggregate
from experiments.cli import arguments
from experiments.cli.parsers.bench import PRESETS, add_arguments
from experiments.records.report import write_report
from experiments.runs import ResultRow, ResultStore
from placement_gym import protocol
from placement_gym.errors import ConfigError


def main(argv: list[str] | None = None) -> int:
    return arguments.module_main(__doc__, add_arguments, run_from_args, argv)


def run_from_args(args: argparse.Namespace) -> None:
    ray_cells.check_arguments(args)
    if getattr(args, "tier", None):
        run_tier(args)
        return
    cfg = dict(PRESETS[args.preset]) if args.preset else dict(PRESETS["small"])
    for key in ("models", "methods", "seeds", "budget", "platform", "backend"):
        if getattr(args, key) is not None:
            cfg[key] = getattr(args, key)
    out = args.out or Path("results") / (args.preset or "custom")
    rows = grid.run_grid(
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
        input_shapes=arguments.input_shapes(args.input_shapes),
        failures=(failed := []),
        ray_address=args.ray_address,
        ray_cpus=args.ray_cpus,
    )
    if rows:
        print(write_report(rows, out))
        print(f"\nresults: {out / 'results.jsonl'}; report: {out / 'report.md'}; plots: {out}/*.png")
    grid.raise_failures(failed)


def run_tier(args: argparse.Namespace) -> list[ResultRow]:
    """``bench --tier``: the protocol's cells of ``--methods`` on ``--tasks``, then the aggregates."""
    clashes = [f"--{k}" for k in ("preset", "models", "budget", "platform", "backend") if getattr(args, k, None)]
    if args.coarsening != protocol.COARSENING or args.k is not None:
        clashes.append("--coarsening/--k")
    if clashes:
        raise ConfigError(
            f"--tier fixes the tasks, budget, backend and coarsening of protocol {protocol.VERSION}; "
            f"drop {', '.join(clashes)} (choose tasks with --tasks)"
        )
    if not args.methods:
        raise ConfigError("--tier needs --methods (registered names or your own module:attribute)")
    budget = protocol.tier_budget(args.tier)
    tasks = protocol.resolve_tasks(args.tasks)
    seeds = list(args.seeds) if args.seeds is not None else list(protocol.SEEDS)
    out = args.out or Path("results") / f"protocol-{protocol.VERSION}-{args.tier}"
    by_platform: dict[str, list[str]] = {}
    for task in tasks:
        by_platform.setdefault(task.platform, []).append(task.model)
    failed: list[str] = []
    for platform, models in by_platform.items():
        grid.run_grid(
            out, models, args.methods, seeds, budget, platform, protocol.BACKEND, protocol.COARSENING,
            progress=not args.no_progress, protocol_version=protocol.VERSION, tier=args.tier, failures=failed,
            ray_address=getattr(args, "ray_address", None), ray_cpus=getattr(args, "ray_cpus", 1.0),
        )  # fmt: skip
    wanted = {(t.model, t.platform) for t in tasks}
    specs = set(args.methods)
    rows = [
        r for r in ResultStore(out / "results.jsonl").rows()
        if r.protocol == protocol.VERSION and r.tier == args.tier and (r.model, r.platform) in wanted
        and r.method in specs
    ]  # fmt: skip
    if rows:
        print(write_aggregate(rows, out, args.tier))
        print(f"\nresults: {out / 'results.jsonl'}; aggregates: {out / 'aggregate.md'}; plots: {out}/*.png")
    grid.raise_failures(failed)
    return rows


if __name__ == "__main__":
    raise SystemExit(main())
