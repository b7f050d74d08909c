"""Tests of the classical baselines and Moirai: validity, budgets, memory, and the MILP against brute force."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from agents import make_method
from agents.baselines.baechi import balanced_shares, favourite_children
from agents.baselines.milp import TIME_SCALE, MILPPlacement, build_milp
from placement_gym.benchmarks import load_benchmark
from placement_gym.envs.device_placement import DevicePlacementEnv
from placement_gym.errors import UnknownNameError
from placement_gym.platforms import load_platform
from placement_gym.simulation.backend import SimulatedBackend
from placement_gym.simulation.cost_model import CostModel

BASELINES = ["single_device", "random_search", "heft", "m_topo", "m_etf", "m_sct", "metis", "milp", "moirai"]
FAST_KWARGS = {"milp": {"time_limit": 10}, "moirai": {"time_limit": 10}}


@pytest.fixture(scope="module")
def tiny_envs() -> list[DevicePlacementEnv]:
    return [
        DevicePlacementEnv("tiny_cnn", "cpu-dgpu", "simulated"),
        DevicePlacementEnv("tiny_bert", "multi-accel", "simulated", coarsening="k", k=12),
    ]


def random_problem(
    seed: int,
    k: int,
    platform: str,
    invoke: float = 0.0,
    capacity: list[float] | None = None,
    big_groups: tuple[int, ...] = (),
    slowdown: list[float] | None = None,
) -> DevicePlacementEnv:
    """An env over a random cost model on ``tiny_bert`` coarsened to at most ``k`` groups.

    Random DAG (every group after the first has 1-2 parents, plus a few skip edges), compute 2-40 us per
    group and device, links 2-10 us + 0.5-2 GB/s, graph inputs on two groups, results from two, an
    ``invoke`` overhead on the last device, and ``capacity`` bytes per device (unlimited by default).
    ``big_groups`` get 1 MB of weights (for memory tests); ``slowdown`` multiplies each device's compute.
    """
    rng = np.random.default_rng(seed)
    bench, plat = load_benchmark("tiny_bert"), load_platform(platform)
    coarse = bench.coarsen("k", k=k)
    g, d = coarse.num_groups, plat.num_devices
    edges = {
        (int(i), j)
        for j in range(1, g)
        for i in rng.choice(j, size=min(j, int(rng.integers(1, 3))), replace=False)
    }
    edges |= {(i, j) for i in range(g) for j in range(i + 2, g) if rng.random() < 0.15}
    edges = sorted(edges)
    src = np.array([e[0] for e in edges], dtype=np.int64)
    dst = np.array([e[1] for e in edges], dtype=np.int64)
    latency = rng.uniform(2e-6, 10e-6, (d, d))
    np.fill_diagonal(latency, 0.0)
    bandwidth = rng.uniform(0.5e9, 2e9, (d, d))
    np.fill_diagonal(bandwidth, np.inf)
    inputs, results = np.zeros(g), np.zeros(g)
    inputs[0], results[g - 1] = 4e3, 4e3
    inputs[rng.integers(0, g)] += 2e3
    results[rng.integers(0, g)] += 1e3
    invoke_overhead = np.zeros(d)
    invoke_overhead[-1] = invoke
    params = rng.uniform(0, 4e3, g)
    params[list(big_groups)] = 1e6
    cost = CostModel(
        device_names=tuple(dev.name for dev in plat.devices),
        compute=rng.uniform(2e-6, 40e-6, (g, d)) * np.asarray(slowdown or [1.0] * d),
        edge_src=src,
        edge_dst=dst,
        edge_bytes=rng.uniform(1e2, 1.5e4, len(src)),
        link_latency=latency,
        link_bandwidth=bandwidth,
        param_bytes=params,
        out_bytes=rng.uniform(1e2, 4e3, g),
        input_bytes=inputs,
        result_bytes=results,
        capacity=np.full(d, 1e12) if capacity is None else np.asarray(capacity, dtype=np.float64),
        invoke_overhead=invoke_overhead,
        host=0,
    )
    backend = SimulatedBackend(bench, coarse, plat, cost_model=cost)
    return DevicePlacementEnv(backend=backend, reward="neg_latency_ms")


def brute_force(env: DevicePlacementEnv) -> float:
    """Lowest simulated latency over all ``D ** G`` placements."""
    grid = np.array(list(itertools.product(range(env.num_devices), repeat=env.num_groups)), dtype=np.int64)
    results = env.problem.backend.evaluate_batch(grid)
    return min(r.latency if r.feasible else np.inf for r in results)


# ---------------------------------------------------------------------- every baseline end to end
@pytest.mark.parametrize("name", BASELINES)
def test_baseline_returns_valid_placement(name: str, tiny_envs: list[DevicePlacementEnv]) -> None:
    for env in tiny_envs:
        result = make_method(name, **FAST_KWARGS.get(name, {})).place(env, budget=40, seed=1)
        assert result.placement.shape == (env.num_groups,)
        assert result.placement.dtype == np.int64
        assert result.placement.min() >= 0 and result.placement.max() < env.num_devices
        assert np.isfinite(result.latency)
        assert 1 <= result.evaluations <= 40
        assert env.problem.evaluate(result.placement).latency == pytest.approx(result.latency)


@pytest.mark.parametrize("name", BASELINES)
def test_budget_is_honoured(name: str) -> None:
    env = random_problem(3, 6, "multi-accel")
    for budget in (1, 3):
        result = make_method(name, **FAST_KWARGS.get(name, {})).place(env, budget=budget)
        assert result.evaluations <= budget


def test_random_search_spends_default_budget_and_respects_mask() -> None:
    env = DevicePlacementEnv("tiny_cnn", "cpu-dgpu", "simulated")
    result = make_method("random_search", budget=25).place(env)
    assert result.evaluations == 25
    assert [n for n, _ in result.history] == list(range(1, 26))


def test_single_device_by_name_and_errors() -> None:
    env = DevicePlacementEnv("tiny_cnn", "cpu-dgpu", "simulated")
    result = make_method("single_device", device="gpu").place(env)
    assert (result.placement == 1).all() and result.evaluations == 1
    best = make_method("single_device").place(env)
    assert best.latency == pytest.approx(env.problem.baseline.latency)
    with pytest.raises(UnknownNameError, match="gpu"):
        make_method("single_device", device="gpuu").place(env)


# ---------------------------------------------------------------------- MILP == brute force
MILP_CASES = [
    pytest.param(0, 6, "cpu-dgpu", 0.0, None, None, id="2dev-6g"),
    pytest.param(1, 8, "cpu-dgpu", 0.0, None, None, id="2dev-8g"),
    pytest.param(2, 8, "cpu-dgpu", 20e-6, None, None, id="2dev-8g-invoke"),
    pytest.param(3, 6, "multi-accel", 0.0, None, None, id="4dev-6g"),
    pytest.param(4, 7, "multi-accel", 30e-6, None, None, id="4dev-7g-npu-invoke"),
    pytest.param(111, 6, "multi-accel", 10e-6, [1e12, 16e3, 9e3, 20e3], None, id="4dev-6g-invoke-memory"),
    pytest.param(104, 8, "cpu-dgpu", 0.0, [1e12, 14e3], None, id="2dev-8g-memory"),
    pytest.param(210, 7, "multi-accel", 12e-6, None, [2.0, 1.5, 1.5, 0.6], id="4dev-7g-fast-npu-invoke"),
]


@pytest.mark.parametrize(("seed", "k", "platform", "invoke", "capacity", "slowdown"), MILP_CASES)
def test_milp_matches_brute_force(
    seed: int, k: int, platform: str, invoke: float, capacity: list | None, slowdown: list | None
) -> None:
    env = random_problem(seed, k, platform, invoke, capacity, slowdown=slowdown)
    optimum = brute_force(env)
    result = MILPPlacement(time_limit=30).place(env)
    assert result.extra["status"] == "Optimal"
    assert result.latency == pytest.approx(optimum, rel=1e-7)
    # the solver's own placement achieves the optimum, and its objective is the simulated latency
    assert result.extra["solver_placement_latency"] == pytest.approx(optimum, rel=1e-7)
    assert result.extra["objective"] == pytest.approx(optimum, rel=1e-6)
    assert result.extra["gap"] <= 1e-6


@pytest.mark.parametrize("seed", [0, 1])
def test_milp_prices_every_placement(seed: int) -> None:
    """With the assignment fixed, the MILP's optimum is the simulated latency (or infeasible if it is)."""
    env = random_problem(111, 6, "multi-accel", 10e-6, [1e12, 16e3, 9e3, 20e3], slowdown=[2.0, 1.5, 1.5, 0.6])
    cost = env.problem.cost_model()
    model = build_milp(cost, np.ones((env.num_groups, env.num_devices), dtype=bool))
    rng = np.random.default_rng(seed)
    for _ in range(12):
        placement = rng.integers(0, env.num_devices, env.num_groups)
        h = model.builder.highs()
        cols = model.x[model.x >= 0].astype(np.int32)
        chosen = set(model.x[np.arange(env.num_groups), placement].tolist())
        fixed = np.array([1.0 if c in chosen else 0.0 for c in cols])
        h.changeColsBounds(len(cols), cols, fixed, fixed)
        h.run()
        simulated = env.problem.evaluate(placement)
        if simulated.feasible:
            assert h.getInfo().objective_function_value / TIME_SCALE == pytest.approx(
                simulated.latency, rel=1e-7
            )
        else:
            assert h.modelStatusToString(h.getModelStatus()) == "Infeasible"


