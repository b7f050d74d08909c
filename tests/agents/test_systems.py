"""The reimplemented learning systems: end to end on tiny graphs, budgets, reproducibility, quality."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from agents import make_method
from agents.base import BudgetTracker
from agents.systems.common import (
    DiscountedReturn,
    MovingAverageBaseline,
    SampleBatch,
    collapsed_fraction,
    is_tied,
    make_generator,
    reinforce,
    sample_categorical,
    seeded_module,
)
from agents.systems.grouper_placer import default_num_groups, group_embeddings, vote
from agents.systems.hsdag import HSDAGPolicy, dominant_edge_clusters, hsdag_coarsening
from agents.systems.placeto import Placeto, WindowBaseline
from agents.systems.rl_placement import Exploration
from placement_gym.envs import DevicePlacementEnv
from placement_gym.errors import PlacementError, PlacementGymError
from placement_gym.problem import problem_of

SYSTEMS = ("hsdag", "rl_placement", "grouper_placer", "placeto")


@pytest.fixture(scope="module")
def cnn_env():
    return DevicePlacementEnv("tiny_cnn", "cpu-dgpu", "simulated")


@pytest.fixture(scope="module")
def bert_env():
    return DevicePlacementEnv("tiny_bert", "cpu-dgpu", "simulated")


@pytest.fixture(scope="module")
def bert_multi_env():
    return DevicePlacementEnv("tiny_bert", "multi-accel", "simulated")


@pytest.mark.parametrize("name", SYSTEMS)
def test_runs_within_budget_and_reproducible(name, cnn_env, bert_multi_env):
    # Budget accounting and reproducibility do not depend on the policy's width: a narrow one (16 instead
    # of 128-512) runs the same code; the released widths are trained in the tests below.
    for env, budget in ((cnn_env, 40), (bert_multi_env, 45)):
        first = make_method(name, samples_per_update=10, hidden=16).place(env, budget=budget, seed=3)
        second = make_method(name, samples_per_update=10, hidden=16).place(env, budget=budget, seed=3)
        g, d = env.num_groups, env.num_devices
        assert first.placement.shape == (g,) and first.placement.dtype == np.int64
        assert first.placement.min() >= 0 and first.placement.max() < d
        assert np.isfinite(first.latency)
        assert first.evaluations == len(first.history) <= budget
        assert (
            first.evaluations == budget or first.extra["stopped_early"]
        )  # only a policy that stopped exploring
        assert 0.0 <= first.extra["collapsed_fraction"] <= 1.0
        assert first.latency == pytest.approx(env.problem.evaluate(first.placement).latency)
        np.testing.assert_array_equal(first.placement, second.placement)
        assert [p["mean_reward"] for p in first.extra["curve"]] == [
            p["mean_reward"] for p in second.extra["curve"]
        ]
        assert isinstance(first.extra["policy"], torch.nn.Module)


# HSDAG and Placeto are left out: as released, HSDAG (no baseline, one discounted return weighting every
# sample) and Placeto (learning rate 1e-3, 10 updates in 200 evaluations, episodes from a random placement)
# do not recover the best single device in 200 evaluations; the systems table of docs/RESULTS.md reports them.
# The budgets end each run by budget, a little more than twice as late as it first reaches the best single
# device (evaluation 26 of rl_placement, 5 of grouper_placer). At budget 200 neither spends its budget: they
# stop after 50 updates that evaluate nothing new (88 and 19 evaluations, 85 and 219 updates), and the best
# latency a run reaches within a smaller budget is one it also holds at 200.
@pytest.mark.parametrize("name, budget", [("rl_placement", 60), ("grouper_placer", 12)])
def test_matches_best_single_device_with_moderate_budget(name, budget, bert_env):
    # On tiny_bert / cpu-dgpu a random placement is ~6x slower than the best single device (the CPU);
    # learning must at least recover it.
    result = make_method(name).place(bert_env, budget=budget, seed=0)
    assert result.evaluations == budget
    assert result.latency <= bert_env.problem.baseline.latency * (1 + 1e-9)
    curve = result.extra["curve"]
    assert curve[-1]["mean_reward"] > curve[0]["mean_reward"]


def test_placeto_generalises_to_unseen_graph(cnn_env, bert_env):
    trained = Placeto().place(cnn_env, budget=60, seed=0).extra["policy"]
    before = [p.detach().clone() for p in trained.parameters()]
    zero_shot = Placeto(policy=trained, train=False).place(bert_env, budget=1, seed=0)
    assert zero_shot.evaluations == 1 and zero_shot.placement.shape == (bert_env.num_groups,)
    assert np.isfinite(zero_shot.latency)
    fine_tuned = Placeto(policy=trained).place(bert_env, budget=20, seed=0)
    assert fine_tuned.evaluations == 20
    assert all(torch.equal(a, b) for a, b in zip(before, trained.parameters()))  # caller's copy intact


def _reference_placeto_logits(policy, graph, placement, done, current):
    """Placeto's logits as first written (fancy indexing, out-of-place index_add, ReLU and division): the
    faster formulation in ``PlacetoPolicy.logits`` must give the same bits, values and gradients."""
    import torch.nn.functional as F

    b, g = placement.shape
    cur = F.one_hot(current, g).float().unsqueeze(-1)
    one_hot = F.one_hot(placement, policy.num_devices).float()
    state = torch.cat([graph.x.expand(b, -1, -1), one_hot, done.unsqueeze(-1), cur], dim=-1)
    h0 = torch.relu(policy.inp(state))
    src, dst = graph.edge_index
    in_deg = torch.bincount(dst, minlength=g).clamp(min=1).float().view(1, g, 1)
    out_deg = torch.bincount(src, minlength=g).clamp(min=1).float().view(1, g, 1)
    fwd = bwd = h0
    for _ in range(policy.rounds):
        agg = torch.zeros_like(fwd).index_add(1, dst, fwd[:, src]) / in_deg
        fwd = torch.relu(policy.fwd(torch.cat([fwd, agg], dim=-1)))
        agg = torch.zeros_like(bwd).index_add(1, src, bwd[:, dst]) / out_deg
        bwd = torch.relu(policy.bwd(torch.cat([bwd, agg], dim=-1)))
    emb = torch.cat([fwd, bwd], dim=-1)
    pools = [emb[torch.arange(b), current]]
    for rel in (graph.ancestors, graph.descendants, graph.parallel):
        weights = rel[current]
        pooled = torch.bmm(weights.unsqueeze(1), emb).squeeze(1)
        pools.append(pooled / weights.sum(-1, keepdim=True).clamp(min=1))
    return policy.head(torch.cat(pools, dim=-1))


def _bits(t):
    return t.detach().contiguous().view(torch.int32)


@pytest.mark.parametrize("env_name", ["cnn_env", "bert_multi_env"])
def test_placeto_logits_bit_identical_to_reference(env_name, request, monkeypatch):
    from agents.systems.placeto import PlacetoGraph, PlacetoPolicy

    env = request.getfixturevalue(env_name)
    problem = problem_of(env)
    g, d = env.num_groups, env.num_devices
    rng = np.random.default_rng(0)
    initial = np.array([rng.choice(np.flatnonzero(row)) for row in np.asarray(problem.device_mask)])
    graph = PlacetoGraph(problem, initial)
    policy = PlacetoPolicy(graph.x.shape[1], d)
    gen = torch.Generator().manual_seed(1)
    b = 7
    placement = torch.randint(0, d, (b, g), generator=gen)
    done = (torch.rand(b, g, generator=gen) < 0.5).float()
    current = torch.randint(0, g, (b,), generator=gen)
    grads = []
    for logits_of in (policy.logits, lambda *a: _reference_placeto_logits(policy, *a)):
        policy.zero_grad()
        logits = logits_of(graph, placement, done, current)
        (logits * torch.linspace(-1, 1, logits.numel()).view_as(logits)).sum().backward()
        grads.append([_bits(logits)] + [_bits(p.grad) for p in policy.parameters()])
    assert all(torch.equal(x, y) for x, y in zip(*grads))

    # end to end: a short training run gives the same placements, losses and history either way
    fast = Placeto(samples_per_update=5).place(env, budget=20, seed=2)
    monkeypatch.setattr(PlacetoPolicy, "logits", _reference_placeto_logits)
    reference = Placeto(samples_per_update=5).place(env, budget=20, seed=2)
    assert np.array_equal(fast.placement, reference.placement) and fast.history == reference.history
    assert [p["loss"] for p in fast.extra["curve"]] == [p["loss"] for p in reference.extra["curve"]]


def test_placeto_rejects_policy_for_other_device_count(cnn_env, bert_multi_env):
    trained = Placeto().place(cnn_env, budget=10, seed=0).extra["policy"]
    with pytest.raises(PlacementError, match="devices"):
        Placeto(policy=trained, train=False).place(bert_multi_env, budget=1)
    with pytest.raises(ValueError, match="policy"):
        Placeto(train=False)


def test_default_budget_is_used_when_none(cnn_env):
    result = make_method("hsdag", default_budget=12, samples_per_update=5).place(cnn_env, budget=None)
    assert result.evaluations == 12


def test_reinforce_never_exceeds_budget(cnn_env):
    from agents.systems.common import SampleBatch

    weight = torch.zeros(1, requires_grad=True)
    problem = problem_of(cnn_env)
    _ = problem.baseline  # its own backend call, once per problem: not one of the calls counted here
    tracker, start = BudgetTracker(problem, 7), problem.evaluations
    calls: list[int] = []
    evaluate_batch, evaluate = problem.backend.evaluate_batch, problem.backend.evaluate_valid
    problem.backend.evaluate_batch = lambda batch: calls.append(len(batch)) or evaluate_batch(batch)
    problem.backend.evaluate_valid = lambda placement: calls.append(1) or evaluate(placement)  # (one placement)
    drawn = iter(range(10**6))

    def sample(k: int) -> SampleBatch:  # distinct placements: the base-D digits of 0, 1, 2, ...
        codes = np.array([next(drawn) for _ in range(k)])
        digits = codes[:, None] // problem.num_devices ** np.arange(problem.num_groups) % problem.num_devices
        return SampleBatch(digits.astype(np.int64), weight.expand(k) * 0.0)

    curve = reinforce(tracker, 7, sample, torch.optim.SGD([weight], lr=0.1), samples_per_update=3)
    assert tracker.used == problem.evaluations - start == 7
    assert [p["evaluations"] for p in curve] == [3, 6, 7]
    assert calls == [3, 3, 1]  # one backend call per update


def test_reinforce_pays_once_for_a_placement_repeated_in_a_batch(cnn_env):
    from agents.systems.common import SampleBatch

    weight = torch.zeros(1, requires_grad=True)
    problem = problem_of(cnn_env)
    tracker, start = BudgetTracker(problem, 4), problem.evaluations

    def sample(k: int) -> SampleBatch:  # k copies of one placement, a new one per update
        placement = np.full((k, problem.num_groups), len(tracker.history) % problem.num_devices)
        placement[:, 0] = len(tracker.history) // problem.num_devices
        return SampleBatch(placement, weight.expand(k) * 0.0)

    curve = reinforce(tracker, 4, sample, torch.optim.SGD([weight], lr=0.1), samples_per_update=3)
    assert [p["evaluations"] for p in curve] == [1, 2, 3, 4]
    assert tracker.used == problem.evaluations - start == 4


def test_moving_average_baseline():
    base = MovingAverageBaseline(decay=0.5, normalize=False)
    np.testing.assert_allclose(base.advantages(np.array([1.0, 3.0])), [-1.0, 1.0])
    np.testing.assert_allclose(base.advantages(np.array([4.0, 6.0])), [2.0, 4.0])  # baseline still 2
    assert base.value == pytest.approx(3.5)
    started = MovingAverageBaseline(decay=0.9, normalize=False, init=-10.0)
    np.testing.assert_allclose(started.advantages(np.array([-1.0, -2.0])), [9.0, 8.0])
    with pytest.raises(ValueError):
        MovingAverageBaseline(decay=1.0)


def test_normalised_advantages_cannot_blow_up():
    base = MovingAverageBaseline()
    np.testing.assert_array_equal(base.advantages(np.full(20, 0.37)), np.zeros(20))  # a tied batch
    near = np.array([1.0, 1.0 + 1e-9, 1.0 - 1e-9, 1.0])  # a near-tie: the spread floor keeps it small
    assert np.abs(base.advantages(near)).max() < 1e-5
    # Centred on the batch mean, not on a lagging average: after a jump the signs still differ.
    base.advantages(np.array([0.0, 0.1]))
    adv = base.advantages(np.array([5.0, 5.2, 5.4]))
    assert adv[0] < 0 < adv[2] and abs(adv.sum()) < 1e-9 and np.abs(adv).max() < 2
    assert is_tied(np.array([2.0, 2.0])) and not is_tied(np.array([2.0, 2.1])) and is_tied(np.array([1.0]))


def test_discounted_return_weights_every_sample_alike():
    adv = DiscountedReturn(0.5).advantages(np.array([4.0, 2.0, 1.0]))
    np.testing.assert_allclose(adv, [1.0 + 1.0 + 1.0] * 3)  # 4 * 0.25 + 2 * 0.5 + 1


def test_collapsed_updates_are_counted(cnn_env):
    weight = torch.zeros(1, requires_grad=True)
    problem = problem_of(cnn_env)
    same = np.zeros((4, problem.num_groups), dtype=np.int64)
    tracker = BudgetTracker(problem, 10)
    curve = reinforce(
        tracker,
        10,
        lambda k: SampleBatch(same[:k], weight.expand(k) * 1.0),
        torch.optim.SGD([weight], lr=0.1),
        samples_per_update=4,
        max_idle_updates=3,
    )
    tracker.detach()
    assert collapsed_fraction(curve) == 1.0 and tracker.used == 1  # one placement, paid once
    assert [p["new"] for p in curve] == [1, 0, 0, 0]  # then three idle updates and a stop
    assert weight.grad is not None and float(weight.grad) == 0.0  # tied: zero advantage, zero gradient


class _IndependentPolicy(torch.nn.Module):
    """One categorical per group, started almost surely on one device."""

    def __init__(self, g: int, d: int, start: int) -> None:
        super().__init__()
        logits = torch.zeros(g, d)
        logits[:, start] = 3.0
        self.logits = torch.nn.Parameter(logits)


def test_learner_leaves_a_single_device_placement():
    # tiny_bert on cpu-igpu: the CPU alone is the best single device, the MILP optimum is ~3% faster and
    # mixes devices. A policy that starts on CPU-only (95% per group, so whole batches repeat CPU-only)
    # must move away from it and find a faster placement without its advantages blowing up.
    env = DevicePlacementEnv("tiny_bert", "cpu-igpu", "simulated")
    problem = problem_of(env)
    policy = _IndependentPolicy(problem.num_groups, problem.num_devices, problem.baseline_device)
    gen = make_generator(0)
    losses = []

    def sample(k: int) -> SampleBatch:
        actions, logp, ent = sample_categorical(policy.logits.expand(k, -1, -1), gen)
        return SampleBatch(actions.numpy(), logp.sum(-1), ent.sum(-1))

    tracker = BudgetTracker(problem, 400)
    # lr 0.02: at 0.05 the policy converges within ~100 evaluations on tiny_bert's 46 fused groups and the
    # rest of the budget is spent on updates of one repeated placement (counted as collapsed).
    curve = reinforce(
        tracker, 400, sample, torch.optim.Adam(policy.parameters(), lr=0.02), samples_per_update=20
    )
    tracker.detach()
    losses = [abs(p["loss"]) for p in curve]
    assert tracker.best_latency < problem.baseline.latency * (1 - 0.01)
    assert max(losses) < 100  # normalised advantages are O(1); the old baseline reached 1e6
    assert collapsed_fraction(curve) < 0.1


def test_hsdag_coarsening_merges_single_predecessor_nodes():
    # 0 -> 1 -> {2, 3} -> 4: 1, 2 and 3 have one predecessor each and join 0's group; 4 has two.
    src, dst = np.array([0, 1, 1, 2, 3]), np.array([1, 2, 3, 4, 4])
    np.testing.assert_array_equal(hsdag_coarsening(5, src, dst), [0, 0, 0, 0, 1])
    # parallel edges count once: 0 => 1 (twice) still merges 1
    np.testing.assert_array_equal(hsdag_coarsening(2, np.array([0, 0]), np.array([1, 1])), [0, 0])


def test_hsdag_dominant_edges():
    und = torch.tensor([[0, 1, 1, 2, 2, 3], [1, 0, 2, 1, 3, 2]])  # path 0 - 1 - 2 - 3, both directions
    score = torch.tensor([0.9, 0.9, 0.1, 0.1, 0.8, 0.8])
    count, labels = dominant_edge_clusters(4, und, score)
    assert count == 2 and labels[0] == labels[1] != labels[2] == labels[3]


def test_hsdag_state_update_stays_bounded():
    # The released GPN normalises (LayerNorm) its input MLP, GNNs and DeepSets, so the state update
    # x <- x + cluster embedding adds a bounded amount per step. Without the norms the embedding grows with
    # x and x grows geometrically: with weights doubled, to 1e9 within 20 steps (then NaN).
    n = 30
    chain = torch.stack([torch.arange(n - 1), torch.arange(1, n)])
    undirected = torch.cat([chain, chain.flip(0)], dim=1)
    policy = seeded_module(lambda: HSDAGPolicy(in_dim=20, num_devices=2), seed=0)
    policy.eval()
    with torch.no_grad():
        for module in policy.modules():
            if isinstance(module, torch.nn.Linear):
                module.weight.mul_(2.0)
        x = torch.rand(n, 20, generator=make_generator(0))
        x[:, -1] = torch.arange(n)  # the released features end with the node's index
        steps = []
        for _ in range(20):
            clusters, labels = policy(x, undirected)
            step = clusters[torch.as_tensor(labels)]
            steps.append(float(step.abs().max()))
            x = x + step
    assert np.isfinite(steps).all() and max(steps) < 1e3


def test_hsdag_options(cnn_env):
    with pytest.raises(PlacementGymError, match="inverse_runtime"):
        make_method("hsdag", reward="speed")
    result = make_method("hsdag", coarsen="hsdag", samples_per_update=5).place(cnn_env, budget=10, seed=0)
    assert result.extra["groups_placed"] < cnn_env.num_groups and result.placement.shape == (
        cnn_env.num_groups,
    )


def test_exploration_clips_and_stops_noise():
    gen = make_generator(0)
    ex = Exploration(temperature=10.0, tanh_constant=5.0, noise_std=0.5, noise_samples=3)
    big = torch.full((2, 3), 1e3)
    assert ex(big, gen, noisy=False).abs().max() <= 5.0
    quiet = ex(torch.tensor([[1.0, -1.0]]), gen, noisy=False)
    torch.testing.assert_close(quiet, 5.0 * torch.tanh(torch.tensor([[0.1, -0.1]])))
    assert not torch.equal(ex(torch.tensor([[1.0, -1.0]]), gen, noisy=True), quiet)
    assert ex.noisy()
    ex.samples = 3
    assert not ex.noisy()


def test_placeto_window_baseline():
    base = WindowBaseline(window=3)
    np.testing.assert_allclose(base.advantages(np.array([1.0, 3.0])), [-1.0, 1.0])
    np.testing.assert_allclose(base.advantages(np.array([5.0, 7.0])), [0.0, 2.0])  # window: 3, 5, 7


def test_grouper_group_embeddings():
    x = torch.tensor([[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]])
    edges = torch.tensor([[0, 1], [1, 2]])  # 0 -> 1 -> 2
    emb = group_embeddings(x, edges, torch.tensor([[0, 0, 1]]), 2)[0]  # groups {0, 1}, {2}
    # row: [edges to g0, to g1, edges from g0, from g1, summed features] / (max + 1)
    np.testing.assert_allclose(
        emb.numpy(), [[1, 1, 1, 0, 1, 2], [0, 0, 1, 0, 1, 1]] / np.array([[3.0], [2.0]])
    )


def test_grouper_vote_and_default_groups():
    op_devices = np.array([[0, 1, 1], [1, 0, 0]])
    assignment = np.array([0, 0, 1])
    weights = np.array([5.0, 1.0, 1.0])
    np.testing.assert_array_equal(vote(op_devices, assignment, weights, 2, 2), [[0, 1], [1, 0]])
    assert default_num_groups(1000, 2) == 40 and default_num_groups(1000, 20) == 256
    assert default_num_groups(10, 4) == 10


def test_reinforce_stops_on_divergence(cnn_env):
    weight = torch.zeros(1, requires_grad=True)
    problem = problem_of(cnn_env)
    tracker = BudgetTracker(problem, 30)

    def sample(k: int) -> SampleBatch:
        logits = torch.full(
            (k, problem.num_groups, problem.num_devices), float("nan") if tracker.used else 0.0
        )
        actions, logp, _ = sample_categorical(logits + weight, make_generator(tracker.used))
        return SampleBatch(actions.numpy(), logp.sum(-1))

    curve = reinforce(tracker, 30, sample, torch.optim.SGD([weight], lr=0.1), samples_per_update=5)
    tracker.detach()
    assert curve[-1] == {"update": 1, "evaluations": tracker.used, "diverged": 1.0} and 0 < tracker.used <= 5
    assert collapsed_fraction(curve) in (0.0, 1.0)
