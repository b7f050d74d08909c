"""The leaderboard: run the protocol's cells resumably and write ``docs/LEADERBOARD.md`` from the stored rows.

``placement-gym leaderboard --run standard`` runs every missing cell (method x train task x seed) of a tier,
cheapest methods first, appending one row per cell to ``results/leaderboard/<tier>/<method>.jsonl`` (the
rows are the store: an interrupted run resumes where it stopped, a cell already stored is skipped). A
seedless method (its result does not depend on the seed) runs once per task, with seed 0, and counts as
the same result for every seed. Rows keep their history at fixed checkpoints only, so the committed
store stays small; each row records the commit of the code that produced it (``extra["code"]``) and the
CPU-seconds of its run (``extra["cpu_seconds"]``; its wall time depends on what else the machine ran).

``placement-gym leaderboard`` (without ``--run``) only regenerates the page from the stored rows that pass
``placement-gym validate`` (replayed, with verdicts cached per version of the code; a row left out is
named on the terminal and counted on the page): per tier, in a table of that tier's rows only, each
method's IQM and optimality gap of the normalised scores with 95% stratified-bootstrap intervals, its mean
score per task, the evaluations it spent and its wall time, and the submission template. Method names are
escaped, so a name cannot add cells, rows, links or tags to the page.

Every stored row replays on the simulated backend (``placement-gym validate``); the test suite replays them
all, so an entry that no longer reproduces fails CI.
"""

from __future__ import annotations

import argparse

from experiments import ray_cells
from experiments.cli.arguments import module_main
from experiments.cli.parsers.leaderboard import add_arguments
from experiments.records import curves_page, leaderboard
from placement_gym.errors import ConfigError


def run_from_args(args: argparse.Namespace) -> None:
    if args.seeds and not args.run:
        raise ConfigError("--seeds chooses the seeds --run runs; give --run TIER too (e.g. --run large)")
    if args.methods and not args.run:
        raise ConfigError("--methods chooses what --run runs; give --run TIER too (e.g. --run standard)")
    ray_cells.check_arguments(args)
    if args.ray_address and not args.run:
        raise ConfigError("--ray-address runs the cells of --run; give --run TIER too (e.g. --run standard)")
    if args.run:
        leaderboard.run_tier(
            args.run, args.methods or leaderboard.METHODS, args.results, args.tasks,
            ray_address=args.ray_address, ray_cpus=args.ray_cpus, seeds=args.seeds,
        )  # fmt: skip
    rejected: list[str] = []
    rows = leaderboard.stored_rows(args.results, rejected=rejected)
    for reason in rejected:
        print(f"left out (placement-gym validate rejects it): {reason}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(leaderboard.render(rows, rejected))
    curves_page.write_figures(leaderboard.split_masked(rows)[0], args.out.parent / curves_page.FIGURES)
    print(f"wrote {args.out}")
    from experiments.records import transfer_board  # the transfer track's page, from results/leaderboard/transfer

    page = args.out.with_name(transfer_board.PAGE.name)
    left_out: list[str] = []
    moved = transfer_board.transfer_rows(args.results / "transfer", rejected=left_out)
    page.write_text(transfer_board.render_transfer(moved, rejected=left_out))
    print(f"wrote {page}")


def main(argv: list[str] | None = None) -> int:
    return module_main(__doc__, add_arguments, run_from_args, argv)


if __name__ == "__main__":
    raise SystemExit(main())
