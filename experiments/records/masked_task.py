"""Masked learners against their unmasked ablations on the mask-binding tasks (the tables of docs/tasks.md,
and the leaderboard page's section on them).

Per task of the ``masked`` split, method and seed, one run at the ``standard`` budget, counting the
evaluated placements that put a group on a device its memory mask blocks:

    python -m experiments.records.masked_task --methods ppo_gnn maskable_ppo_gnn --seeds 0 1 2
    python -m experiments.records.masked_task --tasks whisper_tiny/cpu-igpu-carveout --seeds 0

:func:`section` writes the page's section from stored leaderboard rows of those tasks.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence

import numpy as np

from agents import make_method
from placement_gym.benchmark import run_agent
from placement_gym.problem import PlacementProblem
from placement_gym.protocol import SPLITS, resolve_tasks, tier_budget
from placement_gym.results import ResultRow

#: Why the learners' rows on a mask-binding task are one result where they are (shown only if they are).
IDENTICAL_WHY: dict[tuple[str, str], str] = {
    ("resnet50", "cpu-igpu-lowmem"): (
        "no placement either learner samples fits the iGPU's 8% of the weights, and every infeasible "
        "placement gets the same reward, so neither learns and both return the CPU alone (the baseline)"
    ),
}


def run(method: str, model: str, platform: str, seed: int, budget: int) -> dict[str, float]:
    """One run: its score, latency, evaluations and how its evaluated placements used blocked pairs."""
    problem = PlacementProblem.make(model, platform)
    blocked = ~problem.device_mask  # (G, D)
    rows = np.arange(problem.num_groups)
    on_blocked: list[int] = []  # per evaluated placement: groups on a device that cannot hold them
    feasible_count = [0]

    def count(tracker, placement, latency, feasible) -> None:
        on_blocked.append(int(blocked[rows, placement].sum()))
        feasible_count[0] += bool(feasible)

    start = time.perf_counter()
    outcome = run_agent(make_method(method), problem, budget, seed, listeners=[count])
    return {
        "score": problem.score(outcome.latency),
        "latency_ms": outcome.latency * 1e3,
        "evaluations": outcome.evaluations,
        "feasible": feasible_count[0],
        "placements_on_blocked": sum(n > 0 for n in on_blocked),
        "groups_on_blocked": float(np.mean(on_blocked)) if on_blocked else 0.0,
        "final_on_blocked": int(blocked[rows, outcome.placement].sum()),
        "wall_s": time.perf_counter() - start,
    }


def section(rows: Sequence[ResultRow]) -> list[str]:
    """The page's markdown on the mask-binding tasks: per task and method, the runs' scores and how many
    groups of the returned placements sit on a device that the memory mask blocks for them."""
    from experiments.records import identical_methods

    tasks = [t for t in SPLITS["masked"] if any((r.model, r.platform) == (t.model, t.platform) for r in rows)]
    if not tasks:
        return []
    lines = [
        "## Mask-binding tasks",
        "",
        "The `masked` split (docs/tasks.md): tasks whose memory masks block (group, device) pairs, so that a "
        "masked learner and its unmasked ablation can differ; they are not train tasks and are ranked apart. "
        "Made with `placement-gym leaderboard --run standard --tasks masked --methods ppo_gnn "
        "maskable_ppo_gnn`.",
        "",
    ]
    for task in tasks:
        part = [r for r in rows if (r.model, r.platform) == (task.model, task.platform)]
        blocked = ~PlacementProblem.make(task.model, task.platform).device_mask
        index = np.arange(blocked.shape[0])
        lines += [
            f"### `{task.name}` ({int(blocked.sum())} blocked (group, device) pairs)",
            "",
            "| method | tier | runs | mean score [min, max] | mean latency (ms) | mean evaluations | "
            "groups on a blocked device (all runs' returned placements) |",
            "|---|---|---|---|---|---|---|",
        ]
        by_method = _by_method_tier(part)
        for method, tier in sorted(by_method, key=lambda k: (-np.mean([r.score for r in by_method[k]]), k)):
            rs = by_method[method, tier]
            scores = [r.score for r in rs]
            on_blocked = sum(int(blocked[index, np.asarray(r.placement)].sum()) for r in rs)
            lines.append(
                f"| `{method}` | `{tier}` | {len(rs)} | {np.mean(scores):.3f} [{min(scores):.3f}, "
                f"{max(scores):.3f}] | {np.mean([r.latency for r in rs]) * 1e3:.3f} | "
                f"{np.mean([r.evaluations for r in rs]):.0f} | {on_blocked} |"
            )
        for group in identical_methods.identical_groups(part):
            why = IDENTICAL_WHY.get((task.model, task.platform), "no reason is recorded here")
            names = " and ".join(f"`{m}`" for m in group)
            lines += ["", f"{names} have identical rows on this task: {why}."]
        lines.append("")
    return lines


def _by_method_tier(rows: Sequence[ResultRow]) -> dict[tuple[str, str], list[ResultRow]]:
    out: dict[tuple[str, str], list[ResultRow]] = {}
    for r in rows:
        out.setdefault((r.method, str(r.tier)), []).append(r)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--methods", nargs="+", default=["ppo_gnn", "maskable_ppo_gnn"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--tier", default="standard")
    parser.add_argument("--tasks", nargs="+", default=["masked"], help="tasks or splits (default: masked)")
    args = parser.parse_args(argv)
    budget = tier_budget(args.tier)
    print("| task | method | seed | score | latency ms | evaluations | feasible | using a blocked pair | "
          "groups on a blocked device (mean) | returned placement's groups on a blocked device | wall s |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for task in resolve_tasks(args.tasks):
        for method in args.methods:
            for seed in args.seeds:
                r = run(method, task.model, task.platform, seed, budget)
                print(
                    f"| {task.name} | `{method}` | {seed} | {r['score']:.3f} | {r['latency_ms']:.3f} | "
                    f"{r['evaluations']} | {r['feasible']} | {r['placements_on_blocked']} | {r['groups_on_blocked']:.2f} | "
                    f"{r['final_on_blocked']} | {r['wall_s']:.0f} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
