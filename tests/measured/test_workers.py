"""Measuring workers: disjoint core sets, the one-line error when cores are short, each worker process pinned
to its cores, and the ``local`` platform built for (and its figures stored under) the cores it runs on."""

from __future__ import annotations

import csv
import dataclasses
import json
import os

import pytest

from placement_gym.errors import ConfigError
from placement_gym.measured import workers
from placement_gym.measured.workers import assign_cores, cores_per_device, measuring_layout, pin_process
from placement_gym.platforms import load_platform
from placement_gym.platforms.machine import core_span, cores_key, process_cores


def test_assign_cores_gives_disjoint_sets_in_order():
    assert assign_cores(2, 2, range(4)) == [(0, 1), (2, 3)]
    assert assign_cores(2, 1, [5, 3]) == [(3,), (5,)]
    assert assign_cores(1, 3, [0, 2, 4, 6]) == [(0, 2, 4)]
    layout = assign_cores(3, 2, range(8))
    assert len({c for s in layout for c in s}) == 6 and all(len(s) == 2 for s in layout)
    assert assign_cores(1, 1) == [process_cores()[:1]]  # default: this process's own cores


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            (2, 2, [0, 1]),
            "2 measuring workers of 2 cores each need 4 cores, but this process may run on 2 (cores 0,1): "
            "use --cores-per-worker 1 (a different platform, built on 1 core), or --n-envs 1, "
            "or a machine with 4 cores",
        ),
        ((3, 1, [0, 1]), "need 3 cores, but this process may run on 2 (cores 0,1): use --n-envs 2, or"),
        ((1, 2, [7]), "1 measuring worker of 2 cores needs 2 cores, but this process may run on 1 (cores 7)"),
        (
            (2, 2, [7]),
            "may run on 1 (cores 7): use --n-envs 1 (one process, measuring on the cores it has), or",
        ),
    ],
)
def test_too_few_cores_is_one_line_with_the_numbers(args, message):
    with pytest.raises(ConfigError) as info:
        assign_cores(*args)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_the_error_names_the_option_that_sets_the_worker_count():
    with pytest.raises(ConfigError, match="or --ray-workers 1, or a machine with 4 cores"):
        assign_cores(2, 2, [0, 1, 2], count_option="--ray-workers")


def test_assign_cores_refuses_bad_counts():
    for bad in (0, -1, True, 1.5):
        with pytest.raises(ConfigError, match="must be an integer >= 1"):
            assign_cores(bad, 1, range(4))
        with pytest.raises(ConfigError, match="must be an integer >= 1"):
            assign_cores(1, bad, range(4))


def test_the_default_is_a_core_per_virtual_cpu(monkeypatch, platform):
    from placement_gym.platforms import local

    assert cores_per_device(platform) == 2  # two 1-thread CPU devices
    assert cores_per_device(load_platform("cpu-dgpu")) == 1
    monkeypatch.setattr(local, "local_accelerators", lambda: [])
    assert measuring_layout("local", 2, available=range(4)) == [(0, 1), (2, 3)]
    assert measuring_layout("local", 2, 1, available=range(2)) == [(0,), (1,)]
    with pytest.raises(ConfigError, match="need 4 cores"):
        measuring_layout("local", 2, available=range(2))
    monkeypatch.setattr(local, "local_accelerators", lambda: ["GPU.0"])
    with pytest.raises(ConfigError, match="would share this machine's GPU.0"):
        measuring_layout("local", 2, available=range(8))
    assert measuring_layout("local", 1, available=range(8)) == [(0,)]


def test_core_names():
    assert core_span((0, 1)) == "0,1" and core_span((2, 3, 4, 5)) == "2-5" and core_span([5, 0, 2]) == "0,2,5"
    assert (
        cores_key((0, 1, 2, 3)) == "cores0-3"
        and cores_key((1,)) == "cores1"
        and cores_key((0, 2)) == "cores0_2"
    )


