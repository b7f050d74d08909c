"""PlacementProblem: validation, counting (baseline included), batched evaluation, pickling, accessors."""

from __future__ import annotations

import dataclasses
import gc
import pickle

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import placement_gym
from agents.base import BudgetTracker
from placement_gym.envs import DevicePlacementEnv
from placement_gym.errors import BudgetExhaustedError, PlacementError, PlacementGymError
from placement_gym.platforms import load_platform
from placement_gym.problem import PlacementProblem, first_occurrences, problem_of

TINY_SIM = dict(model="tiny_cnn", platform="cpu-dgpu", backend="simulated")


@pytest.fixture
def problem() -> PlacementProblem:
    return PlacementProblem.make(**TINY_SIM)


def test_problem_of_env_through_wrappers_and_clear_error_otherwise(problem):
    env = gym.make("DevicePlacement-v0", **TINY_SIM)
    assert isinstance(problem_of(env), PlacementProblem)
    assert problem_of(env) is env.unwrapped.problem
    assert problem_of(problem) is problem
    assert placement_gym.problem_of is problem_of and placement_gym.PlacementProblem is PlacementProblem
    with pytest.raises(PlacementGymError, match="not a device-placement env"):
        problem_of(gym.make("CartPole-v1"))


def test_validation_names_the_problem(problem):
    g, d = problem.num_groups, problem.num_devices
    with pytest.raises(PlacementError, match=rf"shape \({g},\)"):
        problem.evaluate(np.zeros(g + 1, dtype=np.int64))
    with pytest.raises(PlacementError, match="integer"):
        problem.evaluate(np.zeros(g, dtype=np.float32))
    with pytest.raises(PlacementError, match=rf"device index {d} out of range.*cpu, gpu"):
        problem.evaluate(np.full(g, d))
    with pytest.raises(PlacementError, match=r"shape \(B, "):
        problem.evaluate_batch(np.zeros(g, dtype=np.int64))
    assert problem.evaluations == 0  # nothing malformed is counted


def test_baseline_is_counted_separately_once(problem):
    assert problem.baseline_evaluations == 0
    base = problem.baseline
    singles = [problem.backend.evaluate_batch(np.full((1, problem.num_groups), dev))[0] for dev in range(2)]
    assert base.latency == min(r.latency for r in singles)
    assert problem.baseline_device == int(np.argmin([r.latency for r in singles]))
    _ = problem.baseline
    assert problem.baseline_evaluations == problem.num_devices and problem.evaluations == 0
    assert problem.stats()["baseline_evaluations"] == problem.num_devices


def test_batch_evaluates_and_counts_each_distinct_placement_once(problem):
    g = problem.num_groups
    a, b = np.zeros(g, dtype=np.int64), np.ones(g, dtype=np.int64)
    _ = problem.baseline  # its own backend call, counted apart
    seen = []
    problem.add_listener(lambda placement, evaluation: seen.append(placement.tolist()))
    sent = []
    inner = problem.backend.evaluate_batch
    problem.backend.evaluate_batch = lambda batch: sent.append(batch.tolist()) or inner(batch)
    out = problem.evaluate_batch(np.stack([b, a, b, b, a]))
    assert [e.latency for e in out] == [out[0].latency, out[1].latency] + [out[0].latency] * 2 + [out[1].latency]
    assert sent == [[b.tolist(), a.tolist()]]  # one backend call, distinct rows, first-appearance order
    assert seen == [b.tolist(), a.tolist()] and problem.evaluations == 2
    single = problem.evaluate(a)
    assert single.latency == out[1].latency and single.reward == out[1].reward
    assert problem.evaluations == 2 and problem.memo_hits == 1  # a repeat across calls is free (the memo)
    assert problem.best_latency == min(out[0].latency, out[1].latency)


def test_evaluate_valid_skips_only_the_validation(problem):
    """The envs' path for an action they validated: the same evaluation, counted and remembered the same,
    with no second validation in the problem or the simulated backend."""
    g = problem.num_groups
    other = PlacementProblem.make(**TINY_SIM)
    placements = [np.arange(g, dtype=np.int64) % 2, np.ones(g, dtype=np.int64)]

    def refuse(*args, **kwargs):
        raise AssertionError("validated twice")

    problem.validate = problem.backend.validate = refuse
    for p in [*placements, placements[0]]:
        fast, checked = problem.evaluate_valid(p), other.evaluate(p)
        assert (fast.latency, fast.reward, fast.feasible) == (checked.latency, checked.reward, checked.feasible)
    assert (problem.evaluations, problem.memo_hits) == (other.evaluations, other.memo_hits) == (2, 1)
    assert problem.best_latency == other.best_latency


