"""Render a saved placement: a text table and a PNG of the graph coloured by device.

The arguments of ``placement-gym show``.
"""

from __future__ import annotations

import argparse

from experiments.cli.arguments import in_file, non_negative_int, out_file

SUMMARY = __doc__.splitlines()[0]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``show``'s arguments to ``parser``."""
    parser.add_argument("path", type=in_file, help="best_placement.json or results.jsonl")
    parser.add_argument("--row", type=non_negative_int, default=None, help="row of a results.jsonl (default: the best)")
    parser.add_argument("--model", default=None, help="only rows of this model (results.jsonl)")
    parser.add_argument("--png", type=out_file, default=None, help="picture path (default: next to the input)")
