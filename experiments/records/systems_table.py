"""The learning systems against issue #14's targets: headroom captured, random search, collapsed updates.

For every (platform, model, learning system) it reads the bench rows at two budgets and prints, with the
median over seeds: the latency, the normalised score against the task's stored reference optimum
(:func:`placement_gym.tasks.reference_optimum`: ``(baseline / latency - 1) / (baseline / optimum - 1)``
with the best single device as baseline; 1 = optimal, 0 = no better than one device, negative = worse),
whether it beats random search at the same budget, the mean share of collapsed updates, and whether the
larger budget is no worse. ``--curves`` adds the learning curves: the median normalised score of the best
placement found so far after a number of evaluations, with each run's collapsed-update share beside it.

Rows whose group count differs from the stored optimum's (made on another version of the graph) are left
out, and counted on stderr.

Usage:
    python -m experiments.records.systems_table --small results/systems --curves     # the table of record and its curves
"""

from __future__ import annotations

import argparse
import math
import sys
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from experiments.runs import ResultRow, ResultStore
from placement_gym.errors import UnknownNameError
from placement_gym.tasks import ReferenceOptimum, reference_for, reference_optimum

#: The reimplemented learning systems.
SYSTEMS = ("hsdag", "rl_placement", "grouper_placer", "placeto")

#: Evaluations at which the learning curves are read.
CHECKPOINTS = (25, 50, 100, 200, 300, 500, 1000, 1500, 2000)

Reference = Callable[[ResultRow], ReferenceOptimum]


def load_rows(folders: Sequence[Path]) -> list[ResultRow]:
    """The rows of the ``results.jsonl`` of each folder (missing folders are skipped); a cell (model,
    platform, method, seed, budget...) found in several folders counts once, from the first."""
    rows: dict[tuple, ResultRow] = {}
    for folder in folders:
        path = Path(folder) / "results.jsonl"
        if path.exists():
            for row in ResultStore(path).rows():
                rows.setdefault(row.key, row)
    return list(rows.values())


def stored_reference(row: ResultRow) -> ReferenceOptimum:
    """The stored reference optimum of a row's task: by the content hash the row records, else (an older
    row) by model, graph version, platform and coarsening.

    Raises:
        UnknownNameError: If the task has none (another platform's figures under a stored name, too).
    """
    if row.task_sha256 is None:
        return reference_optimum(row.model, row.graph_version, row.platform, row.coarsening)
    ref = reference_for(
        row.model, row.graph_version, row.platform, row.coarsening, row.groups, row.task_sha256
    )
    if ref is None:
        raise UnknownNameError("task with a reference optimum (by content)", row.task_sha256[:16], [])
    return ref


def current_rows(rows: list[ResultRow], reference: Reference) -> tuple[list[ResultRow], list[ResultRow]]:
    """``(rows of a task with a reference optimum and its group count, the others)``."""
    kept, dropped = [], []
    for row in rows:
        try:
            ref = reference(row)
        except UnknownNameError:
            dropped.append(row)
            continue
        (kept if row.groups == len(ref.placement) else dropped).append(row)
    return kept, dropped


def _pct(value: float) -> str:
    return f"{value:.0%}" if math.isfinite(value) else "n/a"


def _median(values: list[float]) -> float:
    return float(np.median(values)) if values else math.nan


def _collapsed(rows: list[ResultRow]) -> float:
    return float(np.mean([r.extra.get("collapsed_fraction", math.nan) for r in rows])) if rows else math.nan


def _by_cell(rows: list[ResultRow]) -> dict[tuple[str, str, str], list[ResultRow]]:
    cells: dict[tuple[str, str, str], list[ResultRow]] = defaultdict(list)
    for row in rows:
        cells[(row.platform, row.model, row.method)].append(row)
    return cells


def _verdict(beats: bool, score: float, collapsed: float, no_worse: bool | None) -> str:
    missed = [
        name
        for name, ok in (
            ("random", beats),
            ("60%", score >= 0.6),
            ("collapsed", collapsed < 0.1),
            ("2000", no_worse is not False),
        )
        if not ok
    ]
    if missed:
        return "no (" + ", ".join(missed) + ")"
    return "yes" if no_worse is not None else "yes at 500 (2000 not run)"


