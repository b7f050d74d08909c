"""The aggregates against rliable 1.2.0's own numbers on a fixed input.

The reference numbers below were produced by rliable 1.2.0 (with arch 7.2, pandas 2.3.3: rliable cannot be
installed beside ``arch>=8``, and arch 7.2 does not import with pandas 3) in a separate venv, by
``rly.get_interval_estimates`` (50,000 resamples; 2,000 for the probability of improvement) and
``rly.create_performance_profile`` on the matrices A and B. Point estimates must agree exactly; the
intervals, which come from random resamples, within the bootstrap's own noise.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from experiments.aggregate import (
    improvement_interval,
    iqm,
    optimality_gap,
    performance_profile,
    probability_of_improvement,
    score_matrices,
    stratified_interval,
    write_aggregate,
)
from placement_gym.results import ResultRow
from placement_gym.tasks import reference_optimum

A = np.array(
    [
        [0.6, 0.675, 0.531, 0.377],
        [0.486, 0.352, 0.615, 0.935],
        [0.477, 0.445, 0.722, 0.689],
        [0.626, 0.367, 0.593, 0.774],
        [0.264, 0.486, 0.125, 0.278],
    ]
)  # (runs, tasks)
B = np.array(
    [
        [-0.053, 0.429, 0.12, 0.581],
        [0.547, 0.444, -0.255, 0.338],
        [0.485, 0.534, 0.041, 0.357],
        [0.206, 0.257, 0.818, 0.258],
        [0.49, 0.765, 0.325, 0.466],
    ]
)
TAUS = np.linspace(-0.5, 1.0, 7)
RLIABLE = {
    "a": dict(iqm=0.5236000000000001, iqm_ci=[0.4293, 0.6077], gap=0.47914999999999996, gap_ci=[0.4021, 0.56085],
              profile=[1.0, 1.0, 1.0, 0.95, 0.5, 0.1, 0.0]),
    "b": dict(iqm=0.3849, iqm_ci=[0.2839975, 0.4760999999999999], gap=0.64235, gap_ci=[0.53885, 0.74195],
              profile=[1.0, 0.95, 0.9, 0.75, 0.25, 0.1, 0.0]),
}  # fmt: skip
POI, POI_CI = 0.67, [0.49, 0.84]


@pytest.mark.parametrize(("name", "matrix"), [("a", A), ("b", B)])
def test_iqm_gap_profile_and_intervals_match_rliable(name, matrix):
    ref = RLIABLE[name]
    assert iqm(matrix) == pytest.approx(ref["iqm"], abs=1e-12)
    assert optimality_gap(matrix) == pytest.approx(ref["gap"], abs=1e-12)
    assert performance_profile(matrix, TAUS).tolist() == pytest.approx(ref["profile"], abs=1e-12)
    assert stratified_interval(matrix, iqm) == pytest.approx(ref["iqm_ci"], abs=0.005)
    assert stratified_interval(matrix, optimality_gap) == pytest.approx(ref["gap_ci"], abs=0.005)


def test_probability_of_improvement_matches_rliable():
    assert probability_of_improvement(A, B) == pytest.approx(POI, abs=1e-12)
    assert improvement_interval(A, B) == pytest.approx(POI_CI, abs=0.03)
    assert probability_of_improvement(A, A) == pytest.approx(0.5)


def test_no_spread_gives_a_point_interval():
    same = np.full((5, 3), 0.7)
    assert stratified_interval(same, iqm) == (pytest.approx(0.7), pytest.approx(0.7))


def _row(method: str, seed: int, task: tuple[str, str], score: float, history: list) -> ResultRow:
    ref = reference_optimum(task[0], 1, task[1])
    latency = ref.baseline_latency / (1 + score * (ref.baseline_latency / ref.latency - 1))
    return ResultRow(
        model=task[0], graph_version=1, platform=task[1], backend="simulated", coarsening="fused",
        groups=len(ref.placement), method=method, seed=seed, budget=100, latency=latency,
        cpu_only_latency=ref.baseline_latency, speedup_vs_cpu=1.0, evaluations=history[-1][0], wall_time=1.0,
        placement=list(ref.placement), history=history, protocol="v1", tier="tiny", score=score,
    )  # fmt: skip


def test_rows_become_matrices_and_a_report_with_plots(tmp_path):
    tasks = [("resnet50", "cpu-dgpu"), ("bert", "cpu-igpu")]
    rows = []
    for t, task in enumerate(tasks):
        ref = reference_optimum(task[0], 1, task[1])
        rows.append(_row("heft", 0, task, 0.4 + t / 10, [(1, ref.baseline_latency)]))  # seedless: one run
        for seed in range(5):
            rows.append(
                _row("mine", seed, task, 0.5 + seed / 20, [(1, ref.baseline_latency), (50, ref.latency)])
            )
    rows.append(_row("partial", 0, tasks[0], 0.9, [(1, 1.0)]))
    matrices, found, left_out = score_matrices(rows)
    assert found == sorted(tasks) and matrices["heft"].shape == matrices["mine"].shape == (5, 2)
    assert "partial" in left_out and "1 of 2 tasks" in left_out["partial"]
    assert math.isclose(matrices["heft"][:, 0].std(), 0.0)
    text = write_aggregate(rows, tmp_path, "tiny")
    assert "| mine | 5 x 2 |" in text and "P(row > column)" in text and "left out" in text
    assert (tmp_path / "aggregate.md").read_text() == text
    assert (tmp_path / "performance_profile.png").stat().st_size > 1000
    assert (tmp_path / "score_vs_evaluations.png").stat().st_size > 1000


def test_one_seed_is_one_run_per_task():
    """A run of seed 0 alone (``bench --seeds 0``) is one run per task: never repeated into the protocol's
    five seeds, which would report five runs and a point interval for one."""
    tasks = [("resnet50", "cpu-dgpu"), ("bert", "cpu-igpu")]
    rows = [_row(m, 0, task, 0.5, [(1, 1.0)]) for m in ("heft", "mine") for task in tasks]
    matrices, _, _ = score_matrices(rows)
    assert matrices["heft"].shape == matrices["mine"].shape == (1, 2)


def test_a_seeded_method_run_with_seed_0_only_is_not_repeated_like_a_seedless_one():
    """Beside methods run with seeds 0-4, a seedless method's row counts for every seed, but a seeded
    method run with seed 0 alone (a slow system at the large tier) has one run per task: repeating it
    would report five runs and a narrower interval than one run gives."""
    tasks = [("resnet50", "cpu-dgpu"), ("bert", "cpu-igpu")]
    rows = [_row(m, 0, task, 0.5, [(1, 1.0)]) for m in ("heft", "placeto") for task in tasks]
    rows += [_row("mine", seed, task, 0.5 + seed / 20, [(1, 1.0)]) for seed in range(5) for task in tasks]
    matrices, _, left_out = score_matrices(rows)
    assert not left_out
    assert matrices["heft"].shape == matrices["mine"].shape == (5, 2) and matrices["placeto"].shape == (1, 2)
