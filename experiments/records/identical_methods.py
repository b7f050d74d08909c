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


def _differ_reason(rows: Sequence[ResultRow], group: frozenset[str]) -> str:
    """Why the rows of ``group`` may differ although the methods compute the same thing, from what the rows
    record: the CPUs that made them (a learned method's rows rerun exactly only on the kind of CPU that made
    them, docs/protocol.md)."""
    cpus = {m: {r.versions.get("cpu_fingerprint") for r in rows if r.method == m} for m in sorted(group)}
    made_on = set().union(*cpus.values())
    if len(made_on) == 1 and None not in made_on:
        return "no reason is recorded here (the rows were made on the same kind of CPU)"
    made = "; ".join(
        f"`{m}` on {', '.join(sorted('an unrecorded CPU' if c is None else f'CPU {c}' for c in found))}"
        for m, found in cpus.items()
    )
    return (
        f"the rows were not all made on one kind of CPU ({made}), and a learned method's rows rerun exactly "
        "only on the kind of CPU that made them (docs/protocol.md)"
    )


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


def note(rows: Sequence[ResultRow]) -> list[str]:
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
        reason = _differ_reason(rows, group)
        names = " and ".join(f"`{m}`" for m in sorted(group))
        lines += [
            "",
            f"{names} compute the same thing on the train tasks ({why.split(';')[0]}), but their rows differ "
            f"in {differ} of the {shared} cells both have: {reason}.",
        ]
    return lines
