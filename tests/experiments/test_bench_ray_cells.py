"""The cells-per-hour benchmark of Ray cells runs end to end on one cheap cell (numbers not checked:
they are timing; the rows' identity is)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("ray")


@pytest.mark.slow
def test_bench_ray_cells_reports_each_configuration(tmp_path, capsys):
    from experiments.speed.ray_cells import main

    out = tmp_path / "cells.json"
    results = main(["--methods", "heft", "--tasks", "resnet50/cpu-igpu", "--workers", "1", "--json", str(out)])
    assert [r["workers"] for r in results] == ["local", 1]
    assert all(r["cells"] == 1 and r["identical"] for r in results) and results[0]["rows"] == results[1]["rows"]
    saved = json.loads(out.read_text())
    assert [r["cells_per_hour"] > 0 for r in saved] == [True, True] and "rows" not in saved[0]
    assert "rows identical to the first run's: True" in capsys.readouterr().out
