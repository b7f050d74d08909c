"""The results store: one row per cell with two writers (lock, claims, first row on read), thinned
histories, old rows still readable."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

from placement_gym.results import ResultRow, ResultStore, row_line, thin_history

ROOT = Path(__file__).resolve().parents[1]


def _row(method: str = "heft", seed: int = 0, latency: float = 1.0, protocol: str | None = None) -> ResultRow:
    return ResultRow(
        model="tiny_cnn", graph_version=1, platform="cpu-dgpu", backend="simulated", coarsening="fused",
        groups=2, method=method, seed=seed, budget=5, latency=latency, cpu_only_latency=2.0,
        speedup_vs_cpu=2.0 / latency, evaluations=3, wall_time=0.1, placement=[0, 1], protocol=protocol,
    )  # fmt: skip


def test_history_is_kept_at_fixed_checkpoints_and_the_last_evaluation():
    history = [(i, 100.0 - i) for i in range(1, 738)]
    assert thin_history(history) == [(c, 100.0 - c) for c in (1, 2, 5, 10, 20, 50, 100, 200, 500)] + [
        (737, -637.0)
    ]
    sparse = [(1, 9.0), (4, 7.0), (30, 5.0)]  # the best at a checkpoint is the last entry before it
    assert thin_history(sparse) == [(1, 9.0), (2, 9.0), (5, 7.0), (10, 7.0), (20, 7.0), (30, 5.0)]
    assert thin_history([]) == []


def test_a_cell_is_stored_once_and_read_back_first_row_first(tmp_path):
    store = ResultStore(tmp_path / "results.jsonl")
    assert store.append(_row(latency=1.0)) and not store.append(_row(latency=0.5))
    assert store.append(_row(protocol="v1"))  # another protocol version is another cell
    with open(store.path, "a") as f:  # a file written by an older writer, with a repeated cell
        f.write(row_line(_row(latency=0.25)))
    rows = store.rows()
    assert [(r.latency, r.protocol) for r in rows] == [(1.0, None), (1.0, "v1")]


def test_rows_without_the_protocol_fields_still_read(tmp_path):
    line = json.loads(row_line(_row()))
    for key in ("protocol", "tier", "score"):
        del line[key]
    path = tmp_path / "results.jsonl"
    path.write_text(json.dumps(line) + "\n")
    (row,) = ResultStore(path).rows()
    assert row.protocol is None and math.isnan(row.score)


def test_a_claim_of_a_live_process_is_respected_and_a_dead_ones_taken_over(tmp_path):
    store = ResultStore(tmp_path / "results.jsonl")
    key = _row().key
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        path = store._claim_path(key)
        path.parent.mkdir(exist_ok=True)
        import socket

        path.write_text(json.dumps({"pid": other.pid, "host": socket.gethostname(), "started": None}))
        assert not store.claim(key) and store.claimed_elsewhere([key]) == [key]
    finally:
        other.kill()
        other.wait()
    assert store.claim(key) and store.claimed_elsewhere([key]) == []  # its owner died: taken over
    assert store.append(_row()) and not path.exists()  # the row releases the claim
    assert not store.claim(key)  # stored: nothing to claim


def test_a_torn_claim_file_is_taken_over(tmp_path):
    store = ResultStore(tmp_path / "results.jsonl")
    key = _row().key
    store.claims_dir.mkdir()
    store._claim_path(key).write_text('{"pid": 12')
    assert store.claim(key)


_SLOW_AGENT = """
import os, pathlib, time

def place(problem, budget, seed):
    marks = pathlib.Path(os.environ["MARKS"])
    (marks / str(os.getpid())).touch()
    end = time.time() + 120
    while len(list(marks.iterdir())) < 2 and time.time() < end:  # both writers inside a cell at once
        time.sleep(0.05)
    return [0] * problem.num_groups
"""


def test_two_bench_processes_on_one_out_run_and_store_each_cell_once(tmp_path):
    """Two real ``bench`` processes started together on one ``--out`` (issue #25): every cell runs once,
    in one of the two processes, and is stored once. The agent waits until both processes are inside a
    cell, so the two writers certainly overlap."""
    (tmp_path / "slow_agent.py").write_text(_SLOW_AGENT)
    (tmp_path / "marks").mkdir()
    out = tmp_path / "out"
    cmd = [
        sys.executable, "-m", "experiments.cli.bench", "--models", "tiny_cnn", "--platform", "cpu-dgpu",
        "--backend", "simulated", "--methods", "heft", "slow_agent:place", "--seeds", "0", "1", "--budget", "5",
        "--no-progress", "--out", str(out),
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MARKS": str(tmp_path / "marks")}
    procs = [
        subprocess.Popen(
            cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    outputs = [p.communicate(timeout=600) for p in procs]
    assert all(p.returncode == 0 for p in procs), [e[-2000:] for _, e in outputs]
    ran = [line for text, _ in outputs for line in text.splitlines() if " evals, " in line]
    assert len(ran) == 3, ran  # heft once (seedless), the agent with seeds 0 and 1
    assert len(list((tmp_path / "marks").iterdir())) == 2  # both processes ran a cell
    lines = (out / "results.jsonl").read_text().splitlines()
    assert len(lines) == 3 and len({(json.loads(x)["method"], json.loads(x)["seed"]) for x in lines}) == 3
    assert not any((out / ".results.claims").iterdir())


def test_repeated_arguments_run_each_cell_once(tmp_path):
    from experiments.grid import run_grid

    rows = run_grid(
        tmp_path, ["tiny_cnn", "tiny_cnn"], ["heft", "random_search", "random_search"], [0, 1, 0],
        5, "cpu-dgpu", "simulated", progress=False,
    )  # fmt: skip
    assert sorted((r.method, r.seed) for r in rows) == [("heft", 0), ("random_search", 0), ("random_search", 1)]
    assert len((tmp_path / "results.jsonl").read_text().splitlines()) == 3
