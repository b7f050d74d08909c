"""Train (or run) any placement method on any registered env ID, with progress, logs and the best placement.

The arguments of ``placement-gym train`` and the outputs it writes into ``--out`` (:data:`OUTPUTS`).
"""

from __future__ import annotations

import argparse

from agents import METHODS
from experiments.cli import arguments
from experiments.cli.arguments import add_input_shape_argument

SUMMARY = __doc__.splitlines()[0]

#: What ``train`` writes into ``--out``: a second run refuses to mix with them, ``--overwrite`` removes them.
OUTPUTS = ("best_placement.json", "history.csv", "tb", "checkpoints", "policy", "results.json")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``train``'s arguments to ``parser``."""
    names = ", ".join(METHODS)
    parser.add_argument(
        "--agent", required=True, choices=list(METHODS), metavar="AGENT", help=f"the method: one of {names}"
    )
    parser.add_argument(
        "--env",
        required=True,
        nargs="+",
        help="a registered env ID, e.g. DevicePlacement-bert-cpu_dgpu-sim-v0; several IDs train one policy on all of them "
        "(SB3 learners, one budget across the tasks, the policy saved to OUT/policy)",
    )
    parser.add_argument(
        "--max-nodes", type=arguments.positive_int, default=None, help="multi-task: pad graphs to this many groups"
    )
    parser.add_argument(
        "--max-edges", type=arguments.positive_int, default=None, help="multi-task: pad graphs to this many edges"
    )
    parser.add_argument(
        "--budget",
        type=arguments.budget,
        default=None,
        help="evaluated placements (default: the method's own: learners train for their default budget, "
        "one-shot methods such as heft evaluate what they need)",
    )
    parser.add_argument("--seed", type=arguments.seed, default=0, help="seed of the method and the env")
    parser.add_argument(
        "--env-kwargs", type=arguments.json_object, default={}, help='JSON, e.g. \'{"coarsening": "k", "k": 64}\''
    )
    parser.add_argument(
        "--agent-kwargs", type=arguments.json_object, default={}, help="JSON keyword arguments of the method"
    )
    add_input_shape_argument(parser)
    parser.add_argument(
        "--n-envs",
        type=arguments.positive_int,
        default=1,
        help="envs stepped together by SB3 learners (ignored by others)",
    )
    parser.add_argument(
        "--cores-per-worker",
        type=arguments.positive_int,
        default=None,
        metavar="N",
        help="measured envs: cores of each measuring worker (each --n-envs copy, each Ray actor), disjoint "
        "and pinned; default: a core per virtual CPU of the local platform (2); fewer builds a different, "
        "smaller platform per worker",
    )
    parser.add_argument(
        "--ray-address",
        default=None,
        help="evaluate on a Ray cluster ('auto', 'ray://host:10001'; 'local' starts a local instance)",
    )
    parser.add_argument("--ray-workers", type=arguments.positive_int, default=2, help="Ray actors evaluating placements")
    parser.add_argument(
        "--checkpoint-every",
        type=arguments.non_negative_int,
        default=100,
        help="evaluations between checkpoints of SB3 learners (0: only the final one)",
    )
    parser.add_argument(
        "--out", type=arguments.out_folder, default=None, help="output folder (default runs/<env>/<agent>-s<seed>)"
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help=f"replace the outputs of an earlier run in --out ({', '.join(OUTPUTS)}; nothing else is removed)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
