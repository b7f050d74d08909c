"""The transfer track (protocol transfer-v1): pretrain on the train tasks, then place the held-out families.

The arguments of ``placement-gym transfer pretrain`` and ``placement-gym transfer run``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from placement_gym.transfer import TRANSFER_SEEDS

SUMMARY = __doc__.splitlines()[0]
#: Where the transfer rows of record live, one file per method.
RESULTS = Path("results") / "leaderboard" / "transfer"
#: The methods of the transfer page, in run order (references first).
METHODS: tuple[str, ...] = (
    "random_search", "heft", "local_search", "guided_improvement", "pretrained_ppo", "guided_ppo",
)  # fmt: skip


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``transfer``'s two stages and their arguments to ``parser``."""
    sub = parser.add_subparsers(dest="stage", required=True, help="pretrain or run")
    pre = sub.add_parser("pretrain", help="pretrain a method on the train tasks and record its cost")
    pre.add_argument("--method", required=True, help="module:function with pretrain(envs, steps=, seed=, out=)")
    pre.add_argument("--out", type=Path, required=True, help="folder for what it learns and pretraining.json")
    pre.add_argument("--steps", type=int, required=True, help="env steps over all train tasks")
    pre.add_argument("--seed", type=int, default=0, help="seed of the pretraining run (default: 0)")
    pre.add_argument("--env", default="placement", choices=("placement", "improve"), help="env of each task")
    run = sub.add_parser("run", help="evaluate methods on the held-out tasks (100 placements, seeds 0-4)")
    run.add_argument("--methods", nargs="+", default=list(METHODS), help="method specs (default: the page's)")
    run.add_argument("--pretraining", default=None, help="pretraining.json of the methods, or 'none'")
    run.add_argument("--tasks", nargs="+", default=None, help="held-out tasks model/platform (default: all)")
    run.add_argument(
        "--seeds", nargs="+", type=int, default=list(TRANSFER_SEEDS), help="seeds of each cell (default: 0-4)"
    )
    run.add_argument(
        "--results", type=Path, default=RESULTS, help="rows folder (default: results/leaderboard/transfer)"
    )