def targets_table(
    small: list[ResultRow], large: list[ResultRow], reference: Reference = stored_reference
) -> str:
    """The markdown table (one block per platform); ``reference(row)`` gives a row's reference optimum."""
    cells_small, cells_large = _by_cell(small), _by_cell(large)
    lines: list[str] = []
    for platform in sorted({p for p, _, _ in cells_small}):
        lines += [
            f"#### `{platform}`",
            "",
            "| model | system | seeds | latency ms @500 | score @500 | random @500 | beats random | collapsed @500 "
            "| latency ms @2000 | score @2000 | collapsed @2000 | @2000 no worse | targets met (missed) |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for model in sorted({m for p, m, _ in cells_small if p == platform}):
            rnd = cells_small.get((platform, model, "random_search"), [])
            rnd_med = _median([r.latency for r in rnd])
            ref = None
            for system in SYSTEMS:
                rs = cells_small.get((platform, model, system), [])
                if not rs:
                    continue
                ref = reference(rs[0])
                med = _median([r.latency for r in rs])
                score, collapsed = ref.score(med), _collapsed(rs)
                beats = med < rnd_med
                rl = cells_large.get((platform, model, system), [])
                no_worse: bool | None = None
                large_cells = "not run | - | - | -"
                if rl:
                    med_l = _median([r.latency for r in rl])
                    no_worse = med_l <= med * (1 + 1e-9)
                    large_cells = (
                        f"{med_l * 1e3:.3f} | {_pct(ref.score(med_l))} | {_collapsed(rl):.0%} | "
                        f"{'yes' if no_worse else 'no'}"
                    )
                lines.append(
                    f"| {model} | {system} | {len(rs)} | {med * 1e3:.3f} | {_pct(score)} | {rnd_med * 1e3:.3f} "
                    f"({_pct(ref.score(rnd_med)) if rnd else 'n/a'}) | {'yes' if beats else 'no'} | "
                    f"{collapsed:.0%} | {large_cells} | {_verdict(beats, score, collapsed, no_worse)} |"
                )
            if ref is not None:
                lines.append(
                    f"| {model} | *reference* | | {ref.baseline} {ref.baseline_latency * 1e3:.3f} | 0% | | | "
                    f"| optimum {ref.latency * 1e3:.3f} (gap {ref.gap:.2%}) | 100% | headroom {ref.headroom:.3f} | | |"
                )
        lines.append("")
    return "\n".join(lines)


def best_so_far(row: ResultRow, evaluations: int) -> float:
    """Best latency of a run after ``evaluations`` evaluations (its final best if it stopped earlier;
    NaN before its first evaluation or beyond its budget)."""
    if row.budget is not None and evaluations > row.budget:
        return math.nan
    best = math.nan
    for used, latency in row.history:
        if used > evaluations:
            break
        best = latency
    return best


def curves_table(rows: list[ResultRow], reference: Reference = stored_reference) -> str:
    """Learning curves: per (platform, model, system, budget), the median over seeds of the normalised
    score of the best placement found after each of :data:`CHECKPOINTS` evaluations, the evaluations the
    runs spent (median) and their mean collapsed-update share."""
    groups: dict[tuple[str, str, str, int], list[ResultRow]] = defaultdict(list)
    for row in rows:
        if row.method in (*SYSTEMS, "random_search"):
            groups[(row.platform, row.model, row.method, row.budget or 0)].append(row)
    header = " | ".join(f"@{c}" for c in CHECKPOINTS)
    lines = [
        f"| platform | model | method | budget | seeds | {header} | evaluations spent | collapsed |",
        "|---" * (7 + len(CHECKPOINTS)) + "|",
    ]
    order = {m: i for i, m in enumerate((*SYSTEMS, "random_search"))}
    for key in sorted(groups, key=lambda k: (k[0], k[1], order[k[2]], k[3])):
        platform, model, method, budget = key
        rs = groups[key]
        ref = reference(rs[0])
        points = []
        for c in CHECKPOINTS:
            best = [best_so_far(r, c) for r in rs]
            best = [b for b in best if not math.isnan(b)]
            points.append(_pct(ref.score(_median(best))) if len(best) == len(rs) else "")
        collapsed = "-" if method == "random_search" else f"{_collapsed(rs):.0%}"
        lines.append(
            f"| {platform} | {model} | {method} | {budget} | {len(rs)} | {' | '.join(points)} | "
            f"{_median([r.evaluations for r in rs]):.0f} | {collapsed} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--small", nargs="+", type=Path, required=True, help="result folders (rows split by budget: 500 and 2000 evaluations)"
    )
    parser.add_argument(
        "--large", nargs="+", type=Path, default=[], help="more result folders (also split by budget)"
    )
    parser.add_argument("--curves", action="store_true", help="also print the learning curves")
    args = parser.parse_args(argv)
    # a folder may hold both budgets (results/systems does): rows are split by their budget
    rows = load_rows([*args.small, *args.large])
    small, dropped_small = current_rows([r for r in rows if r.budget == 500], stored_reference)
    large, dropped_large = current_rows([r for r in rows if r.budget == 2000], stored_reference)
    if dropped_small or dropped_large:
        print(
            f"left out {len(dropped_small) + len(dropped_large)} rows of another graph version or a task "
            "without a reference optimum",
            file=sys.stderr,
        )
    print(targets_table(small, large))
    if args.curves:
        print(curves_table(small + large))


if __name__ == "__main__":
    main()