def test_milp_prints_nothing() -> None:
    """No HiGHS banner ("Running HiGHS ... Copyright") or log amid a command's output: a fresh interpreter
    (HiGHS prints its banner once per process) solves a MILP and its stdout and stderr stay empty."""
    import subprocess
    import sys
    from pathlib import Path

    code = (
        "from tests.agents.test_baselines import random_problem\n"
        "from agents.baselines.milp import MILPPlacement\n"
        "MILPPlacement(time_limit=10).place(random_problem(3, 6, 'multi-accel'))\n"
    )
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    assert "HiGHS" not in out.stdout + out.stderr and out.stdout == "", out.stdout


def test_milp_beats_single_devices_when_mixing_pays() -> None:
    env = random_problem(3, 6, "multi-accel")
    result = MILPPlacement(time_limit=30).place(env)
    singles = [env.problem.evaluate(np.full(env.num_groups, d)).latency for d in range(env.num_devices)]
    assert result.latency < min(singles)
    assert len(set(result.placement.tolist())) > 1


def test_moirai_reports_coarsening_level() -> None:
    env = DevicePlacementEnv("tiny_cnn", "cpu-dgpu", "simulated", coarsening="k", k=6)
    result = make_method("moirai", time_limit=10).place(env)
    assert result.extra["coarsening"] == env.problem.coarse.level != "fused"
    assert "coarsening_note" in result.extra
    fused = make_method("moirai", time_limit=10).place(
        DevicePlacementEnv("tiny_cnn", "cpu-dgpu", "simulated")
    )
    assert fused.extra["coarsening"] == "fused" and "coarsening_note" not in fused.extra


