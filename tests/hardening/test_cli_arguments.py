"""The CLI's argument layer (issue #25): every refused input is one line on stderr with exit status 2.

Each case is a finding of the adversarial review, re-run as it was written there.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from experiments import cli
from experiments.cli.arguments import run_command
from experiments.filenames import MAX_STEM, file_stem

SIM = {"model": "tiny_cnn", "platform": "cpu-dgpu", "backend": "simulated"}
BENCH = ["bench", "--models", "tiny_cnn", "--platform", "cpu-dgpu", "--backend", "simulated", "--no-progress"]
TRAIN = ["train", "--agent", "heft", "--env", "DevicePlacement-v0", "--env-kwargs", json.dumps(SIM), "--no-progress"]


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and "\n" not in err, err
    assert err.startswith("placement-gym: error: "), err
    return err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([*BENCH, "--budget", "0"], "--budget: must be >= 1, got 0"),
        ([*BENCH, "--budget", "-1"], "--budget: must be >= 1, got -1"),
        ([*BENCH, "--budget", "1.5"], "--budget: must be an integer"),
        ([*BENCH, "--budget", str(10**12)], "needs at least 116.4 TiB of memory"),
        ([*TRAIN, "--budget", str(10**12)], "needs at least 116.4 TiB of memory"),
        ([*BENCH, "--seeds", "-1"], "--seeds: must be >= 0, got -1"),
        ([*BENCH, "--seeds", str(2**32)], "at most 2**32 - 1"),
        ([*TRAIN, "--seed", "-3"], "--seed: must be >= 0, got -3"),
        ([*TRAIN, "--checkpoint-every", "-4"], "--checkpoint-every: must be >= 0, got -4"),
        ([*TRAIN, "--n-envs", "0"], "--n-envs: must be >= 1"),
        ([*TRAIN, "--max-nodes", "-2"], "--max-nodes: must be >= 1"),
        ([*TRAIN, "--max-edges", "64"], "--max-nodes and --max-edges pad the graphs of multi-task training"),
        ([*BENCH, "--seeds", "0", "0", "1"], "--seeds: 0 is given twice"),
        ([*BENCH, "--methods", "heft", "heft"], "--methods: heft is given twice"),
        ([*BENCH, "--methods", "milp:time_limit=30", "milp:time_limit=30.0"], "milp:time_limit=30 is given twice"),
        ([*BENCH, "--models", "tiny_cnn", "tiny_cnn"], "--models: tiny_cnn is given twice"),
        ([*BENCH, "--methods", "milp:time_limit=NaN"], "time_limit must be a finite number, got 'NaN'"),
        ([*BENCH, "--methods", "milp:time_limit=inf"], "time_limit must be a finite number"),
        ([*BENCH, "--methods", "milp:time_limit=abc"], "time_limit must be a number, got 'abc'"),
        ([*BENCH, "--methods", "milp:time_limt=3"], "Did you mean 'time_limit'?"),
        ([*BENCH, "--methods", "hsdag:hidden=10**9"], "hidden must be an integer"),
        ([*BENCH, "--methods", "hsdag:hidden=1000000000"], "hidden=1000000000 needs at least"),
        ([*BENCH, "--methods", "ppo_gnn:n_steps=1000000000"], "n_steps=1000000000 needs at least"),
        ([*BENCH, "--methods", "random_search:batch_size=0"], "batch_size must be >= 1, got 0"),
        ([*BENCH, "--methods", "rl_placement:hidden=3"], "hidden must be even"),  # the class's own check
        ([*BENCH, "--methods", "hsdag:levels=1000000000"], "levels must be >= 1 and <= 32"),  # a loop: a hang
        ([*BENCH, "--methods", "ppo_gnn:layers=100000"], "layers must be >= 1 and <= 64"),
        ([*BENCH, "--methods", "exact:enumerate_limit=1000000000000"], "needs at least"),
        ([*TRAIN, "--agent-kwargs", '{"hidden": 1000000000}'], "--agent-kwargs"[:0] + "needs at least"),
        ([*TRAIN, "--agent-kwargs", '{"insertoin": true}'], "Did you mean 'insertion'?"),
        ([*TRAIN, "--agent-kwargs", '{"insertion": NaN}'], "must be finite JSON numbers"),
        ([*TRAIN, "--agent-kwargs", "[1]"], "must be a JSON object"),
        ([*TRAIN, "--env-kwargs", '{"infeasible_reward": 1e999}'], "must be finite JSON numbers, got 1e999"),
        (["graphs", "--k", "0"], "--k: must be >= 1"),
        ([*BENCH, "--input-shape", "x=1,3", "--input-shape", "x=1,4"], "gives input 'x' twice"),
        (["show", "--row", "-1", "x.json"], "--row: must be >= 0"),
        (["bogus"], "invalid choice: 'bogus'"),
        (["bench", "--unknown-flag"], "unrecognized arguments: --unknown-flag"),
    ],
)
def test_a_refused_argument_is_one_line_and_status_2(tmp_path, monkeypatch, capsys, argv, message) -> None:
    monkeypatch.chdir(tmp_path)
    if argv[0] == "train" and "--agent-kwargs" in argv and "hidden" in argv[-1]:
        argv = [a if a != "heft" else "hsdag" for a in argv]
    assert cli.main([*argv, "--out", str(tmp_path / "out")] if argv[0] in ("bench", "train") else argv) == 2
    assert message in _one_line_error(capsys)
    assert not (tmp_path / "out" / "results.jsonl").exists(), "refused before any cell ran"


def test_an_out_that_is_a_file_is_refused(tmp_path, capsys) -> None:
    (tmp_path / "afile").write_text("")
    for argv in (BENCH, TRAIN):
        assert cli.main([*argv, "--out", str(tmp_path / "afile")]) == 2
        assert "is a file; give a folder" in _one_line_error(capsys)


def test_a_run_refused_when_it_starts_prints_no_progress_bar(tmp_path, capsys) -> None:
    argv = ["train", "--agent", "single_device", "--env", "DevicePlacement-v0", "--env-kwargs", json.dumps(SIM)]
    assert cli.main([*argv, "--agent-kwargs", '{"device": "gpuu"}', "--out", str(tmp_path / "run")]) == 2
    assert "Did you mean 'gpu'?" in _one_line_error(capsys)  # the only line: no bar before it


def test_a_budget_below_one_is_refused_by_the_api_too(tiny_cnn) -> None:
    from agents import BudgetTracker
    from placement_gym.errors import ConfigError, PlacementGymError
    from placement_gym.problem import PlacementProblem

    problem = PlacementProblem.make("tiny_cnn", "cpu-dgpu", "simulated")
    for bad in (0, -1):
        with pytest.raises(PlacementGymError, match="budget must be >= 1"):
            BudgetTracker(problem, bad)
    with pytest.raises(ConfigError, match="needs at least"):
        BudgetTracker(problem, 10**15)


def test_a_refused_allocation_is_one_line(capsys) -> None:
    def allocate(argv) -> None:
        np.empty(2**62, dtype=np.uint8)  # NumPy refuses at once: more than any machine has

    assert run_command(allocate, []) == 2
    assert "out of memory" in _one_line_error(capsys)

    def torch_allocate(argv) -> None:
        raise RuntimeError("[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate memory")

    assert run_command(torch_allocate, []) == 2
    assert "can't allocate memory" in _one_line_error(capsys)

    def bug(argv) -> None:
        raise RuntimeError("a bug keeps its traceback")

    with pytest.raises(RuntimeError, match="a bug"):
        run_command(bug, [])


def test_help_exits_0_and_module_entry_points_keep_the_contract(capsys) -> None:
    from experiments.cli import bench, show, train

    assert cli.main(["--help"]) == 0
    assert bench.main(["--budget", "0"]) == 2 and "must be >= 1" in _one_line_error(capsys)
    assert train.main(["--agent", "heft"]) == 2 and "--env" in _one_line_error(capsys)
    assert show.main(["missing.json"]) == 2 and "missing.json" in _one_line_error(capsys)


def test_bench_on_a_model_file_in_a_folder_writes_its_report(tmp_path, capsys) -> None:
    """``bench --models path/to/net.xml`` used to write its rows, then die writing the plot whose name held the path."""
    import openvino as ov
    import openvino.opset13 as ops

    x = ops.parameter([1, 3, 8, 8], ov.Type.f32, name="x")
    y = ops.relu(ops.convolution(x, ops.constant(np.ones((4, 3, 3, 3), np.float32)), [1, 1], [1, 1], [1, 1], [1, 1]))
    (tmp_path / "path" / "to").mkdir(parents=True)
    model = tmp_path / "path" / "to" / "net.xml"
    ov.save_model(ov.Model([y], [x], "net"), model)
    out = tmp_path / "out"
    argv = ["bench", "--models", str(model), "--methods", "heft", "--platform", "cpu-dgpu", "--backend", "simulated"]
    assert cli.main([*argv, "--seeds", "0", "--budget", "5", "--out", str(out), "--no-progress"]) == 0
    pictures = sorted(p.name for p in out.glob("placement_*.png"))
    assert len(pictures) == 1 and pictures[0].startswith("placement_net.xml-"), pictures
    assert {p.parent for p in out.rglob("*")} == {out}, "everything inside --out, nothing in sub-folders"


def test_train_twice_into_one_out_is_refused_and_overwrite_removes_only_its_outputs(tmp_path, capsys) -> None:
    out = tmp_path / "run"
    argv = [*TRAIN, "--agent", "random_search", "--budget", "4", "--out", str(out)]
    assert cli.main(argv) == 0
    (out / "notes.txt").write_text("mine")
    history = (out / "history.csv").read_text()
    assert cli.main(argv) == 2
    err = _one_line_error(capsys)
    assert "already holds a run" in err and "history.csv" in err and "best_placement.json" in err
    assert (out / "history.csv").read_text() == history, "the first run's history is untouched"
    assert cli.main([*argv, "--overwrite", "--budget", "3"]) == 0
    rows = (out / "history.csv").read_text().splitlines()
    assert rows[0].startswith("evaluation,") and len(rows) == 1 + 3, "only the second run's evaluations"
    assert (out / "notes.txt").read_text() == "mine", "--overwrite removes train's outputs only"


def test_history_names_the_worker_and_seconds_of_each_evaluation(tmp_path) -> None:
    """history.csv's columns: the first five as before, then worker, evaluation_s and vector_step (empty
    for an evaluation made in this process, and seconds empty where nobody timed it)."""
    import csv

    import gymnasium as gym

    from agents.base import BudgetTracker
    from experiments.cli.train import HISTORY_HEADER, RunLogger

    env = gym.make("DevicePlacement-v0", **SIM)
    problem = env.unwrapped.problem
    logger = RunLogger(tmp_path, env, 3, {}, progress=False)
    tracker = BudgetTracker(problem, 3)
    tracker.listeners.append(logger)
    g = problem.num_groups
    tracker.record(np.zeros(g, dtype=np.int64), 1e-3, True, worker=1, vector_step=2, evaluation_s=0.125)
    tracker.record(np.ones(g, dtype=np.int64), 2e-3, True, worker=0, vector_step=2)  # no seconds reported
    problem.evaluate(np.arange(g, dtype=np.int64) % 2)  # in this process
    tracker.detach()
    logger.close()
    text = (tmp_path / "history.csv").read_text()
    assert text.startswith("evaluation,latency_s,feasible,best_latency_s,wall_s,") and text.splitlines()[0] == HISTORY_HEADER
    rows = list(csv.DictReader(text.splitlines()))
    assert [(r["worker"], r["evaluation_s"], r["vector_step"]) for r in rows[:2]] == [("1", "0.125000", "2"), ("0", "", "2")]
    assert rows[2]["worker"] == rows[2]["vector_step"] == "" and float(rows[2]["evaluation_s"]) > 0
    assert [r["evaluation"] for r in rows] == ["1", "2", "3"]


def test_history_is_created_exclusively(tmp_path) -> None:
    """Two runs started together both pass the check; the second to create history.csv stops."""
    import gymnasium as gym

    from experiments.cli.train import RunLogger
    from placement_gym.errors import ConfigError

    env = gym.make("DevicePlacement-v0", **SIM)
    first = RunLogger(tmp_path, env, 3, {}, progress=False)
    with pytest.raises(ConfigError, match="history.csv already exists"):
        RunLogger(tmp_path, env, 3, {}, progress=False)
    first.close()


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
def test_file_stem_is_one_safe_component_and_tells_inputs_apart(text: str) -> None:
    stem = file_stem(text)
    assert stem and len(stem) <= MAX_STEM + 9
    assert all(c.isascii() and (c.isalnum() or c in "._-") for c in stem)
    assert not stem.startswith(".") and stem not in (".", "..") and "/" not in stem and "\\" not in stem
    assert file_stem(text) == stem  # deterministic
    assert file_stem(stem) == stem  # a safe name stays as it is
    other = text + "x"
    assert file_stem(other) != stem


@pytest.mark.parametrize(
    ("text", "stem"),
    [("resnet50", "resnet50"), ("cpu-dgpu", "cpu-dgpu"), ("inception_v3", "inception_v3")],
)
def test_file_stem_keeps_safe_names(text: str, stem: str) -> None:
    assert file_stem(text) == stem
    assert file_stem("path/to/net.xml").startswith("net.xml-")
    assert file_stem("../../etc/passwd").startswith("passwd-")
    assert file_stem("..").startswith("unnamed-") and file_stem("").startswith("unnamed-")
    assert Path("out", file_stem("a/../../b")).parent == Path("out")
