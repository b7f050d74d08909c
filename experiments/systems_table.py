"""The learning systems against issue #14's targets: headroom captured, random search, collapsed updates.

For every (platform, model, learning system) it reads the bench rows at two budgets and prints, with the
median over seeds: the latency, the normalised score ``(baseline / latency - 1) / (baseline / optimum - 1)``
(the share of the headroom between the best single device and the reference optimum that is captured;
1 = optimal, 0 = no better than one device, negative = worse; "n/a" where the headroom is under 1%),
whether it beats random search at the
same budget, the mean share of collapsed updates, and whether the larger budget is no worse.

The reference optimum of a (platform, model) is the best feasible latency in any row of the ``--reference``
folders and of the two budgets' folders (the MILP's incumbent or any method's best placement).

Usage:
    python -m experiments.systems_table --small results/systems-500 --large results/systems-2000 \
        --reference results/systems-500 results/igpu-sim
"""

from __future__ import annotations

import argparse
import math
from collections import defaultdict
from pathlib import Path

import numpy as np

from experiments.runs import ResultRow, ResultStore

#: The reimplemented learning systems.
SYSTEMS = ("hsdag", "rl_placement", "grouper_placer", "placeto")


def load_rows(folders: list[Path]) -> list[ResultRow]:
    """The rows of the ``results.jsonl`` of each folder (missing folders are skipped); a cell (model,
    platform, method, seed, budget...) found in several folders counts once, from the first."""
    rows: dict[tuple, ResultRow] = {}
    for folder in folders:
        path = Path(folder) / "results.jsonl"
        if path.exists():
            for row in ResultStore(path).rows():
                rows.setdefault(row.key, row)
    return list(rows.values())


#: Below this headroom (optimum's speedup over the best single device) the score is not reported: the
#: denominator is within the simulator's rounding of the MILP's incumbent and the ratio means nothing.
MIN_HEADROOM = 0.01


def _score(baseline: float, latency: float, optimum: float) -> float:
    if not math.isfinite(latency) or baseline / optimum - 1 < MIN_HEADROOM:
        return float("nan")
    return (baseline / latency - 1) / (baseline / optimum - 1)


def _pct(value: float) -> str:
    return f"{value:.0%}" if math.isfinite(value) else "n/a"


def _verdict(met: bool, no_worse: bool | None, score: float, vs_single: float) -> str:
    if not math.isfinite(score):
        return f"n/a (headroom < 1%); {vs_single:.2f}x the best single device"
    if not met:
        return "no"
    return "yes" if no_worse is not None else "yes at 500 (2000 not run)"


def _by_cell(rows: list[ResultRow]) -> dict[tuple[str, str, str], list[ResultRow]]:
    cells: dict[tuple[str, str, str], list[ResultRow]] = defaultdict(list)
    for row in rows:
        cells[(row.platform, row.model, row.method)].append(row)
    return cells


def targets_table(small: list[ResultRow], large: list[ResultRow], reference: list[ResultRow]) -> str:
    """The markdown table (one block per platform)."""
    optimum: dict[tuple[str, str], float] = defaultdict(lambda: math.inf)
    baseline: dict[tuple[str, str], float] = {}
    for row in [*reference, *small, *large]:
        if row.latency is not None and math.isfinite(row.latency):
            optimum[(row.platform, row.model)] = min(optimum[(row.platform, row.model)], row.latency)
        if row.method == "single_device":  # the best single device (every device evaluated)
            baseline[(row.platform, row.model)] = row.latency
    cells_small, cells_large = _by_cell(small), _by_cell(large)
    lines: list[str] = []
    for platform in sorted({p for p, _, _ in cells_small}):
        lines += [
            f"### {platform}",
            "",
            "| model | system | seeds | latency ms @500 | score @500 | random @500 | beats random | collapsed @500 "
            "| latency ms @2000 | score @2000 | collapsed @2000 | @2000 no worse | targets met |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for model in sorted({m for p, m, _ in cells_small if p == platform}):
            key = (platform, model)
            if key not in baseline:
                continue
            base, opt = baseline[key], optimum[key]
            rnd = cells_small.get((platform, model, "random_search"), [])
            rnd_med = float(np.median([r.latency for r in rnd])) if rnd else math.nan
            rnd_large = cells_large.get((platform, model, "random_search"), [])
            rnd_large_med = float(np.median([r.latency for r in rnd_large])) if rnd_large else math.nan
            for system in SYSTEMS:
                rs = cells_small.get((platform, model, system), [])
                if not rs:
                    continue
                med = float(np.median([r.latency for r in rs]))
                score = _score(base, med, opt)
                collapsed = float(np.mean([r.extra.get("collapsed_fraction", math.nan) for r in rs]))
                beats = med < rnd_med
                rl = cells_large.get((platform, model, system), [])
                if rl:
                    med_l = float(np.median([r.latency for r in rl]))
                    score_l, coll_l = (
                        _score(base, med_l, opt),
                        float(np.mean([r.extra.get("collapsed_fraction", math.nan) for r in rl])),
                    )
                    no_worse = med_l <= med * (1 + 1e-9)
                    large_cells = (
                        f"{med_l * 1e3:.3f} | {_pct(score_l)} | {coll_l:.0%} | {'yes' if no_worse else 'no'}"
                    )
                    if rnd_large:
                        large_cells += "" if med_l < rnd_large_med else " (random better)"
                else:
                    no_worse = None
                    large_cells = "not run | - | - | -"
                met = beats and score >= 0.6 and collapsed < 0.1 and no_worse is not False
                lines.append(
                    f"| {model} | {system} | {len(rs)} | {med * 1e3:.3f} | {_pct(score)} | {rnd_med * 1e3:.3f} | "
                    f"{'yes' if beats else 'no'} | {collapsed:.0%} | {large_cells} | "
                    f"{_verdict(met, no_worse, score, med / base)} |"
                )
            lines.append(
                f"| {model} | *reference* | | best single {base * 1e3:.3f} | 0% | | | | optimum {opt * 1e3:.3f} | 100% "
                f"| headroom {base / opt - 1:.1%} | | |"
            )
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--small", nargs="+", type=Path, required=True, help="result folders at 500 evaluations"
    )
    parser.add_argument(
        "--large", nargs="+", type=Path, default=[], help="result folders at 2000 evaluations"
    )
    parser.add_argument("--reference", nargs="+", type=Path, default=[], help="extra folders for the optimum")
    args = parser.parse_args(argv)
    print(targets_table(load_rows(args.small), load_rows(args.large), load_rows(args.reference)))


if __name__ == "__main__":
    main()
