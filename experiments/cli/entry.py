"""The ``placement-gym`` command.

Subcommands:
    bench    a grid of models x methods x seeds, with a table, CSV and plots (default: the small preset)
    train    one method on one env ID, with progress, TensorBoard logs and the best placement as JSON
    show     render a saved placement (text table and PNG)
    place    place a model with a saved policy (zero-shot or fine-tuned)
    graphs   node/edge counts of the benchmark graphs at every coarsening level
    calibrate  redo the validated per-layer profiles of the local platform's devices (and, with
               --boundaries, the segment-boundary costs)
    datasets   Minari datasets of solved placements (optimum, HEFT, improvement paths) per task
    validate   replay result rows on their tasks; reject rows that do not reproduce
    leaderboard  run the protocol's cells resumably and write docs/LEADERBOARD.md from the stored rows
    transfer   the transfer track: pretrain on the train tasks, then evaluate on the held-out families

A mistake in the input (an unknown name, a bad file, an invalid argument) prints one line naming it and
exits with status 2; ``--debug`` shows the traceback instead.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

from experiments.cli.arguments import OneLineParser, UniqueList, positive_int, run_command
from experiments.cli.parsers import (
    bench,
    calibrate,
    datasets,
    leaderboard,
    place,
    show,
    train,
    transfer,
    validate,
)


def build_parser() -> argparse.ArgumentParser:
    """The parser of every subcommand, built from :mod:`experiments.cli.parsers` (no heavy import)."""
    parser = OneLineParser(prog="placement-gym", description="Device placement as an RL benchmark.")
    parser.add_argument("--debug", action="store_true", help="show the full traceback of any error")
    common = OneLineParser(add_help=False)
    common.add_argument(
        "--debug", action="store_true", default=argparse.SUPPRESS, help="show the full traceback of any error"
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for name, module in (
        ("bench", bench),
        ("train", train),
        ("show", show),
        ("place", place),
        ("calibrate", calibrate),
        ("datasets", datasets),
        ("validate", validate),
        ("leaderboard", leaderboard),
        ("transfer", transfer),
    ):
        summary = module.SUMMARY
        module.add_arguments(sub.add_parser(name, help=summary, description=summary, parents=[common]))
    graphs = sub.add_parser(
        "graphs", help="node/edge counts of the benchmark graphs at every coarsening level", parents=[common]
    )
    graphs.add_argument(
        "--models", nargs="+", action=UniqueList, default=None, help="zoo models (default: the benchmark models)"
    )
    graphs.add_argument("--k", type=positive_int, default=64, help="group count of the k-coarsening level")
    return parser


def _run(args: argparse.Namespace) -> None:
    """Run the parsed command: its module (and what it needs) is imported only now."""
    if args.command == "graphs":
        from experiments.records.graph_table import graph_table
        from placement_gym.zoo import BENCHMARK_MODELS

        print(graph_table(args.models or list(BENCHMARK_MODELS), args.k))
    else:
        importlib.import_module(f"experiments.cli.{args.command}").run_from_args(args)


def _show_notes() -> None:
    """Print the package's logged notes (e.g. a dynamic batch set to 1) as ``note: ...`` lines."""
    logger = logging.getLogger("placement_gym")
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("note: %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)


def main(argv: list[str] | None = None) -> int:
    """Run the command; returns the exit status (0; 2 with one line on stderr for a user error; 130 when
    interrupted). See :func:`experiments.cli.arguments.run_command`."""

    def command(argv: list[str] | None) -> None:
        args = build_parser().parse_args(argv)
        _show_notes()
        _run(args)

    return run_command(command, argv)


if __name__ == "__main__":
    sys.exit(main())
