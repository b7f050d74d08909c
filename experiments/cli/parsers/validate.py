"""Validate result rows: check what each row claims, replay its placement, and rerun the deterministic methods.

The arguments of ``placement-gym validate``.
"""

from __future__ import annotations

import argparse

from experiments.cli.arguments import in_file

SUMMARY = __doc__.splitlines()[0]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``validate``'s arguments to ``parser``."""
    parser.add_argument("rows", nargs="+", type=in_file, help="results files (JSON lines)")
    parser.add_argument("--quiet", action="store_true", help="print only the rejected rows")
    parser.add_argument(
        "--rerun", type=int, default=0, metavar="N",
        help="also rerun N sampled rows end to end, method included, and report those that differ",
    )  # fmt: skip
    parser.add_argument(
        "--trust-modules", action="append", default=[], metavar="MODULE[,MODULE...]",
        help="let --rerun draw and rerun rows of agents from these modules (ppo_torch, stable_baselines3; "
        "repeatable, or comma-separated), imported as bench imports them: installed ones first, then the "
        "current folder. Without it, rows whose method names a module outside the project are not rerun: "
        "a results file never makes validate import code",
    )  # fmt: skip
    parser.add_argument(
        "--sample-seed", type=int, default=0, help="seed of the --rerun sample (default: 0)"
    )
    parser.add_argument(
        "--no-cache", action="store_true", help="recompute every verdict (ignore and keep no cache)"
    )