def test_memo_and_cache_answer_repeats_without_objects_for_the_collector(problem):
    """A repeat gets back what the first evaluation gave (feasible or not; the backend cache's answer in a
    new run marked ``cached``), and the thousands of results a long run keeps add no objects for the
    garbage collector to walk (its full collections walked them all)."""
    small, _ = _memory_constrained(problem)
    every = np.array(np.meshgrid(*[range(small.num_devices)] * small.num_groups)).reshape(small.num_groups, -1).T
    first = [small.evaluate(p) for p in every]
    assert 0 < sum(e.feasible for e in first) < len(first)  # both kinds are remembered
    for p, e in zip(every, first):
        again = small.evaluate(p)
        assert (again.result, again.reward) == (e.result, e.reward)
    small.start_run()  # a new run: a new memo, the backend's cache still answers
    for p, e in zip(every, first):
        cached = small.evaluate(p)
        assert cached.result == dataclasses.replace(e.result, cached=True) and cached.reward == e.reward
    assert small.evaluations == 2 * len(every) and small.memo_hits == len(every)

    ops = PlacementProblem.make("tiny_cnn", "cpu-dgpu", "simulated", coarsening="ops")
    placements = np.unique(np.random.default_rng(0).integers(0, 2, (4000, ops.num_groups)), axis=0)
    gc.collect()
    tracked = len(gc.get_objects())
    assert all(ops.evaluate(p).feasible for p in placements)
    gc.collect()
    assert ops.evaluations == len(placements) > 3000 and ops.backend.num_cached >= len(placements)
    grown = len(gc.get_objects()) - tracked
    assert grown < 100, f"{grown} more objects tracked after {len(placements)} evaluations"


def test_tracker_cuts_a_batch_to_the_budget_and_counts_what_the_problem_counts(problem):
    g = problem.num_groups
    rows = np.array([[i >> k & 1 for k in range(g)] for i in range(6)], dtype=np.int64)  # 6 distinct
    tracker = BudgetTracker(problem, 4)
    batch = np.concatenate([rows[:2], rows[:1], rows[2:]])  # a repeat inside: 7 rows, 6 distinct
    out = tracker.evaluate_batch(batch)
    assert len(out) == 5 and tracker.used == 4 == problem.evaluations and tracker.exhausted
    assert len(tracker.evaluate_batch(rows)) == 4  # the seen rows before the first new one, free
    assert tracker.evaluate(rows[0]) == (out[0].latency, out[0].reward)  # a repeat is free
    with pytest.raises(BudgetExhaustedError, match="budget of 4 distinct"):
        tracker.evaluate(rows[5])
    with pytest.raises(BudgetExhaustedError):  # the problem itself refuses it while the run lasts
        problem.evaluate(rows[5])
    assert tracker.used == 4 == problem.evaluations
    tracker.detach()
    problem.evaluate(rows[5])
    assert tracker.used == 4  # detached trackers stop counting


def test_problem_pickles_by_rebuilding_from_names(problem):
    copy = pickle.loads(pickle.dumps(problem))
    p = np.arange(problem.num_groups) % problem.num_devices
    assert copy.evaluate(p).latency == problem.evaluate(p).latency
    parts = PlacementProblem(problem.benchmark, problem.coarse, problem.platform, problem.backend)
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(parts)


def test_backend_for_another_graph_is_refused(problem):
    other = PlacementProblem.make(model="tiny_bert", platform="cpu-dgpu", backend="simulated")
    with pytest.raises(PlacementGymError, match="backend must be built"):
        PlacementProblem(problem.benchmark, problem.coarse, problem.platform, other.backend)


def _memory_constrained(problem: PlacementProblem) -> tuple[PlacementProblem, np.ndarray]:
    """``problem``'s model on its platform with every device's memory shrunk until no single device holds
    the model but a split does (found by the simulator itself); the problem and a feasible split."""
    rng = np.random.default_rng(0)
    splits = rng.integers(0, problem.num_devices, (256, problem.num_groups))
    total = float(problem.cost_model().memory.sum())
    for fraction in (0.9, 0.8, 0.7, 0.6, 0.5):
        cap = int(fraction * total)
        devices = [dataclasses.replace(d, memory_bytes=cap) for d in problem.platform.devices]
        platform = dataclasses.replace(problem.platform, devices=devices, name="tiny-memory")
        small = PlacementProblem.make(problem.benchmark, platform, "simulated", reward="neg_latency_ms")
        feasible = [r.feasible for r in small.backend.evaluate_batch(splits)]
        if not small.has_baseline and any(feasible):
            return small, splits[feasible.index(True)]
    pytest.skip("no memory size where only a split fits (the tiny model's peak is too even)")


