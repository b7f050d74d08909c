"""Place a model with a saved policy: zero-shot (no training on it; --budget evaluations of its rollouts) or after fine-tuning.

The arguments of ``placement-gym place``.
"""

from __future__ import annotations

import argparse

from experiments.cli import arguments
from experiments.cli.arguments import add_input_shape_argument

SUMMARY = __doc__.splitlines()[0]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``place``'s arguments to ``parser``."""
    parser.add_argument(
        "--policy",
        type=arguments.in_path,
        default=None,
        help="a saved policy folder (SB3Method.save, or a pretrained_ppo policy); default: the shipped "
        "pretrained policy (zero-shot on any model and platform)",
    )
    parser.add_argument(
        "--budget",
        type=arguments.budget,
        default=100,
        help="evaluations of a pretrained policy's rollouts on this model (fine-tuning included)",
    )
    parser.add_argument("--model", required=True, help="zoo model name, or an IR / ONNX file")
    parser.add_argument("--platform", required=True, help="platform name, or a .yaml file")
    parser.add_argument(
        "--backend", default="simulated", choices=["simulated", "measured"], help="latency backend"
    )
    parser.add_argument("--coarsening", default="fused", help="coarsening level (ops, fused)")
    parser.add_argument(
        "--fine-tune",
        type=arguments.non_negative_int,
        default=0,
        metavar="N",
        help="evaluations of further training on this model (0: zero-shot)",
    )
    parser.add_argument(
        "--seed", type=arguments.seed, default=0, help="seed of the deterministic episode and fine-tuning"
    )
    parser.add_argument("--out", type=arguments.out_file, default=None, help="write the record as JSON here")
    add_input_shape_argument(parser)
