"""The Ray throughput benchmark runs end to end on a tiny model (numbers not checked: they are timing)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("ray")


@pytest.mark.slow
@pytest.mark.parametrize("driver", ["batch", "hsdag"])
def test_bench_ray_reports_each_actor_count(driver, tmp_path, capsys):
    import ray

    from experiments.speed.ray_backend import main

    out = tmp_path / "rows.json"
    try:
        main(
            [
                "--driver",
                driver,
                "--model",
                "tiny_cnn",
                "--samples-per-update",
                "2",
                "--updates",
                "2",
                "--budget",
                "4",
                "--workers",
                "1",
                "--warmup",
                "0",
                "--repeats",
                "1",
                "--json",
                str(out),
            ]
        )
    finally:
        ray.shutdown()
    (row,) = json.loads(out.read_text())
    assert row["workers"] == 1 and row["evaluations"] == 4 and row["per_second"] > 0
    assert len(row["cores"]) == 1 and len(row["cores"][0]) == 1 and row["replaced"] == 0
    assert "1 actor(s) on cores" in capsys.readouterr().out
