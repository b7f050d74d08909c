"""The learned-vs-search benchmark: its rows (the one row format, old rows converted) and the target
checks of its table."""

from __future__ import annotations

import json

import pytest

from experiments.records.convert_rows import read_rows
from experiments.records.learned_vs_search import main, run, table
from placement_gym.results import ResultRow, parse_row
from placement_gym.tasks import reference_optimum

REF = reference_optimum("resnet50", 1, "cpu-igpu")


def _row(method: str, ratio: float, seed: int = 0) -> ResultRow:
    return ResultRow(
        model="resnet50", graph_version=1, platform="cpu-igpu", backend="simulated", coarsening="fused",
        groups=len(REF.placement), method=method, seed=seed, budget=30, latency=REF.latency * ratio,
        cpu_only_latency=1.0, speedup_vs_cpu=1.0, evaluations=1, wall_time=0.1, placement=list(REF.placement),
        extra={"best_single_ms": REF.latency * 1.2e3},
    )  # fmt: skip


def test_table_checks_each_target():
    rows = [_row("heft", 1.10), _row("local_search", 1.04), _row("simulated_annealing", 1.01)]
    rows += [
        _row("guided_improvement", x, seed) for seed, x in enumerate((1.015, 1.0199, 1.025))
    ]  # median 1.0199
    line = table(rows, set()).splitlines()[-1]
    assert "1.0199" in line
    assert line.endswith("| met | met | NOT met | met |")  # 1.02x met, beats HEFT, loses to SA
    held = table(rows, {"resnet50"}).splitlines()[-1]
    assert held.endswith("| met | met | NOT met | met |")
    old = [
        {"model": r.model, "platform": r.platform, "method": r.method, "latency_ms": r.latency * 1e3,
         "optimum_ms": REF.latency * 1e3, "best_single_ms": r.extra["best_single_ms"]}
        for r in rows
    ]  # fmt: skip
    assert table(old, set()) == table(rows, set())  # the older rows format reads the same


def test_run_spends_the_budget_and_writes_a_result_row():
    row = run("resnet50", "cpu-igpu", "guided_improvement", 0, 30)
    assert isinstance(row, ResultRow) and row.evaluations == 30 and row.latency >= REF.latency * (1 - 1e-9)
    assert row.score == pytest.approx(REF.score(row.latency)) and row.history[-1][0] == 30


def test_old_rows_are_converted_and_reuse_keeps_only_the_named_methods(tmp_path):
    old = [
        {"model": "resnet50", "platform": "cpu-igpu", "method": m, "seed": 0, "budget": 30,
         "latency_ms": REF.latency * 1e3 * r, "optimum_ms": REF.latency * 1e3, "ratio": r,
         "best_single_ms": REF.baseline_latency * 1e3, "evaluations": 1, "wall_s": 0.1,
         "placement": list(REF.placement), "graph_version": 1}
        for m, r in (("heft", 1.1), ("local_search", 1.04), ("guided_improvement", 1.09))
    ]  # fmt: skip
    (tmp_path / "old.jsonl").write_text("".join(json.dumps(r) + "\n" for r in old))
    converted = read_rows(tmp_path / "old.jsonl")
    assert converted[0].score == pytest.approx(REF.score(REF.latency * 1.1))
    assert converted[0].cpu_only_latency > 0 and "converted_from" in converted[0].extra
    main(["--models", "--platforms", "--rows", str(tmp_path / "old.jsonl"), "--reuse", "heft", "local_search",
          "--out", str(tmp_path / "new")])  # fmt: skip
    lines = (tmp_path / "new" / "rows.jsonl").read_text().splitlines()
    assert [parse_row(x, "new").method for x in lines] == ["heft", "local_search"]
    assert [r.method for r in read_rows(tmp_path / "new" / "rows.jsonl")] == ["heft", "local_search"]
