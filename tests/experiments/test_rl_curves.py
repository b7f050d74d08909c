"""experiments.rl_curves: best-so-far at checkpoints, resumable rows, the table."""

from __future__ import annotations

import json

import pytest

from experiments import rl_curves


def test_best_at_reads_the_history_at_each_checkpoint():
    history = [(1, 5.0), (2, 4.0), (3, 4.0), (4, 2.0)]
    assert rl_curves.best_at(history, [1, 3, 4, 100]) == [5.0, 4.0, 2.0, 2.0]
    assert rl_curves.best_at(history[1:], [1]) == [float("inf")]


def test_table_takes_medians_and_main_skips_stored_runs(tmp_path, monkeypatch, capsys):
    rows = [
        {"task": "t:p", "method": "m", "seed": s, "checkpoints": [10, 20], "score": [0.1 * s, 0.2 * s],
         "ratio": [1.0 + s, 1.0 + 2 * s]}
        for s in range(3)
    ]
    (tmp_path / "rows.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n{torn")
    assert len(rl_curves.read_rows(tmp_path / "rows.jsonl")) == 3
    table = rl_curves.table(rl_curves.read_rows(tmp_path / "rows.jsonl"))
    assert "| t:p | m | 3 | 0.100 (2.0000) | 0.200 (3.0000) |" in table
    monkeypatch.setattr(rl_curves, "run", lambda *a: pytest.fail("a stored run ran again"))
    rl_curves.main(["--out", str(tmp_path), "--tasks", "t:p", "--methods", "m", "--seeds", "0", "1",
                    "--checkpoints", "10", "20"])
    rl_curves.main(["--out", str(tmp_path), "--table"])
    assert "| @10 | @20 |" in capsys.readouterr().out