# ---------------------------------------------------------------------- memory
@pytest.mark.parametrize("name", ["heft", "m_topo", "m_etf", "m_sct", "milp"])
def test_memory_capacity_respected(name: str) -> None:
    big = (1, 3, 4)
    # device 1 (fast for everything) cannot hold a group with 1 MB of weights
    env = random_problem(5, 7, "cpu-dgpu", capacity=[1e12, 5e5], big_groups=big, slowdown=[4.0, 1.0])
    result = make_method(name, **FAST_KWARGS.get(name, {})).place(env)
    assert np.isfinite(result.latency)
    assert (result.placement[list(big)] != 1).all()
    assert env.problem.evaluate(result.placement).feasible


def test_heft_without_insertion_respects_memory() -> None:
    big = (1, 3, 4)
    env = random_problem(5, 7, "cpu-dgpu", capacity=[1e12, 5e5], big_groups=big, slowdown=[4.0, 1.0])
    result = make_method("heft", insertion=False).place(env)
    assert (result.placement[list(big)] != 1).all()
    assert env.problem.evaluate(result.placement).feasible


def test_heft_insertion_option_changes_the_schedule() -> None:
    """Without insertion a group never fills an idle gap, so on some random DAGs HEFT's choices differ;
    both variants give valid, feasible placements."""
    differ = 0
    for seed in range(8):
        env = random_problem(seed, 10, "multi-accel")
        a, b = (make_method("heft", insertion=flag).place(env) for flag in (True, False))
        assert env.problem.evaluate(b.placement).feasible
        differ += int((a.placement != b.placement).any())
    assert differ > 0


def test_heft_insertion_must_be_a_bool() -> None:
    with pytest.raises(ValueError, match="insertion"):
        make_method("heft", insertion="no")


# ---------------------------------------------------------------------- helpers
def test_balanced_shares_water_fill() -> None:
    shares = balanced_shares(10.0, np.array([100.0, 2.0, 100.0]))
    assert shares.tolist() == pytest.approx([4.0, 2.0, 4.0])


def test_favourite_children_are_a_matching() -> None:
    env = random_problem(1, 8, "cpu-dgpu")
    cost = env.problem.cost_model()
    fav = favourite_children(cost)
    chosen = fav[fav >= 0]
    assert len(set(chosen.tolist())) == len(chosen)
    edges = set(zip(cost.edge_src.tolist(), cost.edge_dst.tolist()))
    assert all((p, int(c)) in edges for p, c in enumerate(fav) if c >= 0)
