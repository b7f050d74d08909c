"""placement_gym.benchmark.evaluate: any agent (PlacementMethod, object with place, plain function) under
the problem's budget, one row per (task, seed), resumable in a store."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest

from agents import make_method
from placement_gym import protocol
from placement_gym.benchmark import evaluate
from placement_gym.errors import ConfigError, UnknownNameError

TINY = ["tiny_cnn/cpu-dgpu"]
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from my_agent import GreedyAgent, greedy  # noqa: E402


def _greedy_random(problem, budget, seed):
    """Evaluates new random placements without looking at any budget."""
    rng = np.random.default_rng(seed)
    for _ in range(10_000):
        problem.evaluate(rng.integers(0, problem.num_devices, problem.num_groups))
    return None


def test_an_agent_cannot_evaluate_past_the_budget():
    (row,) = evaluate(_greedy_random, tasks=["resnet50/cpu-dgpu"], budget=30, seeds=[0])
    assert row.evaluations == 30 and row.extra["stopped_by_budget"] is True
    assert row.history[-1][0] == 30 and np.isfinite(row.latency) and math.isfinite(row.score)


def test_function_class_and_registered_method_give_rows():
    rows = evaluate(greedy, tasks=TINY, budget=8, seeds=[0, 1, 0])  # a repeated seed runs once
    assert [r.seed for r in rows] == [0, 1] and rows[0].method.endswith("my_agent:greedy")
    assert all(r.evaluations <= 8 and r.protocol is None and len(r.placement) == r.groups for r in rows)
    (mine,) = evaluate(GreedyAgent(passes=1), tasks=TINY, budget=8, seeds=[0], name="mine")
    assert mine.method == "mine" and mine.extra == {"passes": 1, "stalled": False, "env_steps": 15}
    (cls,) = evaluate(GreedyAgent, tasks=TINY, budget=8, seeds=[0])  # a class: an instance per run
    assert cls.method == "greedy_agent" and cls.extra["passes"] == 100 and cls.extra["stalled"] is False
    (heft,) = evaluate(make_method("heft"), tasks=TINY, budget=8, seeds=[0])
    assert heft.method == "heft" and heft.evaluations >= 1


def test_the_returned_placement_is_scored_even_if_never_evaluated():
    (row,) = evaluate(lambda problem, budget, seed: [1] * problem.num_groups, tasks=TINY, budget=5, seeds=[0])
    assert row.evaluations == 0 and row.placement == [1] * row.groups and np.isfinite(row.latency)


def test_a_tier_sets_the_budget_and_the_protocol_and_a_store_resumes(tmp_path, monkeypatch):
    rows = evaluate(greedy, tasks=["resnet50/cpu-dgpu"], tier="tiny", seeds=[0], out=tmp_path)
    assert rows[0].budget == protocol.TIERS["tiny"] and rows[0].protocol == protocol.VERSION
    assert rows[0].tier == "tiny" and 0 < rows[0].score <= 1 + 1e-9
    import placement_gym.benchmark as benchmark

    monkeypatch.setattr(benchmark, "run_agent", lambda *a, **k: pytest.fail("a stored cell ran again"))
    again = evaluate(greedy, tasks=["resnet50/cpu-dgpu"], tier="tiny", seeds=[0], out=tmp_path)
    assert [r.key for r in again] == [r.key for r in rows]


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        (dict(agent=ConfigError, budget=5), ConfigError, "class without a place"),
        (dict(agent=42, budget=5), ConfigError, "neither"),
        (dict(agent=greedy), ConfigError, "exactly one of budget"),
        (dict(agent=greedy, budget=5, tier="tiny"), ConfigError, "exactly one of budget"),
        (dict(agent=greedy, budget=0), ConfigError, "positive integer"),
        (dict(agent=greedy, tier="huge"), UnknownNameError, "tier"),
        (dict(agent=greedy, tier="tiny", tasks=["tiny_cnn/cpu-dgpu"]), UnknownNameError, "protocol task"),
        (dict(agent=greedy, budget=5, tasks=["nope/cpu-dgpu"]), UnknownNameError, "zoo model"),
    ],
)
def test_bad_arguments_are_refused_before_anything_runs(kwargs, error, match):
    agent = kwargs.pop("agent")
    with pytest.raises(error, match=match):
        evaluate(agent, **{"tasks": TINY, **kwargs})
