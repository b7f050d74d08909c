"""The leaderboard's learning curves and profiles: scores read from the stored histories at 100 / 500 / 5,000
distinct placements, points past a tier's budget said to be missing, bands that hold the point, and the note
on methods whose rows are one result."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from experiments.records import curves_page, identical_methods
from experiments.records.leaderboard import RESULTS, split_masked, stored_rows
from placement_gym.tasks import reference_optimum

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def standard():
    """The stored standard rows of the train tasks (the page ranks the mask-binding tasks apart)."""
    return split_masked(stored_rows(ROOT / RESULTS))[0]["standard"]


def test_the_score_at_a_checkpoint_is_the_best_so_far_and_a_finished_run_keeps_its_last_best(standard):
    row = next(r for r in standard if r.method == "random_search" and r.seed == 0)
    ref = reference_optimum(row.model, row.graph_version, row.platform, row.coarsening)
    latencies = dict(row.history)
    assert curves_page.score_at(row, 100) == pytest.approx(ref.score(latencies[100]))
    assert curves_page.score_at(row, 500) == pytest.approx(ref.score(row.history[-1][1]))
    short = dataclasses.replace(row, history=[(1, row.history[0][1]), (7, row.history[3][1])])
    assert curves_page.score_at(short, 100) == pytest.approx(ref.score(row.history[3][1]))
    assert np.isnan(curves_page.score_at(dataclasses.replace(row, history=[]), 100))


def test_standard_rows_give_two_points_and_say_that_the_large_one_is_missing(standard):
    rows = [r for r in standard if r.method in ("random_search", "heft")]
    table, points = curves_page.curve_table({"standard": rows})
    assert points == [100, 500, 5000]
    tier, runs, cells = table["random_search"]
    assert tier == "standard" and runs == 60 and cells[2] is None
    for iqm, low, high in cells[:2]:
        assert low <= iqm <= high
    assert cells[0][0] <= cells[1][0]  # best so far: never worse with more placements
    text = "\n".join(curves_page.section({"standard": rows}))
    assert "no `large` rows yet" in text and curves_page.CURVES_PNG in text


def test_profile_bands_hold_the_point_and_fall_with_tau():
    rng = np.random.default_rng(0)
    matrix = np.clip(rng.normal(0.5, 0.3, size=(5, 12)), -0.4, 0.95)
    taus = np.linspace(-0.5, 1.0, 31)
    mid, low, high = curves_page.profile_bands(matrix, taus, reps=500)
    assert np.all(low <= mid + 1e-12) and np.all(mid <= high + 1e-12)
    assert np.all(np.diff(mid) <= 0) and mid[0] == 1.0 and mid[-1] == 0.0


def test_figures_are_written(standard, tmp_path):
    rows = [r for r in standard if r.method in ("random_search", "local_search")]
    paths = curves_page.write_figures({"standard": rows}, tmp_path)
    assert [p.name for p in paths] == [curves_page.CURVES_PNG, curves_page.PROFILES_PNG]
    assert all(p.read_bytes()[:4] == b"\x89PNG" for p in paths)


def test_ppo_gnn_and_maskable_ppo_gnn_are_one_result_on_the_train_tasks_and_the_page_says_why(standard):
    masked = split_masked(stored_rows(ROOT / RESULTS))[1]
    assert ["maskable_ppo_gnn", "ppo_gnn"] not in identical_methods.identical_groups(
        [r for r in masked if r.platform == "cpu-igpu-carveout"]
    )  # where the masks bind and placements fit, they differ
    groups = identical_methods.identical_groups(standard)
    assert ["maskable_ppo_gnn", "ppo_gnn"] in groups
    text = "\n".join(identical_methods.note(standard))
    assert "`maskable_ppo_gnn` and `ppo_gnn`" in text and "whisper_tiny/cpu-igpu-carveout" in text
    changed = [dataclasses.replace(r, evaluations=r.evaluations - 1) if r.method == "ppo_gnn" and r.seed == 3 else r
               for r in standard]  # fmt: skip
    assert ["maskable_ppo_gnn", "ppo_gnn"] not in identical_methods.identical_groups(changed)


def test_a_same_computation_pair_whose_rows_differ_is_named_with_the_cells_and_the_cpus_that_made_them(standard):
    def on_cpu(row, cpu):
        return dataclasses.replace(row, versions={**row.versions, "cpu_fingerprint": cpu})

    pair = [r for r in standard if r.method in ("ppo_gnn", "maskable_ppo_gnn")]
    same_cpu = [on_cpu(r, "aaaaaaaaaaaa") for r in pair]
    changed = [dataclasses.replace(r, evaluations=r.evaluations - 1) if r.method == "ppo_gnn" and r.seed == 3 else r
               for r in same_cpu]  # fmt: skip
    text = "\n".join(identical_methods.note(changed))
    assert "`maskable_ppo_gnn` and `ppo_gnn` compute the same thing" in text
    assert "differ in 12 of the 60 cells both have" in text
    assert "no reason is recorded here (the rows were made on the same kind of CPU)" in text
    elsewhere = [on_cpu(r, "bbbbbbbbbbbb") if r.method == "ppo_gnn" and r.seed == 3 else r for r in changed]
    text = "\n".join(identical_methods.note(elsewhere))
    assert "`maskable_ppo_gnn` on CPU aaaaaaaaaaaa; `ppo_gnn` on CPU aaaaaaaaaaaa, CPU bbbbbbbbbbbb" in text
    assert "kind of CPU that made them" in text
    unrecorded = [on_cpu(r, None) if r.method == "maskable_ppo_gnn" else r for r in changed]
    assert "`maskable_ppo_gnn` on an unrecorded CPU" in "\n".join(identical_methods.note(unrecorded))
    assert "rows differ" not in "\n".join(identical_methods.note(same_cpu))
