"""The ``placement-gym`` command.

Subcommands:
    bench    a grid of models x methods x seeds, with a table, CSV and plots (default: the small preset)
    train    one method on one env ID, with progress, TensorBoard logs and the best placement as JSON
    show     render a saved placement (text table and PNG)
    graphs   node/edge counts of the benchmark graphs at every coarsening level
"""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    from experiments import bench, show, train

    parser = argparse.ArgumentParser(prog="placement-gym", description="Device placement as an RL benchmark.")
    sub = parser.add_subparsers(dest="command", required=True)
    bench.add_arguments(sub.add_parser("bench", help=bench.__doc__.splitlines()[0]))
    train.add_arguments(sub.add_parser("train", help=train.__doc__.splitlines()[0]))
    show.add_arguments(sub.add_parser("show", help=show.__doc__.splitlines()[0]))
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
    else:
        {"bench": bench, "train": train, "show": show}[args.command].run_from_args(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
