"""The leaderboard: run the protocol's cells resumably and write ``docs/LEADERBOARD.md`` from the stored rows.

The arguments of ``placement-gym leaderboard`` and where it keeps its rows and page.
"""

from __future__ import annotations

import argparse

from experiments import defaults
from experiments.cli import ray_arguments
from experiments.cli.arguments import UniqueList, out_file, out_folder, seed

SUMMARY = __doc__.splitlines()[0]

#: Where the stored rows live (one folder per tier, one file per method), and the generated page.
RESULTS, PAGE = defaults.LEADERBOARD_RESULTS, defaults.LEADERBOARD_PAGE


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``leaderboard``'s arguments to ``parser``."""
    parser.add_argument(
        "--run", metavar="TIER", default=None, help="run the missing cells of this tier first"
    )
    parser.add_argument(
        "--methods", nargs="+", default=None, help="method specs to run (default: every leaderboard method)"
    )
    parser.add_argument("--tasks", nargs="+", default=None, help="protocol tasks or splits (default: train)")
    parser.add_argument(
        "--seeds",
        nargs="+",
        type=seed,
        action=UniqueList,
        default=None,
        help="protocol seeds the seeded methods of --run run (default: 0-4; a later run with more seeds "
        "adds the missing cells)",
    )
    parser.add_argument(
        "--results", type=out_folder, default=RESULTS, help="rows folder (default: results/leaderboard)"
    )
    parser.add_argument("--out", type=out_file, default=PAGE, help="page to write (default: docs/LEADERBOARD.md)")
    ray_arguments.add_arguments(parser)  # --ray-address, --ray-cpus: the cells as Ray tasks
