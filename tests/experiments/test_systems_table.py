"""The issue-#14 target table: scores against the best single device and the reference optimum."""

from __future__ import annotations

from experiments.runs import ResultRow
from experiments.systems_table import targets_table


def _row(
    method: str, seed: int, latency: float, budget: int = 500, collapsed: float | None = None
) -> ResultRow:
    extra = {} if collapsed is None else {"collapsed_fraction": collapsed}
    return ResultRow(
        "m",
        1,
        "p",
        "simulated",
        "fused",
        3,
        method,
        seed,
        budget,
        latency,
        10.0,
        1.0,
        budget,
        0.0,
        [0, 0, 0],
        extra=extra,
    )


def test_scores_medians_and_verdicts():
    reference = [_row("single_device", 0, 10.0), _row("milp", 0, 5.0)]
    small = [_row("random_search", s, 9.0) for s in range(3)]
    small += [
        _row("hsdag", s, lat, collapsed=c) for s, (lat, c) in enumerate([(6.0, 0.0), (6.25, 0.1), (9.5, 0.2)])
    ]
    small += [_row("placeto", s, lat, collapsed=0.0) for s, lat in enumerate([5.5, 6.0, 6.0])]
    large = [_row("hsdag", s, 6.0, budget=2000, collapsed=0.0) for s in range(3)]
    table = targets_table(small, large, reference)
    hsdag = next(line for line in table.splitlines() if "| hsdag |" in line)
    # (latencies in seconds, shown in ms) median 6.25: (10 / 6.25 - 1) / (10 / 5 - 1) = 60%; collapsed 10% on average: the target is missed
    assert "| 6250.000 | 60% | 9000.000 | yes | 10% | 6000.000 | 67% | 0% | yes | no |" in hsdag
    placeto = next(line for line in table.splitlines() if "| placeto |" in line)
    assert "| 6000.000 | 67% |" in placeto and placeto.endswith("yes at 500 (2000 not run) |")
    assert "headroom 100.0%" in table


def test_no_score_without_headroom():
    reference = [_row("single_device", 0, 10.0), _row("milp", 0, 9.99)]
    small = [_row("random_search", 0, 20.0), _row("hsdag", 0, 12.0, collapsed=0.0)]
    line = next(x for x in targets_table(small, [], reference).splitlines() if "| hsdag |" in x)
    assert "| n/a |" in line and "1.20x the best single device" in line


def test_a_cell_in_two_folders_counts_once(tmp_path):
    from experiments.runs import ResultStore
    from experiments.systems_table import load_rows

    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        ResultStore(tmp_path / name / "results.jsonl").append(_row("hsdag", 0, 6.0, collapsed=0.0))
    assert len(load_rows([tmp_path / "a", tmp_path / "b", tmp_path / "missing"])) == 1