def test_neg_latency_reward_works_where_no_single_device_fits(problem):
    """Regression (issue 9): step() raised PlacementError when no single device could hold the model,
    although the error message recommended this reward."""
    small, split = _memory_constrained(problem)
    env = DevicePlacementEnv(problem=small)
    env.reset(seed=0)
    _, reward, terminated, _, info = env.step(np.zeros(env.num_groups, dtype=np.int64))
    assert terminated and not info["feasible"] and reward == small.reward.infeasible
    assert "baseline_latency" not in info and "speedup" not in info  # no baseline: absent, not nan
    env.reset(seed=0)
    _, reward, _, _, info = env.step(split)
    assert info["feasible"] and reward == pytest.approx(-info["latency"] * 1e3)
    with pytest.raises(PlacementError, match="no single device"):
        _ = small.baseline
    speedup = PlacementProblem(small.benchmark, small.coarse, small.platform, small.backend, "speedup")
    with pytest.raises(PlacementError, match="neg_latency_ms"):
        speedup.evaluate(split)


def test_every_mode_refuses_a_step_after_the_episode_ended():
    """Regression (issue 9): one-shot mode silently evaluated again after termination."""
    for mode in ("oneshot", "sequential"):
        env = DevicePlacementEnv(**TINY_SIM, mode=mode)
        with pytest.raises(PlacementError, match="reset"):
            env.step(env.action_space.sample())  # never started
        env.reset(seed=0)
        done = False
        while not done:
            _, _, done, _, _ = env.step(env.action_space.sample())
        before = env.problem.evaluations
        with pytest.raises(PlacementError, match="reset"):
            env.step(env.action_space.sample())
        assert env.problem.evaluations == before


def test_load_platform_name_is_kept(problem):
    assert problem.platform.name == load_platform("cpu-dgpu").name == "cpu-dgpu"


@pytest.mark.parametrize("platform", ["cpu-dgpu", "cpu-igpu", "multi-accel"])
def test_device_features_are_bounded_and_consistent(platform):
    problem = PlacementProblem.make("tiny_bert", platform, "simulated")
    f, cost = problem.device_features, problem.cost_model()
    g, d, e = problem.num_groups, problem.num_devices, problem.coarse.graph.num_edges
    assert f.node_device.shape == (g, d, 3) and f.edge_link.shape == (e, d * d) and f.device.shape == (d, 5)
    for arr in (f.node_device, f.edge_link, f.device):
        assert arr.dtype == np.float32 and arr.min() >= 0.0 and arr.max() <= 1.0
    np.testing.assert_array_equal(f.node_device[:, :, 2], problem.device_mask)
    np.testing.assert_allclose(f.node_device[:, :, 1].max(axis=1), 1.0)  # the fastest device of each group
    fastest = np.argmin(cost.compute, axis=1)
    assert np.all(f.node_device[np.arange(g), fastest, 0] <= f.node_device[:, :, 0].max(axis=1))
    assert f.device[:, 0].max() == 1.0 and f.device[problem.host, 3] == 1.0 and f.device[:, 3].sum() == 1.0
    diagonal = f.edge_link.reshape(e, d, d)[:, np.arange(d), np.arange(d)]
    assert not diagonal.any() and (f.edge_link.sum(axis=1) > 0).all()


def test_info_score_is_normalised_against_the_stored_optimum():
    env = gym.make("DevicePlacement-resnet50-cpu_igpu-sim-v0")
    problem = problem_of(env)
    ref = problem.reference
    assert ref is not None and ref.platform == "cpu-igpu" and len(ref.placement) == problem.num_groups
    env.reset(seed=0)
    info = env.step(np.array(ref.placement))[4]
    assert info["score"] == pytest.approx(1.0) and info["latency"] == pytest.approx(ref.latency)
    env.reset(seed=0)
    best_single = np.full(problem.num_groups, problem.baseline_device)
    assert env.step(best_single)[4]["score"] == pytest.approx(0.0, abs=1e-9)
    tiny = DevicePlacementEnv(**TINY_SIM)
    tiny.reset(seed=0)
    assert tiny.problem.reference is None and np.isnan(tiny.problem.score(1e-3))
    assert "score" not in tiny.step(tiny.action_space.sample())[4]


@settings(max_examples=200, deadline=None)
@given(hnp.arrays(np.int64, st.tuples(st.integers(0, 12), st.integers(1, 4)), elements=st.integers(0, 2)))
def test_first_occurrences_agrees_with_numpy_unique(rows):
    first, inverse = first_occurrences(rows)
    assert len(inverse) == len(rows)
    if not len(rows):
        assert first == []
        return
    _, unique_first = np.unique(rows, axis=0, return_index=True)
    assert first == sorted(unique_first.tolist())  # each distinct row's first index, ascending
    np.testing.assert_array_equal(rows[first][inverse], rows)  # every row maps to its own distinct row
