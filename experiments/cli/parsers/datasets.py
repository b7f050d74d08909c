"""Build Minari datasets of solved placements, one per task and MDP, for imitation and offline RL.

The arguments of ``placement-gym datasets`` and how a task is written.
"""

from __future__ import annotations

import argparse

from experiments.cli.arguments import checked, non_negative_int, out_folder
from placement_gym.errors import ConfigError

SUMMARY = __doc__.splitlines()[0]

#: MDPs a dataset can hold: the placement env's ``mode``, or the improvement MDP.
MODES = ("oneshot", "sequential", "improve")


def parse_task(text: str) -> tuple[str, str]:
    """``"model/platform"`` -> ``(model, platform)``."""
    model, sep, platform = text.partition("/")
    if not sep or not model or not platform:
        raise ConfigError(f"a task is written model/platform (e.g. inception_v3/cpu-igpu), got {text!r}")
    return model, platform


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``datasets``'s arguments to ``parser``."""
    parser.add_argument(
        "--tasks",
        nargs="+",
        type=checked(parse_task),
        default=None,
        help="model/platform pairs (default: the 12 train tasks)",
    )
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES, help="MDPs (default: all)")
    parser.add_argument(
        "--path", type=out_folder, default=None, help="Minari data path (default: $MINARI_DATASETS_PATH)"
    )
    parser.add_argument(
        "--path-points", type=non_negative_int, default=8, help="episodes per improvement path (oneshot; 0: none)"
    )
    parser.add_argument("--overwrite", action="store_true", help="rebuild datasets that exist")
    parser.add_argument(
        "--scores",
        action="store_true",
        help="only print the reference scores of the datasets (builds nothing)",
    )
