"""The ``placement-gym`` command.

Subcommands:
    graphs   node/edge counts of the benchmark graphs at every coarsening level
"""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="placement-gym", description="Device placement as an RL benchmark.")
    sub = parser.add_subparsers(dest="command", required=True)
    graphs = sub.add_parser(
        "graphs", help="node/edge counts of the benchmark graphs at every coarsening level"
    )
    graphs.add_argument("--models", nargs="+", default=None)
    graphs.add_argument("--k", type=int, default=64)
    args = parser.parse_args(argv)
    if args.command == "graphs":
        from experiments.graph_table import graph_table
        from placement_gym.zoo import BENCHMARK_MODELS

        print(graph_table(args.models or list(BENCHMARK_MODELS), args.k))
    return 0


if __name__ == "__main__":
    sys.exit(main())
