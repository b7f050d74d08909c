"""The acceptance script's statistics (synthetic data) and one tiny end-to-end run."""

from __future__ import annotations

import json

import numpy as np
import pytest

from experiments import calibrate, cli
from experiments import sim_vs_measured as svm
from experiments import sim_vs_measured_stats as stats


def test_placements_of_each_kind():
    placements = svm.sample_placements(num_groups=12, num_devices=2, count=5, seed=0)
    kinds = [k for k, _ in placements]
    assert kinds.count("single") == 2 and kinds.count("iid") == 5 and kinds.count("blocks") == 5
    for kind, p in placements:
        assert p.shape == (12,) and set(p.tolist()) <= {0, 1}
        if kind == "blocks":
            assert 1 <= np.count_nonzero(np.diff(p)) <= 7  # 2-8 contiguous blocks


def test_self_agreement_and_its_ceiling():
    a = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    perfect = stats.self_agreement(a, a.copy())
    assert perfect["spearman"] == pytest.approx(1.0) and perfect["ceiling_spearman"] == pytest.approx(1.0)
    assert perfect["mape"] == 0.0 and perfect["floor_mape"] == 0.0
    b = np.array([1.1, 1.9, 3.3, 5.0, 4.0])  # one swap: r = 0.9
    noisy = stats.self_agreement(a, b)
    assert noisy["spearman"] == pytest.approx(0.9)
    assert noisy["ceiling_spearman"] == pytest.approx(np.sqrt(2 * 0.9 / 1.9))
    assert noisy["floor_mape"] == pytest.approx(noisy["mape"] / 2)


def _run(spearman: float, mape: float) -> dict:
    summary = {"all": {"spearman": spearman, "mape": mape}, "self_all": {"spearman": 0.97}}
    return {"meta": {"date": "d"}, "models": {"m": {"summary": summary}}}


def test_runs_agree_within_the_issue_tolerances():
    ok, _ = stats.compare_runs([_run(0.90, 0.08), _run(0.92, 0.10), _run(0.91, 0.09)], ["a", "b", "c"])
    assert ok["m"]["agree"] and ok["m"]["max_diff_spearman"] == pytest.approx(0.02)
    bad, lines = stats.compare_runs([_run(0.90, 0.08), _run(0.95, 0.08)], ["a", "b"])
    assert not bad["m"]["agree"] and "NO" in lines[-1]
    worse, _ = stats.compare_runs([_run(0.90, 0.08), _run(0.90, 0.12)], ["a", "b"])
    assert not worse["m"]["agree"]


def test_tiny_end_to_end_run_and_compare(tmp_path, capsys):
    out = tmp_path / "svm"
    args = ["--models", "tiny_cnn", "--count", "3", "--max-repeats", "6", "--time-budget", "0.5"]
    res = svm.main([*args, "--out", str(out)])
    s = res["models"]["tiny_cnn"]["summary"]
    assert s["evaluated"] == 8 and s["feasible"] == 8
    for key in ("self_all", "self_blocks", "self_raw_all", "all", "all_raw", "iid", "blocks"):
        assert key in s
    assert s["load_before"][0] >= 0 and s["profile"]["action"] in ("ok", "reprofiled", "rescaled")
    rows = json.loads(out.with_suffix(".json").read_text())["models"]["tiny_cnn"]["rows"]
    assert all(len(r["measured_replicates"]) == 2 and r["replicates"][0]["host_load"] >= 0 for r in rows)
    assert "Targets:" in out.with_suffix(".md").read_text()
    agreement = svm.main(
        [
            "--compare",
            str(out.with_suffix(".json")),
            str(out.with_suffix(".json")),
            "--out",
            str(tmp_path / "agree"),
        ]
    )
    assert agreement["tiny_cnn"]["agree"] and agreement["tiny_cnn"]["max_diff_spearman"] == 0.0


def test_calibrate_redoes_one_profile_per_distinct_device(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PLACEMENT_GYM_CACHE", str(tmp_path))
    rows = calibrate.calibrate(["tiny_cnn"])
    assert [r["device"] for r in rows] == ["cpu0"]  # the two virtual CPUs compile the same model
    assert rows[0]["action"] in ("ok", "reprofiled", "rescaled") and rows[0]["whole"] > 0
    assert cli.main(["calibrate", "--model", "tiny_cnn"]) == 0
    assert "| tiny_cnn | cpu0 |" in capsys.readouterr().out
    assert cli.main(["calibrate", "--model", "tiny_cnm"]) == 2
    assert "Did you mean 'tiny_cnn'" in capsys.readouterr().err
