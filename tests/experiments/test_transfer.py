"""The transfer track's runner: counted pretraining envs, a user's pretrain/evaluate pair, rows that replay,
and the page's per-track tables."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from experiments.cli import transfer
from experiments.grid import run_cell
from experiments.records.transfer_board import render_transfer, transfer_rows
from experiments.records.validation import validate
from placement_gym import transfer as track
from placement_gym.errors import ConfigError
from placement_gym.protocol import Task
from placement_gym.transfer import VERSION, read_pretraining

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
TINY = (Task("tiny_cnn", "cpu-igpu", "train"), Task("tiny_bert", "multi-accel", "train"))


def test_counted_envs_truncate_once_the_shared_budget_is_spent(monkeypatch) -> None:
    monkeypatch.setattr("placement_gym.protocol.TRAIN_TASKS", TINY)
    budget = transfer.StepBudget(3)
    envs = transfer.train_envs(budget)
    infos = []
    for env in [envs[0], envs[1], envs[0], envs[1]]:
        env.reset(seed=0)
        *_, truncated, info = env.step(np.zeros(env.action_space.shape, dtype=np.int64))
        infos.append((truncated, info.get("budget_exhausted", False)))
    assert infos == [(False, False), (False, False), (True, True), (True, True)] and budget.used == 4


def test_a_users_pretrained_agent_enters_with_one_command_each(monkeypatch, tmp_path) -> None:
    monkeypatch.setattr("placement_gym.protocol.TRAIN_TASKS", TINY)
    monkeypatch.syspath_prepend(str(EXAMPLES))
    record = transfer.run_pretraining("transfer_agent:pretrain", tmp_path / "policy", steps=60, seed=0)
    assert record.env_steps == 60 and record.cpu_s > 0 and record.models == ("tiny_cnn", "tiny_bert")
    assert read_pretraining(tmp_path / "policy" / "pretraining.json") == record
    assert record.source == "<dir>/policy/pretraining.json" and "--out <dir>/policy " in record.command
    weights = json.loads((tmp_path / "policy" / "weights.json").read_text())
    assert set(weights) == {"2", "4"}  # one weight matrix per device count of the train tasks

    from placement_gym.problem import PlacementProblem
    from transfer_agent import FeaturePolicy

    problem = PlacementProblem.make("tiny_vit", "multi-accel", "simulated")
    placement = FeaturePolicy(policy=str(tmp_path / "policy")).place(problem, budget=20, seed=0)
    assert placement.shape == (problem.num_groups,) and problem.evaluate(placement).feasible
    # through the protocol, which hands a class agent its env
    spec = f"transfer_agent:FeaturePolicy:policy={tmp_path / 'policy'}"
    row = run_cell("tiny_vit", spec, 0, 20, "cpu-igpu", "simulated", "fused")
    assert row.evaluations <= 20 and row.latency > 0
    sys.modules.pop("transfer_agent", None)


def test_a_method_without_a_pretraining_record_is_refused() -> None:
    with pytest.raises(ConfigError, match="pretraining record"):
        transfer.pretraining_of("my_agent:greedy")
    assert transfer.pretraining_of("my_agent:greedy", "none").env_steps == 0


def test_transfer_rows_replay_and_render_per_track(tmp_path) -> None:
    ran = transfer.run_transfer(["heft", "random_search"], tmp_path, tasks=["whisper_tiny/cpu-igpu"], seeds=[0, 1],
                                log=lambda *_: None)  # fmt: skip
    assert ran == 1 + 2
    rows = transfer_rows(tmp_path)
    assert {r.protocol for r in rows} == {VERSION} and {r.tier for r in rows} == {"transfer"}
    assert all(r.budget == 100 and r.evaluations <= 100 and r.extra["pretraining"]["env_steps"] == 0 for r in rows)
    verdicts = validate(sorted(tmp_path.glob("*.jsonl")))
    assert len(verdicts) == 3 and all(v.ok for v in verdicts), [v.line() for v in verdicts]
    page = render_transfer(rows)
    assert "## Black-box track" in page and "## White-box track" in page and "`random_search`" in page
    assert transfer.run_transfer(["heft"], tmp_path, tasks=["whisper_tiny/cpu-igpu"], log=lambda *_: None) == 0


def test_validate_rejects_a_transfer_row_on_a_task_outside_the_track(tmp_path) -> None:
    transfer.run_transfer(["heft"], tmp_path, tasks=["whisper_tiny/cpu-igpu"], log=lambda *_: None)
    path = tmp_path / "heft.jsonl"
    row = json.loads(path.read_text().splitlines()[0])
    path.write_text(json.dumps({**row, "model": "bert"}) + "\n")
    (verdict,) = validate([path])
    assert not verdict.ok and "not a task of protocol transfer-v1" in verdict.line()
    extra = {k: v for k, v in row["extra"].items() if k != "pretraining"}
    path.write_text(json.dumps({**row, "extra": extra}) + "\n")
    (verdict,) = validate([path])
    assert not verdict.ok and "no pretraining record" in verdict.line()
    swin = {**row["extra"], "pretraining": {**row["extra"]["pretraining"], "models": ["swin_t"]}}
    path.write_text(json.dumps({**row, "extra": swin}) + "\n")
    (verdict,) = validate([path])
    assert not verdict.ok and "held-out family swin_t" in verdict.line()


def test_the_committed_transfer_page_is_generated_from_the_stored_rows() -> None:
    from experiments.cli.transfer import RESULTS
    from experiments.records.transfer_board import PAGE

    root = Path(__file__).resolve().parents[2]
    rejected: list[str] = []
    rows = transfer_rows(root / RESULTS, rejected=rejected)
    assert not rejected, rejected[:3]
    by_method: dict[str, set] = {}
    for r in rows:
        by_method.setdefault(r.method.partition(":")[0], set()).add((r.model, r.platform, r.seed))
    tasks = {(t.model, t.platform) for t in track.TRANSFER_TASKS}
    for name in ("random_search", "local_search", "guided_improvement", "pretrained_ppo", "guided_ppo",
                 "transfer_agent"):  # fmt: skip
        assert by_method.get(name) == {(m, p, s) for m, p in tasks for s in range(5)}, name
    assert by_method["heft"] == {(m, p, 0) for m, p in tasks}  # seedless: one run per task
    assert {r.track for r in rows} == {"black-box", "white-box"}
    expected = render_transfer(rows, rejected=rejected)
    assert (root / PAGE).read_text() == expected, "regenerate it: placement-gym leaderboard"
