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


#: Why the rows of a group in :data:`WHY` differ at a tier although the methods compute the same thing.
DIFFER_WHY: dict[tuple[frozenset[str], str], str] = {
    (frozenset({"ppo_gnn", "maskable_ppo_gnn"}), "large"): (
        "the two were made on two machines, with other CPUs (a learned method's rows rerun exactly only on "
        "the kind of CPU that made them, docs/protocol.md) and perhaps another torch_geometric version (rows "
        "of that time do not record it). On the machine that made the `maskable_ppo_gnn` rows, `ppo_gnn` "
        "gives the `maskable_ppo_gnn` row exactly, at the `ppo_gnn` rows' own commit too (checked on "
        "`inception_v3/cpu-dgpu`, seed 0: 3857 evaluations, score 0.944, against 3821 and 0.956 in the "
        "stored `ppo_gnn` row)"
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


def _differing_cells(rows: Sequence[ResultRow], group: frozenset[str]) -> tuple[int, int]:
    """How many of the cells every method of ``group`` has give different results, of how many."""
    cells: dict[tuple, dict[str, tuple]] = {}
    for r in rows:
        if r.method in group:
            cells.setdefault((r.model, r.platform, r.seed, r.budget), {})[r.method] = _fingerprint(r)
    shared = [c for c in cells.values() if len(c) == len(group)]
    return sum(len(set(c.values())) > 1 for c in shared), len(shared)


def note(rows: Sequence[ResultRow], tier: str | None = None) -> list[str]:
    """Markdown lines naming each group of identical methods and why the page shows every row, and each
    group known to compute the same thing whose rows differ here, with how many cells differ and why."""
    lines = []
    groups = identical_groups(rows)
    for group in groups:
        why = WHY.get(frozenset(group), "both are shown as stored (no reason is recorded here)")
        names = " and ".join(f"`{m}`" for m in group)
        lines += ["", f"{names} have identical rows (placement, evaluations, history) in every cell: {why}."]
    present = {r.method for r in rows}
    for group, why in WHY.items():
        if not group <= present or sorted(group) in groups:
            continue
        differ, shared = _differing_cells(rows, group)
        if not differ:
            continue
        reason = DIFFER_WHY.get((group, tier), "no reason is recorded here")
        names = " and ".join(f"`{m}`" for m in sorted(group))
        lines += [
            "",
            f"{names} compute the same thing on the train tasks ({why.split(';')[0]}), but their rows differ "
            f"in {differ} of the {shared} cells both have: {reason}.",
        ]
    return lines
