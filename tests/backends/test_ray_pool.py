"""The Ray actor pool backend against a local Ray instance started by the test."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import placement_gym
from placement_gym.backends import make_backend
from placement_gym.backends.ray_pool import claim_cores
from placement_gym.benchmarks import load_benchmark
from placement_gym.errors import BackendError, PlacementError, UnknownNameError
from placement_gym.platforms import load_platform
from placement_gym.simulation.backend import SimulatedBackend

ray = pytest.importorskip("ray")


class SlowSimulated(SimulatedBackend):
    """The simulator, 0.1 s per evaluation: long enough to kill an actor while it works."""

    def evaluate(self, placement):
        time.sleep(0.1)
        return super().evaluate(placement)


class CrashingSimulated(SimulatedBackend):
    """The simulator, except that the worker process dies on any placement putting group 0 on device 1."""

    def evaluate(self, placement):
        if placement[0] == 1:
            os._exit(1)
        return super().evaluate(placement)


@pytest.fixture(scope="module")
def local_ray():
    # Logical CPUs: the simulated pools below reserve little, the measured one pins real cores.
    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def problem():
    bench = load_benchmark("tiny_cnn")
    return bench, bench.coarsen("fused"), load_platform("cpu-dgpu")


def _placements(problem, n: int, seed: int = 0) -> np.ndarray:
    _, coarse, platform = problem
    return np.random.default_rng(seed).integers(0, platform.num_devices, size=(n, coarse.num_groups))


@pytest.fixture(scope="module")
def pool(local_ray, problem):
    """Two actors, each evaluating with :class:`SlowSimulated` (shared: each actor takes seconds to start)."""
    pool = make_backend("ray", *problem, inner=SlowSimulated, num_workers=2, cpus_per_worker=0.5)
    yield pool
    pool.close()


def test_pool_matches_direct_backend_in_input_order(pool, problem):
    direct = make_backend("simulated", *problem)
    assert pool.deterministic
    placements = _placements(problem, 12)
    placements[5] = placements[2]  # a repeat within the batch shares the first one's result
    assert pool.evaluate_batch(placements) == direct.evaluate_batch(placements)
    # Repeats in later calls go back to the actor that has them cached, as a single backend answers them.
    assert pool.evaluate(placements[3]) == direct.evaluate(placements[3])
    again = pool.evaluate_batch(placements[::-1])
    assert again == direct.evaluate_batch(placements[::-1]) and all(r.cached for r in again)
    assert pool.evaluate_batch(np.zeros((0, problem[1].num_groups), dtype=np.int64)) == []
    with pytest.raises(PlacementError):
        pool.evaluate_batch(placements[:, :-1])
    with pytest.raises(PlacementError):
        pool.evaluate(np.full(problem[1].num_groups, 7))


def test_workers_import_the_drivers_code(pool):
    for info in pool.describe_workers():
        assert Path(info["package"]).resolve() == Path(placement_gym.__file__).resolve()
        assert info["pid"] != os.getpid() and info["cores"] == []


def test_a_batch_spreads_over_all_workers(pool, problem):
    before = [w["evaluations"] for w in pool.describe_workers()]
    pool.evaluate_batch(_placements(problem, 8, seed=1))
    counts = [w["evaluations"] - b for w, b in zip(pool.describe_workers(), before)]
    assert sum(counts) == 8 and min(counts) >= 1


def test_killing_a_worker_mid_batch_loses_no_evaluation(pool, problem):
    direct = make_backend("simulated", *problem)
    replaced = pool.replaced
    victim = pool.describe_workers()[0]["pid"]
    placements = _placements(problem, 16, seed=2)
    killer = threading.Timer(0.35, os.kill, (victim, signal.SIGKILL))
    killer.start()
    results = pool.evaluate_batch(placements)
    killer.join()
    assert pool.replaced == replaced + 1
    assert [r.latency for r in results] == [r.latency for r in direct.evaluate_batch(placements)]
    assert all(r.feasible for r in results)
    assert victim not in [w["pid"] for w in pool.describe_workers()]
    # An actor dying between calls: every later single evaluation still returns.
    os.kill(pool.describe_workers()[1]["pid"], signal.SIGKILL)
    for p in placements[:4]:
        assert pool.evaluate(p).latency == direct.evaluate(p).latency
    assert pool.replaced == replaced + 2


def test_a_placement_that_keeps_killing_workers_becomes_infeasible(local_ray, problem):
    direct = make_backend("simulated", *problem)
    pool = make_backend(
        "ray", *problem, inner=CrashingSimulated, num_workers=2, max_retries=1, cpus_per_worker=0.5
    )
    try:
        placements = _placements(problem, 6, seed=3)
        placements[:, 0] = 0
        placements[4, 0] = 1  # kills the worker evaluating it
        results = pool.evaluate_batch(placements)
        for i, (r, d) in enumerate(zip(results, direct.evaluate_batch(placements))):
            if i == 4:
                assert not r.feasible and r.latency == float("inf")
                assert "Ray worker failed 2 times" in r.reason and "ActorDiedError" in r.reason
            else:
                assert r == d
        assert pool.replaced == 2  # one try and one retry, each killing its actor
    finally:
        pool.close()


def test_claim_cores_never_hands_out_a_held_core(tmp_path):
    allowed = sorted(os.sched_getaffinity(0))
    first, fds = claim_cores(1, tmp_path)
    try:
        if len(allowed) > 1:
            second, more = claim_cores(1, tmp_path)
            assert second != first
            for fd in more:
                os.close(fd)
        with pytest.raises(BackendError, match="only"):
            claim_cores(len(allowed), tmp_path)
    finally:
        for fd in fds:
            os.close(fd)
    cores, fds = claim_cores(len(allowed), tmp_path)  # released with the descriptors
    assert cores == allowed
    for fd in fds:
        os.close(fd)


def test_bad_arguments_are_named(local_ray, problem):
    with pytest.raises(BackendError, match="num_workers"):
        make_backend("ray", *problem, inner="simulated", num_workers=0)
    with pytest.raises(UnknownNameError, match="simulatd"):
        make_backend("ray", *problem, inner="simulatd")
    with pytest.raises(BackendError, match="nest"):
        make_backend("ray", *problem, inner="ray")
    with pytest.raises(BackendError, match="max_retries"):
        make_backend("ray", *problem, inner="simulated", max_retries=-1)
    with pytest.raises(BackendError, match="could not start"):
        make_backend("ray", *problem, inner="simulated", num_workers=1, inner_kwargs={"no_such": 1})
    with pytest.raises(BackendError, match="did not start within 2"):
        make_backend("ray", *problem, inner="simulated", num_workers=1, cpus_per_worker=64, start_timeout=2)


@pytest.mark.slow
def test_ray_pool_measures(local_ray):
    bench = load_benchmark("tiny_bert")
    coarse = bench.coarsen("fused", k=8)
    measured = make_backend(
        "ray",
        bench,
        coarse,
        load_platform("local"),
        inner="measured",
        num_workers=2,
        pin_cpus=True,
        inner_kwargs={"warmup": 1, "repeats": 2},
    )
    try:
        assert not measured.deterministic
        cores = [w["cores"] for w in measured.describe_workers()]
        assert all(len(c) == 1 for c in cores) and cores[0] != cores[1]
        res = measured.evaluate_batch(np.eye(2, coarse.num_groups, dtype=np.int64))
        assert all(r.feasible and r.latency > 0 and r.samples >= 1 for r in res)
    finally:
        measured.close()


@pytest.mark.slow
def test_ray_backend_drives_an_env(local_ray):
    from placement_gym.envs import DevicePlacementEnv

    env = DevicePlacementEnv(
        "tiny_cnn", "cpu-dgpu", "ray", backend_kwargs={"inner": "simulated", "num_workers": 1}
    )
    env.reset(seed=0)
    _, reward, terminated, _, info = env.step(np.zeros(env.num_groups, dtype=np.int64))
    assert terminated and info["feasible"] and np.isfinite(reward)
    pool = env.problem.backend
    os.kill(pool.describe_workers()[0]["pid"], signal.SIGKILL)
    for _ in range(2):  # a dead actor used to make every second step raise ActorDiedError
        env.reset()
        _, reward, _, _, info = env.step(np.ones(env.num_groups, dtype=np.int64))
        assert info["feasible"] and np.isfinite(reward)
    assert pool.replaced == 1
    env.close()
    with pytest.raises(BackendError, match="closed"):
        pool.evaluate(np.zeros(env.num_groups, dtype=np.int64))
