"""The sim-to-real recipe's plumbing on tiny_cnn (measured for real, tiny budgets): stages wired, rows
written as they come, a rerun resumes, and the report has all three placements with intervals."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

from experiments.fidelity import rounds, sim_to_real
from experiments.fidelity.sim_to_real_report import KINDS, pooled, summary, verdict
from experiments.runs import read_json_lines as read_rows

ARGS = ["--models", "tiny_cnn", "--budget", "5", "--fine-tune", "2", "--sim-budget", "10"]
ARGS += ["--candidates", "2", "--remeasure-rounds", "1", "--time-budget", "1"]


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
    # the pick: the two fastest single measurements, the simulator's best among them, re-measured once
    again = [r for r in rows if r["stage"] == "remeasure"]
    assert len(again) == 2 and again[0]["placement"] == best["placement"]
    assert sim["sim_best"] in [r["placement"] for r in again]
    assert all(len(r["times"]) == len(r["reference_times"]) >= 1 for r in again)
    chosen = next(r for r in rows if r["stage"] == "pick")
    assert stages.index("pick") == max(i for i, s in enumerate(stages) if s == "remeasure") + 1
    compare = [r for r in rows if r["stage"] == "compare"]
    assert [r["kind"] for r in compare] == list(KINDS) and all(r["round"] == 0 for r in compare)
    assert compare[0]["placement"] == chosen["placement"]
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
    path.write_text(json.dumps(row) + '\n{"model": "m", "sta')
    assert read_rows(path) == [row]
    assert any("m: unfinished (fine_tune, pick missing)" in line for line in summary(read_rows(path), 2))


def _compare(kind: str, ratio: float) -> dict:
    times = list(np.full(12, 0.01 * ratio) + np.linspace(0, 1e-5, 12))
    refs = [0.01] * 12
    return {
        "kind": kind,
        "feasible": True,
        "times": times,
        "reference_times": refs,
        "load": [0.1, 0.2],
        "placement": [0, 1],
    }


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


# The pick on a fake measured backend (no OpenVINO): placements with known true latencies, a fine-tune
# whose fastest single measurement was lucky.
SIM_BEST, HEFT, LUCKY, CLOSE = [0, 0, 0, 0], [1, 0, 0, 0], [1, 1, 0, 0], [0, 1, 0, 0]
#: One measurement each in the fake fine-tune (ms): LUCKY measured fastest once.
SINGLE = {tuple(LUCKY): 9.0, tuple(CLOSE): 9.6, tuple(SIM_BEST): 10.0, tuple(HEFT): 11.0, (1, 1, 1, 1): 12.0}
FAKE = ["--models", "fake", "--candidates", "3", "--remeasure-rounds", "3", "--rounds", "2"]


class Stop(Exception):
    """Stands for a run stopped from outside."""


class FakeBackend:
    """Drift-corrected measurements of placements whose true latency is ``truth`` (ms): 12 pairs of runs
    with +-0.5% noise against a 10 ms reference; raises :class:`Stop` after ``stop_after`` evaluations."""

    def __init__(self, truth: dict, seed: int, stop_after: int | None = None):
        self.truth, self.rng, self.stop_after, self.calls = truth, np.random.default_rng(seed), stop_after, 0

    def evaluate(self, placement):
        self.calls += 1
        if self.stop_after is not None and self.calls > self.stop_after:
            raise Stop
        refs = 0.010 * (1 + self.rng.uniform(-0.005, 0.005, 12))
        times = refs * self.truth[tuple(placement)] / 10.0 * (1 + self.rng.uniform(-0.005, 0.005, 12))
        self.last_timing = SimpleNamespace(times=tuple(times), reference_times=tuple(refs))
        latency = float(np.median(times / refs)) * 0.010
        return SimpleNamespace(feasible=True, latency=latency, ci=0.001 * latency, reason=None)

    def close(self):
        pass


@pytest.fixture
def fake_recipe(monkeypatch):
    """The recipe on ``fake``: a sim row, a fine-tune of the single measurements ``SINGLE``, and measured
    rounds on :class:`FakeBackend` with the truth the test sets (``truth``, ``stop_after``)."""
    state = {"truth": None, "stop_after": None, "opened": 0}

    def sim_stage(model, policy, sim_budget, seed):
        return {
            "model": model,
            "stage": "sim",
            "heft": HEFT,
            "heft_sim_ms": 11.0,
            "sim_best": SIM_BEST,
            "sim_best_sim_ms": 10.0,
            "sim_best_source": "descent",
        }

    def fine_tune_stage(model, start, args, cache, log):
        for i, (placement, ms) in enumerate(SINGLE.items()):
            log(
                {
                    "model": model,
                    "stage": "fine_tune_eval",
                    "evaluation": i + 1,
                    "placement": list(placement),
                    "latency_ms": ms,
                }
            )
        return {
            "model": model,
            "stage": "fine_tune",
            "placement": LUCKY,
            "best_measured_ms": 9.0,
            "evaluations": len(SINGLE),
        }

    def open_backend(model, settings):
        state["opened"] += 1
        return FakeBackend(state["truth"], state["opened"], state["stop_after"])

    monkeypatch.setattr(sim_to_real, "sim_stage", sim_stage)
    monkeypatch.setattr(sim_to_real, "fine_tune_stage", fine_tune_stage)
    monkeypatch.setattr(rounds, "open_backend", open_backend)
    return state


def _truth(lucky: float) -> dict:
    return {tuple(SIM_BEST): 10.0, tuple(HEFT): 11.0, tuple(CLOSE): 10.3, tuple(LUCKY): lucky}


def test_the_pick_is_made_on_the_remeasurement_not_the_lucky_single_measurement(tmp_path, fake_recipe):
    fake_recipe["truth"] = _truth(lucky=10.6)  # LUCKY is truly 6% slower than the simulator's best
    sim_to_real.main([*FAKE, "--out", str(tmp_path / "s2r")])
    rows = read_rows(tmp_path / "s2r.jsonl")
    assert [r["stage"] for r in rows if r["stage"] != "fine_tune_eval"] == (
        ["sim", "fine_tune"] + ["remeasure"] * 9 + ["pick"] + ["compare"] * 6
    )
    again = [r for r in rows if r["stage"] == "remeasure"]
    assert sorted((r["round"], r["candidate"]) for r in again) == [(r, i) for r in range(3) for i in range(3)]
    assert [r["placement"] for r in again[:3]] == [LUCKY, CLOSE, SIM_BEST]  # fastest single measurement first
    assert all(len(r["times"]) == len(r["reference_times"]) == 12 for r in again)
    chosen = next(r for r in rows if r["stage"] == "pick")
    assert chosen["placement"] == SIM_BEST and chosen["index"] == chosen["sim_index"] == 2
    assert next(r for r in rows if r["stage"] == "fine_tune")["placement"] == LUCKY  # one measurement's pick
    assert all(
        r["placement"] == SIM_BEST for r in rows if r["stage"] == "compare" and r["kind"] == "fine_tuned"
    )
    text = (tmp_path / "s2r.md").read_text()
    assert "| fake | 0 | 2 / 2 | 9.00 | 10.6" in text and "| simulator's best, all on host, picked |" in text
    assert "one measurement would have picked candidate 0" in text and "target met" in text
    assert "fake: re-measurement: 9 measurements, " in text and "s of wall time" in text


def test_a_candidate_clearly_faster_on_remeasurement_is_picked(tmp_path, fake_recipe):
    fake_recipe["truth"] = _truth(lucky=9.0)
    sim_to_real.main([*FAKE, "--out", str(tmp_path / "s2r")])
    rows = read_rows(tmp_path / "s2r.jsonl")
    assert next(r for r in rows if r["stage"] == "pick")["placement"] == LUCKY
    assert "the pick took candidate 0" in (tmp_path / "s2r.md").read_text()


def test_all_on_host_is_remeasured_and_picked_when_the_simulators_best_split_is_clearly_slower(
    tmp_path, fake_recipe, monkeypatch
):
    # the simulator's best is HEFT's split; all-on-host (SIM_BEST's placement here) is not among the 3
    # fastest single measurements' room once the simulator's best takes a place, but is truly fastest
    fake_recipe["truth"] = {**_truth(lucky=10.6), tuple(SIM_BEST): 8.0}
    make_sim = sim_to_real.sim_stage
    monkeypatch.setattr(sim_to_real, "sim_stage", lambda *a: {**make_sim(*a), "sim_best": HEFT})
    sim_to_real.main([*FAKE, "--out", str(tmp_path / "s2r")])
    chosen = next(r for r in read_rows(tmp_path / "s2r.jsonl") if r["stage"] == "pick")
    assert [c["placement"] for c in chosen["candidates"]] == [LUCKY, SIM_BEST, HEFT]
    assert chosen["placement"] == SIM_BEST and chosen["sim_index"] == 2
    assert "| all on host, picked |" in (tmp_path / "s2r.md").read_text()


def test_a_stopped_remeasurement_resumes(tmp_path, fake_recipe):
    fake_recipe["truth"], fake_recipe["stop_after"] = _truth(lucky=10.6), 4
    out = str(tmp_path / "s2r")
    with pytest.raises(Stop):
        sim_to_real.main([*FAKE, "--out", out])
    first = read_rows(tmp_path / "s2r.jsonl")
    assert [r["stage"] for r in first].count("remeasure") == 4 and "pick" not in [r["stage"] for r in first]
    partial = "\n".join(summary(first, 2, 3))
    assert "| fake | 2 | 4 / 0 | 10.00 | 10.0" in partial and "| 1/3 |" in partial and "pick missing" in partial
    fake_recipe["stop_after"] = None
    sim_to_real.main([*FAKE, "--out", out])
    rows = read_rows(tmp_path / "s2r.jsonl")
    assert rows[: len(first)] == first
    again = [(r["round"], r["candidate"]) for r in rows if r["stage"] == "remeasure"]
    assert sorted(again) == [(r, i) for r in range(3) for i in range(3)]
    assert next(r for r in rows if r["stage"] == "pick")["placement"] == SIM_BEST
    with pytest.raises(SystemExit, match="another --candidates"):
        (tmp_path / "s2r.jsonl").write_text("\n".join(json.dumps(r) for r in first) + "\n")
        sim_to_real.main([*FAKE, "--candidates", "2", "--out", out])


def test_rows_compared_with_the_one_measurement_pick_are_not_resumed(tmp_path, fake_recipe):
    fake_recipe["truth"] = _truth(lucky=10.6)
    sim_to_real.main([*FAKE, "--out", str(tmp_path / "s2r")])
    old = [r for r in read_rows(tmp_path / "s2r.jsonl") if r["stage"] not in ("remeasure", "pick")]
    (tmp_path / "old.jsonl").write_text("\n".join(json.dumps(r) for r in old) + "\n")
    assert any("picked by one measurement" in line for line in summary(old, 2))
    with pytest.raises(SystemExit, match="one measurement"):
        sim_to_real.main([*FAKE, "--out", str(tmp_path / "old")])
    sim_to_real.main([*FAKE, "--report", "--out", str(tmp_path / "old")])  # the summary alone: no measuring
    text = (tmp_path / "old.md").read_text()
    assert "picked by one measurement" in text and "best seen 9.00 ms, 1 of them within 4% of it, it included" in text
    with pytest.raises(SystemExit, match="does not exist"):
        sim_to_real.main([*FAKE, "--report", "--out", str(tmp_path / "none")])
