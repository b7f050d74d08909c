"""The dispatch-noise experiment: its statistics, its idle-priority spinners and one tiny real run."""

from __future__ import annotations

import os
import time

import numpy as np
import pytest

from experiments.studies import dispatch_noise
from experiments.studies.dispatch_noise import Spinners, bootstrap_mean_ci, summarize_variant


def _rows(gaps: list[float], kinds: list[str]) -> list[dict]:
    rows = []
    for i, (g, k) in enumerate(zip(gaps, kinds)):
        base = 10.0 + i
        passes = [base * (1 - g / 2), base * (1 + g / 2)]
        recs = [
            {
                "latency": x,
                "raw": x,
                "cv": 0.01,
                "load": 1.0,
                "times": [x, 2 * x],
                "reference_times": [1.0, 3.0],
            }
            for x in passes
        ]
        rows.append({"kind": k, "v": recs})
    return rows


def test_summary_measures_the_gap_between_passes() -> None:
    rows = _rows([0.02, 0.04, 0.0, 0.06], ["iid", "blocks", "iid", "blocks"])
    s = summarize_variant(rows, "v")
    assert s["gap_mean"] == pytest.approx(0.03, rel=1e-9)
    assert s["gap_ci"][0] <= 0.03 <= s["gap_ci"][1]
    assert s["spearman"] == pytest.approx(1.0) and s["cv_median"] == pytest.approx(0.01)
    # the fastest run and the fastest-run ratio carry the same gaps here (reference runs are equal)
    for name in ("raw min", "min ratio"):
        assert s["estimators"][name]["gap_mean"] == pytest.approx(0.03, rel=1e-9)
    del rows[0]["v"][0]["times"]
    assert "raw min" not in summarize_variant(rows, "v")["estimators"]  # records without run times


def test_bootstrap_interval_is_tight_for_a_constant() -> None:
    assert bootstrap_mean_ci(np.full(10, 0.5)) == (0.5, 0.5)
    low, high = bootstrap_mean_ci(np.arange(100.0))
    assert low < 49.5 < high


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def _cpu_ns(pid: int) -> int:
    with open(f"/proc/{pid}/schedstat") as f:  # time on a CPU in ns (clock ticks miss a short run)
        return int(f.read().split()[0])


def test_spinners_run_at_idle_priority_only_while_awake() -> None:
    spinners = Spinners()
    try:
        assert len(spinners.procs) == len(os.sched_getaffinity(0))
        pid = spinners.procs[0].pid
        assert os.sched_getaffinity(pid) == {min(os.sched_getaffinity(0))}
        assert os.sched_getscheduler(pid) == os.SCHED_IDLE
        assert _state(pid) == "T"  # stopped until awake
        ran = _cpu_ns(pid)
        with spinners.awake():
            deadline = time.monotonic() + 60  # at idle priority it runs only when its CPU has time to spare
            while _cpu_ns(pid) == ran and time.monotonic() < deadline:
                time.sleep(0.05)
            assert _cpu_ns(pid) > ran and _state(pid) != "T"
        assert _state(pid) == "T"  # stopped again as awake() returns
        ran = _cpu_ns(pid)
        time.sleep(0.2)
        assert _cpu_ns(pid) == ran
    finally:
        spinners.close()
    assert all(p.poll() is not None for p in spinners.procs)


@pytest.mark.slow
def test_a_tiny_run_reports_every_variant(tmp_path) -> None:
    payload = dispatch_noise.main(["--model", "tiny_cnn", "--count", "2", "--out", str(tmp_path / "dn")])
    assert set(payload["summary"]) == set(dispatch_noise.VARIANTS)
    assert len(payload["rows"]) == 4 and all(len(r["threads"]) == 2 for r in payload["rows"])
    assert (tmp_path / "dn.md").read_text().count("| queue+awake |") == 2  # both tables
