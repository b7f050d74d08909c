"""Guided improvement: moves, features, the scorer's file format, budgets, determinism, optimality."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from agents import make_method
from agents.baselines.common import allowed_devices
from agents.learned.moves import KINDS, MOVE_FEATURES, MoveFeaturizer, branch_sets, propose, twin_classes
from agents.learned.scorer import MoveScorer, fit_scorer
from placement_gym.errors import PlacementGymError, UnknownNameError
from placement_gym.problem import PlacementProblem
from placement_gym.simulation.cost_model import CostModel
from placement_gym.simulation.schedule import Schedule


@pytest.fixture(scope="module")
def small() -> PlacementProblem:
    return PlacementProblem.make("tiny_bert", "multi-accel", "simulated", coarsening="k", k=6)


@pytest.fixture(scope="module")
def fused() -> PlacementProblem:
    return PlacementProblem.make("tiny_bert", "multi-accel", "simulated")


def test_moves_change_the_placement_on_allowed_devices_and_cover_every_single_move(fused):
    allowed = allowed_devices(fused)
    placement = np.zeros(fused.num_groups, dtype=np.int64)
    classes, branches = twin_classes(fused.cost_model()), branch_sets(fused.cost_model())
    moves = propose(placement, allowed, classes, branches)
    singles = {
        (int(np.flatnonzero(m)[0]), int(d))
        for m, d, k in zip(moves.members, moves.target, moves.kind)
        if k == 0
    }
    assert singles == {(g, d) for g, d in zip(*np.nonzero(allowed)) if d != 0}
    mixed = np.random.default_rng(0).integers(0, fused.num_devices, fused.num_groups)
    kinds = set(moves.kind.tolist()) | set(propose(mixed, allowed, classes, branches).kind.tolist())
    assert kinds == set(range(len(KINDS)))  # every kind occurs on tiny_bert
    for i in range(len(moves)):
        after = moves.apply(placement, i)
        assert not np.array_equal(after, placement)
        assert allowed[np.arange(fused.num_groups), after].all()


def fork_join(invoke: float = 0.0, seed: int = 0) -> CostModel:
    """0 -> {1, 2 -> 3} -> 4 on three devices (device 0 is the host), random costs."""
    rng = np.random.default_rng(seed)
    edges = [(0, 1), (0, 2), (1, 4), (2, 3), (3, 4)]
    latency = rng.uniform(2e-6, 1e-5, (3, 3))
    np.fill_diagonal(latency, 0.0)
    bandwidth = rng.uniform(0.5e9, 2e9, (3, 3))
    np.fill_diagonal(bandwidth, np.inf)
    inputs, results = np.zeros(5), np.zeros(5)
    inputs[0], results[4] = 4e3, 4e3
    return CostModel(
        device_names=("d0", "d1", "d2"),
        compute=rng.uniform(2e-6, 4e-5, (5, 3)),
        edge_src=np.array([s for s, _ in edges]),
        edge_dst=np.array([t for _, t in edges]),
        edge_bytes=rng.uniform(1e2, 1.5e4, len(edges)),
        link_latency=latency,
        link_bandwidth=bandwidth,
        param_bytes=np.zeros(5),
        out_bytes=np.full(5, 1e3),
        input_bytes=inputs,
        result_bytes=results,
        capacity=np.full(3, 1e12),
        invoke_overhead=np.array([0.0, 0.0, invoke]),
    )


def test_branch_sets_are_the_branches_with_their_fork_and_join():
    got = {tuple(np.flatnonzero(m)) for m in branch_sets(fork_join())}
    assert got == {(1, 4), (0, 1), (0, 1, 4), (2, 3), (2, 3, 4), (0, 2, 3), (0, 2, 3, 4)}


def test_branch_moves_send_a_whole_inception_branch():
    problem = PlacementProblem.make("inception_v3", "multi-accel", "simulated")
    cost = problem.cost_model()
    branches = branch_sets(cost)
    moves = propose(np.zeros(problem.num_groups, dtype=np.int64), allowed_devices(problem),
                    twin_classes(cost), branches)  # fmt: skip
    sent = moves.members[moves.kind == KINDS.index("branch")]
    assert len(branches) > 0 and len(sent) == 3 * len(branches)  # every set to each of 3 other devices
    # fork + a factorised 7x7 chain (5 groups) + join: 7 groups, not a run of consecutive indices (the
    # other branches lie between), so no segment move sends them
    gapped = [m for m in branches if np.ptp(np.flatnonzero(m)) + 1 > m.sum()]
    assert max(int(m.sum()) for m in gapped) == 7


@pytest.mark.parametrize("seed", range(4))
def test_estimate_is_a_lower_bound_without_invoke_and_exact_on_the_host(seed):
    cost = fork_join(seed=seed)
    grid = np.array(list(itertools.product(range(3), repeat=5)), dtype=np.int64)
    simulated = Schedule.build(cost).run_batch(grid)[0]
    estimate = MoveFeaturizer(cost).estimate(grid)
    assert (estimate <= simulated * (1 + 1e-9)).all()
    assert estimate[0] == pytest.approx(simulated[0])  # all on the host: the sum of compute times
    assert (estimate < simulated * (1 - 1e-6)).any()  # queueing is ignored somewhere
    with_invoke = MoveFeaturizer(fork_join(invoke=1e-3, seed=seed)).estimate(grid)
    on_d2 = (grid == 2).any(axis=1)
    assert np.allclose(with_invoke[~on_d2], estimate[~on_d2]) and (with_invoke[on_d2] >= 1e-3).all()


@pytest.mark.parametrize("seed", range(3))
def test_estimate_from_a_base_equals_the_full_pass(seed):
    """``base`` only skips the groups before a row's first difference: the result is the same to the bit,
    whatever the base (one row's, another placement's) and whichever group differs first."""
    cost = fork_join(invoke=1e-3, seed=seed)
    grid = np.array(list(itertools.product(range(3), repeat=5)), dtype=np.int64)
    featurizer = MoveFeaturizer(cost)
    full = np.array([featurizer.estimate(row[None, :])[0] for row in grid])
    for base in (grid[0], grid[-1], grid[len(grid) // 2]):
        assert np.array_equal(featurizer.estimate(grid, base=base), full)
    with pytest.raises(ValueError, match="base has shape"):
        featurizer.estimate(grid, base=grid[0][:3])
    assert featurizer.estimate(grid[:0]).shape == (0,)


def test_twin_classes_group_identical_layers(fused):
    classes = twin_classes(fused.cost_model())
    cost = fused.cost_model()
    for c in np.unique(classes):
        rows = cost.compute[classes == c]
        assert np.allclose(rows, rows[0], rtol=1e-5)
    assert len(np.unique(classes)) < fused.num_groups  # tiny_bert repeats its layers


def test_single_move_features_match_the_cost_model(fused):
    cost = fused.cost_model()
    placement = np.zeros(fused.num_groups, dtype=np.int64)
    moves = propose(placement, allowed_devices(fused), twin_classes(cost))
    feats = MoveFeaturizer(cost).features(placement, 1e-3, moves)
    assert feats.shape == (len(moves), len(MOVE_FEATURES)) and np.isfinite(feats).all()
    i = int(np.flatnonzero(moves.kind == 0)[0])
    g, d = int(np.flatnonzero(moves.members[i])[0]), int(moves.target[i])
    assert feats[i, 0] == pytest.approx((cost.compute[g, d] - cost.compute[g, 0]) / 1e-3, rel=1e-4)


def test_criticality_is_one_on_the_longest_path(fused):
    crit = MoveFeaturizer(fused.cost_model()).criticality(np.zeros(fused.num_groups, dtype=np.int64))
    assert crit.max() == pytest.approx(1.0) and (crit >= 0).all()


def test_budget_is_exact_and_the_start_is_heft_or_a_single_device(fused):
    result = make_method("guided_improvement").place(fused, budget=40, seed=0)
    assert result.evaluations == 40 and len(result.history) == 40
    singles = [fused.evaluate(np.full(fused.num_groups, d)).latency for d in range(fused.num_devices)]
    assert result.latency <= min(singles)


def test_deterministic_with_a_seed(fused):
    a = make_method("guided_improvement").place(fused, budget=60, seed=3)
    b = make_method("guided_improvement").place(fused, budget=60, seed=3)
    assert np.array_equal(a.placement, b.placement) and a.history == b.history


@pytest.mark.parametrize("ranker", ["learned", "cost", "estimate", "random"])
def test_reaches_the_brute_force_optimum_of_a_tiny_graph(ranker, small):
    space = np.array(list(itertools.product(range(small.num_devices), repeat=small.num_groups)))
    optimum = min(e.latency for e in small.evaluate_batch(space))
    result = make_method("guided_improvement", ranker=ranker).place(small, budget=len(space), seed=0)
    assert result.evaluations <= len(space)  # never evaluates a placement twice
    assert result.latency == pytest.approx(optimum)


def test_scorer_round_trips_and_ranks_improving_moves_first(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((400, len(MOVE_FEATURES))).astype(np.float32)
    change = np.where(x[:, 0] < 0, -0.01, 0.02)  # moves with a negative first feature improve
    scorer, _ = fit_scorer(x, change, epochs=30)
    assert (scorer.predict(x[x[:, 0] < -0.5]).max()) < scorer.predict(x[x[:, 0] > 0.5]).min()
    scorer.save(tmp_path / "s", {"note": "test"})
    again = MoveScorer.load(tmp_path / "s")
    assert np.allclose(again.predict(x), scorer.predict(x))


def test_bad_arguments_and_missing_weights_are_named(tmp_path):
    with pytest.raises(UnknownNameError):
        make_method("guided_improvement", ranker="greedy")
    with pytest.raises(ValueError, match="batch_size"):
        make_method("guided_improvement", batch_size=0)
    with pytest.raises(PlacementGymError, match="pretraining.guided_improvement"):
        make_method("guided_improvement", weights=tmp_path)
    with pytest.raises(UnknownNameError):
        make_method("guided_improvement", tabu="forever")
    with pytest.raises(ValueError, match="depth, walk"):
        make_method("guided_improvement", depth=-1)
    with pytest.raises(ValueError, match="depth, walk"):
        make_method("guided_improvement", walk=-0.1)


def test_local_tabu_lifts_a_failed_move_once_its_part_of_the_graph_moves(fused):
    from agents.learned.moves import Moves
    from agents.learned.search import local_tabu_mask, move_keys

    cost = fused.cost_model()
    g = int(cost.edge_dst[0])  # a group with a predecessor
    neighbour = int(cost.edge_src[0])
    adjacent = set(cost.edge_src[cost.edge_dst == g]) | set(cost.edge_dst[cost.edge_src == g]) | {g}
    far = next(x for x in range(cost.num_groups) if x not in adjacent)
    members = np.zeros((2, cost.num_groups), dtype=bool)
    members[0, g] = members[1, far] = True
    moves = Moves(members, np.array([1, 1]), np.array([0, 0]))
    keys = move_keys(moves)
    failed = {keys[0]: 0}  # the move of g failed before any change; the move of far never failed
    moved_at = np.full(cost.num_groups, -1)
    mask = lambda: local_tabu_mask(moves, keys, failed, moved_at, cost.edge_src, cost.edge_dst)  # noqa: E731
    assert mask().tolist() == [True, False]
    moved_at[far] = 1  # a change far from g leaves it tabu
    assert mask().tolist() == [True, False]
    moved_at[neighbour] = 2  # a neighbour of g moved: its move is untried again
    assert mask().tolist() == [False, False]
    failed[keys[0]] = 2  # it failed again after that change
    assert mask().tolist() == [True, False]


def test_walks_past_local_optima_and_never_evaluates_a_placement_twice(fused):
    from agents.base import BudgetTracker
    from agents.learned.scorer import PRETRAINED
    from agents.learned.search import guided_search

    tracker = BudgetTracker(fused, 400)
    evaluated: list[bytes] = []
    tracker.listeners.append(lambda t, p, lat, ok: evaluated.append(np.asarray(p).tobytes()))
    counts = guided_search(
        tracker, MoveScorer.load(PRETRAINED), np.random.default_rng(0), 4, local_tabu=True, depth=8, walk=0.5
    )
    tracker.detach()
    assert counts["walks"] > 0 and tracker.used == 400
    assert len(evaluated) == len(set(evaluated)) == 400
    with pytest.raises(ValueError, match="depth"):
        guided_search(
            BudgetTracker(fused, 10), MoveScorer.load(PRETRAINED), np.random.default_rng(0), depth=0
        )


def test_late_acceptance_steps_to_worse_neighbours_only_when_on(fused):
    from agents.base import BudgetTracker
    from agents.learned.scorer import PRETRAINED
    from agents.learned.search import guided_search

    def run(**options) -> tuple[dict[str, int], np.ndarray, list[bytes]]:
        tracker = BudgetTracker(fused, 300)
        evaluated: list[bytes] = []
        tracker.listeners.append(lambda t, p, lat, ok: evaluated.append(np.asarray(p).tobytes()))
        counts = guided_search(
            tracker, MoveScorer.load(PRETRAINED), np.random.default_rng(0), 4, depth=32, walk=0.0, **options
        )
        tracker.detach()
        assert tracker.used == 300 and len(set(evaluated)) == len(evaluated)
        return counts, tracker.best_placement, evaluated

    off, off_best, off_evaluated = run()
    assert off["walks"] == 0  # without a walk nothing moves to a worse neighbour
    on, _, _ = run(late=5, late_after=0)
    assert on["walks"] > 0
    never, never_best, never_evaluated = run(late=5, late_after=10**6)  # it never starts: the default search
    assert never == off and np.array_equal(never_best, off_best) and never_evaluated == off_evaluated
    with pytest.raises(ValueError, match="late"):
        guided_search(
            BudgetTracker(fused, 10), MoveScorer.load(PRETRAINED), np.random.default_rng(0), late=-1
        )
    with pytest.raises(ValueError, match="late_after"):
        make_method("guided_improvement", late_after=-1)


def test_the_method_searches_with_its_options(fused):
    from agents.base import BudgetTracker
    from agents.learned.scorer import PRETRAINED
    from agents.learned.search import guided_search

    options = {"tabu": "local", "depth": 8, "walk": 0.0, "late": 3, "late_after": 0}
    result = make_method("guided_improvement", **options).place(fused, budget=120, seed=3)
    tracker = BudgetTracker(fused, 120)
    guided_search(
        tracker, MoveScorer.load(PRETRAINED), np.random.default_rng(3), 4, 2,
        local_tabu=True, depth=8, walk=0.0, late=3, late_after=0,
    )  # fmt: skip
    tracker.detach()
    assert np.array_equal(np.asarray(result.placement), tracker.best_placement)
    assert result.latency == tracker.best_latency


def test_fine_tuning_refits_within_the_budget(fused):
    from agents.base import BudgetTracker
    from agents.learned.fine_tuning import FineTuningScorer
    from agents.learned.scorer import PRETRAINED
    from agents.learned.search import guided_search

    base = MoveScorer.load(PRETRAINED)
    ranker = FineTuningScorer(base, after=20, epochs=2, objective="improve")
    tracker = BudgetTracker(fused, 80)
    guided_search(tracker, ranker, np.random.default_rng(0))
    tracker.detach()
    assert tracker.used == 80 and ranker.tuned and ranker.scorer is not base
    result = make_method("guided_improvement", fine_tune=20).place(fused, budget=80, seed=0)
    assert result.evaluations == 80
    with pytest.raises(ValueError, match="fine_tune"):
        make_method("guided_improvement", ranker="cost", fine_tune=10)


def test_listwise_fine_tuning_groups_moves_by_ranking_and_keeps_the_scorer_without_improvements():
    from agents.learned.fine_tuning import FineTuningScorer
    from agents.learned.scorer import PRETRAINED

    base = MoveScorer.load(PRETRAINED)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((12, len(MOVE_FEATURES)))
    flat = FineTuningScorer(base, after=8, epochs=2)
    for _ in range(2):
        flat.scores(x, None)
        flat.observe(x[:4], np.full(4, 0.01))  # nothing improves
    assert flat.tuned and flat.scorer is base
    tuned = FineTuningScorer(base, after=8, epochs=2, lr=1e-2)
    for k in range(2):
        tuned.scores(x, None)
        tuned.observe(x[4 * k : 4 * k + 4], np.array([-0.02, 0.01, 0.01, 0.01]))
    assert tuned.tuned and tuned.scorer is not base
    assert [s.tolist() for s in tuned._state] == [[1] * 4, [2] * 4]
    with pytest.raises(UnknownNameError):
        FineTuningScorer(base, objective="mse")


def test_the_memory_scorer_is_taken_where_memory_binds():
    from agents.learned.guided import memory_binds
    from agents.learned.scorer import PRETRAINED, PRETRAINED_MEMORY

    bound = PlacementProblem.make("inception_v3", "model-parallel", "simulated").cost_model()
    free = PlacementProblem.make("inception_v3", "multi-accel", "simulated").cost_model()
    assert memory_binds(bound) and not memory_binds(free)
    method = make_method("guided_improvement")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((50, len(MOVE_FEATURES)))
    for cost, path in ((bound, PRETRAINED_MEMORY), (free, PRETRAINED)):
        assert np.array_equal(method.ranker_for(rng, cost).predict(x), MoveScorer.load(path).predict(x))
    one = make_method("guided_improvement", weights=PRETRAINED)
    assert np.array_equal(one.ranker_for(rng, bound).predict(x), MoveScorer.load(PRETRAINED).predict(x))


def test_touched_edges_and_move_keys_match_their_dense_definitions(fused):
    from agents.learned.search import move_keys

    cost = fused.cost_model()
    placement = np.random.default_rng(0).integers(0, fused.num_devices, fused.num_groups)
    moves = propose(placement, allowed_devices(fused), twin_classes(cost), branch_sets(cost))
    featurizer = MoveFeaturizer(cost)
    mi, gi = np.nonzero(moves.members)
    me, ee = featurizer._touched(mi, gi)
    dense = moves.members[:, cost.edge_src] | moves.members[:, cost.edge_dst]  # (M, E)
    want_m, want_e = np.nonzero(dense)
    assert np.array_equal(me, want_m) and np.array_equal(ee, want_e)
    keys = move_keys(moves)
    expected = [m.tobytes() + bytes([int(d)]) for m, d in zip(np.packbits(moves.members, axis=1), moves.target)]
    assert keys == expected
