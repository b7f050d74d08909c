"""The issue-#14 target table: scores against the stored reference optimum, and the learning curves."""

from __future__ import annotations

import math

from experiments.records.systems_table import best_so_far, current_rows, curves_table, targets_table
from experiments.runs import ResultRow
from placement_gym.tasks import ReferenceOptimum

#: A task whose best single device takes 10 s and whose optimum takes 5 s (three groups).
REF = ReferenceOptimum("m", 1, "p", "fused", 5.0, 5.0, (0, 1, 0), "single device cpu", 10.0, 6.0, {}, {})


def reference(row: ResultRow) -> ReferenceOptimum:
    return REF


def _row(
    method: str,
    seed: int,
    latency: float,
    budget: int = 500,
    collapsed: float | None = None,
    groups: int = 3,
    history: list | None = None,
) -> ResultRow:
    extra = {} if collapsed is None else {"collapsed_fraction": collapsed}
    return ResultRow(
        "m", 1, "p", "simulated", "fused", groups, method, seed, budget, latency, 10.0, 1.0, budget, 0.0,
        [0] * groups, history=history or [(budget, latency)], extra=extra,
    )  # fmt: skip


def test_scores_medians_and_verdicts():
    small = [_row("random_search", s, 9.0) for s in range(3)]
    small += [
        _row("hsdag", s, lat, collapsed=c) for s, (lat, c) in enumerate([(6.0, 0.0), (6.25, 0.1), (9.5, 0.2)])
    ]
    small += [_row("placeto", s, lat, collapsed=0.0) for s, lat in enumerate([5.5, 6.0, 6.0])]
    large = [_row("hsdag", s, 6.0, budget=2000, collapsed=0.0) for s in range(3)]
    table = targets_table(small, large, reference)
    hsdag = next(line for line in table.splitlines() if "| hsdag |" in line)
    # (latencies in seconds, shown in ms) median 6.25: (10 / 6.25 - 1) / (10 / 5 - 1) = 60%; collapsed 10%
    # on average: that target is missed
    assert "| 6250.000 | 60% | 9000.000 (11%) | yes | 10% | 6000.000 | 67% | 0% | yes | no (collapsed) |" in hsdag
    placeto = next(line for line in table.splitlines() if "| placeto |" in line)
    assert "| 6000.000 | 67% |" in placeto and placeto.endswith("yes at 500 (2000 not run) |")
    assert "optimum 5000.000 (gap 0.00%) | 100% | headroom 2.000" in table


def test_every_missed_target_is_named():
    small = [_row("random_search", 0, 7.0), _row("hsdag", 0, 8.0, collapsed=0.5)]
    large = [_row("hsdag", 0, 9.0, budget=2000, collapsed=0.0)]
    line = next(x for x in targets_table(small, large, reference).splitlines() if "| hsdag |" in x)
    assert line.endswith("| no (random, 60%, collapsed, 2000) |")


def test_rows_of_another_graph_are_left_out():
    kept, dropped = current_rows([_row("hsdag", 0, 6.0), _row("hsdag", 1, 6.0, groups=4)], reference)
    assert [r.seed for r in kept] == [0] and [r.seed for r in dropped] == [1]


def test_learning_curve_reads_best_so_far():
    row = _row("hsdag", 0, 5.0, budget=100, history=[(1, 10.0), (40, 8.0), (60, 5.0)])
    assert math.isnan(best_so_far(row, 0)) and best_so_far(row, 50) == 8.0 and best_so_far(row, 100) == 5.0
    assert math.isnan(best_so_far(row, 200))  # beyond the budget
    stopped = _row("hsdag", 1, 8.0, budget=100, history=[(1, 10.0), (30, 8.0)])
    assert best_so_far(stopped, 100) == 8.0  # a run that stopped keeps its best
    table = curves_table([row, stopped], reference)
    line = next(x for x in table.splitlines() if "| hsdag |" in x)
    # @25: both at 10 (0%); @50: both at 8 (25%); @100: 5 and 8, median 6.5 -> (10/6.5 - 1) / 1 = 54%
    assert line.startswith("| p | m | hsdag | 100 | 2 | 0% | 25% | 54% |")


def test_a_cell_in_two_folders_counts_once(tmp_path):
    from experiments.runs import ResultStore
    from experiments.records.systems_table import load_rows

    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        ResultStore(tmp_path / name / "results.jsonl").append(_row("hsdag", 0, 6.0, collapsed=0.0))
    assert len(load_rows([tmp_path / "a", tmp_path / "b", tmp_path / "missing"])) == 1
