"""experiments.records.rl_curves: best-so-far at checkpoints, resumable rows, the table."""

from __future__ import annotations

import json

import pytest

from experiments.records import rl_curves
from experiments.runs import read_json_lines


def test_best_at_reads_the_history_at_each_checkpoint():
    history = [(1, 5.0), (2, 4.0), (3, 4.0), (4, 2.0)]
    assert rl_curves.best_at(history, [1, 3, 4, 100]) == [5.0, 4.0, 2.0, 2.0]
    assert rl_curves.best_at(history[1:], [1]) == [float("inf")]


def test_table_takes_medians_and_main_skips_stored_runs(tmp_path, monkeypatch, capsys):
    rows = [
        {
            "task": "t:p",
            "method": "m",
            "seed": s,
            "checkpoints": [10, 20],
            "score": [0.1 * s, 0.2 * s],
            "ratio": [1.0 + s, 1.0 + 2 * s],
        }
        for s in range(3)
    ]
    (tmp_path / "rows.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n{torn")
    assert len(read_json_lines(tmp_path / "rows.jsonl")) == 3
    table = rl_curves.table(read_json_lines(tmp_path / "rows.jsonl"))
    assert "| t:p | m | 3 | 0.100 (2.0000) | 0.200 (3.0000) |" in table
    monkeypatch.setattr(rl_curves, "run", lambda *a: pytest.fail("a stored run ran again"))
    rl_curves.main(
        [
            "--out",
            str(tmp_path),
            "--tasks",
            "t:p",
            "--methods",
            "m",
            "--seeds",
            "0",
            "1",
            "--checkpoints",
            "10",
            "20",
        ]
    )
    rl_curves.main(["--out", str(tmp_path), "--table"])
    assert "| @10 | @20 |" in capsys.readouterr().out


def _row(method: str, seed: int, checkpoints: list[int], scores: list[float]) -> dict:
    return {
        "task": "bert:cpu-igpu",
        "method": method,
        "seed": seed,
        "checkpoints": checkpoints,
        "score": scores,
        "ratio": [2.0 - x for x in scores],
        "evaluations": max(checkpoints) - seed,
    }


def test_curves_read_each_checkpoint_from_the_shortest_run_that_reaches_it(tmp_path, capsys):
    rows = [_row("per_budget", s, [100, 500], [0.1, 0.5]) for s in range(3)]
    rows += [_row("per_budget", s, [500, 5000], [0.4, 0.9]) for s in range(3)]
    rows += [_row("one_run", s, [100, 500, 5000], [0.2, 0.3, 0.6 + 0.1 * s]) for s in range(2)]
    rows += [_row("one_run", 2, [100, 500], [0.25, 0.3])]  # a seed run only to 500
    found = rl_curves.curves(rows)
    per_budget = found[("bert:cpu-igpu", "per_budget")]
    assert {n: [max(r["checkpoints"]) for r in runs] for n, runs in per_budget.items()} == {
        100: [500] * 3,
        500: [500] * 3,  # the run of budget 500, not the first 500 evaluations of the longer run
        5000: [5000] * 3,
    }
    one_run = found[("bert:cpu-igpu", "one_run")]
    assert {n: [r["seed"] for r in runs] for n, runs in one_run.items()} == {100: [0, 1, 2], 500: [0, 1, 2], 5000: [0, 1]}
    table = rl_curves.curve_table(rows)
    assert "| bert / cpu-igpu | per_budget | 0.100 (1.9000) | 0.500 (1.5000) | 0.900 (1.1000) | 4,999 of 5,000 |" in table
    assert "| bert / cpu-igpu | one_run | 0.200 (1.8000) | 0.300 (1.7000) | 0.650 (1.3500) [2 seeds] |" in table
    (tmp_path / "rows.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    rl_curves.main(["--out", str(tmp_path), "--curves", "--plot", str(tmp_path / "curves.png")])
    assert "| @100 | @500 | @5000 | evaluations spent |" in capsys.readouterr().out
    assert (tmp_path / "curves.png").read_bytes()[:4] == b"\x89PNG"


def test_reading_an_empty_folder_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit):
        rl_curves.main(["--out", str(tmp_path), "--curves"])
    assert "no stored runs" in capsys.readouterr().err
