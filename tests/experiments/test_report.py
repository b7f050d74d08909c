"""The normalised score in the reports, from the stored reference optima."""

from __future__ import annotations

import pytest

from experiments.report import markdown_table, merge_rows, suite_table, summarise
from experiments.runs import ResultRow
from placement_gym.tasks import reference_optimum


def _row(
    method: str, latency: float, platform: str = "cpu-igpu", seed: int = 0, groups: int = 206
) -> ResultRow:
    return ResultRow(
        model="bert", graph_version=1, platform=platform, backend="simulated", coarsening="fused", groups=groups,
        method=method, seed=seed, budget=500, latency=latency, cpu_only_latency=0.034317,
        speedup_vs_cpu=0.034317 / latency, evaluations=1, wall_time=0.0, placement=[0] * groups,
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


def test_rows_of_another_graph_get_no_score_and_stay_out_of_the_suite() -> None:
    ref = reference_optimum("bert", 1, "cpu-igpu")
    assert len(ref.placement) == 206  # BERT's fused level; 267 before the fusion fix
    summary = summarise([_row("heft", ref.latency, groups=267), _row("exact", ref.latency)])
    stale = next(s for s in summary if s["method"] == "heft")
    assert stale["score"] != stale["score"]  # NaN: scored against another graph's optimum it would be 1.0
    assert "heft" not in suite_table(summary).splitlines()[0]
    # the same method on both graphs: summarised apart, and the suite shows the current graph's cell
    both = summarise([_row("hsdag", ref.latency, groups=267), _row("hsdag", ref.baseline_latency)])
    assert sorted(s["groups"] for s in both) == [206, 267]
    assert suite_table(both).splitlines()[2].endswith("| 0.00 |")


def test_merge_rows_keeps_the_last_row_of_each_cell() -> None:
    first, again, other_seed = _row("hsdag", 0.031), _row("hsdag", 0.032), _row("hsdag", 0.033, seed=1)
    old_graph = _row("hsdag", 0.034, groups=267)
    merged = merge_rows([first, other_seed, old_graph, again])
    assert sorted(r.latency for r in merged) == [0.032, 0.033, 0.034]


def test_suite_from_several_folders_with_a_method_filter(tmp_path, capsys) -> None:
    from experiments.report import main
    from experiments.runs import ResultStore

    ref = reference_optimum("bert", 1, "cpu-igpu")
    ResultStore(tmp_path / "a" / "results.jsonl").append(_row("heft", ref.baseline_latency))
    ResultStore(tmp_path / "b" / "results.jsonl").append(_row("heft", ref.latency))  # same cell: b wins
    ResultStore(tmp_path / "b" / "results.jsonl").append(_row("hsdag", ref.latency))
    main(["--suite", str(tmp_path / "a"), str(tmp_path / "b"), "--methods", "heft"])
    header, _, row = capsys.readouterr().out.splitlines()
    assert "| heft |" in header and "hsdag" not in header and row.endswith("| 1.00 |")
