"""The normalised score in the reports, from the stored reference optima."""

from __future__ import annotations

import numpy as np
import pytest

from experiments.records.report import COLUMNS, markdown_table, merge_rows, suite_table, summarise
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


def test_main_table_has_one_reference_and_explains_every_column() -> None:
    """The stored optimum is the one reference (named under the table); the MILP is a row like the others;
    every column of the header is explained under the table."""
    ref = reference_optimum("bert", 1, "cpu-igpu")
    rows = [_row("milp:time_limit=30", ref.latency * 1.1), _row("heft", ref.baseline_latency)]
    rows.append(_row("heft", 0.03, platform="nowhere"))
    text = markdown_table(summarise(rows))
    header = next(line for line in text.splitlines() if line.startswith("| model"))
    columns = [c.strip() for c in header.strip("|").split("|")]
    explained = [name for name, _ in COLUMNS]
    for column in columns:
        assert any(column.startswith(name) for name in explained), f"column {column!r} is not explained"
        assert "MILP" not in column
    for name in explained:
        assert f"\n- {name}: " in text
    assert f"Stored optimum: bert {ref.latency * 1e3:.3f} ms" in text
    assert "No stored optimum for bert: no score." in text  # the "nowhere" platform's block
    milp = next(line for line in text.splitlines() if "milp:time_limit=30" in line)
    assert f"| {ref.score(ref.latency * 1.1):.3f} |" in milp


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
    assert "score vs optimum" in markdown_table(list(summary.values()))
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
    from experiments.records.report import main
    from experiments.runs import ResultStore

    ref = reference_optimum("bert", 1, "cpu-igpu")
    ResultStore(tmp_path / "a" / "results.jsonl").append(_row("heft", ref.baseline_latency))
    ResultStore(tmp_path / "b" / "results.jsonl").append(_row("heft", ref.latency))  # same cell: b wins
    ResultStore(tmp_path / "b" / "results.jsonl").append(_row("hsdag", ref.latency))
    main(["--suite", str(tmp_path / "a"), str(tmp_path / "b"), "--methods", "heft"])
    header, _, row = capsys.readouterr().out.splitlines()
    assert "| heft |" in header and "hsdag" not in header and row.endswith("| 1.00 |")


def test_speedup_against_a_device_that_fits_never_xinf(tmp_path) -> None:
    """Where CPU-only does not fit, the speedup is against the fastest single device that fits; where none
    fits (model-parallel) there is none, written as null and shown as '-', never 'xinf' or 0.000."""
    import dataclasses
    import json

    from experiments.grid import speedup, speedup_reference
    from experiments.records.report import paper_table
    from experiments.runs import ResultStore, speedup_text
    from placement_gym.platforms import load_platform
    from placement_gym.problem import PlacementProblem

    base = load_platform("cpu-dgpu")
    cpu = base.device_index("cpu")
    devices = tuple(
        dataclasses.replace(d, memory_bytes=1) if i == cpu else d for i, d in enumerate(base.devices)
    )
    small_cpu = PlacementProblem.make("tiny_cnn", dataclasses.replace(base, devices=devices), "simulated")
    cpu_latency, reference, latency = speedup_reference(small_cpu)
    gpu = small_cpu.evaluate(np.full(small_cpu.num_groups, 1 - cpu, dtype=np.int64)).latency
    assert cpu_latency == float("inf") and reference == "gpu_only" and latency == gpu

    mp = PlacementProblem.make("tiny_cnn", "model-parallel", "simulated")
    assert speedup_reference(mp)[1:] == ("none", float("inf"))
    assert np.isnan(speedup(float("inf"), 0.01)) and speedup(0.02, float("inf")) == 0.0

    rows = [
        dataclasses.replace(_row("heft", 0.01), speedup_vs_cpu=gpu / 0.01, speedup_reference="gpu_only"),
        dataclasses.replace(_row("heft", 0.01, platform="model-parallel"), cpu_only_latency=float("inf"),
                            speedup_vs_cpu=float("nan"), speedup_reference="none"),
    ]  # fmt: skip
    store = ResultStore(tmp_path / "results.jsonl")
    for row in rows:
        store.append(row)
    assert json.loads((tmp_path / "results.jsonl").read_text().splitlines()[1])["speedup_vs_cpu"] is None
    back = store.rows()
    assert np.isnan(back[1].speedup_vs_cpu) and speedup_text(back[1]).startswith("no single device fits")
    assert speedup_text(back[0]) == f"x{gpu / 0.01:.2f} vs gpu_only"
    text = markdown_table(summarise(back)) + paper_table(summarise(back))
    assert "vs gpu_only" in text and "no single device fits" in text
    assert "xinf" not in text and "| 0.000 |" not in text and "x0.00" not in text
