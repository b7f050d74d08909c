"""The acceptance script's statistics (synthetic data) and one tiny end-to-end run."""

from __future__ import annotations

import json

import numpy as np
import pytest

from experiments import cli
from experiments.cli import calibrate
from experiments.fidelity import stats
from experiments.fidelity import sim_vs_measured as svm


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
    assert "Noise ceiling" in out.with_suffix(".md").read_text() and "relative" in s
    costs = tmp_path / "costs.json"
    costs.write_text(json.dumps({"invoke_overhead": 0.0, "transfer_latency": 0.01, "bandwidth": 1e9,
                                 "blocked_bandwidth": 1e9, "contention": 1.0}))  # fmt: skip
    again = svm.main(
        ["--rescore", str(out.with_suffix(".json")), "--costs", str(costs), "--out", str(tmp_path / "re")]
    )
    rows_again = again["models"]["tiny_cnn"]["rows"]
    split = [r for r, old in zip(rows_again, rows) if r["kind"] != "single"]
    assert all(r["simulated"] >= 0.01 for r in split if any(r["placement"]) and not all(r["placement"]))
    assert [r["measured"] for r in rows_again] == [r["measured"] for r in rows]
    # the run recorded the default simulator (segments on local): re-simulating it gives the same latencies
    same = svm.main(
        ["--rescore", str(out.with_suffix(".json")), "--schedule", "segments", "--out", str(tmp_path / "s")]
    )
    resimulated = [r["simulated"] for r in same["models"]["tiny_cnn"]["rows"]]
    assert resimulated == pytest.approx([r["simulated"] for r in rows], rel=1e-9)
    assert same["meta"]["rescored"]["schedule"] == "segments"
    used = same["models"]["tiny_cnn"]["cost_model"]["resimulated_with"]
    assert used["profiles"]["cpu0"]["layer_sum"] > 0 and used["profiles"]["cpu0"]["profiled_at"]
    assert len(used["platform"]) == 2  # the local figures and the boundary costs
    assert "platform" not in again["models"]["tiny_cnn"]["cost_model"]["resimulated_with"]  # --costs given


