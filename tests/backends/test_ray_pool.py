"""The Ray actor pool backend against a local Ray instance started by the test."""

from __future__ import annotations

import numpy as np
import pytest

from placement_gym.backends import make_backend
from placement_gym.benchmarks import load_benchmark
from placement_gym.platforms import load_platform

ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
    yield
    ray.shutdown()


@pytest.mark.slow
def test_ray_pool_matches_direct_backend_and_measures(local_ray):
    bench = load_benchmark("tiny_bert")
    coarse = bench.coarsen("fused", k=8)
    platform = load_platform("cpu-dgpu")
    direct = make_backend("simulated", bench, coarse, platform)
    pool = make_backend("ray", bench, coarse, platform, inner="simulated", num_workers=2)
    assert pool.deterministic
    placements = np.random.default_rng(0).integers(0, 2, size=(6, coarse.num_groups))
    assert [r.latency for r in pool.evaluate_batch(placements)] == [
        direct.evaluate(p).latency for p in placements
    ]
    assert pool.evaluate(placements[0]).latency == direct.evaluate(placements[0]).latency
    pool.close()

    local = load_platform("local")
    measured = make_backend(
        "ray", bench, coarse, local, inner="measured", num_workers=1, inner_kwargs={"warmup": 1, "repeats": 2}
    )
    assert not measured.deterministic
    res = measured.evaluate_batch(np.zeros((2, coarse.num_groups), dtype=np.int64))
    assert all(r.feasible and r.latency > 0 and r.samples >= 1 for r in res)
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
    env.close()
