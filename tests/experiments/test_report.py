"""The normalised score in the reports, from the stored reference optima."""

from __future__ import annotations

import pytest

from experiments.report import markdown_table, suite_table, summarise
from experiments.runs import ResultRow
from placement_gym.tasks import reference_optimum


def _row(method: str, latency: float, platform: str = "cpu-igpu", seed: int = 0) -> ResultRow:
    return ResultRow(
        model="bert", graph_version=1, platform=platform, backend="simulated", coarsening="fused", groups=267,
        method=method, seed=seed, budget=500, latency=latency, cpu_only_latency=0.034317,
        speedup_vs_cpu=0.034317 / latency, evaluations=1, wall_time=0.0, placement=[0] * 267,
    )  # fmt: skip


def test_scores_in_summary_and_tables() -> None:
    ref = reference_optimum("bert", 1, "cpu-igpu")
    rows = [
        _row("exact", ref.latency),
        _row("heft", ref.baseline_latency),
        _row("hsdag", ref.baseline_latency, seed=0),
        _row("hsdag", ref.latency, seed=1),
        _row("heft", 0.03, platform="nowhere"),  # no reference optimum: no score
    ]
    summary = {(s["platform"], s["method"]): s for s in summarise(rows)}
    assert summary[("cpu-igpu", "exact")]["score"] == pytest.approx(1.0)
    assert summary[("cpu-igpu", "heft")]["score"] == pytest.approx(0.0)
    assert summary[("cpu-igpu", "hsdag")]["score"] == pytest.approx(0.5)  # mean over seeds
    assert summary[("nowhere", "heft")]["score"] != summary[("nowhere", "heft")]["score"]  # NaN
    assert "normalised score" in markdown_table(list(summary.values()))
    table = suite_table(list(summary.values())).splitlines()
    assert len(table) == 3 and "bert / cpu-igpu" in table[2]
    assert table[0].count("|") == 8 and "exact" not in table[0]  # 5 fixed columns + heft + hsdag
    assert table[2].endswith("| 0.00 | 0.50 |")
