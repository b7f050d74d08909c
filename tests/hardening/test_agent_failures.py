"""An agent's SystemExit or exception fails its cell, with one line, while the other cells run (bench)."""

from __future__ import annotations

import json
import sys
import textwrap

import pytest

from experiments.cli import main
from experiments.grid import run_grid
from placement_gym.errors import AgentFailedError

AGENTS = """
import sys

def exits(problem, budget, seed):
    sys.exit(0)

def raises(problem, budget, seed):
    raise RuntimeError("boom")

def host(problem, budget, seed):
    return None
"""


@pytest.fixture
def failing_agents(tmp_path, monkeypatch):
    (tmp_path / "failing_agents.py").write_text(textwrap.dedent(AGENTS))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "failing_agents", raising=False)


def test_bench_records_each_failed_cell_and_runs_the_others(failing_agents, tmp_path, capsys):
    out = tmp_path / "grid"
    status = main([
        "bench", "--models", "tiny_cnn", "--methods", "failing_agents:exits", "heft", "failing_agents:raises",
        "failing_agents:host", "--seeds", "0", "1", "--budget", "3", "--platform", "cpu-dgpu",
        "--backend", "simulated", "--out", str(out), "--no-progress",
    ])  # fmt: skip
    captured = capsys.readouterr()
    assert status == 2
    assert "FAILED tiny_cnn failing_agents:exits seed 0: it called sys.exit(0)" in captured.out
    assert "FAILED tiny_cnn failing_agents:raises seed 1: RuntimeError: boom" in captured.out
    errors = captured.err.strip().splitlines()
    assert len(errors) == 1 and errors[0].startswith("placement-gym: error: 4 cell(s) failed, the others ran")
    assert "Traceback" not in captured.err
    methods = [json.loads(line)["method"] for line in (out / "results.jsonl").read_text().splitlines()]
    assert sorted(methods) == ["failing_agents:host", "failing_agents:host", "heft"]  # the later cells ran
    assert (out / "report.md").exists()


def test_run_grid_raises_after_every_cell_ran(failing_agents, tmp_path):
    with pytest.raises(AgentFailedError, match=r"1 cell\(s\) failed.*exits seed 0: it called sys.exit\(0\)"):
        run_grid(tmp_path, ["tiny_cnn"], ["failing_agents:exits", "failing_agents:host"], [0], 3, "cpu-dgpu",
                 "simulated", progress=False)  # fmt: skip
    rows = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert [r["method"] for r in rows] == ["failing_agents:host"]