def test_local_platform_is_built_for_and_stored_under_its_cores(monkeypatch, tmp_path):
    """Figures calibrated on one core set never describe another: the cache key names the cores, the
    platform records them and says so, and a process's platform follows its affinity."""
    from placement_gym.measured import boundary_costs
    from placement_gym.platforms import local

    monkeypatch.setenv("PLACEMENT_GYM_CACHE", str(tmp_path))
    speedups = {(0,): 1.0, (0, 1): 1.7}
    cores_now = [(0,)]
    measured = []

    def fake_figures():
        measured.append(cores_now[0])
        return {
            "copy_bandwidth": 1e10,
            "copy_latency": 1e-6,
            "boundary_bandwidth": 2e9,
            "blocked_boundary_bandwidth": 1e8,
            "invoke_overhead": 4e-5,
            "parallel_speedup": speedups[cores_now[0]],
        }

    fake_boundaries = {"fixed": 8e-5, "bandwidth": 2e9, "blocked_bandwidth": 1e8}
    for module in (local, boundary_costs):
        monkeypatch.setattr(module, "process_cores", lambda: cores_now[0])
    monkeypatch.setattr(local, "measure_local_figures", fake_figures)
    monkeypatch.setattr(boundary_costs, "measure_boundary_costs", lambda platform: fake_boundaries)
    monkeypatch.setattr(local, "local_accelerators", lambda: [])
    local._local_platform.cache_clear()
    try:
        one = local.local_platform()
        cores_now[0] = (0, 1)
        two = local.local_platform()
        assert local.local_platform() is two and measured == [(0,), (0, 1)]  # measured once per core set
        speedups[(0, 1)] = 1.5  # calibrate --boundaries: measured again on the same cores
        again = local.recalibrate()
        assert measured == [(0,), (0, 1), (0, 1)] and local.local_platform() is again
        assert [d.contention for d in again.devices] == pytest.approx([0.5, 0.5])
    finally:
        local._local_platform.cache_clear()
    assert one.cores == (0,) and two.cores == (0, 1)
    assert "core 0, shared by both" in one.description and "cores 0,1" in two.description
    assert [d.contention for d in one.devices] == [1.0, 1.0]
    assert [d.contention for d in two.devices] == pytest.approx([0.3, 0.3])
    entries = sorted(p.name for p in (tmp_path / "platform").iterdir() if not p.name.startswith("."))
    assert [e for e in entries if "-cores0-" in e or "-cores0_1-" in e] == entries and len(entries) == 4
    for entry in entries:
        assert json.loads((tmp_path / "platform" / entry / "meta.json").read_text())["cores"] in ([0], [0, 1])


def test_measured_results_of_part_of_the_machine_are_kept_apart(platform, tiny_cnn):
    """A platform built on fewer cores than the machine has keys its results by that count."""
    from placement_gym.measured.backend import MeasuredBackend

    coarse = tiny_cnn.coarsen("fused")
    whole = dataclasses.replace(platform, cores=tuple(range(os.cpu_count() or 1)))
    assert "cores" not in MeasuredBackend(tiny_cnn, coarse, whole).config
    assert "cores" not in MeasuredBackend(tiny_cnn, coarse, platform).config  # not tied to cores
    if (os.cpu_count() or 1) > 1:
        part = dataclasses.replace(platform, cores=(0,))
        assert MeasuredBackend(tiny_cnn, coarse, part).config["cores"] == 1


def _measured_env(platform):
    from placement_gym.envs.device_placement import DevicePlacementEnv

    return DevicePlacementEnv(
        model="tiny_cnn", platform=platform, backend="measured", backend_kwargs={"repeats": 2, "rel_ci": None}
    )


def test_each_worker_process_is_pinned_to_its_cores(platform):
    """The SubprocVecEnv workers of a measured env run pinned where worker_cores says, and measure there."""
    from agents.sb3.methods import PPOGNN

    core = process_cores()[0]
    method = PPOGNN(n_envs=2)
    method.worker_cores = [(core,), (core,)]  # one core for both, so that the test runs on any machine
    vec = method.make_vec_env(_measured_env(platform))
    try:
        described = vec.env_method("describe")
        assert [d["affinity"] for d in described] == [[core], [core]]
        assert [d["cores"] for d in described] == [[core], [core]]
        assert len({d["pid"] for d in described}) == 2 and os.getpid() not in {d["pid"] for d in described}
        vec.reset()
        _, _, _, infos = vec.step([vec.action_space.sample() for _ in range(2)])
        assert all(info["latency"] > 0 for info in infos)
    finally:
        vec.close()
    method.worker_cores = [(core,)]
    with pytest.raises(Exception, match="1 core set"):
        method.make_vec_env(_measured_env(platform))


def test_copies_of_a_measured_env_get_disjoint_cores_by_default(platform):
    from agents.sb3.methods import PPOGNN

    cores = process_cores()
    method = PPOGNN(n_envs=2)
    if len(cores) < 4:  # two virtual CPUs a worker: too few cores is the one-line error
        with pytest.raises(ConfigError, match="need 4 cores"):
            method.make_vec_env(_measured_env(platform))
        return
    vec = method.make_vec_env(_measured_env(platform))
    try:
        assert [d["affinity"] for d in vec.env_method("describe")] == [list(cores[:2]), list(cores[2:4])]
    finally:
        vec.close()


