"""Redo the per-layer profiles of the local platform's devices (validated; see placement_gym.measured.profiling).

The arguments of ``placement-gym calibrate``.
"""

from __future__ import annotations

import argparse

from experiments.cli.arguments import UniqueList

SUMMARY = __doc__.splitlines()[0]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``calibrate``'s arguments to ``parser``."""
    parser.add_argument(
        "--model", nargs="+", action=UniqueList, default=None, help="zoo models (default: the benchmark models)"
    )
    parser.add_argument("--platform", default="local", help="platform whose devices are profiled")
    parser.add_argument(
        "--boundaries",
        action="store_true",
        help="also re-measure the local platform's figures and segment-boundary costs, on this process's cores",
    )
    parser.add_argument("--boundaries-only", action="store_true", help="only the segment-boundary costs")
    parser.add_argument(
        "--allow-busy",
        action="store_true",
        help="store figures measured while other processes were busy on these cores (recorded as such); "
        "by default they are measured again and, if the host stays busy, refused",
    )