def test_calibrate_redoes_one_profile_per_distinct_device(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PLACEMENT_GYM_CACHE", str(tmp_path))
    rows = calibrate.calibrate(["tiny_cnn"])
    assert [r["device"] for r in rows] == ["cpu0"]  # the two virtual CPUs compile the same model
    assert rows[0]["action"] in ("ok", "reprofiled", "rescaled") and rows[0]["whole"] > 0
    assert cli.main(["calibrate", "--model", "tiny_cnn"]) == 0
    assert "| tiny_cnn | cpu0 |" in capsys.readouterr().out
    assert cli.main(["calibrate", "--model", "tiny_cnm"]) == 2
    assert "Did you mean 'tiny_cnn'" in capsys.readouterr().err


def _rows(
    measured: np.ndarray, simulated: np.ndarray, level: float, noise: float = 0.0, seed: int = 0
) -> list:
    """Rows as the script stores them: host single row first, then alternate iid / blocks; replicate
    latencies are ``ratio x level`` with the reference timed at ``level`` (raw = latency)."""
    rng = np.random.default_rng(seed)
    rows = []
    for i, (m, s) in enumerate(zip(measured, simulated)):
        kind = "single" if i == 0 else ("iid" if i % 2 else "blocks")
        reps = [float(m * np.exp(noise * rng.standard_normal())) for _ in range(2)]
        rows.append(
            {
                "kind": kind,
                "placement": [0, 0] if i == 0 else [1, 0],
                "measured": float(np.median(reps)),
                "measured_replicates": reps,
                "raw_replicates": reps,
                "replicates": [
                    {"latency": r, "raw": r, "ci": 0.01 * r, "samples": 6, "t": 10.0 * k}
                    for k, r in enumerate(reps)
                ],  # fmt: skip
                "simulated": float(s),
            }
        )
    return rows


def test_relative_mape_cancels_a_slow_reference_level():
    """A reference level measured 25% too slow scales every drift-corrected latency (level-scaled MAPE
    moves) but not the ratios to the host reference (relative MAPE stays)."""
    rng = np.random.default_rng(0)
    sim = rng.uniform(1.0, 2.0, 21)
    sim[0] = 1.0
    measured = sim * rng.uniform(0.97, 1.03, 21)
    measured[0] = 1.0
    good = stats.relative_figures(_rows(measured, sim, 1.0), 1.0)
    slow = stats.relative_figures(_rows(1.25 * measured, sim, 1.25), 1.25)
    assert good["all"]["mape"] == pytest.approx(slow["all"]["mape"]) and good["all"]["mape"] < 0.03
    assert stats.summarize_rows(_rows(1.25 * measured, sim, 1.25), 2)["all"]["mape"] > 0.2
    assert stats.relative_figures(_rows(measured, sim, 1.0), None) == {}


def test_window_reference_recovers_the_reference_time():
    rows = _rows(np.array([1.0, 2.0, 3.0]), np.array([1.0, 2.0, 3.0]), 0.5)
    for r in rows:  # the reference ran at 0.8 s in every window: raw = ratio x 0.8, latency = ratio x 0.5
        for rec in r["replicates"]:
            rec["raw"] = rec["latency"] / 0.5 * 0.8
    assert stats.window_reference(rows, 0.5) == pytest.approx(0.8)


def test_noise_ceiling_finds_the_sd_that_gives_the_target():
    truth = np.linspace(1.0, 2.0, 60)
    assert stats.noisy_agreement(truth, 1e-6) == pytest.approx(1.0)
    assert stats.noisy_agreement(truth, 0.3) < 0.8
    sd = stats.sd_for_agreement(truth, 0.95)
    assert stats.noisy_agreement(truth, sd) >= 0.95 > stats.noisy_agreement(truth, 1.2 * sd)
    rows = _rows(truth, truth, 1.0, noise=2 * sd, seed=1)
    ceiling = stats.noise_ceiling(rows, samples=6)
    c = ceiling["all"]
    assert c["sd"] == pytest.approx(2 * sd, rel=0.35)
    assert c["runs_needed"] == pytest.approx(6 * (c["sd"] / c["sd_needed"]) ** 2)
    assert c["runs_needed"] > 6 and set(ceiling) == {"all", "blocks"}


def test_compare_runs_checks_the_relative_mape_too():
    def run(mape: float, rel: float) -> dict:
        summary = {"all": {"spearman": 0.9, "mape": mape}, "relative": {"all": {"mape": rel}}}
        return {"meta": {"date": "d"}, "models": {"m": {"summary": summary}}}

    summary, lines = stats.compare_runs([run(0.04, 0.04), run(0.19, 0.045)], ["a", "b"])
    assert not summary["m"]["agree"] and summary["m"]["agree_relative"]
    assert "NO / yes" in lines[-1]


def _pooled_run(truth: np.ndarray, simulated: np.ndarray, level: float, noise: float, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    kinds = ["single"] + ["iid", "blocks"] * ((len(truth) - 1) // 2)
    rows = [
        {"kind": k, "placement": [0] * 3 if i == 0 else [i % 2, 1, i], "simulated": float(s),
         "measured": float(level * t * np.exp(noise * rng.standard_normal()))}
        for i, (k, t, s) in enumerate(zip(kinds, truth, simulated))
    ]  # fmt: skip
    summary = {"all": {"spearman": 0.0, "mape": 0.0}, "reference_level": level}
    return {"meta": {"date": "d"}, "models": {"m": {"summary": summary, "rows": rows}}}


def test_pooling_runs_averages_the_measurement_noise_out():
    truth = np.linspace(1.0, 1.3, 41)  # close latencies: 5% noise per run scrambles their order
    runs = [_pooled_run(truth, truth * 2.0, level=1.0 + 0.1 * r, noise=0.05, seed=r) for r in range(8)]
    summary, lines = stats.compare_runs(runs, [str(r) for r in range(8)])
    pooled = summary["m"]["pooled"]
    single = stats.pooled_figures([runs[0]["models"]["m"], runs[0]["models"]["m"]])  # one run, twice
    assert pooled["runs"] == 8 and pooled["all"]["n"] == 41
    assert pooled["all"]["spearman"] > single["all"]["spearman"] + 0.05
    assert pooled["all"]["mape"] < single["all"]["mape"]  # levels differ per run: ratios cancel them
    assert 0 < pooled["split_halves"] < 1 and "runs pooled" in "\n".join(lines)
    other = _pooled_run(truth, truth * 2.0, 1.0, 0.05, 9)
    other["models"]["m"]["rows"][3]["placement"] = [9, 9, 9]  # another placement: nothing to pool
    assert stats.pooled_figures([runs[0]["models"]["m"], other["models"]["m"]]) == {}
    assert stats.pooled_figures([_run(0.9, 0.1)["models"]["m"]] * 2) == {}  # runs without rows


def test_rescore_needs_no_measurement_and_keeps_the_figures(tmp_path):
    rows = _rows(np.linspace(1.0, 2.0, 11), np.linspace(1.0, 2.1, 11), 1.0, noise=0.01)
    rows = [{**r, "segments": 1 + i % 4} for i, r in enumerate(rows)]  # synthetic: no benchmark to count them
    summary = {"reference_level": 1.0, "groups": 2, "load_before": [0.1], "load_after": [0.2],
               "wall_seconds": 3.0, "profile": {}, "profile_warnings": []}  # fmt: skip
    payload = {
        "meta": {"command": {"level": "fused", "replicates": 2}, "date": "d"},
        "models": {"m": {"summary": summary, "rows": rows, "cost_model": {}}},
    }
    stored = tmp_path / "run.json"
    stored.write_text(json.dumps(payload))
    out = svm.rescore(json.loads(stored.read_text()))
    s = out["models"]["m"]["summary"]
    assert s["all"] == stats.summarize_rows(rows, 2)["all"]
    assert s["relative"]["all"]["n"] == 11 and s["noise_ceiling"]["all"]["n"] == 11
    assert s["wall_seconds"] == 3.0 and out["meta"]["rescored"]["costs"] is None
    with pytest.raises(SystemExit):
        svm.main(["--costs", str(stored)])  # --costs without --rescore
    with pytest.raises(SystemExit):
        svm.main(["--schedule", "segments"])  # --schedule without --rescore


def test_noise_by_segments_finds_noise_that_grows_with_segments():
    rng = np.random.default_rng(0)
    rows = []
    for i in range(60):
        segments = 1 + i
        truth = 0.1 * (1 + i / 60)
        noise = np.exp(0.001 * segments * rng.standard_normal(2))  # sd grows with the segment count
        rows.append({"kind": "iid", "segments": segments, "measured_replicates": list(truth * noise)})
    rows.append({"kind": "single", "segments": 1, "measured_replicates": [0.1, 0.5]})  # not a split: ignored
    out = stats.noise_by_segments(rows)
    sds = [b["sd"] for b in out["bins"]]
    assert [b["segments"] for b in out["bins"]] == [[1, 20], [21, 40], [41, 60]]
    assert sds[0] < sds[1] < sds[2] and out["spearman"] > 0.3
    assert stats.noise_by_segments([{**r, "segments": None} for r in rows]) == {}


def test_rounds_pool_their_runs_into_one_estimate():
    from placement_gym.backends.base import LatencyResult
    from placement_gym.measured.timing import summarize

    level = 0.05
    rounds = [
        (summarize([0.11, 0.12, 0.13], [0.05, 0.05, 0.05], level), 0.3),
        (summarize([0.20, 0.22, 0.24], [0.10, 0.10, 0.10], level), 0.5),  # the machine twice as slow
    ]
    evaluations = [
        (LatencyResult(latency=t.estimate, feasible=True, ci=t.ci_half_width, samples=3, host_load=load), t)
        for t, load in rounds
    ]
    rec = svm._pooled_record(evaluations, t=1.0)
    assert rec["samples"] == 6 and rec["rounds"] == 2 and rec["stop"] == "rounds"
    assert rec["latency"] == pytest.approx(
        level * 2.3
    )  # median of the six ratios 2.2, 2.4, 2.6, 2.0, 2.2, 2.4
    assert rec["host_load"] == pytest.approx(0.4) and rec["raw"] == pytest.approx(0.165)
    single = svm._pooled_record(evaluations[:1], t=1.0)
    assert single["latency"] == pytest.approx(rounds[0][0].estimate) and single["samples"] == 3
    infeasible = (LatencyResult(latency=float("inf"), feasible=False, reason="out of memory"), None)
    assert svm._pooled_record([evaluations[0], infeasible], t=1.0)["latency"] is None


def test_tiny_run_in_rounds(tmp_path):
    args = ["--models", "tiny_cnn", "--count", "2", "--rounds", "2", "--round-repeats", "2", "--chunk", "3"]
    res = svm.main([*args, "--time-budget", "0.5", "--out", str(tmp_path / "rounds")])
    rows = res["models"]["tiny_cnn"]["rows"]
    assert all(r["replicates"][0]["rounds"] == 2 and r["replicates"][0]["samples"] == 4 for r in rows)
    assert all(r["segments"] >= 1 for r in rows) and rows[0]["segments"] == 1  # all on the host: one segment
    assert "2 passes over the chunk per replicate" in (tmp_path / "rounds.md").read_text()
