"""Leaderboard and bench cells as Ray tasks, against a local Ray instance the test starts: the rows are a
local run's (timings aside), a worker lost mid-cell reruns the cell into exactly one row, and a failing agent
fails its cell as in a local run, leaving no claim behind."""

from __future__ import annotations

import pytest

from experiments import cli
from experiments.grid import run_grid
from experiments.ray_cells import comparable
from experiments.records.leaderboard import run_tier, store_path
from placement_gym.errors import AgentFailedError, ConfigError
from placement_gym.results import ResultStore

ray = pytest.importorskip("ray")

GRID = dict(models=["tiny_cnn"], platform="cpu-dgpu", backend="simulated")
DIE_ONCE = "tests.experiments.ray_die_once:die_once"


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
    yield "local"
    ray.shutdown()


def _by_key(rows):
    return {r.key: comparable(r) for r in rows}


def test_leaderboard_cells_on_ray_store_the_local_rows(local_ray, tmp_path):
    methods, task = ["heft", "random_search"], ["resnet50/cpu-igpu"]
    quiet = dict(tasks=task, log=lambda *_: None)
    assert run_tier("tiny", methods, tmp_path / "local", **quiet) == 6
    assert run_tier("tiny", methods, tmp_path / "ray", ray_address=local_ray, **quiet) == 6
    for spec in methods:
        local = ResultStore(store_path(tmp_path / "local", "tiny", spec)).rows()
        remote = ResultStore(store_path(tmp_path / "ray", "tiny", spec)).rows()
        assert _by_key(remote) == _by_key(local) and len(remote) == len(local)
        assert {r.extra["code"] for r in remote} == {r.extra["code"] for r in local}
    # resumed on Ray: every cell is stored, nothing is sent
    assert run_tier("tiny", methods, tmp_path / "ray", ray_address=local_ray, **quiet) == 0


def test_bench_cli_on_ray_matches_a_local_grid(local_ray, tmp_path):
    local = run_grid(tmp_path / "local", methods=["heft", "random_search"], seeds=[0, 1], budget=20,
                     progress=False, **GRID)  # fmt: skip
    status = cli.main(
        ["bench", "--models", "tiny_cnn", "--platform", "cpu-dgpu", "--backend", "simulated", "--methods",
         "heft", "random_search", "--seeds", "0", "1", "--budget", "20", "--no-progress", "--out",
         str(tmp_path / "ray"), "--ray-address", local_ray, "--ray-cpus", "0.5"]
    )  # fmt: skip
    assert status == 0
    remote = ResultStore(tmp_path / "ray" / "results.jsonl").rows()
    assert len(remote) == len(local) == 3 and _by_key(remote) == _by_key(local)


def test_a_cell_whose_worker_dies_runs_again_into_one_row(local_ray, tmp_path):
    marker = tmp_path / "died"
    spec = f"{DIE_ONCE}:marker={marker}"
    rows = run_grid(tmp_path / "ray", methods=[spec], seeds=[3], budget=10, progress=False,
                    ray_address=local_ray, **GRID)  # fmt: skip
    assert marker.exists(), "the first try did not run (or did not die)"
    lines = (tmp_path / "ray" / "results.jsonl").read_text().splitlines()
    assert len(rows) == len(lines) == 1 and rows[0].seed == 3 and rows[0].evaluations == 10
    local = run_grid(tmp_path / "local", methods=[spec], seeds=[3], budget=10, progress=False, **GRID)
    assert comparable(rows[0]) == comparable(local[0])


def test_a_failing_agent_fails_its_cell_and_the_others_run_as_locally(local_ray, tmp_path):
    methods = ["tests.experiments.ray_die_once:fail", "random_search"]
    with pytest.raises(AgentFailedError, match="always fails"):
        run_grid(tmp_path, methods=methods, seeds=[0], budget=10, progress=False, ray_address=local_ray, **GRID)
    store = ResultStore(tmp_path / "results.jsonl")
    assert [r.method for r in store.rows()] == ["random_search"]
    assert not list(store.claims_dir.glob("*.json")), "a claim outlived the run"
    with pytest.raises(ConfigError, match="--ray-address"):
        cli.main(["leaderboard", "--ray-address", "local", "--debug"])