def test_pin_process_moves_every_thread(monkeypatch):
    calls = []
    monkeypatch.setattr(os, "sched_setaffinity", lambda tid, cores: calls.append((tid, tuple(cores))))
    pin_process((3,))
    assert os.getpid() in {tid for tid, _ in calls}  # the main thread, and every other one
    assert len(calls) >= 1 and all(cores == (3,) for _, cores in calls)
    with pytest.raises(ConfigError, match="at least one core"):
        pin_process(())


def _train(tmp_path, *extra: str) -> list[str]:
    return [
        "train", "--agent", "ppo_gnn", "--env", "DevicePlacement-resnet50-v1", "--budget", "10",
        "--no-progress", "--out", str(tmp_path / "run"), *extra,
    ]  # fmt: skip


def test_train_with_too_few_cores_is_one_line_before_anything_runs(monkeypatch, tmp_path, capsys):
    """The ResNet-50 command with more workers than cores: status 2, the numbers, nothing built or pinned."""
    from experiments import cli
    from placement_gym.platforms import local

    monkeypatch.setattr(workers, "process_cores", lambda: (0, 1))
    monkeypatch.setattr(local, "local_accelerators", lambda: [])
    affinity = process_cores()
    assert cli.main(_train(tmp_path, "--n-envs", "2")) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err
    assert (
        "2 measuring workers of 2 cores each need 4 cores, but this process may run on 2 (cores 0,1)" in err
    )
    assert "--cores-per-worker 1" in err
    assert cli.main(_train(tmp_path, "--n-envs", "3", "--cores-per-worker", "1")) == 2
    assert "3 measuring workers of 1 core each need 3 cores" in capsys.readouterr().err
    assert process_cores() == affinity and not (tmp_path / "run").exists()


def test_train_pins_itself_to_the_first_workers_cores(monkeypatch, tmp_path):
    """train() pins this process (which measures the final placement) to worker 0's cores and hands the
    workers' core sets to the learner, before the env is made."""
    from experiments.cli import train as train_module

    pinned, made = [], []
    monkeypatch.setattr(workers, "process_cores", lambda: (4, 5, 6, 7))
    monkeypatch.setattr(workers, "pin_process", lambda cores: pinned.append(tuple(cores)))

    def stop(env_id, env_kwargs, *args, **kwargs):
        made.append(pinned[:])
        raise ConfigError("stop here")

    monkeypatch.setattr(train_module, "make_env", stop)
    kwargs = {"model": "tiny_cnn", "platform": "cpu-dgpu", "backend": "measured"}
    with pytest.raises(ConfigError, match="stop here"):
        train_module.train(
            "ppo_gnn", "DevicePlacement-v0", tmp_path / "run", 10, 0, kwargs, {}, n_envs=2, cores_per_worker=2
        )
    assert made == [[(4, 5)]]
    pinned.clear()
    simulated = {**kwargs, "backend": "simulated"}
    with pytest.raises(ConfigError, match="stop here"):
        train_module.train("ppo_gnn", "DevicePlacement-v0", tmp_path / "run", 10, 0, simulated, {}, n_envs=2)
    assert pinned == []  # a simulated env measures nothing: no pinning


@pytest.mark.slow
def test_train_with_two_measuring_workers_of_one_core(tmp_path):
    """The one command, on a tiny model: 2 workers of 1 core each train ppo_gnn on the local platform of
    their own core; this process measures the final placement on the first worker's core."""
    from experiments.cli.train import train

    cores = process_cores()
    if len(cores) < 2:
        pytest.skip("needs 2 cores this process may run on")
    env_kwargs = {
        "model": "tiny_cnn",
        "platform": "local",
        "backend": "measured",
        "backend_kwargs": {"repeats": 2, "rel_ci": None},
    }
    try:
        agent_kwargs = {"n_steps": 4, "batch_size": 8}
        result = train(
            "ppo_gnn", "DevicePlacement-v0", tmp_path / "run", 9, 0, env_kwargs, agent_kwargs,
            n_envs=2, progress=False, cores_per_worker=1,
        )  # fmt: skip
        assert process_cores() == cores[:1]  # pinned to the first worker's core for the final placement
    finally:
        pin_process(cores)
    history = (tmp_path / "run" / "history.csv").read_text().splitlines()
    assert 3 <= len(history) - 1 == result.evaluations <= 9 and result.latency > 0
    rows = list(csv.DictReader(history))
    *training, final = rows
    assert {r["worker"] for r in training} <= {"0", "1"} and final["worker"] == ""
    assert all(float(r["evaluation_s"]) >= 0 for r in rows) and all(r["vector_step"] for r in training)
