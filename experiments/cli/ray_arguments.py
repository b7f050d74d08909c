"""The ``--ray-address`` and ``--ray-cpus`` arguments of ``leaderboard`` and ``bench``: their cells as Ray tasks
(:mod:`experiments.ray_cells`)."""

from __future__ import annotations

import argparse

from experiments import defaults
from experiments.cli.arguments import finite_float

#: CPUs a cell's task reserves unless told otherwise.
DEFAULT_CPUS = defaults.RAY_CPUS


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--ray-address`` and ``--ray-cpus`` to ``parser``."""
    parser.add_argument(
        "--ray-address",
        metavar="ADDR",
        default=None,
        help="run the cells as Ray tasks: 'local' (a new instance on this machine), 'auto' (the cluster "
        "'ray start' runs here), host:port or ray://host:10001; rows are stored here",
    )
    parser.add_argument(
        "--ray-cpus",
        type=finite_float,
        default=DEFAULT_CPUS,
        metavar="N",
        help=f"CPUs each cell's Ray task reserves (default: {DEFAULT_CPUS:g})",
    )
