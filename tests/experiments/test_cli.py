"""The experiment commands end to end on a tiny model: bench (resumable), show, train."""

from __future__ import annotations

import json

import numpy as np
import pytest

from agents.specs import parse_spec
from experiments import cli
from experiments.grid import run_grid
from experiments.runs import ResultStore
from placement_gym.errors import ConfigError

GRID = dict(models=["tiny_cnn"], platform="cpu-dgpu", backend="simulated")


def test_method_specs_are_parsed_by_agents_specs():
    assert parse_spec("milp:time_limit=30,warm_start=false").kwargs == {"time_limit": 30.0, "warm_start": False}
    assert parse_spec("single_device:device=cpu").kwargs == {"device": "cpu"}
    with pytest.raises(ConfigError):
        parse_spec("milp:time_limit")


def test_bench_grid_writes_rows_report_and_resumes(tmp_path, monkeypatch):
    methods = ["single_device:device=cpu", "heft", "random_search"]
    rows = run_grid(tmp_path, methods=methods, seeds=[0, 1], budget=20, progress=False, **GRID)
    # heft and single_device are seedless: run once; random search once per seed
    assert sorted(r.method for r in rows) == [
        "heft",
        "random_search",
        "random_search",
        "single_device:device=cpu",
    ]
    for r in rows:
        assert len(r.placement) == r.groups and np.isfinite(r.latency) and r.versions["openvino"]
        assert r.evaluations <= 20 and r.speedup_vs_cpu > 0
    cpu = next(r for r in rows if r.method.startswith("single"))
    assert cpu.speedup_vs_cpu == pytest.approx(1.0)

    # a rerun finds every cell done and runs nothing (a method that would fail proves it is not called)
    import experiments.grid as bench

    monkeypatch.setattr(bench, "run_cell", lambda *a, **k: pytest.fail("finished cell was rerun"))
    again = run_grid(tmp_path, methods=methods, seeds=[0, 1], budget=20, progress=False, **GRID)
    assert len(again) == len(rows)


def test_store_ignores_a_torn_last_line(tmp_path):
    rows = run_grid(tmp_path, methods=["heft"], seeds=[0], budget=5, progress=False, **GRID)
    with open(tmp_path / "results.jsonl", "a") as f:
        f.write('{"model": "tiny_cnn", "trunc')
    assert len(ResultStore(tmp_path / "results.jsonl").rows()) == len(rows) == 1


def test_bench_cli_report_and_show(tmp_path, capsys):
    out = tmp_path / "b"
    cli.main(
        [
            "bench",
            "--models",
            "tiny_cnn",
            "--methods",
            "heft",
            "random_search",
            "--seeds",
            "0",
            "--budget",
            "10",
            "--platform",
            "cpu-dgpu",
            "--backend",
            "simulated",
            "--out",
            str(out),
            "--no-progress",
        ]
    )
    text = capsys.readouterr().out
    assert "| tiny_cnn | heft |" in text and (out / "report.md").exists() and (out / "summary.csv").exists()
    for png in ("latency.png", "learning_curves.png", "placement_tiny_cnn_cpu-dgpu.png"):
        assert (out / png).stat().st_size > 1000
    cli.main(["show", str(out / "results.jsonl"), "--png", str(tmp_path / "p.png")])
    shown = capsys.readouterr().out
    assert "latency:" in shown and (tmp_path / "p.png").exists()


def test_train_writes_best_placement_history_and_tensorboard(tmp_path, capsys):
    out = tmp_path / "run"
    cli.main(
        [
            "train",
            "--agent",
            "random_search",
            "--env",
            "DevicePlacement-v0",
            "--budget",
            "15",
            "--seed",
            "1",
            "--env-kwargs",
            json.dumps({"model": "tiny_cnn", "platform": "cpu-dgpu", "backend": "simulated"}),
            "--out",
            str(out),
            "--no-progress",
        ]
    )
    best = json.loads((out / "best_placement.json").read_text())
    assert (
        best["model"] == "tiny_cnn" and best["evaluations"] == 15 and len(best["placement"]) == best["groups"]
    )
    history = (out / "history.csv").read_text().splitlines()
    assert len(history) == 16  # header + one line per evaluation
    assert list((out / "tb").glob("events.out.tfevents.*"))
    cli.main(["show", str(out / "best_placement.json"), "--png", str(tmp_path / "best.png")])
    assert "tiny_cnn on cpu-dgpu" in capsys.readouterr().out
