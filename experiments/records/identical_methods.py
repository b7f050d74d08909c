"""Leaderboard methods whose stored rows are one result: the same placement, evaluations and history in every
cell they share, and the same cells.

Two such rows on the page would count one computation twice. Where the reason is known (a masked learner
and its unmasked ablation on tasks whose masks block no (group, device) pair), :data:`WHY` says it and the
page keeps both rows with that note, because the methods differ on a task where the masks bind.
"""

from __future__ import annotations

from collections.abc import Sequence

from placement_gym.results import ResultRow

#: Why a known group of methods gives identical rows on the train tasks, and why the page keeps them all.
WHY: dict[frozenset[str], str] = {
    frozenset({"ppo_gnn", "maskable_ppo_gnn"}): (
        "no memory mask blocks a (group, device) pair on the train tasks, so MaskablePPO's masked "
        "distribution is PPO's and both compute the same thing from the same seed; both rows stay because "
        "the methods differ where the masks bind (the mask-binding task `whisper_tiny/cpu-igpu-carveout`, "
        "below and in docs/tasks.md)"
    ),
    frozenset({"milp:time_limit=30", "moirai:time_limit=30"}): (
        "Moirai is the project's placement MILP (`agents.baselines.milp`) run on the fused graph, and every "
        "protocol task is the fused graph, so both solve the same MILP from the same warm start with the "
        "same 30 s limit; both rows stay because Moirai is a published system listed by name, and it "
        "differs from `milp` on other coarsenings"
    ),
}


def _fingerprint(row: ResultRow) -> tuple:
    return (tuple(row.placement), row.evaluations, tuple(map(tuple, row.history)), row.latency)


def identical_groups(rows: Sequence[ResultRow]) -> list[list[str]]:
    """Groups (of two or more) of methods whose rows cover the same cells with the same results."""
    by_method: dict[str, dict[tuple, tuple]] = {}
    for r in rows:
        by_method.setdefault(r.method, {})[(r.model, r.platform, r.seed, r.budget)] = _fingerprint(r)
    groups: dict[tuple, list[str]] = {}
    for method, cells in by_method.items():
        groups.setdefault(tuple(sorted(cells.items())), []).append(method)
    return [sorted(g) for g in groups.values() if len(g) > 1]


def note(rows: Sequence[ResultRow]) -> list[str]:
    """Markdown lines naming each group of identical methods and why the page shows every row."""
    lines = []
    for group in identical_groups(rows):
        why = WHY.get(frozenset(group), "both are shown as stored (no reason is recorded here)")
        names = " and ".join(f"`{m}`" for m in group)
        lines += ["", f"{names} have identical rows (placement, evaluations, history) in every cell: {why}."]
    return lines
