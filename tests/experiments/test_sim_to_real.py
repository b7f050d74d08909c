"""The sim-to-real recipe's plumbing on tiny_cnn (measured for real, tiny budgets): stages wired, rows
written as they come, a rerun resumes, and the report has all three placements with intervals."""

from __future__ import annotations

import json

import numpy as np
import pytest

from experiments.fidelity import sim_to_real
from experiments.fidelity.sim_to_real import KINDS, pooled, summary, verdict
from experiments.runs import read_json_lines as read_rows

ARGS = ["--models", "tiny_cnn", "--budget", "5", "--fine-tune", "2", "--sim-budget", "10"]
ARGS += ["--time-budget", "1"]


def test_stages_rows_resume_and_report(tmp_path, capsys):
    out = str(tmp_path / "s2r")
    sim_to_real.main([*ARGS, "--rounds", "1", "--out", out])
    rows = read_rows(tmp_path / "s2r.jsonl")
    stages = [r["stage"] for r in rows]
    assert stages[0] == "sim" and stages.count("sim") == 1 and stages.count("fine_tune") == 1
    evals = [r for r in rows if r["stage"] == "fine_tune_eval"]
    tune = next(r for r in rows if r["stage"] == "fine_tune")
    assert len(evals) == tune["evaluations"] <= 5
    assert stages.index("fine_tune") > max(i for i, s in enumerate(stages) if s == "fine_tune_eval")
    sim = rows[0]
    # the final placement is the best measured placement seen during fine-tuning
    best = min((r for r in evals if r["latency_ms"] is not None), key=lambda r: r["latency_ms"])
    assert tune["placement"] == best["placement"] and tune["best_measured_ms"] == best["latency_ms"]
    assert tune["start_measured_ms"] is not None  # the simulator's best was measured as the descent's start
    compare = [r for r in rows if r["stage"] == "compare"]
    assert [r["kind"] for r in compare] == list(KINDS) and all(r["round"] == 0 for r in compare)
    assert compare[1]["placement"] == sim["sim_best"] and compare[2]["placement"] == sim["heft"]
    assert all(len(r["times"]) == len(r["reference_times"]) >= 1 for r in compare)

    # resume: more rounds measure only the new ones; sim and fine-tune are not redone
    sim_to_real.main([*ARGS, "--rounds", "2", "--out", out])
    again = read_rows(tmp_path / "s2r.jsonl")
    assert again[: len(rows)] == rows
    new = again[len(rows) :]
    assert [r["stage"] for r in new] == ["compare"] * 3
    assert [r["round"] for r in new] == [1, 1, 1] and [r["kind"] for r in new] == list(sim_to_real.ORDERS[1])

    stats = pooled([r for r in again if r["stage"] == "compare"])
    assert set(stats) == set(KINDS)
    for s in stats.values():
        assert s["low_ms"] <= s["latency_ms"] <= s["high_ms"] and s["rounds"] == 2
    text = (tmp_path / "s2r.md").read_text()
    for kind in KINDS:
        assert f"| tiny_cnn | {kind} |" in text
    assert "target" in text and "unfinished" not in text


def test_torn_line_is_skipped_and_unfinished_is_reported(tmp_path):
    path = tmp_path / "r.jsonl"
    row = {"model": "m", "stage": "sim", "sim_best_sim_ms": 1.0, "heft_sim_ms": 2.0}
    path.write_text(json.dumps(row) + "\n{\"model\": \"m\", \"sta")
    assert read_rows(path) == [row]
    assert any("m: unfinished (fine_tune missing)" in line for line in summary(read_rows(path), 2))


def _compare(kind: str, ratio: float) -> dict:
    times = list(np.full(12, 0.01 * ratio) + np.linspace(0, 1e-5, 12))
    refs = [0.01] * 12
    return {"kind": kind, "feasible": True, "times": times, "reference_times": refs, "load": [0.1, 0.2],
            "placement": [0, 1]}


@pytest.mark.parametrize(
    ("ratios", "expected"),
    [
        ((1.0, 1.0, 2.0), {"sim_best": "tie", "heft": "better"}),
        ((2.0, 1.0, 1.0), {"sim_best": "worse", "heft": "worse"}),
    ],
)
def test_verdict_reads_the_intervals(ratios, expected):
    rows = [_compare(k, r) for k, r in zip(KINDS, ratios)]
    assert verdict(pooled(rows)) == expected
