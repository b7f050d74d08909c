"""The learned-vs-search benchmark: its rows and the target checks of its table."""

from __future__ import annotations

import json

from experiments.learned_vs_search import main, run, table


def _row(method: str, latency: float, model: str = "m") -> dict:
    return {
        "model": model, "platform": "p", "method": method, "latency_ms": latency, "optimum_ms": 10.0,
        "best_single_ms": 12.0,
    }  # fmt: skip


def test_table_checks_each_target():
    rows = [_row("heft", 11.0), _row("local_search", 10.4), _row("simulated_annealing", 10.1)]
    rows += [_row("guided_improvement", x) for x in (10.15, 10.2, 10.25)]  # median 10.2
    line = table(rows, set()).splitlines()[-1]
    assert "1.0200" in line
    assert line.endswith("| met | met | NOT met | met |")  # 1.02x met, beats HEFT, loses to SA
    held = table(rows, {"m"}).splitlines()[-1]
    assert held.endswith("| met | met | NOT met | met |")


def test_run_spends_the_budget_and_reports_the_ratio():
    row = run("resnet50", "cpu-igpu", "guided_improvement", 0, 30)
    assert row["evaluations"] == 30 and row["ratio"] >= 1.0 - 1e-9
    assert row["ratio"] == row["latency_ms"] / row["optimum_ms"]


def test_reuse_keeps_only_the_named_methods_of_earlier_rows(tmp_path):
    rows = [_row("heft", 11.0), _row("local_search", 10.4), _row("guided_improvement", 10.9)]
    (tmp_path / "old.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    main(["--models", "--platforms", "--rows", str(tmp_path / "old.jsonl"), "--reuse", "heft", "local_search",
          "--out", str(tmp_path / "new")])  # fmt: skip
    kept = [json.loads(x)["method"] for x in (tmp_path / "new" / "rows.jsonl").read_text().splitlines()]
    assert kept == ["heft", "local_search"]
